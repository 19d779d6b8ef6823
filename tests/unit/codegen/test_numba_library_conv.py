"""The CPU backend's convolutions (``codegen/numba_cpu/library.py`` ``conv``/``conv_transpose``, kernels in
``convolution.py``): im2col + BLAS and the direct loop nests against the float64 reference kernels, for the
geometries training graphs hold (forward convs, the ConvTranspose of an input gradient, the transposed-
batch convs of weight gradients, depthwise, grouped, strided, dilated, padded, 1-D) and the fallback
to the reference for what they do not run (3-D, float64, ``auto_pad``)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.numba_cpu import convolution, library as L  # noqa: E402
from codegen.numpy_ref.linalg import conv as ref_conv, conv_transpose as ref_conv_transpose  # noqa: E402
from codegen.numpy_ref.registry import OpContext  # noqa: E402
from codegen.numpy_ref.training import conv_weight_grad as ref_weight_grad  # noqa: E402
from tests.unit.codegen.blas_probe import run_blas_probe  # noqa: E402

CTX = OpContext(opset=17)

# (x shape, w shape, attrs): Conv
CONVS = {
    "resnet stem 7x7/2": ((2, 3, 20, 20), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    "3x3 same": ((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3/2 odd size": ((3, 8, 9, 7), (6, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "1x1 point, big plane": ((2, 8, 16, 16), (12, 8, 1, 1), {}),
    "1x1 point, small plane": ((4, 8, 3, 3), (12, 8, 1, 1), {}),
    "1x1 point on 1x1 planes (squeeze-excitation)": ((5, 24, 1, 1), (12, 24, 1, 1), {}),
    "grouped 1x1 point, small plane": ((3, 16, 3, 3), (8, 8, 1, 1), {"group": 2}),
    "grouped 1x1 point on 1x1 planes": ((3, 16, 1, 1), (12, 8, 1, 1), {"group": 2}),
    "1x1/2 downsample": ((2, 8, 8, 8), (16, 8, 1, 1), {"strides": [2, 2]}),
    "depthwise 3x3": ((2, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "depthwise 5x5/2": ((2, 6, 11, 11), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    "depthwise 3x3, channels last": ((2, 16, 10, 10), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
    "depthwise 5x5/2 dilated, channels last": ((3, 24, 11, 9), (24, 1, 5, 5),
                                               {"group": 24, "strides": [2, 1], "dilations": [1, 2],
                                                "pads": [2, 1, 2, 3]}),
    "depthwise 5x5 on a 2x2 plane": ((2, 32, 2, 2), (32, 1, 5, 5), {"group": 32, "pads": [2, 2, 2, 2]}),
    "grouped, gemm per group": ((2, 16, 7, 7), (32, 4, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "dilated, asymmetric pads": ((2, 4, 12, 12), (8, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 0, 3]}),
    # the weight gradient of "3x3/2 odd size" as autodiff writes it: batch and channels swapped,
    # the output gradient as the kernel, strides and dilations swapped
    "weight gradient of a 3x3/2 conv": ((8, 3, 9, 7), (6, 3, 5, 4), {"dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    "weight gradient of a depthwise conv": ((1, 2 * 6, 11, 11), (6, 2, 6, 6),
                                            {"group": 6, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "1-D": ((2, 4, 17), (6, 4, 3), {"strides": [2], "pads": [1, 1]}),
}

# ConvTranspose: the input gradients of some of the convs above
CONV_TRANSPOSES = {
    "dx of 3x3 same": ((2, 16, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "dx of 3x3/2 odd size": ((3, 6, 5, 4), (6, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                          "output_padding": [0, 0]}),
    "dx of 7x7/2 stem": ((2, 8, 10, 10), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3],
                                                        "output_padding": [1, 1]}),
    "dx of 1x1 point, big plane": ((2, 12, 16, 16), (12, 8, 1, 1), {}),
    "dx of 1x1 point, small plane": ((4, 12, 3, 3), (12, 8, 1, 1), {}),
    "dx of 1x1 point on 1x1 planes": ((5, 12, 1, 1), (12, 24, 1, 1), {}),
    "dx of grouped 1x1 point, small plane": ((3, 16, 3, 3), (16, 8, 1, 1), {"group": 2}),
    "dx of grouped 1x1 point on 1x1 planes": ((3, 24, 1, 1), (24, 8, 1, 1), {"group": 3}),
    "dx of 1x1/2 downsample": ((2, 16, 4, 4), (16, 8, 1, 1), {"strides": [2, 2], "output_padding": [1, 1]}),
    "dx of depthwise 5x5/2": ((2, 6, 6, 6), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    "dx of depthwise 3x3/2, channels last": ((2, 16, 5, 5), (16, 1, 3, 3),
                                             {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1],
                                              "output_padding": [1, 0]}),
    "dx of depthwise 5x5 dilated, channels last": ((3, 24, 9, 7), (24, 1, 5, 5),
                                                   {"group": 24, "dilations": [1, 2], "pads": [2, 1, 2, 3]}),
    "dx of grouped conv": ((2, 32, 7, 7), (32, 4, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "dx of dilated conv": ((2, 8, 8, 10), (8, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 0, 3]}),
    "1-D": ((2, 6, 9), (6, 4, 3), {"strides": [2], "pads": [1, 1], "output_padding": [0]}),
}


def _arrays(sx, sw, bias, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(sx).astype(np.float32)
    w = rng.standard_normal(sw).astype(np.float32)
    return x, w, (rng.standard_normal(bias).astype(np.float32) if bias else None)


def _check(got, want, terms):
    """float32 sums of ``terms`` products of unit normals against the float64 truth: a few ulps times √terms."""
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * np.finfo(np.float32).eps * np.sqrt(terms) * 4)


@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("exact", [True, False], ids=["float64 sum", "float32 sum"])
def test_conv_equals_the_reference(name, bias, exact):
    sx, sw, attrs = CONVS[name]
    x, w, b = _arrays(sx, sw, sw[0] if bias else 0)
    inputs = (x, w, b) if bias else (x, w)
    want = ref_conv([a.astype(np.float64) for a in inputs], attrs, CTX)[0]
    out = np.full(want.shape, np.nan, np.float32)
    assert L.conv(ref_conv, inputs, attrs, CTX, out=out, exact=exact) is out
    _check(out, want, int(np.prod(sw[1:])))


@pytest.mark.parametrize("name", list(CONV_TRANSPOSES))
def test_conv_transpose_equals_the_reference(name):
    sx, sw, attrs = CONV_TRANSPOSES[name]
    x, w, b = _arrays(sx, sw, sw[1] * attrs.get("group", 1))
    want = ref_conv_transpose([x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)], attrs, CTX)[0]
    out = np.full(want.shape, np.nan, np.float32)
    assert L.conv_transpose(ref_conv_transpose, (x, w, b), attrs, CTX, out=out) is out
    _check(out, want, sw[0] // attrs.get("group", 1) * int(np.prod(sw[2:])))


@pytest.mark.parametrize("name", [n for n in CONVS if not n.startswith("weight gradient")])
def test_conv_weight_grad_equals_the_reference(name):
    """ai.dcstudio ConvWeightGrad (X, dY) of every forward conv above, in W's layout."""
    sx, sw, attrs = CONVS[name]
    x, w, _ = _arrays(sx, sw, 0)
    dy = np.random.default_rng(2).standard_normal(ref_conv([x, w], attrs, CTX)[0].shape).astype(np.float32)
    full = {**attrs, "kernel_shape": list(sw[2:])}
    want = ref_weight_grad([x.astype(np.float64), dy.astype(np.float64)], full, CTX)[0]
    assert want.shape == sw
    out = np.full(sw, np.nan, np.float32)
    assert L.conv_weight_grad(ref_weight_grad, (x, dy), full, CTX, out=out) is out
    _check(out, want, sx[0] * int(np.prod(dy.shape[2:])))


def test_weight_grad_chunks_sum_over_images(monkeypatch):
    """Images in several chunks: each chunk's product is added to the first's."""
    sx, sw, attrs = CONVS["3x3/2 odd size"]
    x, w, _ = _arrays(sx, sw, 0)
    dy = np.random.default_rng(2).standard_normal((3, 6, 5, 4)).astype(np.float32)
    full = {**attrs, "kernel_shape": [3, 3]}
    want = ref_weight_grad([x.astype(np.float64), dy.astype(np.float64)], full, CTX)[0]
    monkeypatch.setattr(convolution, "SCRATCH", 72 * 20)
    monkeypatch.setattr(convolution, "_LOCAL", threading.local())
    assert convolution._chunk(3, 72 * 20) == 1
    out = np.full(sw, np.nan, np.float32)
    L.conv_weight_grad(ref_weight_grad, (x, dy), full, CTX, out=out)
    _check(out, want, 3 * 20)


def test_both_strategies_run():
    """The cases above reach the GEMM path and the direct loop nests (the choice is by shape)."""
    gemm = [n for n, (sx, sw, a) in CONVS.items() if convolution.gemm_pays(sw[1], sw[0] // a.get("group", 1),
                                                                           int(np.prod(sw[2:])))]
    assert "3x3 same" in gemm and "depthwise 3x3" not in gemm and "weight gradient of a depthwise conv" not in gemm
    assert all(n in gemm for n in CONVS if "1x1 point" in n)       # the pointwise paths: copies, one GEMM
    dx = [n for n, (sx, sw, a) in CONV_TRANSPOSES.items()
          if convolution.gemm_pays(sx[1] // a.get("group", 1), sw[1], int(np.prod(sw[2:])))]
    assert all(n in dx for n in CONV_TRANSPOSES if "1x1 point" in n)
    last = [n for n, (sx, sw, a) in CONVS.items()
            if convolution.depthwise_pays(a.get("group", 1), sw[1], sw[0] // a.get("group", 1))]
    assert sorted(last) == sorted(n for n in CONVS if "channels last" in n or "2x2 plane" in n)


def test_depthwise_channels_last_writes_a_strided_output_in_place():
    """A depthwise conv's channels-last result lands in a strided ``out`` (through a copy) and its weight
    gradient in a strided ``dW``; what lies between the strides stays untouched."""
    sx, sw, attrs = CONVS["depthwise 3x3, channels last"]
    x, w, _ = _arrays(sx, sw, 0)
    want = ref_conv([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0]
    big = np.zeros((2, 32, 10, 10), np.float32)
    L.conv(ref_conv, (x, w), attrs, CTX, out=big[:, ::2])
    _check(big[:, ::2], want, 9)
    assert not big[:, 1::2].any()
    dy = np.random.default_rng(2).standard_normal(want.shape).astype(np.float32)
    full = {**attrs, "kernel_shape": [3, 3]}
    dw_want = ref_weight_grad([x.astype(np.float64), dy.astype(np.float64)], full, CTX)[0]
    wide = np.zeros((16, 2, 3, 3), np.float32)
    L.conv_weight_grad(ref_weight_grad, (x, dy), full, CTX, out=wide[:, :1])
    _check(wide[:, :1], dw_want, 2 * 100)
    assert not wide[:, 1:].any()


def test_chunks_of_images_give_the_same_result(monkeypatch):
    """A scratch buffer too small for the batch: the images go through im2col/col2im in chunks."""
    sx, sw, attrs = CONVS["3x3/2 odd size"]
    x, w, _ = _arrays(sx, sw, 0)
    want = ref_conv([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0]
    monkeypatch.setattr(convolution, "SCRATCH", 8 * 9 * 20 * 2 - 1)       # one image per chunk, then two
    monkeypatch.setattr(convolution, "_LOCAL", threading.local())
    assert convolution._chunk(3, 8 * 9 * 20) == 1
    chunked = np.full(want.shape, np.nan, np.float32)
    L.conv(ref_conv, (x, w), attrs, CTX, out=chunked)
    _check(chunked, want, 72)
    monkeypatch.setattr(convolution, "SCRATCH", 8 * 9 * 20 * 2)
    assert convolution._chunk(3, 8 * 9 * 20) == 2
    chunked[...] = np.nan
    L.conv(ref_conv, (x, w), attrs, CTX, out=chunked)
    _check(chunked, want, 72)


def test_a_strided_output_is_written_in_place():
    """``out`` a non-contiguous view (a planned buffer is contiguous, but a caller's may not be)."""
    sx, sw, attrs = CONVS["3x3 same"]
    x, w, _ = _arrays(sx, sw, 0)
    want = ref_conv([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0]
    big = np.zeros((2, 32, 9, 9), np.float32)
    out = big[:, ::2]
    L.conv(ref_conv, (x, w), attrs, CTX, out=out)
    _check(big[:, ::2], want, 72)
    assert not big[:, 1::2].any()


@pytest.mark.parametrize("case", ["3-D", "float64", "auto_pad"])
def test_what_the_kernels_do_not_run_falls_back_to_the_reference(case):
    rng = np.random.default_rng(1)
    if case == "3-D":
        x, w, attrs = rng.standard_normal((1, 2, 4, 4, 4)), rng.standard_normal((3, 2, 2, 2, 2)), {}
    else:
        x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
        attrs = {"auto_pad": "SAME_UPPER"} if case == "auto_pad" else {}
    dtype = np.float64 if case == "float64" else np.float32
    x, w = x.astype(dtype), w.astype(dtype)
    want = ref_conv([x, w], attrs, CTX)[0]
    out = np.empty(want.shape, dtype)
    L.conv(ref_conv, (x, w), attrs, CTX, out=out)
    np.testing.assert_array_equal(out, want)


POOLS = {
    "resnet 3x3/2 pad 1": ((2, 4, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "2x2/2": ((2, 3, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "ceil mode": ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "dilated": ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]}),
    "1-D": ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
}


@pytest.mark.parametrize("name", list(POOLS))
@pytest.mark.parametrize("with_indices", [True, False], ids=["indices", "values"])
def test_max_pool_equals_the_reference(name, with_indices):
    from codegen.numpy_ref.nn import maxpool as ref_max_pool
    sx, attrs = POOLS[name]
    x = np.random.default_rng(0).standard_normal(sx).astype(np.float32)
    want, want_idx = ref_max_pool([x], attrs, CTX)
    out = np.full(want.shape, np.nan, np.float32)
    idx = np.full(want.shape, -7, np.int64) if with_indices else None
    assert L.max_pool(ref_max_pool, (x,), attrs, CTX, out=out, indices=idx) is out
    np.testing.assert_array_equal(out, want)
    if with_indices:
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(x.reshape(-1)[idx], out)


@pytest.mark.parametrize("shape", [(8, 96, 32, 32), (2, 3, 5), (1, 4, 3, 2, 2)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed view"])
def test_global_average_pool_runs_natively_within_one_ulp_of_the_reference(shape, layout):
    """``L.reference`` runs GlobalAveragePool on float32 as a loop nest (``pooling.native``): a float64
    sum in another order than the reference's ``np.mean``, rounded once, so within one float32 ulp."""
    from codegen.numba_cpu import pooling
    from codegen.numpy_ref.nn import global_average_pool as ref_gap
    x = (np.random.default_rng(1).standard_normal(shape) * 3 + 1).astype(np.float32)
    if layout != "contiguous":
        x = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)
    want = ref_gap([x], {}, CTX)[0]
    native = pooling.native(ref_gap, (x,))
    assert native is not None
    got = L.reference(ref_gap, (x,), {}, CTX)[0]
    assert got.shape == want.shape == x.shape[:2] + (1,) * (x.ndim - 2) and got.dtype == np.float32
    assert (np.abs(got - want) <= np.spacing(np.abs(want))).all()
    np.testing.assert_array_equal(native[0], got)
    wide = x.astype(np.float64)                                      # not float32: the reference runs
    assert pooling.native(ref_gap, (wide,)) is None
    np.testing.assert_array_equal(L.reference(ref_gap, (wide,), {}, CTX)[0], ref_gap([wide], {}, CTX)[0])


def test_the_forward_conv_rounds_its_float64_sum_once():
    """A 3×3 conv over 128 channels of ReLU outputs (1,152 terms): within one ulp of the float64 truth
    rounded (fp32 sums would be ~10 ulps off, enough to flip a ReLU mask now and then)."""
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal((4, 128, 6, 6)), 0).astype(np.float32)
    w = (rng.standard_normal((32, 128, 3, 3)) * 0.03).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1]}
    truth = ref_conv([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0].astype(np.float32)
    out = np.empty(truth.shape, np.float32)
    L.conv(ref_conv, (x, w), attrs, CTX, out=out)
    assert (np.abs(out - truth) <= np.spacing(np.abs(truth))).all()


@pytest.mark.parametrize("name", ["depthwise 3x3, channels last", "depthwise 5x5/2 dilated, channels last",
                                  "3x3/2 odd size", "dx of 3x3 same"])
def test_the_copies_and_depthwise_loops_give_the_same_bits_on_any_number_of_threads(name):
    """``im2col``, ``col2im``, the channels-last copies and ``depthwise_taps`` run ``prange`` over channels,
    images or planes; every element is summed in the same order however many threads share the loop
    (the weight gradient splits channels only: it sums over images)."""
    numba = pytest.importorskip("numba")
    transpose = name.startswith("dx of")
    sx, sw, attrs = (CONV_TRANSPOSES if transpose else CONVS)[name]
    x, w, _ = _arrays(sx, sw, 0)
    if transpose:
        shape = ref_conv_transpose([x, w], attrs, CTX)[0].shape
        calls = {"dx": lambda out: L.conv_transpose(ref_conv_transpose, (x, w), attrs, CTX, out=out)}
    else:
        shape = ref_conv([x, w], attrs, CTX)[0].shape
        dy = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
        full = {**attrs, "kernel_shape": list(sw[2:])}
        calls = {"y": lambda out: L.conv(ref_conv, (x, w), attrs, CTX, out=out, exact=False),
                 "dw": lambda out: L.conv_weight_grad(ref_weight_grad, (x, dy), full, CTX, out=out)}
    before = numba.get_num_threads()
    results = {}
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS), numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            for what, call in calls.items():
                out = np.full(sw if what == "dw" else shape, np.nan, np.float32)
                call(out)
                results.setdefault(what, []).append((threads, out))
    finally:
        numba.set_num_threads(before)
    for what, runs in results.items():
        assert not np.isnan(runs[0][1]).any(), what
        for threads, out in runs[1:]:
            assert np.array_equal(out, runs[0][1]), f"{what}: {threads} threads differ from 1"


SOLO_PROBE = """
import json
import numpy as np
from codegen.numba_cpu import convolution, library as L
from codegen.numpy_ref.linalg import conv as ref_conv
from codegen.numpy_ref.registry import OpContext
ctx = OpContext(opset=17)
rng = np.random.default_rng(0)
x, w = rng.standard_normal((2, 8, 16, 16)).astype(np.float32), rng.standard_normal((12, 8, 1, 1)).astype(np.float32)
out, seen, real = np.full((2, 12, 16, 16), np.nan, np.float32), [], convolution.conv2d
def spy(*args, **kw):
    seen.append(L.blas_threads())
    return real(*args, **kw)
def boom(*args, **kw):
    seen.append(L.blas_threads())
    raise MemoryError("scratch")
before = L.blas_threads()
convolution.conv2d = spy
L.conv(ref_conv, (x, w), {}, ctx, out=out, exact=False)
L.SOLO_MACS = 12 * 256 * 8 * 2                  # exactly this conv's multiply-adds: no longer below
L.conv(ref_conv, (x, w), {}, ctx, out=out, exact=False)
L.SOLO_MACS, convolution.conv2d = 10 ** 12, boom
try:
    L.conv(ref_conv, (x, w), {}, ctx, out=np.empty_like(out), exact=False)
except MemoryError:
    seen.append("raised")
want = ref_conv([x.astype(np.float64), w.astype(np.float64)], {}, ctx)[0]
print(json.dumps({"before": before, "seen": seen, "after": L.blas_threads(), "error": float(np.abs(out - want).max())}))
"""


def test_small_convolutions_run_their_gemms_on_one_blas_thread():
    """Below ``SOLO_MACS`` multiply-adds a conv's GEMMs run on one BLAS thread, above it on what was set; the
    count comes back afterwards, also when the conv raises. In a fresh process with BLAS on two threads (this
    one's BLAS may have been held to one by an earlier test)."""
    res = run_blas_probe(SOLO_PROBE, 2, timeout=300)
    assert res["seen"] == [1, 2, 1, "raised"] and res["after"] == 2
    assert res["error"] < 1e-4
