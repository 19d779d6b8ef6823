"""Every CUDA kernel the backend emits compiles with NVRTC for sm_80 and sm_90, in float32 and in
the bfloat16 storage variant: for every fixture training graph and the bundled example, as imported
(lowered) and after the representative history (expand + map_fusion), the bundled recipe's
history on the bundled example (GEMM epilogues, grouped GEMMs), and BERT-small after
``mixed_precision`` (real bfloat16 and float16 containers). No GPU is needed (FACTS.md);
running the kernels is tested only where a device exists."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from codegen.cupy_cuda.c_expr import to_cuda
from codegen.cupy_cuda.device_lib import PRELUDE
from codegen.cupy_cuda.render import kernel_source
from codegen.cupy_cuda.nvrtc import ARCHS, available, compile_check
from codegen.program.program import build_program
from ir import expr as E
from ir.memlet import Memlet
from ir.onnx_import import import_model
from tests.golden.kernels import check_kernels
from tests.peer.test_export_fixtures import CASES, fixture_graph, fuse_everything
from tests.unit.transforms.test_mixed_precision import _lower_everything as mix

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"
BUNDLED = EXAMPLES / "bert_layer_base_train.onnx"
RECIPE = EXAMPLES / "bert_layer_base_train.history.json"


@pytest.fixture(scope="module")
def nvrtc_ready():
    reason = available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"NVRTC compile checks must run in CI: {reason}")
        pytest.skip(reason)


def _kernels(graph, storage):
    prog = build_program(graph, lambda m, g: kernel_source(m, g, storage=storage))
    owners = {st.kernel: st.node_id for st in prog.statements if st.kernel}
    extern = [(node.id, why) for node, why in prog.extern.values()]
    return {name: (ks, owners.get(name, "a grouped contraction")) for name, ks in prog.kernels.items()}, extern


def _batch_check(kernels: dict, arch: str) -> list[str]:
    """Compile all kernels as one translation unit; on failure find the culprits one by one."""
    source = PRELUDE + "\n".join(ks.source[len(PRELUDE):] for ks, _ in kernels.values())
    if compile_check(source, "batch", arch).ok:
        return []
    bad = []
    for name, (ks, owner) in kernels.items():
        res = compile_check(ks.source, name, arch)
        if not res.ok:
            bad.append(f"{name} (node {owner!r}, {arch}): {res.log[:800]}")
    return bad or [f"the batch failed for {arch} but no kernel alone does"]


@pytest.fixture(scope="module")
def all_kernels(fixtures_dir):
    """Distinct kernels of every graph, fused and not, float32 and bfloat16 storage."""
    graphs = [fixture_graph(fixtures_dir, case, fused)[0] for case in CASES for fused in (False, True)]
    from studio.session.exporting import load_with_history
    bundled = import_model(BUNDLED)
    fused_bundled = bundled.clone()
    fuse_everything(fused_bundled)
    recipe, _ = load_with_history(str(BUNDLED), str(RECIPE), [])     # epilogues, grouped GEMMs, layouts
    graphs += [bundled, fused_bundled, recipe]
    for dtype in ("bfloat16", "float16"):                                # real mixed-precision containers
        mixed = fixture_graph(fixtures_dir, "ort/bert_layer_small/train_step_adamw", True)[0].clone()
        assert mix(mixed, dtype) > 0
        graphs.append(mixed)
    found: dict[str, dict] = {"float32": {}, "bfloat16": {}}
    refused = []
    for g in graphs:
        for storage, key in ((None, "float32"), ("bfloat16", "bfloat16")):
            kernels, extern = _kernels(g, storage)
            found[key].update(kernels)
            refused += extern
    return found, refused


@pytest.mark.slow
def test_every_kernel_compiles(nvrtc_ready, all_kernels):
    """sm_80 and sm_90, float32 and bfloat16 storage; NVRTC runs in threads (it releases the GIL)."""
    found, refused = all_kernels
    assert not refused, f"maps without a CUDA kernel: {refused[:5]}"
    assert min(len(v) for v in found.values()) > 100
    jobs = [(variant, arch) for variant in ("float32", "bfloat16") for arch in ARCHS]
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda job: _batch_check(found[job[0]], job[1]), jobs))
    bad = [f"[{variant} {arch}] {msg}" for (variant, arch), msgs in zip(jobs, results) for msg in msgs]
    assert not bad, "\n".join(bad[:5])


@pytest.mark.slow
def test_kernel_bodies_match_their_snapshot(all_kernels, update_golden):
    """The texts of every kernel above, less their names (``tests.golden.kernels``): no GPU, no NVRTC needed."""
    from codegen.cupy_cuda.backend import CUDA
    found, _ = all_kernels
    for variant, kernels in found.items():
        check_kernels(f"fixtures_cuda_{variant}", {n: CUDA.kernel_module(ks) for n, (ks, _) in kernels.items()},
                      update_golden)


def test_compile_errors_are_reported_with_the_log(nvrtc_ready):
    res = compile_check('extern "C" __global__ void k() { int x = ; }', "broken", "sm_80")
    assert not res.ok and "expected an expression" in res.log


def _tiny_graph():
    from onnx import helper, numpy_helper
    from ir import lowering
    from ir.onnx_import import import_proto
    from tests.unit.ir.onnx_models import model, vi
    b = numpy_helper.from_array(np.ones(16, np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["h"], name="add"),
             helper.make_node("Erf", ["h"], ["e"], name="erf"),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="colsum", keepdims=0)]
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    g = import_proto(model(nodes, [vi("x", [8, 16])], [vi("s", [16])], [b, axes]))
    lowering.expand_all(g)
    return g


def test_cuda_printer_uses_float_functions():
    x = E.Var("x")
    gelu = E.Bin("mul", E.Bin("mul", x, E.c(0.5)), E.Bin("add", E.c(1.0), E.Un("erf", E.Bin("mul", x, E.c(0.7071067811865476)))))
    src = to_cuda(gelu)
    assert "erff(" in src and "0.5f" in src
    assert to_cuda(E.Select(E.Bin("gt", x, E.c(0.0)), x, E.c(0.0))) == "((x > 0.0f) ? x : 0.0f)"
    assert to_cuda(E.Un("neg", E.Un("exp", x))) == "(-expf(x))"
    assert to_cuda(E.c(float("-inf"))) == "-INFINITY" and to_cuda(E.Cast(x, "float16")) == "((__half)(x))"
    powers = {2.0: "dcs_sq(x)", 3.0: "dcs_cube(x)", 0.5: "sqrtf(x)", -1.0: "(1.0f / x)", 1.0: "(x)",
              1.5: "powf(x, 1.5f)"}
    assert {k: to_cuda(E.Bin("pow", x, E.c(k))) for k in powers} == powers
    assert to_cuda(E.Bin("pow", x, E.Var("y"))) == "powf(x, y)"


def test_cuda_printer_computes_float64_in_double_and_ints_in_their_type():
    x, n = E.Var("x"), E.Var("n")
    f64 = {"x": "float64", "y": "float64", "n": "int64"}
    assert to_cuda(E.Un("neg", E.Un("exp", x)), types=f64) == "(-exp(x))"
    assert to_cuda(E.Un("sign", x), types=f64) == "(copysign(1.0, x) * (x != 0.0))"
    assert to_cuda(E.Bin("max", x, E.Var("y")), types=f64) == "dcs_max<double>(x, y)"
    assert to_cuda(E.Bin("pow", x, E.Const(0.5, "float64")), types=f64) == "sqrt(x)"
    assert to_cuda(E.Bin("pow", x, E.Const(-1.0, "float64")), types=f64) == "(1.0 / x)"
    assert to_cuda(E.Bin("max", n, E.Const(3, "int64")), types=f64) == "dcs_max<long long>(n, 3)"
    helpers: set[str] = set()
    assert to_cuda(E.Un("abs", n), types=f64, helpers=helpers) == "dcs_iabs(n)" and helpers == {"dcs_iabs"}
    assert to_cuda(E.Un("exp", n), types=f64) == "exp(((double)(n)))"         # NumPy: a float function of an int
    assert to_cuda(E.Bin("mul", x, E.c(0.5)), types=f64) == "(x * 0.5f)"    # a float32 constant keeps its type
    assert to_cuda(E.Un("isnan", n), types=f64) == "false"


def test_a_cast_to_a_type_without_a_c_type_is_refused_not_printed_as_float():
    """A cast to uint32 printed as ``(float)`` kept the fraction of 2.5 (and the sign of -1): the map is refused
    by name, and the step runs it with the reference executor."""
    from codegen.program.kernel import UnsupportedMap
    from tests.unit.codegen.test_numba_loopnest import _map_graph
    i = E.Var("i")
    cast = E.Cast(E.Cast(E.Var("a"), "uint32"), "float32")
    g, m = _map_graph(Memlet("y", (i,)), {"a": Memlet("x", (i,))}, cast)
    with pytest.raises(UnsupportedMap, match="a cast to uint32, which CUDA kernels do not handle"):
        kernel_source(m, g)
    assert to_cuda(E.Cast(E.Var("x"), "uint8")) == "((unsigned char)(x))"


def test_kernels_print_the_expression_trees_with_to_cuda():
    g = _tiny_graph()
    erf = g.nodes["erf/expanded"]
    ks = kernel_source(erf, g)
    tasklet = erf.body[0]
    assert to_cuda(tasklet.expr, {c: "@" for c in tasklet.inputs}).split("@")[0] in ks.source
    assert "erff(" in ks.source and ks.threads == 2 and ks.extents == (8, 16)
    bf16 = kernel_source(erf, g, storage="bfloat16")
    assert "__bfloat162float(" in bf16.source and "__float2bfloat16_rn(" in bf16.source
    assert bf16.name != ks.name


def test_shared_reductions_use_atomics_and_owned_ones_do_not():
    g = _tiny_graph()
    col = kernel_source(g.nodes["colsum/expanded"], g)
    add = kernel_source(g.nodes["add/expanded"], g)
    assert "atomicAdd" not in add.source
    assert col.init["s"].kind in ("full", "empty", "zeros")


def test_without_a_device_the_package_says_so_and_exits(tmp_path):
    """On a machine where CUDA cannot start, the package's command line prints why and what to do and
    exits 2, and ``Model()`` raises that message, instead of a CuPy traceback from the first upload."""
    cupy = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")
    if cupy.is_available():
        pytest.skip("a CUDA device is present: the package runs there (test_running_needs_a_device)")
    import subprocess
    import sys
    from codegen.export.package import export_package
    from codegen.numpy_ref.feeds import feeds_for
    from tests.peer.test_export_fixtures import load_package
    g = _tiny_graph()
    res = export_package(g, tmp_path / "tiny_cuda", inputs=feeds_for(g), backend="cuda")
    run = subprocess.run([sys.executable, "-m", "tiny_cuda", "--check"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith("tiny_cuda: this package runs on an NVIDIA GPU") and "--backend cpu" in run.stderr
    with pytest.raises(RuntimeError, match="export the model again with --backend cpu"):
        load_package(res.path).Model()


def test_running_needs_a_device():
    cupy = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")
    if not cupy.is_available():
        pytest.skip("no CUDA device on this machine: the exported CUDA package is compile-checked only")
    from codegen.export.package import export_package
    from codegen.numpy_ref.executor import run
    from codegen.numpy_ref.feeds import compare, feeds_for
    from tests.peer.test_export_fixtures import load_package
    import tempfile
    g = _tiny_graph()
    feeds = feeds_for(g)
    with tempfile.TemporaryDirectory() as d:
        res = export_package(g, Path(d) / "tiny_cuda", inputs=feeds, backend="cuda")
        out = load_package(res.path).Model().step(**feeds)
        host = {k: cupy.asnumpy(v) for k, v in out.items()}
        assert compare(run(g, feeds), host, 1e-5) == []
