"""Pooling of the CPU backend: ONNX MaxPool (with its Indices output) on float32, 1-D and 2-D, and
GlobalAveragePool on float32 (``global_average_pool``).

An exported package carries a verbatim copy of this file beside ``_lib.py`` (which imports it the
first time a pooling op or a reference kernel runs), so it imports only NumPy and numba. ``native``
runs the reference kernels tagged with a version here instead of them. One loop nest (``nogil``), its
(image, channel) planes split over numba's threads (each output is computed alone: the same bits on any
number of threads): a window's maximum and the flat index of its first maximal element in the
input tensor (row-major, ``storage_order`` 0), which is what the backward's scatter reads. The
output size (``ceil_mode``) is the output array's.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def max_pool(x, y, idx, kh, kw, sh, sw, ph, pw, dh, dw, with_indices):
    n, c = x.shape[0], x.shape[1]
    for plane in prange(n * c):
        _plane(x, y, idx, plane // c, plane % c, kh, kw, sh, sw, ph, pw, dh, dw, with_indices)


@njit(cache=True, nogil=True, error_model="numpy")
def _plane(x, y, idx, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, with_indices):
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    ho, wo = y.shape[2], y.shape[3]
    base = (b * c + ch) * h * w
    for oh in range(ho):
        for ow in range(wo):
            best = -np.inf
            at = -1
            for i in range(kh):
                ih = oh * sh + i * dh - ph
                if ih < 0 or ih >= h:
                    continue
                for j in range(kw):
                    iw = ow * sw + j * dw - pw
                    if iw < 0 or iw >= w:
                        continue
                    v = x[b, ch, ih, iw]
                    if v > best or at < 0:
                        best = v
                        at = base + ih * w + iw
            y[b, ch, oh, ow] = best
            if with_indices:
                idx[b, ch, oh, ow] = at


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def global_average_pool(x, y):
    """``y[r]`` = the mean of row ``r`` of ``x`` (rows: the (image, channel) planes, flattened), summed
    in float64 in order and rounded once, as the reference kernel sums in float64; threads take rows, so
    the bits do not depend on their number. On EfficientNet-B0's squeeze-and-excitation blocks the
    reference (a float64 copy of the whole input, then ``np.mean``) took 0.3 ms a call."""
    rows, m = x.shape
    for r in prange(rows):
        acc = 0.0
        for i in range(m):
            acc += x[r, i]
        y[r] = acc / m


def native(fn, inputs: tuple) -> list[np.ndarray] | None:
    """The outputs of reference kernel ``fn`` computed here, where ``fn`` names a version in this file
    (its ``native`` tag, ``codegen/numpy_ref``) and the version takes these inputs (``_lib.reference``
    asks first), else None."""
    version = _NATIVE.get(getattr(fn, "native", None))
    return version(inputs) if version is not None else None


def _global_average_pool(inputs: tuple) -> list[np.ndarray] | None:
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim < 3 or x.size == 0:
        return None
    out = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), np.float32)
    global_average_pool(np.ascontiguousarray(x).reshape(x.shape[0] * x.shape[1], -1), out.reshape(-1))
    return [out]


_NATIVE = {"global_average_pool": _global_average_pool}
