"""Pooling of the CPU backend: ONNX MaxPool (with its Indices output) on float32, 1-D and 2-D.

An exported package carries a verbatim copy of this file beside ``_lib.py`` (which imports it the
first time a pooling op runs), so it imports only NumPy and numba. One loop nest (``nogil``), its
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
