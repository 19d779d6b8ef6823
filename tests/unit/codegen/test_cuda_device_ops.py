"""The device versions of formerly host-only ops (``codegen/cupy_cuda/device_ops.py``) against the
NumPy reference kernels they replace: run here with NumPy as the array namespace, and with CuPy on
a device where there is one (skipped here, with the reason). Data movement must match exactly;
the loss and the average pool to float32 rounding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codegen.cupy_cuda import device_ops
from codegen.numpy_ref import kernels  # noqa: F401 - registers the reference kernels
from codegen.numpy_ref.registry import OpContext, lookup

RNG = np.random.default_rng(7)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _pool_ties(*shape):
    """Small integers: windows hold equal maxima, so the first-maximum rule is exercised."""
    return RNG.integers(0, 3, shape).astype(np.float32)


CASES = {   # name: (op, inputs, attrs)
    "gather_rows_negative": ("Gather", [_f(6, 4), np.array([[0, -1, 3], [5, -6, 2]], np.int64)], {}),
    "gather_axis1": ("Gather", [_f(3, 5, 2), np.array([4, 0, -2], np.int32)], {"axis": 1}),
    "gather_scalar_index": ("Gather", [_f(6, 4), np.array(-2, np.int64)], {"axis": 0}),
    "gather_elements": ("GatherElements", [_f(4, 5), RNG.integers(-5, 5, (4, 3))], {"axis": 1}),
    "scatter_none": ("ScatterElements", [_f(4, 6), np.array([[5, 0, -2], [1, 2, 3], [0, 4, 2], [-6, 1, 3]]),
                                         _f(4, 3)], {"axis": 1}),
    "scatter_add_duplicates": ("ScatterElements", [_f(5, 3), RNG.integers(0, 5, (9, 3)), _f(9, 3)],
                               {"axis": 0, "reduction": "add"}),
    "scatter_max": ("ScatterElements", [_f(5, 3), RNG.integers(0, 5, (7, 3)), _f(7, 3)],
                    {"axis": 0, "reduction": "max"}),
    "constant_of_shape_float": ("ConstantOfShape", [np.array([2, 3], np.int64)],
                                {"value": np.array([1.5], np.float32)}),
    "constant_of_shape_int": ("ConstantOfShape", [np.array([4], np.int64)], {"value": np.array([7], np.int64)}),
    "constant_of_shape_default": ("ConstantOfShape", [np.array([3, 1], np.int64)], {}),
    "concat": ("Concat", [_f(2, 3), _f(2, 1), _f(2, 4)], {"axis": -1}),
    "concat_ints_axis0": ("Concat", [np.arange(6).reshape(2, 3), np.arange(3).reshape(1, 3)], {"axis": 0}),
    "split_sizes": ("Split", [_f(3, 10), np.array([2, 5, 3], np.int64)], {"axis": 1}),
    "split_equal": ("Split", [_f(6, 2)], {"axis": 0}),
    "global_average_pool": ("GlobalAveragePool", [_f(2, 3, 5, 7)], {}),
    "sce_mean": ("SoftmaxCrossEntropyLoss", [_f(6, 10), RNG.integers(0, 10, 6)], {"reduction": "mean"}),
    "sce_weights_ignore": ("SoftmaxCrossEntropyLoss",
                           [_f(5, 4, 3), np.array([[0, 1, 3], [2, -100, 1], [3, 3, 0], [1, 0, -100], [2, 2, 2]]),
                            np.abs(_f(4)) + 0.1], {"reduction": "mean", "ignore_index": -100}),
    "sce_sum": ("SoftmaxCrossEntropyLoss", [_f(4, 7), RNG.integers(0, 7, 4)], {"reduction": "sum"}),
    "sce_none": ("SoftmaxCrossEntropyLoss", [_f(4, 7), RNG.integers(0, 7, 4)], {"reduction": "none"}),
    "maxpool_resnet_stem": ("MaxPool", [_f(2, 3, 9, 9)], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                          "pads": [1, 1, 1, 1]}),
    "maxpool_ties": ("MaxPool", [_pool_ties(2, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "maxpool_dilated_asym": ("MaxPool", [_f(1, 2, 8, 7)], {"kernel_shape": [2, 3], "dilations": [2, 1],
                                                           "pads": [0, 1, 1, 0]}),
    "maxpool_ceil": ("MaxPool", [_f(1, 2, 7, 7)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "maxpool_ceil_ties": ("MaxPool", [_pool_ties(1, 3, 5, 5)], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                "ceil_mode": 1, "pads": [1, 1, 0, 0]}),
    "slice_steps_axes": ("Slice", [_f(5, 6, 4), np.array([1, -1], np.int64), np.array([4, -7], np.int64),
                                   np.array([0, -2], np.int64), np.array([2, -2], np.int64)], {}),
    "slice_starts_ends_only": ("Slice", [_f(6, 3), np.array([-4], np.int64), np.array([100], np.int64)], {}),
    "slice_conv_crop": ("Slice", [_f(2, 3, 7, 7), np.array([0, 0], np.int64), np.array([5, 5], np.int64),
                                  np.array([2, 3], np.int64)], {}),
    "pad_constant_value": ("Pad", [_f(2, 3, 4), np.array([0, 1, 2, 0, 0, 1], np.int64), np.array(0.5, np.float32)],
                           {"mode": "constant"}),
    "pad_negative_crops": ("Pad", [_f(4, 5), np.array([-1, 2, 0, -2], np.int64)], {}),
    "pad_reflect": ("Pad", [_f(1, 2, 5, 5), np.array([0, 0, 2, 1, 0, 0, 1, 2], np.int64)], {"mode": "reflect"}),
    "pad_edge_axes": ("Pad", [_f(3, 4), np.array([1, 2], np.int64), None, np.array([-1], np.int64)],
                      {"mode": "edge"}),
    "sce_grad_mean": ("com.microsoft/SoftmaxCrossEntropyLossGrad",
                      [np.array(1.3, np.float32), np.log(np.abs(_f(6, 5)) / 3 + 0.01), RNG.integers(0, 5, 6)],
                      {"reduction": "mean"}),
    "sce_grad_weights_ignore_input": ("com.microsoft/SoftmaxCrossEntropyLossGrad",
                                      [np.array(0.7, np.float32), np.log(np.abs(_f(4, 3, 2)) / 2 + 0.01),
                                       np.array([[0, 2], [1, -1], [2, 2], [-1, 0]]), np.abs(_f(3)) + 0.1,
                                       np.array(-1, np.int64)], {"reduction": "mean"}),
    "sce_grad_none": ("com.microsoft/SoftmaxCrossEntropyLossGrad",
                      [_f(4), np.log(np.abs(_f(4, 3)) / 2 + 0.01), RNG.integers(0, 3, 4)], {"reduction": "none"}),
    "sce_grad_sum": ("com.microsoft/SoftmaxCrossEntropyLossGrad",
                     [np.array(2.0, np.float32), np.log(np.abs(_f(4, 3)) / 2 + 0.01), RNG.integers(0, 3, 4)],
                     {"reduction": "sum"}),
    "maxpool_grad_overlapping": ("MaxPoolGrad", [_f(2, 3, 4, 4), RNG.integers(0, 2 * 3 * 9 * 9, (2, 3, 4, 4))], {}),
    "batch_norm_internal_train": ("com.microsoft/BatchNormInternal",
                                  [_f(4, 3, 5, 5), _f(3), _f(3), _f(3), np.abs(_f(3)) + 0.5],
                                  {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}),
    "batch_norm_internal_2d_inference": ("com.microsoft/BatchNormInternal",
                                         [_f(6, 4), _f(4), _f(4), _f(4), np.abs(_f(4)) + 0.5],
                                         {"training_mode": 0}),
    "batch_norm_grad": ("com.microsoft/BatchNormalizationGrad",
                        [_f(4, 3, 5, 5), _f(4, 3, 5, 5), _f(3), _f(3), np.abs(_f(3)) + 0.5], {}),
}
SHAPES = {"maxpool_grad_overlapping": ((2, 3, 9, 9),)}    # dX's shape, which the exporter records
OPSET = {"pad_edge_axes": 18}
TOLERANT = ("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "GlobalAveragePool")
FLOAT64_SUMS = ("MaxPoolGrad", "BatchNormInternal", "BatchNormalizationGrad")   # on a device: another summing order


def _op(name):
    """(domain, op type) of case ``name``."""
    op = CASES[name][0]
    return tuple(op.split("/")) if "/" in op else ("", op)


def _run(name, xp):
    _, inputs, attrs = CASES[name]
    opset = OPSET.get(name, 17)
    want = lookup(*_op(name))(list(inputs), dict(attrs), OpContext(opset=opset, output_shapes=SHAPES.get(name)))
    ctx = OpContext(opset=opset, n_outputs=len(want), output_shapes=tuple(w.shape for w in want),
                    output_dtypes=tuple(w.dtype for w in want), label=name)
    dev = [None if x is None else xp.asarray(x) for x in inputs]
    # as the CUDA library: small inputs (graph constants there) have a host copy, the rest do not
    shadow = {id(d): x for d, x in zip(dev, inputs) if x is not None and x.size <= 64}
    # tensor attributes on the device, except for one case that keeps them on the host (both happen)
    dev_attrs = {k: xp.asarray(v) if isinstance(v, np.ndarray) and name != "constant_of_shape_int" else v
                 for k, v in attrs.items()}
    got = device_ops.OPS[_op(name)](xp, dev, dev_attrs, ctx, lambda v: shadow.get(id(v)))
    assert got is not None, f"{name}: the device version declined a case it should handle"
    return [np.asarray(g.get() if hasattr(g, "get") else g) for g in got], want


def _compare(name, got, want, exact=True):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
        if _op(name)[1] in TOLERANT:
            np.testing.assert_allclose(g, w, rtol=2e-7, atol=0, err_msg=name)
        elif _op(name)[1] in FLOAT64_SUMS and not exact:   # float64 in any order, rounded once: an ulp
            np.testing.assert_allclose(g, w, rtol=2.5e-7, atol=1e-7 * float(np.abs(w).max(initial=1.0)), err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_device_versions_match_the_reference_kernels_with_numpy(name):
    got, want = _run(name, np)
    _compare(name, got, want)


def test_every_device_op_has_a_reference_kernel_and_cases():
    covered = {_op(n) for n in CASES}
    for key in device_ops.OPS:
        assert lookup(*key) is not None, key
        assert key in covered, f"{key} has no case here"


def test_cases_it_does_not_handle_fall_back_to_the_host():
    x = _f(1, 1, 4, 4, 4)                                       # 3-D pooling
    ctx = OpContext(opset=17, output_shapes=((1, 1, 3, 3, 3), (1, 1, 3, 3, 3)))
    assert device_ops.max_pool(np, [x], {"kernel_shape": [2, 2, 2]}, ctx) is None
    ctx = OpContext(opset=17, output_shapes=(None,))
    assert device_ops.constant_of_shape(np, [np.array([2], np.int64)], {}, ctx) is None
    # starts computed on the device (no host copy): Slice declines rather than read them back
    ctx = OpContext(opset=17, output_shapes=((2, 3),))
    starts, ends = np.array([0], np.int64), np.array([2], np.int64)
    assert device_ops.slice_(np, [_f(4, 3), starts, ends], {}, ctx, lambda v: None) is None
    assert device_ops.pad(np, [_f(4, 3), np.array([1, 0, 0, 0], np.int64)], {}, ctx, lambda v: None) is None


def test_the_exported_cuda_library_dispatches_to_them():
    """The CUDA library maps each reference kernel to its device version (the import of CuPy is
    what needs the cuda extra; no device is touched)."""
    library = pytest.importorskip("codegen.cupy_cuda.library", reason="cupy (the cuda extra) is not installed")
    for domain, op in device_ops.OPS:
        assert library._device_op(lookup(domain, op)) is device_ops.OPS[(domain, op)]
    assert library._device_op(lookup("", "Relu")) is None


def test_device_versions_on_a_device():
    cupy = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception:  # noqa: BLE001 - any failure to reach a device means there is none
        pytest.skip("no CUDA device on this machine: the device versions run here with NumPy only")
    for name in sorted(CASES):
        got, want = _run(name, cupy)
        _compare(name, got, want, exact=False)
    from codegen.cupy_cuda import library
    small, big = cupy.arange(3), cupy.zeros(library.SMALL_CONSTANT + 1)
    library._remember_constants({"small": small, "big": big})
    assert library.host_value(small).tolist() == [0, 1, 2] and library.host_value(big) is None
    assert library.host_value(cupy.arange(3)) is None          # an equal array that is not the weight


def test_an_exported_cuda_package_carries_them_beside_its_reference_kernels(tmp_path):
    """The package's copy imports its own ``_ref`` (not the repository's) and maps every op."""
    import importlib
    import sys

    from onnx import helper

    from codegen.export.package import export_package
    from codegen.numpy_ref.feeds import feeds_for
    from ir.onnx_import import import_proto
    from tests.unit.ir.onnx_models import vi
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    g = helper.make_graph([node], "g", [vi("x", [5, 3]), vi("i", [2], 7)], [vi("y", [2, 3])])
    graph = import_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    res = export_package(graph, tmp_path / "gather_cuda", inputs=feeds_for(graph), backend="cuda")
    path = Path(res.path) / "device_ops.py"
    assert path.read_text() == Path(device_ops.__file__).read_text()
    sys.path.insert(0, str(tmp_path))
    try:
        mod = importlib.import_module("gather_cuda.device_ops")
        assert mod._slice_bounds.__module__ == "gather_cuda._ref.shape"
        assert set(mod.OPS) == set(device_ops.OPS)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "gather_cuda" or n.startswith("gather_cuda.")]:
            del sys.modules[name]
