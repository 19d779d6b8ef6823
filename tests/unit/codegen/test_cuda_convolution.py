"""The CUDA backend's convolutions (``codegen/cupy_cuda/convolution.py``) without a GPU: the kernel source
compiles with NVRTC for sm_80 and sm_90, and the whole path (im2col/col2im or direct kernels plus the
GEMMs, as the library runs them) gives the float64 reference's result when its kernels are compiled for
the host by g++ and launched as one thread (each kernel is a grid-stride loop, so one thread walks every
element through the same index arithmetic) with NumPy standing in for CuPy and cuBLAS. On a machine with
a GPU, the last test runs the library's ``conv`` calls on the device."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from codegen.cupy_cuda import convolution, nvrtc
from codegen.numpy_ref.linalg import conv as ref_conv, conv_transpose as ref_conv_transpose
from codegen.numpy_ref.training import conv_weight_grad as ref_weight_grad
from tests.unit.codegen.test_numba_library_conv import CONV_TRANSPOSES, CONVS, CTX, _arrays, _check

HOST = r"""
#include <cmath>
struct Dim { unsigned x, y, z; };
static Dim blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
"""


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
def test_the_kernels_compile_with_nvrtc(arch):
    why = nvrtc.available()
    if why:
        pytest.skip(why)
    res = nvrtc.compile_check(convolution.SOURCE, "convolution", arch)
    assert res.ok, res.log
    assert res.ptx_bytes > 0


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the kernels cannot be run on the host")
    d = tmp_path_factory.mktemp("cuda_conv")
    (d / "conv.cpp").write_text(HOST + convolution.SOURCE, encoding="utf-8")
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(d / "conv.so"), str(d / "conv.cpp")],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(d / "conv.so"))


@pytest.fixture
def on_host(host_kernels, monkeypatch):
    """``convolution`` with NumPy as CuPy and its kernels launched on the host."""
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        empty=np.empty, ascontiguousarray=np.ascontiguousarray, float32=np.float32))
    launched = []

    def launch(name, total, *args):
        launched.append(name)
        conv = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_int(int(a)) for a in args]
        for a in args:
            assert not isinstance(a, np.ndarray) or a.flags.c_contiguous, name
        getattr(host_kernels, name)(*conv)
    monkeypatch.setattr(convolution, "_launch", launch)
    return launched


def _matmul(a, b, out):
    return np.matmul(a, b, out=out)


def _geometry(attrs, nd=2):
    return (tuple(attrs.get("strides", [1] * nd)), tuple(attrs.get("pads", [0] * 2 * nd))[:nd],
            tuple(attrs.get("dilations", [1] * nd)))


TWO_D = [n for n in CONVS if n != "1-D"]


CASES = [("conv", n) for n in TWO_D] + [("transpose", n) for n in CONV_TRANSPOSES if n != "1-D"]


@pytest.mark.parametrize("kind,name", CASES, ids=[f"{k}: {n}" for k, n in CASES])
def test_conv_and_conv_transpose_on_the_host(kind, name, on_host):
    sx, sw, attrs = (CONVS if kind == "conv" else CONV_TRANSPOSES)[name]
    x, w, _ = _arrays(sx, sw, 0)
    ref, run = (ref_conv, convolution.conv2d) if kind == "conv" else (ref_conv_transpose, convolution.conv_transpose2d)
    want = ref([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0]
    y = np.full(want.shape, np.nan, np.float32)
    run(x, w, y, *_geometry(attrs), attrs.get("group", 1), _matmul)
    group = attrs.get("group", 1)
    _check(y, want, int(np.prod(sw[1:])) if kind == "conv" else sw[0] // group * int(np.prod(sw[2:])))
    if kind == "conv":
        gemm = convolution.gemm_pays(sw[1], sw[0] // group, int(np.prod(sw[2:])))
        assert on_host == (["im2col"] * group if gemm else ["direct_conv"])


@pytest.mark.parametrize("name", [n for n in TWO_D if not n.startswith("weight gradient")])
def test_weight_grad_on_the_host(name, on_host):
    sx, sw, attrs = CONVS[name]
    x, w, _ = _arrays(sx, sw, 0)
    dy = np.random.default_rng(1).standard_normal(ref_conv([x, w], attrs, CTX)[0].shape).astype(np.float32)
    full = {**attrs, "kernel_shape": list(sw[2:])}
    want = ref_weight_grad([x.astype(np.float64), dy.astype(np.float64)], full, CTX)[0]
    dw = np.full(sw, np.nan, np.float32)
    convolution.conv_weight_grad2d(x, dy, dw, *_geometry(attrs), attrs.get("group", 1), _matmul)
    _check(dw, want, sx[0] * int(np.prod(dy.shape[2:])))


CONV_GRADS = ["resnet stem 7x7/2", "3x3/2 odd size", "1x1/2 downsample", "depthwise 5x5/2", "grouped, gemm per group",
              "dilated, asymmetric pads"]


@pytest.mark.parametrize("name", CONV_GRADS)
def test_conv_grad_on_the_host(name, on_host, monkeypatch):
    """onnxruntime's ConvGrad (dY, X, W) -> (dX, dW, dB) as the library runs it on a device (``_conv_grad``:
    the transposed convolution, the weight gradient, a float64 sum), with NumPy standing in for CuPy and
    cuBLAS, against the float64 reference kernel. Before, the op ran on the host: a step that holds it
    (the onnxruntime-training CNN artifacts) could not be captured as a CUDA graph."""
    L = pytest.importorskip("codegen.cupy_cuda.library", reason="cupy (the cuda extra) is not installed")
    from codegen.numpy_ref.registry import lookup
    monkeypatch.setattr(L, "cp", np)
    monkeypatch.setattr(L, "matmul", _matmul)
    sx, sw, attrs = CONVS[name]
    x, w, _ = _arrays(sx, sw, 0)
    dy = np.random.default_rng(2).standard_normal(ref_conv([x, w], attrs, CTX)[0].shape).astype(np.float32)
    ref = lookup("com.microsoft", "ConvGrad")
    assert L._device_op(ref) is L._conv_grad
    want = ref([dy, x, w], attrs, CTX)
    got = L._conv_grad(np, [dy, x, w], attrs, CTX)
    group = attrs.get("group", 1)
    _check(got[0], want[0], sw[0] // group * int(np.prod(sw[2:])))      # dX: output channels x window
    _check(got[1], want[1], sx[0] * int(np.prod(dy.shape[2:])))         # dW: images x output points
    np.testing.assert_allclose(got[2], want[2], rtol=2e-7)              # dB: float64 sums, rounded once
    assert on_host and set(on_host) <= {"col2im", "direct_conv_transpose", "direct_weight_grad"} | {"im2col"}
    assert L._conv_grad(np, [dy.astype(np.float64), x, w], attrs, CTX) is None      # not float32: the host's


def test_the_library_runs_convolutions_on_the_device():
    cp = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception:                                     # noqa: BLE001 - any failure means no usable GPU
        pytest.skip("no CUDA device on this machine: the kernels are compile-checked and host-run only")
    from codegen.cupy_cuda import library as L
    for name, (sx, sw, attrs) in CONVS.items():
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal(sx).astype(np.float32), rng.standard_normal(sw).astype(np.float32)
        want = ref_conv([x.astype(np.float64), w.astype(np.float64)], attrs, CTX)[0]
        out = cp.empty(want.shape, cp.float32)
        L.conv(ref_conv, (cp.asarray(x), cp.asarray(w)), attrs, CTX, out)
        _check(cp.asnumpy(out), want, int(np.prod(sw[1:])))
    from codegen.numpy_ref.registry import lookup
    for name in CONV_GRADS:                               # onnxruntime's ConvGrad through L.reference
        sx, sw, attrs = CONVS[name]
        x, w, _ = _arrays(sx, sw, 0)
        dy = np.random.default_rng(2).standard_normal(ref_conv([x, w], attrs, CTX)[0].shape).astype(np.float32)
        ref = lookup("com.microsoft", "ConvGrad")
        want = ref([dy, x, w], attrs, CTX)
        got = [cp.asnumpy(g) for g in L.reference(ref, [cp.asarray(a) for a in (dy, x, w)], attrs, CTX)]
        _check(got[0], want[0], sw[0] // attrs.get("group", 1) * int(np.prod(sw[2:])))
        _check(got[1], want[1], sx[0] * int(np.prod(dy.shape[2:])))
        np.testing.assert_allclose(got[2], want[2], rtol=2e-7)
