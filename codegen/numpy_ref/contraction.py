"""Selectable implementations of contractions (``OpNode.impl``, see ``ir.lowering.library``).

``contract(a, b, impl)`` is ``a @ b`` (NumPy broadcasting) computed as one BLAS
call (``blas``) or with the reduction dimension split into panels of
``PANEL`` (``blocked``), accumulating in the operands' dtype.
"""
from __future__ import annotations

import numpy as np

PANEL = 256


def contract(a: np.ndarray, b: np.ndarray, impl: str = "blas") -> np.ndarray:
    """Matrix product of the last two axes, by the chosen implementation."""
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
