"""Exported CPU packages against real references: every fixture training graph, as imported and after a
representative history (every op expanded, then ``map_fusion`` to a fixpoint).

For each graph the package is written by ``codegen.export.package.export_package`` with the oracle of
the original (imported) model and imported as a package; its ``Model.step`` must reproduce the
reference executor and the fixture's own references (loss, gradients, the AdamW update) at the peer
tests' tolerances, and its own ``--check`` (the original's float64 truth, derived tolerances) must pass. Kernels compile once per machine
(content-addressed cache), so the sweep stays fast after the first run. The fresh-venv run of
``python -m <package> --check`` is in ``tests/unit/codegen/test_export_fresh_venv.py``.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package, mismatches  # noqa: E402
from codegen.numba_cpu import kernel_cache  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.oracle import Oracle  # noqa: E402
from ir import lowering  # noqa: E402
from ir.containers import Role  # noqa: E402
from ir.onnx_import import import_model  # noqa: E402
from ir.onnx_load import read_model  # noqa: E402
from ir.verify import verify  # noqa: E402
from tests.peer.fixture_feeds import BATCHNORM, ORT_MODELS, assert_close, ort_feeds  # noqa: E402
from transforms.registry import create  # noqa: E402

JOINT = ["mlp_joint", "mlp_joint_sgd", "mlp_joint_adamw", "tiny_resnet_joint", "tiny_resnet_joint_adamw",
         "bert_layer_small_joint", "bert_layer_small_joint_adamw"]
CASES = [f"ort/{m}/{a}" for m in sorted(ORT_MODELS) for a in ("training_model", "gradient_model", "train_step_adamw")]
CASES += [f"joint/{j}" for j in JOINT]


def fuse_everything(graph):
    """The representative history on ``graph`` in place: expand every op, then map_fusion to a
    fixpoint, applying each step's ``rewrite`` directly (the Session's per-step clones and recounts
    are what ``test_export.py`` covers) and verifying once at the end."""
    lowering.expand_all(graph)
    mf = create("map_fusion")
    step = 0
    while True:
        match = next((m for m in mf.matches(graph) if mf.check(graph, m).ok), None)
        if match is None:
            break
        step += 1
        mf.rewrite(graph, match, step)
    verify(graph)
    return step


def load_package(path: Path):
    """Import an exported package from its directory (a unique name per directory)."""
    spec = importlib.util.spec_from_file_location(path.name, path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.name] = module
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def fixture_graph(fixtures_dir: Path, case: str, fused: bool):
    """(graph, feeds, fixture references, has BatchNorm, fusion steps) of one case — built once per
    process; callers must not edit the graph (clone it)."""
    graph, feeds, ref, batchnorm = _case(fixtures_dir, case)
    steps = fuse_everything(graph) if fused else 0
    return graph, feeds, ref, batchnorm, steps


@functools.lru_cache(maxsize=None)
def fixture_oracle(fixtures_dir: Path, case: str):
    """The oracle of the case's original model on the case's feeds (built once per process)."""
    graph, feeds, _, _, _ = fixture_graph(fixtures_dir, case, False)
    return Oracle.of(graph, read_model(_path(fixtures_dir, case)), feeds)


def _path(fixtures_dir: Path, case: str) -> Path:
    kind, *rest = case.split("/")
    if kind == "ort":
        return fixtures_dir / "ort_artifacts" / ORT_MODELS[rest[0]] / f"{rest[1]}.onnx"
    return fixtures_dir / "joint_standard" / f"{rest[0]}.onnx"


def _case(fixtures_dir: Path, case: str):
    kind, *rest = case.split("/")
    if kind == "ort":
        model, artifact = rest
        folder = fixtures_dir / "ort_artifacts" / ORT_MODELS[model]
        ref = dict(np.load(folder / "reference.npz"))
        graph = import_model(folder / f"{artifact}.onnx")
        return graph, ort_feeds(graph, ref), ref, model in BATCHNORM
    path = fixtures_dir / "joint_standard" / f"{rest[0]}.onnx"
    ref = dict(np.load(path.with_suffix(".npz")))
    graph = import_model(path)
    feeds = {"input": ref["input"], "labels": ref["labels"]}
    feeds.update({n: ref[f"param/{n}"] for n in graph.inputs if f"param/{n}" in ref})
    return graph, feeds, ref, "resnet" in rest[0]


def _check_fixture_references(graph, out, ref, rtol):
    """Loss and gradients against the fixture (torch / onnxruntime-training), as test_fixtures does."""
    assert_close(out[graph.outputs[0]], ref["loss"], rtol, "loss")
    grads = [n for n in graph.outputs if graph.containers[n].role is Role.GRADIENT and f"grad/{n[:-5]}" in ref]
    scale = max((float(np.abs(ref[f"grad/{n[:-5]}"]).max()) for n in grads), default=0.0)
    for n in grads:
        assert_close(out[n], ref[f"grad/{n[:-5]}"], rtol, f"gradient {n}", scale=scale)
    for n in graph.outputs:
        base = n[:-4]
        if n.endswith(".new") and graph.containers[n].role is Role.PARAMETER:
            if f"param1/{base}" in ref:     # ORT: one AdamW step moves each weight by about lr
                assert_close(out[n] - ref[f"param0/{base}"], ref[f"param1/{base}"] - ref[f"param0/{base}"],
                             max(rtol, 1e-3), f"update of {base}", scale=1e-3)
            elif f"new/{base}" in ref:
                assert_close(out[n], ref[f"new/{base}"], rtol, f"updated {base}", scale=1.0)


@pytest.fixture(scope="module", autouse=True)
def _shared_kernel_cache():
    kernel_cache.install_locator()


@pytest.mark.parametrize("fused", [False, True], ids=["imported", "fused"])
@pytest.mark.parametrize("case", CASES)
def test_exported_step_matches_reference_and_fixture(fixtures_dir, tmp_path, case, fused):
    graph, feeds, ref, batchnorm, steps = fixture_graph(fixtures_dir, case, fused)
    want = reference(graph, feeds)
    pkg = tmp_path / ("p_" + case.replace("/", "_") + ("_fused" if fused else ""))
    res = export_package(graph, pkg, inputs=feeds, oracle=fixture_oracle(fixtures_dir, case))
    assert res.kernels > 0
    package = load_package(pkg)
    out = package.Model().step(**feeds)
    with np.load(pkg / "check.npz") as f:
        stored = {k: f[k] for k in f.files}
    defaults = [k for k, n in enumerate(package.model.INPUTS) if n in package.model._DEFAULTS]
    assert not any(f"in_{k}" in stored for k in defaults)      # the step takes them from weights.npz
    cli = importlib.import_module(f"{pkg.name}._cli")
    assert cli.check(package.Model(), stored, package.model.INPUTS, package.model.OUTPUTS)
    assert mismatches(graph, want, out, 2e-3 if batchnorm else 1e-4) == []
    _check_fixture_references(graph, out, ref, 2e-2 if batchnorm else 1e-4)
    assert steps > 0 or not fused or "gradient_model" in case
