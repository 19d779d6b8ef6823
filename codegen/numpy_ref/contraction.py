"""Selectable implementations of contractions (``OpNode.impl``, see ``ir.lowering.library``).

``contract(a, b, impl)`` is ``a @ b`` (NumPy broadcasting) computed as one BLAS
call (``blas``) or with the reduction dimension split into panels of
``PANEL`` (``blocked``). Float operands narrower than float64 accumulate in float64 and the
product is returned in float64 (callers round it once to their dtype): an fp32 BLAS sum
over K terms carries an error that depends on the machine's kernel (measured 8 u on an
Intel Xeon's OpenBLAS against onnxruntime's 3.4 u on the MLP fixture's weight gradient),
and the reference executor must never be the inaccurate side (``codegen.oracle``).
"""
from __future__ import annotations

import numpy as np

PANEL = 256


def contract(a: np.ndarray, b: np.ndarray, impl: str = "blas") -> np.ndarray:
    """Matrix product of the last two axes, by the chosen implementation."""
    a, b = _accumulating(a), _accumulating(b)
    if impl in ("blas", "default", "im2col"):
        return np.matmul(a, b)
    if impl != "blocked":
        raise ValueError(f"unknown contraction implementation {impl!r}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] <= PANEL:
        return np.matmul(a, b)
    k = a.shape[-1]
    out = np.matmul(a[..., :, :PANEL], b[..., :PANEL, :])
    for start in range(PANEL, k, PANEL):
        out += np.matmul(a[..., :, start:start + PANEL], b[..., start:start + PANEL, :])
    return out


def _accumulating(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind in "fV" and x.dtype.itemsize < 8 else x
