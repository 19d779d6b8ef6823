"""Exported CPU packages of mixed-precision graphs (``mixed_precision``: bfloat16 or float16
storage, float32 compute): every eligible transient of the BERT-small training step stored in
bfloat16 (or its forward activations in float16), exported and run. numba has no float16 and
NumPy no bfloat16, so kernels see uint16 bits (``codegen/numba_cpu/halfbits.py``) and
contractions widen bfloat16 operands.

The package must match the reference executor on the same mixed-precision graph (which
rounds with ml_dtypes at the same points) at float32 kernel tolerance, and the original float32
step at the transformation's stated tolerance; it must store the low-precision tensors in
2-byte buffers; and a reference kernel that would read bfloat16 bits is refused by name."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package, mismatches  # noqa: E402
from codegen.numba_cpu import kernel_cache  # noqa: E402
from codegen.numba_cpu.backend import program as build_program  # noqa: E402
from codegen.program.program import HalfStorageError  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import feeds_for  # noqa: E402
from ir import lowering  # noqa: E402
from ir.onnx_import import import_model, import_proto  # noqa: E402
from tests.peer.test_export_fixtures import fuse_everything, load_package  # noqa: E402
from tests.unit.ir.onnx_models import model, vi  # noqa: E402
from tests.unit.transforms.test_mixed_precision import _lower_everything as mix  # noqa: E402
from transforms.mixed_precision import BF16_RTOL, FP16_RTOL  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _shared_kernel_cache():
    kernel_cache.install_locator()


def _relative(want: np.ndarray, got: np.ndarray) -> float:
    w, g = np.asarray(want, np.float64), np.asarray(got, np.float64)
    return float(np.abs(w - g).max() / max(np.abs(w).max(), 1e-3))


@pytest.mark.parametrize("dtype,rtol", [("bfloat16", BF16_RTOL), ("float16", FP16_RTOL)])
def test_mixed_precision_bert_small_exports_and_runs(fixtures_dir, tmp_path, dtype, rtol):
    g = import_model(fixtures_dir / "ort_artifacts/bert_layer_small/legacy_ln3/train_step_adamw.onnx")
    fuse_everything(g)
    feeds = feeds_for(g)
    exact = reference(g, feeds)
    assert mix(g, dtype) >= (40 if dtype == "bfloat16" else 5)
    half = [n for n, c in g.containers.items() if c.dtype == dtype]
    want = reference(g, feeds)
    prog = build_program(g)
    assert not prog.extern, [reason for _, reason in prog.extern.values()]
    res = export_package(g, tmp_path / f"bert_{dtype}", inputs=feeds)
    out = load_package(res.path).Model().step(**feeds)
    assert mismatches(g, want, out, 1e-3) == []                      # same rounding points as the reference
    worst = max(g.outputs, key=lambda n: _relative(exact[n], out[n]))
    assert _relative(exact[worst], out[worst]) <= rtol, worst        # the stated tolerance vs float32
    text = (res.path / "model.py").read_text(encoding="utf-8")
    kernels = "".join(p.read_text(encoding="utf-8") for p in (res.path / "kernels").glob("k_*.py"))
    store, load = ("_f32_bf16", "_bf16_f32") if dtype == "bfloat16" else ("_f32_f16", "_f16_f32")
    assert f"def {store}(" in kernels and f"def {load}(" in kernels        # kernels convert the bits
    assert ("np.uint16)" in text) and (dtype == "float16" or "L.widen_bf16(" in text)
    assert len(half) >= 5


def test_a_reference_kernel_reading_bfloat16_is_refused_by_name():
    """mixed_precision never leaves one, but a hand-made graph can: refuse rather than read bits."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="act"),
             helper.make_node("ReduceMax", ["h"], ["y"], name="rmax", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [4, 8])], [vi("y", [])]))
    lowering.expand_node(g, "act")
    g.containers["h"] = replace(g.containers["h"], dtype="bfloat16")
    with pytest.raises(HalfStorageError, match="'rmax' .* touches the bfloat16 tensor 'h'"):
        build_program(g, lowered=True)
