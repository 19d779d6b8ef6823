"""The exported package (``codegen/export``): safe names and literals, the files and their imports,
the header, ``Model`` (step, forward, train_step), ``python -m <package> --check``, refusals, and the
``dcstudio export`` command with a history recorded in a Session."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.program.namespace import Namespace, comment, literal, sanitize  # noqa: E402
from codegen.export.package import ExportError, export_package  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import compare, feeds_for  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from studio.cli import main  # noqa: E402
from studio.session import Session  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.unit.ir.onnx_models import mlp  # noqa: E402
from transforms.registry import create  # noqa: E402

STDLIB_OK = {"argparse", "os", "sys", "time", "math", "importlib", "__future__", "typing", "dataclasses",
             "itertools", "functools", "collections", "operator", "cmath", "numpy", "numba", "ml_dtypes",
             "threadpoolctl", "concurrent", "threading", "platform", "llvmlite",
             "ctypes", "warnings", "json", "tempfile", "types", "rich", "signal"}
# threadpoolctl optional (_lib.set_threads); ctypes: quiet_blas; warnings: SPINNING; json, tempfile, types: the
# runtime's checkpoints; rich optional (_cli.py's training progress, plain lines without it); signal: _cli.py's Ctrl-C


# --- namespace -------------------------------------------------------------------------------

def test_namespace_sanitizes_dedupes_and_is_stable():
    ns = Namespace(reserved=("W",))
    assert ns.name("a", "layer.0/weight") == "layer_0_weight"
    assert ns.name("b", "layer.0:weight") == "layer_0_weight_1"       # dedupe
    assert ns.name("a", "ignored") == "layer_0_weight"                 # same object, same name
    assert ns.name("c", "class") == "class_" and ns.name("d", "print") == "print_"
    assert ns.name("e", "3d") == "_3d" and ns.name("f", "W") == "W_1" and ns.name("g", "") == "v"
    assert sanitize("__import__('os')") == "import_os"
    assert sanitize("/layer/attention/self/key/Add_output_0") == "layer_attention_self_key_Add"
    long = sanitize("/" + "/".join(["encoder", "layer.11", "attention", "self", "key", "MatMul"] * 3) + "_output_1")
    assert len(long) <= 64 and long.endswith("key_MatMul_output_1")
    assert long.split("_")[0] in ("encoder", "layer", "11", "attention", "self", "key", "MatMul")   # whole words
    assert all(n.isidentifier() for n in (sanitize("λ"), sanitize("a\nb"), sanitize("'; rm -rf /")))


def test_literals_are_plain_values_only():
    assert literal(("a", 1, 2.5, True, None, [1, 2], {"k": -1})) == "('a', 1, 2.5, True, None, [1, 2], {'k': -1})"
    assert literal("é'\"\n") == ascii("é'\"\n") and literal(float("inf")) == 'float("inf")'
    assert literal(np.int64(3)) == "3" and literal(np.float32(0.5)) == "0.5" and literal((1,)) == "(1,)"
    for bad in (np.zeros(2), object(), {1: 2}, b"bytes"):
        with pytest.raises(TypeError):
            literal(bad)
    assert "\n" not in comment("a\nb") and comment("x" * 500).endswith("...")


# --- a package -------------------------------------------------------------------------------

def _graph():
    g = import_proto(mlp(batch=4))
    return g


def _export(tmp_path, g, name="pkg", **kw):
    return export_package(g, tmp_path / name, inputs=feeds_for(g), version="test", **kw)


def test_package_files_parse_and_import_only_numpy_numba_and_stdlib(tmp_path):
    res = _export(tmp_path, _graph())
    assert {"__init__.py", "__main__.py", "model.py", "_lib.py", "weights.npz", "check.npz",
            "kernels/__init__.py"} <= set(res.files)
    assert any(f.startswith("kernels/k_") for f in res.files) and any(f.startswith("_ref/") for f in res.files)
    for path in res.path.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {(node.module or "").split(".")[0]}
            else:
                continue
            assert tops <= STDLIB_OK, f"{path.relative_to(res.path)} imports {tops - STDLIB_OK}"
            assert not tops & {"ir", "codegen", "transforms", "studio", "onnx"}


def test_model_matches_reference_and_has_forward_and_train_step(tmp_path):
    g = _graph()
    feeds = feeds_for(g)
    mod = load_package(_export(tmp_path, g, "pkg_model").path)
    m = mod.Model()
    assert compare(reference(g, feeds), m.step(**feeds), 1e-5) == []
    assert set(m.forward(**feeds)) == set(mod.model.FORWARD_OUTPUTS)
    again = m.step(**feeds)                    # planned buffers are reused: results stay equal
    assert compare(reference(g, feeds), again, 1e-5) == []
    with pytest.raises(TypeError, match="unknown inputs"):
        m.step(nonsense=1)


def test_header_names_source_history_and_generator(tmp_path):
    g = _graph()
    step = type("S", (), {"transformation": "map_fusion\n", "params": {}, "anchors": ("a\n", "b")})()
    hist = tmp_path / "h.json"
    hist.write_text("{}")
    res = export_package(g, tmp_path / "pkg_h", inputs=feeds_for(g), history=[step] * 3, version="9.9",
                         history_file=hist)
    text = (res.path / "model.py").read_text()
    head = text.split("import os")[0]
    assert "# source sha256: " in head and "# history: 3 steps from h.json (file sha256 44136fa355b3678a, " in head
    assert "#   map_fusion\\n x3\n" in head and "dcstudio 9.9" in head     # the name escaped, steps counted
    assert text.count("    # ") >= len(g.nodes)           # a comment per kernel statement


def test_python_m_check_passes_and_fails_on_wrong_references(tmp_path):
    res = _export(tmp_path, _graph(), "pkg_cli")
    run = lambda *a: subprocess.run([sys.executable, "-m", "pkg_cli", *a], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    ok = run("--check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "outputs match" in ok.stdout
    data = dict(np.load(res.path / "check.npz"))
    data["out_0"] = data["out_0"] + 1.0
    np.savez(res.path / "check.npz", **data)
    bad = run("--check")
    assert bad.returncode == 1 and "FAIL" in bad.stdout


THREAD_VARIABLES = ("DCSTUDIO_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def _threads_used(tmp_path, package, *args, cpus=None, **env):
    """(numba, BLAS) threads the package's ``--time 1`` reports, run on ``cpus`` (an affinity mask,
    as ``taskset``) with no thread variable set but ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    proc = subprocess.run([sys.executable, "-m", package, "--time", "1", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**clean, **env},
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"threads: numba (\d+), BLAS (\d+)", proc.stdout)
    assert found, proc.stdout
    return int(found[1]), int(found[2])


def test_the_package_uses_every_core_of_its_affinity_mask_by_default(tmp_path):
    from codegen.numba_cpu.library import physical_cores
    _export(tmp_path, _graph(), "pkg_threads")
    cores = physical_cores()
    assert _threads_used(tmp_path, "pkg_threads") == (cores, cores)
    assert _threads_used(tmp_path, "pkg_threads", cpus={min(os.sched_getaffinity(0))}) == (1, 1)
    assert _threads_used(tmp_path, "pkg_threads", DCSTUDIO_THREADS="1") == (1, 1)
    assert _threads_used(tmp_path, "pkg_threads", "--threads", "1") == (1, 1)


def test_physical_cores_count_hyperthread_siblings_once(tmp_path):
    from codegen.numba_cpu.library import physical_cores
    for cpu, (package, core) in {0: (0, 0), 1: (0, 0), 2: (0, 1), 3: (1, 0), 4: (1, 0)}.items():
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")
    assert physical_cores({0, 1, 2, 3, 4}, str(tmp_path)) == 3       # 0+1 and 3+4 are sibling pairs
    assert physical_cores({0, 1}, str(tmp_path)) == 1
    assert physical_cores({1, 2, 7}, str(tmp_path)) == 3             # cpu7 has no topology: counts alone
    assert 1 <= physical_cores() <= len(os.sched_getaffinity(0))


def test_export_refuses_nodes_that_need_dcstudio(tmp_path):
    from tests.unit.codegen.test_numba_loopnest import _map_graph
    from ir import expr as E
    from ir.memlet import Memlet
    i = E.Var("i")
    g, _ = _map_graph(Memlet("y", (i,)), {"a": Memlet("x", (i,))}, E.Var("a"), dtype="bfloat16")
    with pytest.raises(ExportError, match="'m': 'x' is a bfloat16 graph input, output or initializer"):
        export_package(g, tmp_path / "pkg_bf16", inputs={"x": np.zeros(8, np.float32)})
    assert not (tmp_path / "pkg_bf16").exists()
    with pytest.raises(ExportError, match="must be a Python identifier"):
        export_package(_graph(), tmp_path / "not-a-name", inputs={})


def test_cli_exports_a_session_history(tmp_path, fixtures_dir):
    model_path = fixtures_dir / "ort_artifacts/mlp/legacy/training_model.onnx"
    s = Session.open(model_path, autosave=False)
    for m in list(create("expand").matches(s.graph)):
        s.apply("expand", m.anchors)
    mf = create("map_fusion")
    while (m := next((m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok), None)) is not None:
        s.apply("map_fusion", m.anchors)
    hist = tmp_path / "h.json"
    s.save_history(hist)
    assert main(["export", str(model_path), str(hist), "-o", str(tmp_path / "mlp_fused")]) == 0
    text = (tmp_path / "mlp_fused" / "model.py").read_text()
    assert f"# history: {s.cursor} steps" in text and "fused:" in text
    proc = subprocess.run([sys.executable, "-m", "mlp_fused", "--check"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert main(["export", str(model_path), "-o", str(tmp_path / "bad name")]) == 2


def test_export_says_which_parameters_have_no_value_in_the_model(tmp_path, fixtures_dir, capsys):
    """An onnxruntime-training artifact takes its parameters as inputs without initializers: the package's defaults
    are then the check's generated inputs, and the export says so, naming them; ``--inputs`` with the weights
    gives them values, and the note goes."""
    import numpy as np
    model_path = fixtures_dir / "ort_artifacts/mlp/legacy/train_step_adamw.onnx"
    assert main(["export", str(model_path), "-o", str(tmp_path / "mlp_plain")]) == 0
    out = capsys.readouterr().out
    assert "note: 4 parameters (fc1.weight, fc1.bias, fc2.weight, …) have no value in the model" in out, out
    assert "--inputs WEIGHTS.npz" in out
    ref = np.load(fixtures_dir / "ort_artifacts/mlp/legacy/reference.npz")
    weights = tmp_path / "weights.npz"
    np.savez(weights, **{k.removeprefix("param0/"): ref[k] for k in ref.files if k.startswith("param0/")})
    assert main(["export", str(model_path), "--inputs", str(weights), "-o", str(tmp_path / "mlp_weights")]) == 0
    out = capsys.readouterr().out
    assert "check it:" in out and "have no value" not in out, out
    mod = load_package(tmp_path / "mlp_weights")
    np.testing.assert_array_equal(mod.Model().state_dict()["fc2.bias"], ref["param0/fc2.bias"])


def test_exported_kernels_are_byte_identical_to_the_cache(tmp_path):
    from codegen.numba_cpu.kernel_cache import kernel_module
    from codegen.numba_cpu.backend import program as build_program
    g = _graph()
    res = _export(tmp_path, g, "pkg_k")
    prog = build_program(g)
    for name, ks in prog.kernels.items():
        assert (res.path / "kernels" / f"{name}.py").read_text() == kernel_module(ks)


def test_recycled_outputs_feed_the_next_step(tmp_path, fixtures_dir):
    """train_step with recycle_outputs: two buffer sets in turn; every step equals the reference."""
    import numpy as np
    from ir.onnx_import import import_model
    from tests.peer.fixture_feeds import ort_feeds
    folder = fixtures_dir / "ort_artifacts/mlp/legacy"
    g = import_model(folder / "train_step_adamw.onnx")
    feeds = ort_feeds(g, np.load(folder / "reference.npz"))
    res = export_package(g, tmp_path / "pkg_rec", inputs=feeds)
    mod = load_package(res.path)
    m = mod.Model(recycle_outputs=True)
    data = {k: v for k, v in feeds.items() if k not in m.state_names()}
    state = dict(feeds)
    firsts = []
    for _ in range(3):
        want = reference(g, state)
        got = m.train_step(**data) if firsts else m.train_step(**feeds)
        assert compare(want, got, 1e-5) == []
        firsts.append(got[g.outputs[0]])
        state.update({old: np.array(want[new]) for new, old in mod.model.UPDATES})
    assert len(mod.model.UPDATES) == 3 * 4 and firsts[0] != firsts[2]


def test_an_export_of_a_corrupted_graph_fails_its_check_against_the_original(tmp_path):
    """The stored references are the ORIGINAL model's: a graph whose Gemm drifted by 1e-3 exports,
    but its ``--check`` fails (it used to compare with the transformed graph and pass)."""
    from codegen.oracle import Oracle
    from tests.unit.ir.onnx_models import mlp as mlp_proto
    proto = mlp_proto(batch=4)
    original = import_proto(proto)
    bad = original.clone()
    bad.nodes["fc1"].attrs["alpha"] = 1.001
    feeds = feeds_for(original)
    oracle = Oracle.of(original, proto, feeds)
    run = lambda pkg: subprocess.run([sys.executable, "-m", pkg, "--check"], cwd=tmp_path,  # noqa: E731
                                     capture_output=True, text=True, timeout=300)
    export_package(original, tmp_path / "pkg_good", inputs=feeds, oracle=oracle)
    export_package(bad, tmp_path / "pkg_bad", inputs=feeds, oracle=oracle)
    good, wrong = run("pkg_good"), run("pkg_bad")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "compared with the original model's outputs (onnxruntime fp32 vs float64 truth)" in good.stdout
    assert wrong.returncode == 1 and "FAIL 'y': error 0.00" in wrong.stdout, wrong.stdout
