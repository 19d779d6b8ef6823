"""Convolutions of the CPU backend: ONNX Conv and ConvTranspose on float32, 1-D and 2-D.

An exported package carries a verbatim copy of this file beside ``_lib.py`` (which imports it
the first time a convolution runs), so it imports only NumPy and numba.

Three strategies, picked per call from the shapes:

- **GEMM** (every group has enough channels for BLAS to pay): ``im2col`` copies the receptive
  fields of a chunk of images into a scratch ``(C/G·kh·kw, images, Ho·Wo)`` buffer, one sgemm
  per group multiplies the weights with it, and the product lands in the output (directly when
  the chunk is one image, else through one transposing copy). A 1×1 stride-1 unpadded conv
  skips the copy: its input already is the matrix. ConvTranspose is the mirror: the transposed
  weights times the input give the columns, and ``col2im`` adds them into the output planes.
  Chunks keep the scratch buffer near ``SCRATCH`` floats so that it stays in cache.
- **Depthwise, channels last** (one input and one output channel per group, at least
  ``DEPTHWISE_CHANNELS`` groups; the conv, its ConvTranspose and its ConvWeightGrad): the operands
  are copied to (N, H·W, C) scratch, every in-image tap of every output point runs one loop along
  the channels, and the result is copied back. Late EfficientNet stages have 4×4 and 2×2 planes,
  where loops along plane rows ran 2 to 4 points long: measured here on EfficientNet-B0's sixteen
  depthwise convs (batch 8, 64×64, one thread) 25.4 → 3.8 ms forward, 27.5 → 4.0 ms for dX and
  20.8 → 4.1 ms for dW, copies included.
- **Direct** loop nests (other grouped convs too small for BLAS, and the weight-gradient convs
  autodiff writes for depthwise ones when ``conv_weight_grad`` has not rewritten them): one output
  plane per iteration; the inner loop runs along output columns, or along kernel columns when the
  kernel is wider than the output (a weight gradient: the "kernel" is the output gradient, the
  "output" the 3×3 filter).

The copies (``im2col``, ``col2im``, the channels-last ones) and ``depthwise_taps`` run on numba's
threads (``prange`` over channels, images or planes: each output element is written by one thread,
and every sum runs in the same order on any number of threads); a statement the step's schedule runs
beside another gets its share of the threads (``L.parallel`` sets numba's count per thread), BLAS
takes them inside a GEMM, and ``L.set_threads`` makes idle BLAS workers sleep at once
(``quiet_blas``) so they do not spin on the cores these loops need. The direct loop nests are serial.
A forward conv's GEMMs sum in float64 when a choice depends on its result (``conv2d(wide=True)``: ReLU
masks, max-pool argmaxes; the program decides, ``codegen/program/decisions.py``), else in float32; the
backward's (ConvTranspose, the weight gradient) in float32, as onnxruntime's do.
"""
from __future__ import annotations

import threading

import numpy as np
from numba import get_num_threads, njit, prange

SCRATCH = 1 << 21
"""Floats of im2col/col2im scratch per chunk of images (8 MB)."""

_LOCAL = threading.local()


@njit(cache=True, nogil=True, error_model="numpy")
def _lo(pad, off, step):
    """First output index o >= 0 with o*step + off - pad >= 0."""
    d = pad - off
    if d <= 0:
        return 0
    return (d + step - 1) // step


@njit(cache=True, nogil=True, error_model="numpy")
def _hi(size, pad, off, step, count):
    """One past the last o < count with o*step + off - pad < size."""
    d = size - 1 + pad - off
    if d < 0:
        return 0
    return min(count, d // step + 1)


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def im2col(x, cols, n0, c0, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo):
    """cols[(c·kh + i)·kw + j, n, oh·wo + ow] = x[n0 + n, c0 + c, oh·sh + i·dh - ph, ow·sw + j·dw - pw]
    (0 outside the image)."""
    h, w = x.shape[2], x.shape[3]
    rows, nb = cols.shape[0], cols.shape[1]
    for r in prange(rows):
        c = r // (kh * kw)
        i = (r // kw) % kh
        j = r % kw
        lo, hi = _lo(pw, j * dw, sw), _hi(w, pw, j * dw, sw, wo)
        for n in range(nb):
            for oh in range(ho):
                base = oh * wo
                ih = oh * sh + i * dh - ph
                if ih < 0 or ih >= h:
                    for ow in range(wo):
                        cols[r, n, base + ow] = 0.0
                    continue
                for ow in range(lo):
                    cols[r, n, base + ow] = 0.0
                for ow in range(lo, hi):
                    cols[r, n, base + ow] = x[n0 + n, c0 + c, ih, ow * sw + j * dw - pw]
                for ow in range(max(lo, hi), wo):
                    cols[r, n, base + ow] = 0.0


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def col2im(cols, y, n0, m0, mg, kh, kw, sh, sw, ph, pw, dh, dw, h, w):
    """y[n0 + n, m0 + m] = sum over (i, j, ih, iw) of cols[(m·kh + i)·kw + j, n, ih·w + iw] placed at
    (ih·sh + i·dh - ph, iw·sw + j·dw - pw); each plane is zeroed first."""
    ho, wo = y.shape[2], y.shape[3]
    nb = cols.shape[1]
    for q in prange(nb * mg):
        n, m = q // mg, q % mg
        plane = y[n0 + n, m0 + m]
        plane[:, :] = 0.0
        for i in range(kh):
            for j in range(kw):
                r = (m * kh + i) * kw + j
                lo, hi = _lo(pw, j * dw, sw), _hi(wo, pw, j * dw, sw, w)
                for ih in range(h):
                    oh = ih * sh + i * dh - ph
                    if oh < 0 or oh >= ho:
                        continue
                    base = ih * w
                    for iw in range(lo, hi):
                        plane[oh, iw * sw + j * dw - pw] += cols[r, n, base + iw]


@njit(cache=True, nogil=True, error_model="numpy")
def direct_conv(x, w, y, cg, mg, sh, sw, ph, pw, dh, dw):
    """Grouped Conv, one output plane at a time (``cg`` input and ``mg`` output channels per group)."""
    n_img, m_all, ho, wo = y.shape
    h, wi = x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    wide = kw > wo
    for t in range(n_img * m_all):
        n, m = t // m_all, t % m_all
        g = m // mg
        if wide:                                   # kernel-inner: a weight gradient's big "kernel"
            for oh in range(ho):
                for ow in range(wo):
                    acc = np.float32(0.0)
                    jlo = _lo(pw, ow * sw, dw)
                    jhi = _hi(wi, pw, ow * sw, dw, kw)
                    for c in range(cg):
                        ci = g * cg + c
                        for i in range(kh):
                            ih = oh * sh + i * dh - ph
                            if ih < 0 or ih >= h:
                                continue
                            for j in range(jlo, jhi):
                                acc += w[m, c, i, j] * x[n, ci, ih, ow * sw + j * dw - pw]
                    y[n, m, oh, ow] = acc
            continue
        plane = y[n, m]
        plane[:, :] = 0.0
        for c in range(cg):
            ci = g * cg + c
            for i in range(kh):
                for oh in range(ho):
                    ih = oh * sh + i * dh - ph
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        wv = w[m, c, i, j]
                        lo, hi = _lo(pw, j * dw, sw), _hi(wi, pw, j * dw, sw, wo)
                        for ow in range(lo, hi):
                            plane[oh, ow] += wv * x[n, ci, ih, ow * sw + j * dw - pw]


@njit(cache=True, nogil=True, error_model="numpy")
def direct_conv_transpose(x, w, y, cg, mg, sh, sw, ph, pw, dh, dw):
    """Grouped ConvTranspose, one output plane at a time: x (N, G·cg, H, W), w (G·cg, mg, kh, kw)."""
    n_img, m_all, ho, wo = y.shape
    h, wi = x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    for t in range(n_img * m_all):
        n, o = t // m_all, t % m_all
        g, m = o // mg, o % mg
        plane = y[n, o]
        plane[:, :] = 0.0
        for c in range(cg):
            ci = g * cg + c
            for i in range(kh):
                for ih in range(h):
                    oh = ih * sh + i * dh - ph
                    if oh < 0 or oh >= ho:
                        continue
                    for j in range(kw):
                        wv = w[ci, m, i, j]
                        lo, hi = _lo(pw, j * dw, sw), _hi(wo, pw, j * dw, sw, wi)
                        for iw in range(lo, hi):
                            plane[oh, iw * sw + j * dw - pw] += wv * x[n, ci, ih, iw]


@njit(cache=True, nogil=True, error_model="numpy")
def direct_weight_grad(x, dy, dw, cg, mg, sh, sw, ph, pw, dh, dwl):
    """dW[m, c, i, j] = sum over (n, oh, ow) of
    dy[n, m, oh, ow]·x[n, g·cg + c, oh·sh + i·dh - ph, ow·sw + j·dwl - pw]."""
    n_img, m_all, ho, wo = dy.shape
    h, wi = x.shape[2], x.shape[3]
    kh, kw = dw.shape[2], dw.shape[3]
    for m in range(m_all):
        g = m // mg
        for c in range(cg):
            ci = g * cg + c
            for i in range(kh):
                for j in range(kw):
                    lo, hi = _lo(pw, j * dwl, sw), _hi(wi, pw, j * dwl, sw, wo)
                    acc = np.float32(0.0)
                    for n in range(n_img):
                        for oh in range(ho):
                            ih = oh * sh + i * dh - ph
                            if ih < 0 or ih >= h:
                                continue
                            for ow in range(lo, hi):
                                acc += dy[n, m, oh, ow] * x[n, ci, ih, ow * sw + j * dwl - pw]
                    dw[m, c, i, j] = acc


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def channels_last(a, out):
    """out[n, p, c] = a[n, c, p]. The inner loop runs along p: the strided side then steps by C,
    not by a power-of-two plane size, which would map every access to one cache set. Threads take
    (image, block of 16 channels) pairs: one 64-byte line of ``out`` per point each."""
    nn, cc, pp = a.shape
    nb = (cc + 15) // 16
    for q in prange(nn * nb):
        n, c0 = q // nb, (q % nb) * 16
        for c in range(c0, min(cc, c0 + 16)):
            for p in range(pp):
                out[n, p, c] = a[n, c, p]


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def channels_first(a, out):
    """out[n, c, p] = a[n, p, c] (inner loop along p, as in ``channels_last``); threads take planes."""
    nn, pp, cc = a.shape
    for q in prange(nn * cc):
        n, c = q // cc, q % cc
        for p in range(pp):
            out[n, c, p] = a[n, p, c]


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def depthwise_taps(at_out, at_in, at_tap, target, h, wi, ho, wo, sh, sw, ph, pw, dh, dw, threads):
    """A depthwise conv channels last, over every in-image tap (image n, output point o, kernel tap i, j
    reading input point p): ``at_out`` (N, Ho·Wo, C), ``at_in`` (N, H·W, C), ``at_tap`` (kh, kw, C). The
    ``target`` (0, 1, 2: at_out, at_in, at_tap) is zeroed, then gets the other two's product added at
    each tap: the conv (0), its input gradient (1) and its weight gradient (2, float32 sums in
    image-then-point order, as ``direct_weight_grad``'s). Threads take blocks of channels (and, but
    for the weight gradient, which sums over images, one image each), ``threads`` (numba's count for
    the calling thread) or more pieces: every sum runs in the same order on any number of threads."""
    nn, cc = at_out.shape[0], at_out.shape[2]
    slices = nn if target != 2 else 1
    blocks = max(1, min(cc // 16, -(-threads // slices)))
    width = -(-cc // blocks)
    for q in prange(slices * blocks):
        c0 = (q % blocks) * width
        n0 = q // blocks if target != 2 else 0
        _taps_slice(at_out, at_in, at_tap, target, n0, n0 + 1 if target != 2 else nn, c0, min(cc, c0 + width),
                    h, wi, ho, wo, sh, sw, ph, pw, dh, dw)


@njit(cache=True, nogil=True, error_model="numpy")
def _taps_slice(at_out, at_in, at_tap, target, n0, n1, c0, c1, h, wi, ho, wo, sh, sw, ph, pw, dh, dw):
    """``depthwise_taps`` on images n0..n1 and channels c0..c1, serial: the inner loop runs along the
    channels (a loop nest inside ``prange`` vectorized worse: 3.5x slower on one thread)."""
    kh, kw = at_tap.shape[0], at_tap.shape[1]
    if target == 0:
        at_out[n0:n1, :, c0:c1] = 0.0
    elif target == 1:
        at_in[n0:n1, :, c0:c1] = 0.0
    # the weight gradient sums into a buffer of this thread's own: every point adds to every tap, and where
    # two threads' channels share a cache line, it went back and forth (2 threads ran 0.8x as fast as one)
    taps = at_tap if target != 2 else np.zeros(at_tap.shape, np.float32)
    for n in range(n0, n1):
        for oh in range(ho):
            ilo, ihi = _lo(ph, oh * sh, dh), _hi(h, ph, oh * sh, dh, kh)
            for ow in range(wo):
                jlo, jhi = _lo(pw, ow * sw, dw), _hi(wi, pw, ow * sw, dw, kw)
                o = at_out[n, oh * wo + ow, c0:c1]
                for i in range(ilo, ihi):
                    for j in range(jlo, jhi):
                        p = at_in[n, (oh * sh + i * dh - ph) * wi + ow * sw + j * dw - pw, c0:c1]
                        t = taps[i, j, c0:c1]
                        if target == 0:
                            for c in range(c1 - c0):
                                o[c] += t[c] * p[c]
                        elif target == 1:
                            for c in range(c1 - c0):
                                p[c] += t[c] * o[c]
                        else:
                            for c in range(c1 - c0):
                                t[c] += o[c] * p[c]
    if target == 2:
        at_tap[:, :, c0:c1] = taps[:, :, c0:c1]


def _scratch(size: int, which: str = "buf", dtype=np.float32) -> np.ndarray:
    """A per-thread buffer of at least ``size`` elements (statements run side by side): ``buf`` holds
    the columns, ``buf2``/``buf3`` a GEMM's product or operand meanwhile."""
    key = f"{which}_{np.dtype(dtype).name}"
    buf = getattr(_LOCAL, key, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, SCRATCH), dtype)
        setattr(_LOCAL, key, buf)
    return buf[:size]


def _as(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``a`` reshaped without a copy (it is a BLAS call's ``out``: a copy would drop the result)."""
    v = a.view()
    v.shape = shape
    return v


def _chunk(n: int, per_image: int) -> int:
    return max(1, min(n, SCRATCH // max(per_image, 1)))


def _pointwise(kh, kw, sh, sw, ph, pw, ho, wo, h, w) -> bool:
    """A 1×1 conv of stride 1 without padding: its im2col columns are the input's planes (a NumPy
    transpose copies them several times faster than ``im2col``'s general loops on 1×1 to 8×8 planes,
    measured here: 0.09 against 0.35 ms for 8 images of 1,152 2×2 planes)."""
    return kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and (ho, wo) == (h, w)


def gemm_pays(cg: int, mg: int, k: int) -> bool:
    """Whether a group's contraction is big enough for BLAS (else the direct loop nest)."""
    return mg >= 4 and cg * k >= 8


DEPTHWISE_CHANNELS = 16
"""A depthwise conv (one input and one output channel per group) with at least this many channels
runs channels last (``depthwise_taps``): its inner loop then runs along the channels, not along rows of
an output plane, which in late stages are 2 to 8 points long."""


def depthwise_pays(group: int, cg: int, mg: int) -> bool:
    return cg == 1 and mg == 1 and group >= DEPTHWISE_CHANNELS


def _last(a: np.ndarray, which: str) -> np.ndarray:
    """A scratch (N, H·W, C) copy of the 4-d ``a`` (N, C, H, W)."""
    n, c, h, w = a.shape
    out = _scratch(n * h * w * c, which).reshape(n, h * w, c)
    channels_last(a.reshape(n, c, h * w), out)
    return out


def _first(yl: np.ndarray, y: np.ndarray) -> None:
    """y (N, C, H, W) = the channels-last ``yl`` (N, H·W, C); through a copy when ``y`` is a strided view."""
    n, c, h, w = y.shape
    if y.flags.c_contiguous:
        channels_first(yl, y.reshape(n, c, h * w))
        return
    planes = np.empty((n, c, h * w), np.float32)
    channels_first(yl, planes)
    y[...] = planes.reshape(y.shape)


def _taps(w: np.ndarray) -> np.ndarray:
    """Depthwise weights (C, 1, kh, kw) as a scratch (kh, kw, C)."""
    c, _, kh, kw = w.shape
    out = _scratch(kh * kw * c, "buf3").reshape(kh, kw, c)
    out[...] = w.reshape(c, kh * kw).T.reshape(kh, kw, c)
    return out


def conv2d(x, w, y, strides, pads, dilations, group, wide: bool = True) -> None:
    """ONNX Conv (no bias) of 4-d float32 ``x`` and ``w`` into ``y`` (N, M, Ho, Wo). ``wide``: the GEMMs
    run in float64 on float64 columns and the result is rounded once, as the reference does: a conv's
    output feeds ReLU masks and max-pool choices, and fp32 sums over C·kh·kw terms (~1e-6 relative)
    flip such a choice about once per ResNet-18 step at batch 8, which changes every gradient
    upstream of it; onnxruntime's fp32 convs err as much, so a check against it fails by chance."""
    n, c, h, wi = x.shape
    m, cg, kh, kw = w.shape
    mg = m // group
    (sh, sw), (ph, pw), (dh, dw) = strides, pads, dilations
    ho, wo = y.shape[2], y.shape[3]
    if depthwise_pays(group, cg, mg):
        yl = _scratch(n * ho * wo * m, "buf2").reshape(n, ho * wo, m)
        depthwise_taps(yl, _last(x, "buf"), _taps(w), 0, h, wi, ho, wo, sh, sw, ph, pw, dh, dw, get_num_threads())
        _first(yl, y)
        return
    if not gemm_pays(cg, mg, kh * kw):
        direct_conv(x, w, y, cg, mg, sh, sw, ph, pw, dh, dw)
        return
    hw, kk = ho * wo, cg * kh * kw
    acc = np.float64 if wide else np.float32
    point = _pointwise(kh, kw, sh, sw, ph, pw, ho, wo, h, wi)
    for g in range(group):
        wg = w[g * mg:(g + 1) * mg].reshape(mg, kk).astype(acc, copy=False)
        xg = x[:, g * cg:(g + 1) * cg]
        if point and hw == 1:               # (N, C) times Wᵀ: one GEMM, no copy (squeeze-and-excitation)
            yg = _as(y[:, g * mg:(g + 1) * mg], (n, mg))
            if wide:
                np.copyto(yg, xg.reshape(n, cg).astype(acc) @ wg.T, casting="same_kind")
            else:
                np.matmul(xg.reshape(n, cg), wg.T, out=yg)
            continue
        if point and hw >= 256 and not wide:
            np.matmul(wg, xg.reshape(n, cg, hw), out=_as(y[:, g * mg:(g + 1) * mg], (n, mg, hw)))
            continue
        nb = _chunk(n, kk * hw)
        for n0 in range(0, n, nb):
            b = min(nb, n - n0)
            cols = _scratch(kk * b * hw, dtype=acc).reshape(kk, b, hw)
            if point:                       # the columns are the images' planes, channels first
                np.copyto(cols, xg[n0:n0 + b].reshape(b, cg, hw).transpose(1, 0, 2), casting="same_kind")
            else:
                im2col(x, cols, n0, g * cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo)
            if b == 1 and not wide:
                np.matmul(wg, cols.reshape(kk, hw), out=_as(y[n0, g * mg:(g + 1) * mg], (mg, hw)))
                continue
            prod = _scratch(mg * b * hw, "buf2", acc).reshape(mg, b, hw)
            np.matmul(wg, cols.reshape(kk, b * hw), out=_as(prod, (mg, b * hw)))
            np.copyto(_as(y[n0:n0 + b, g * mg:(g + 1) * mg], (b, mg, hw)), prod.transpose(1, 0, 2), casting="same_kind")


def conv_transpose2d(x, w, y, strides, pads, dilations, group) -> None:
    """ONNX ConvTranspose (no bias; output size given by ``y``) of 4-d float32 arrays."""
    n, c, h, wi = x.shape
    cg = c // group
    _, mg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = strides, pads, dilations
    ho, wo = y.shape[2], y.shape[3]
    if depthwise_pays(group, cg, mg):
        dxl = _scratch(n * ho * wo * c, "buf2").reshape(n, ho * wo, c)
        depthwise_taps(_last(x, "buf"), dxl, _taps(w), 1, ho, wo, h, wi, sh, sw, ph, pw, dh, dw, get_num_threads())
        _first(dxl, y)
        return
    if not gemm_pays(cg, mg, kh * kw):
        direct_conv_transpose(x, w, y, cg, mg, sh, sw, ph, pw, dh, dw)
        return
    hw, kk = h * wi, mg * kh * kw
    point = _pointwise(kh, kw, sh, sw, ph, pw, ho, wo, h, wi)
    for g in range(group):
        wt = w[g * cg:(g + 1) * cg].reshape(cg, kk).T
        xg = x[:, g * cg:(g + 1) * cg].reshape(n, cg, hw)
        if point and hw == 1:
            np.matmul(xg.reshape(n, cg), wt.T, out=_as(y[:, g * mg:(g + 1) * mg], (n, mg)))
            continue
        if point and hw >= 256:
            np.matmul(wt, xg, out=_as(y[:, g * mg:(g + 1) * mg], (n, mg, hw)))
            continue
        nb = 1 if hw >= 256 else _chunk(n, max(kk, cg) * hw)
        for n0 in range(0, n, nb):
            b = min(nb, n - n0)
            cols = _scratch(kk * b * hw).reshape(kk, b, hw)
            if b == 1:
                np.matmul(wt, xg[n0], out=_as(cols, (kk, hw)))
            else:
                xs = _scratch(cg * b * hw, "buf2").reshape(cg, b, hw)
                np.copyto(xs, xg[n0:n0 + b].transpose(1, 0, 2))
                np.matmul(wt, xs.reshape(cg, b * hw), out=_as(cols, (kk, b * hw)))
            if point:
                np.copyto(_as(y[n0:n0 + b, g * mg:(g + 1) * mg], (b, mg, hw)), cols.transpose(1, 0, 2))
            else:
                col2im(cols, y, n0, g * mg, mg, kh, kw, sh, sw, ph, pw, dh, dw, h, wi)


def conv_weight_grad2d(x, dy, dw, strides, pads, dilations, group) -> None:
    """The weight gradient of ONNX Conv (no bias) into ``dw`` (M, C/G, kh, kw), in W's own layout:
    per group, the output gradient (Mg, images·Ho·Wo) times the im2col columns of ``x`` transposed,
    summed over chunks of images."""
    n = x.shape[0]
    m, cg, kh, kw = dw.shape
    mg = m // group
    (sh, sw), (ph, pw), (dh, dwl) = strides, pads, dilations
    ho, wo = dy.shape[2], dy.shape[3]
    if depthwise_pays(group, cg, mg):
        acc = _scratch(kh * kw * m, "buf3").reshape(kh, kw, m)
        depthwise_taps(_last(dy, "buf2"), _last(x, "buf"), acc, 2, x.shape[2], x.shape[3], ho, wo,
                       sh, sw, ph, pw, dh, dwl, get_num_threads())
        dw[...] = acc.transpose(2, 0, 1)[:, None]
        return
    if not gemm_pays(cg, mg, kh * kw):
        direct_weight_grad(x, dy, dw, cg, mg, sh, sw, ph, pw, dh, dwl)
        return
    hw, kk = ho * wo, cg * kh * kw
    nb = _chunk(n, max(kk, mg) * hw)
    point = _pointwise(kh, kw, sh, sw, ph, pw, ho, wo, x.shape[2], x.shape[3])
    for g in range(group):
        dwg = _as(dw[g * mg:(g + 1) * mg], (mg, kk))
        if point and hw == 1:               # dYᵀ (Mg, N) times X (N, Cg): one GEMM, no copy
            np.matmul(dy[:, g * mg:(g + 1) * mg].reshape(n, mg).T, x[:, g * cg:(g + 1) * cg].reshape(n, cg), out=dwg)
            continue
        for n0 in range(0, n, nb):
            b = min(nb, n - n0)
            cols = _scratch(kk * b * hw).reshape(kk, b, hw)
            if point:
                np.copyto(cols, x[n0:n0 + b, g * cg:(g + 1) * cg].reshape(b, cg, hw).transpose(1, 0, 2))
            else:
                im2col(x, cols, n0, g * cg, kh, kw, sh, sw, ph, pw, dh, dwl, ho, wo)
            dyg = _scratch(mg * b * hw, "buf2").reshape(mg, b, hw)
            np.copyto(dyg, dy[n0:n0 + b, g * mg:(g + 1) * mg].reshape(b, mg, hw).transpose(1, 0, 2))
            target = dwg if n0 == 0 else _scratch(mg * kk, "buf3").reshape(mg, kk)
            np.matmul(dyg.reshape(mg, b * hw), cols.reshape(kk, b * hw).T, out=target)
            if target is not dwg:
                dwg += target
