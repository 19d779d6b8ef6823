"""Convolutions of the CUDA backend: ONNX Conv, ConvTranspose and ai.dcstudio ConvWeightGrad on float32,
1-D and 2-D (the library reshapes 1-D to 2-D), on the device.

An exported CUDA package carries a verbatim copy of this file beside ``_lib.py`` (which imports it the
first time a convolution runs), so it imports only CuPy and NumPy. ``SOURCE`` is compiled once per
process with NVRTC (``cupy.RawModule``); tests compile-check it for sm_80/sm_90 and run its index
arithmetic on the host (``tests/unit/codegen/test_cuda_convolution.py``).

The strategies mirror the CPU backend's (``codegen/numba_cpu/convolution.py``): where each group has
enough channels, ``im2col`` writes the receptive fields of the whole batch as a ``(C/G·kh·kw,
N·Ho·Wo)`` matrix and the library's cuBLAS GEMM (``matmul``, handed in) multiplies it with the weights;
ConvTranspose multiplies first and gathers with ``col2im``; the weight gradient multiplies the output
gradient with the columns transposed. Depthwise convolutions (one output channel per group) run
direct kernels. Every kernel is a grid-stride loop with one output element per iteration, written as
a gather (no atomics: results do not depend on scheduling).
"""
from __future__ import annotations

import math

import numpy as np

SOURCE = r"""
#define FOR_EACH(t, total) \
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < (total); \
         t += (long long)gridDim.x * blockDim.x)

// the output point (img, channel, oh, ow) of flat index t in an (n, m_all, ho, wo) array
__device__ __forceinline__ void point(long long t, int m_all, int ho, int wo, int* img, int* m, int* oh, int* ow) {
    *ow = (int)(t % wo);
    *oh = (int)((t / wo) % ho);
    *m = (int)((t / ((long long)wo * ho)) % m_all);
    *img = (int)(t / ((long long)wo * ho * m_all));
}

// the input index *at in [0, size) with o = *at*s + k*d - p, if there is one (a transposed conv's gather)
__device__ __forceinline__ bool source(int o, int p, int k, int d, int s, int size, int* at) {
    int a = o + p - k * d;
    if (a < 0 || a % s) return false;
    *at = a / s;
    return *at < size;
}

extern "C" __global__ void im2col(const float* x, float* cols, int n, int c, int h, int w, int c0, int cg,
                                  int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int ho, int wo) {
    // cols[(ci*kh + i)*kw + j][img][oh*wo + ow] = x[img][c0 + ci][oh*sh + i*dh - ph][ow*sw + j*dw - pw]
    long long hw = (long long)ho * wo;
    FOR_EACH(t, (long long)cg * kh * kw * n * hw) {
        long long p = t % hw, rest = t / hw;
        int img = (int)(rest % n);
        long long r = rest / n;
        int j = (int)(r % kw), i = (int)((r / kw) % kh), ci = (int)(r / ((long long)kw * kh));
        int oh = (int)(p / wo), ow = (int)(p % wo);
        int ih = oh * sh + i * dh - ph, iw = ow * sw + j * dw - pw;
        cols[t] = (ih >= 0 && ih < h && iw >= 0 && iw < w)
            ? x[(((long long)img * c + c0 + ci) * h + ih) * w + iw] : 0.0f;
    }
}

extern "C" __global__ void col2im(const float* cols, float* y, int n, int m_all, int ho, int wo, int m0, int mg,
                                  int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    // y[img][m0 + m][oh][ow] = sum of cols[(m*kh + i)*kw + j][img][ih*w + iw] over the (i, j, ih, iw)
    // with oh = ih*sh + i*dh - ph and ow = iw*sw + j*dw - pw
    long long hw = (long long)h * w;
    FOR_EACH(t, (long long)n * mg * ho * wo) {
        int img, m, oh, ow;
        point(t, mg, ho, wo, &img, &m, &oh, &ow);
        float acc = 0.0f;
        for (int i = 0; i < kh; ++i) {
            int ih, iw;
            if (!source(oh, ph, i, dh, sh, h, &ih)) continue;
            for (int j = 0; j < kw; ++j) {
                if (!source(ow, pw, j, dw, sw, w, &iw)) continue;
                acc += cols[(((long long)m * kh + i) * kw + j) * n * hw + img * hw + (long long)ih * w + iw];
            }
        }
        y[(((long long)img * m_all + m0 + m) * ho + oh) * wo + ow] = acc;
    }
}

extern "C" __global__ void direct_conv(const float* x, const float* wt, float* y, int n, int c, int h, int w,
                                       int m_all, int cg, int mg, int kh, int kw, int ho, int wo,
                                       int sh, int sw, int ph, int pw, int dh, int dw) {
    FOR_EACH(t, (long long)n * m_all * ho * wo) {
        int img, m, oh, ow;
        point(t, m_all, ho, wo, &img, &m, &oh, &ow);
        int g = m / mg;
        float acc = 0.0f;
        for (int ci = 0; ci < cg; ++ci) {
            const float* xp = x + ((long long)img * c + g * cg + ci) * h * w;
            const float* wp = wt + ((long long)m * cg + ci) * kh * kw;
            for (int i = 0; i < kh; ++i) {
                int ih = oh * sh + i * dh - ph;
                if (ih < 0 || ih >= h) continue;
                for (int j = 0; j < kw; ++j) {
                    int iw = ow * sw + j * dw - pw;
                    if (iw >= 0 && iw < w) acc += wp[i * kw + j] * xp[(long long)ih * w + iw];
                }
            }
        }
        y[t] = acc;
    }
}

extern "C" __global__ void direct_conv_transpose(const float* x, const float* wt, float* y, int n, int c, int h,
                                                 int w, int m_all, int cg, int mg, int kh, int kw, int ho, int wo,
                                                 int sh, int sw, int ph, int pw, int dh, int dw) {
    // x (n, c = G*cg, h, w), wt (c, mg, kh, kw), y (n, m_all = G*mg, ho, wo)
    FOR_EACH(t, (long long)n * m_all * ho * wo) {
        int img, o, oh, ow;
        point(t, m_all, ho, wo, &img, &o, &oh, &ow);
        int g = o / mg, m = o % mg;
        float acc = 0.0f;
        for (int ci = 0; ci < cg; ++ci) {
            int cc = g * cg + ci;
            const float* xp = x + ((long long)img * c + cc) * h * w;
            const float* wp = wt + ((long long)cc * mg + m) * kh * kw;
            for (int i = 0; i < kh; ++i) {
                int ih, iw;
                if (!source(oh, ph, i, dh, sh, h, &ih)) continue;
                for (int j = 0; j < kw; ++j) {
                    if (source(ow, pw, j, dw, sw, w, &iw)) acc += wp[i * kw + j] * xp[(long long)ih * w + iw];
                }
            }
        }
        y[t] = acc;
    }
}

extern "C" __global__ void direct_weight_grad(const float* x, const float* dy, float* dwt, int n, int c, int h,
                                              int w, int m_all, int cg, int mg, int kh, int kw, int ho, int wo,
                                              int sh, int sw, int ph, int pw, int dh, int dw) {
    // dwt[m][ci][i][j] = sum over (img, oh, ow) of dy[img][m][oh][ow] * x[img][g*cg + ci][oh*sh + i*dh - ph][...]
    FOR_EACH(t, (long long)m_all * cg * kh * kw) {
        int j = (int)(t % kw), i = (int)((t / kw) % kh), ci = (int)((t / ((long long)kw * kh)) % cg);
        int m = (int)(t / ((long long)kw * kh * cg)), g = m / mg;
        float acc = 0.0f;
        for (int img = 0; img < n; ++img) {
            const float* xp = x + ((long long)img * c + g * cg + ci) * h * w;
            const float* dp = dy + ((long long)img * m_all + m) * ho * wo;
            for (int oh = 0; oh < ho; ++oh) {
                int ih = oh * sh + i * dh - ph;
                if (ih < 0 || ih >= h) continue;
                for (int ow = 0; ow < wo; ++ow) {
                    int iw = ow * sw + j * dw - pw;
                    if (iw >= 0 && iw < w) acc += dp[(long long)oh * wo + ow] * xp[(long long)ih * w + iw];
                }
            }
        }
        dwt[t] = acc;
    }
}
"""
KERNELS = ("im2col", "col2im", "direct_conv", "direct_conv_transpose", "direct_weight_grad")
THREADS = 256
_MODULE: list = []


def _kernel(name: str):
    import cupy as cp
    if not _MODULE:
        _MODULE.append(cp.RawModule(code=SOURCE, options=("-std=c++17",)))
    return _MODULE[0].get_function(name)


def _launch(name: str, total: int, *args) -> None:
    blocks = max(1, min(math.ceil(total / THREADS), 1 << 16))
    _kernel(name)((blocks,), (THREADS,), tuple(np.int32(a) if isinstance(a, (int, np.integer)) else a for a in args))


def gemm_pays(cg: int, mg: int, k: int) -> bool:
    """Whether a group's contraction is big enough for cuBLAS (else the direct kernel)."""
    return mg >= 4 and cg * k >= 8


def _columns(x, cg: int, g: int, kh: int, kw: int, geo, ho: int, wo: int):
    import cupy as cp
    (sh, sw), (ph, pw), (dh, dw) = geo
    n, c, h, w = x.shape
    cols = cp.empty((cg * kh * kw, n * ho * wo), cp.float32)
    _launch("im2col", cols.size, x, cols, n, c, h, w, g * cg, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo)
    return cols


def _direct(name: str, x, w, y, cg: int, mg: int, kh: int, kw: int, geo, total: int) -> None:
    (sh, sw), (ph, pw), (dh, dw) = geo
    n, c, h, wi = x.shape
    ho, wo = (y.shape[2], y.shape[3]) if name != "direct_weight_grad" else (w.shape[2], w.shape[3])
    m_all = y.shape[1] if name != "direct_weight_grad" else y.shape[0]
    _launch(name, total, x, w, y, n, c, h, wi, m_all, cg, mg, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw)


def _direct_or_columns(name: str, x, w, y, w_shape, group: int, spatial, geo, total: int):
    """The direct kernel ``name`` when a group is too small for cuBLAS (then nothing more to do), else
    yields (group, Mg, its im2col columns of ``x``): shared by the conv and its weight gradient."""
    m, cg, kh, kw = w_shape
    if not gemm_pays(cg, m // group, kh * kw):
        _direct(name, x, w, y, cg, m // group, kh, kw, geo, total)
        return
    for g in range(group):
        yield g, m // group, _columns(x, cg, g, kh, kw, geo, *spatial)


def conv2d(x, w, y, strides, pads, dilations, group, matmul) -> None:
    """ONNX Conv (no bias) of 4-d C-contiguous float32 device arrays into ``y`` (N, M, Ho, Wo)."""
    import cupy as cp
    n, (ho, wo) = x.shape[0], y.shape[2:]
    for g, mg, cols in _direct_or_columns("direct_conv", x, w, y, w.shape, group, (ho, wo),
                                          (strides, pads, dilations), y.size):
        prod = matmul(w[g * mg:(g + 1) * mg].reshape(mg, -1), cols, cp.empty((mg, n * ho * wo), cp.float32))
        y[:, g * mg:(g + 1) * mg] = prod.reshape(mg, n, ho, wo).transpose(1, 0, 2, 3)


def conv_transpose2d(x, w, y, strides, pads, dilations, group, matmul) -> None:
    """ONNX ConvTranspose (no bias; output size given by ``y``) of 4-d C-contiguous float32 device arrays."""
    import cupy as cp
    n, c, h, wi = x.shape
    cg = c // group
    _, mg, kh, kw = w.shape
    (ho, wo), geo = y.shape[2:], (strides, pads, dilations)
    if not gemm_pays(cg, mg, kh * kw):
        _direct("direct_conv_transpose", x, w, y, cg, mg, kh, kw, geo, y.size)
        return
    (sh, sw), (ph, pw), (dh, dw) = geo
    for g in range(group):
        xg = cp.ascontiguousarray(x[:, g * cg:(g + 1) * cg].reshape(n, cg, h * wi).transpose(1, 0, 2))
        cols = matmul(w[g * cg:(g + 1) * cg].reshape(cg, -1).T, xg.reshape(cg, n * h * wi),
                      cp.empty((mg * kh * kw, n * h * wi), cp.float32))
        _launch("col2im", n * mg * ho * wo, cols, y, n, y.shape[1], ho, wo, g * mg, mg, h, wi, kh, kw,
                sh, sw, ph, pw, dh, dw)


def conv_weight_grad2d(x, dy, dw, strides, pads, dilations, group, matmul) -> None:
    """The weight gradient of ONNX Conv (no bias) into ``dw`` (M, C/G, kh, kw), in W's layout."""
    import cupy as cp
    n, (ho, wo) = x.shape[0], dy.shape[2:]
    for g, mg, cols in _direct_or_columns("direct_weight_grad", x, dy, dw, dw.shape, group, (ho, wo),
                                          (strides, pads, dilations), dw.size):
        dyg = cp.ascontiguousarray(dy[:, g * mg:(g + 1) * mg].reshape(n, mg, ho * wo).transpose(1, 0, 2))
        matmul(dyg.reshape(mg, n * ho * wo), cols.T, dw[g * mg:(g + 1) * mg].reshape(mg, -1))
