"""Vectorizable float32 forms of exp, tanh and erf, with tested error bounds.

numba from pip has no vectorized math library: ``math.exp``/``math.tanh`` inside
``@njit`` become one libm call per element and stop LLVM from vectorizing the loop
(FACTS.md "CPU kernels"). These forms use only +, ×, ÷, min/max, ``np.floor``,
selects and an int→float bit reinterpretation, so a loop calling them vectorizes
(AVX2: 8 lanes). Kernels compile with ``error_model="numpy"`` (a division must not
branch on a zero divisor) and call these only on float32 values; float64 keeps libm.

Error bounds, measured against float64 libm on a dense sample of all float32 bit
patterns (every 193rd) and asserted by ``tests/unit/codegen/test_numba_fastmath.py`` (``ERROR_BOUNDS``):

- ``fast_exp``: Cephes expf polynomial on r = x − n·ln2 (Cody–Waite split), times
  2^n added to the result's exponent field as an integer (exact, and immune to the
  kernels' reassociation; results below 2^-125 are scaled in two steps so subnormals
  round right). Relative error ≤ 4e-7 for normal results; for x < −87.33 (subnormal
  results) the absolute error is ≤ 1.2e-38; x > 88.7228 gives inf, NaN stays NaN.
- ``fast_tanh``: Eigen's odd rational minimax form x·P(x²)/Q(x²) on |x| ≤ 7.9053
  (beyond it tanh rounds to ±1 in float32). Relative and absolute error ≤ 4e-7.
- ``fast_erf``: Eigen's rational form x·P(x²)/Q(x²) on |x| ≤ 4 (erf(4) = 1 − 1.5e-8).
  Absolute error ≤ 5e-7 (relative ≤ 5e-7 away from 0).
GELU needs no form of its own: its expansion is built from erf (or tanh) and
arithmetic, which the kernel printer maps onto these.

The functions are plain Python on NumPy scalars (they run without numba too); the
kernel modules copy their source (``source_of``) and compile it with
``@njit(inline="always")``.
"""
from __future__ import annotations

import inspect

import numpy as np

F = np.float32
ERROR_BOUNDS = {"fast_exp": 4e-7, "fast_tanh": 4e-7, "fast_erf": 5e-7}
"""Relative error bounds (absolute for erf) that the tests assert; see the module docstring."""


def fast_exp(x):
    """exp(x) for float32 x (relative error ≤ 4e-7 for normal results)."""
    xc = min(max(x, F(-103.972084)), F(88.7228394))
    n = np.floor(xc * F(1.44269504088896341) + F(0.5))
    r = xc - n * F(0.693359375) - n * F(-2.12194440e-4)
    p = F(1.9875691500e-4)
    p = p * r + F(1.3981999507e-3)
    p = p * r + F(8.3334519073e-3)
    p = p * r + F(4.1665795894e-2)
    p = p * r + F(1.6666665459e-1)
    p = p * r + F(5.0000001201e-1)
    y = p * r * r + r + F(1.0)
    k = np.int32(n)
    low = k < np.int32(-125)
    k = k + np.int32(64) if low else k
    y = np.int32(F(y).view(np.int32) + (k << np.int32(23))).view(np.float32)
    y = y * F(5.421010862427522e-20) if low else y
    y = F(0.0) if x < F(-103.972084) else y
    y = F(np.inf) if x > F(88.7228394) else y
    return x if x != x else y


def fast_tanh(x):
    """tanh(x) for float32 x (error ≤ 4e-7)."""
    xc = min(max(x, F(-7.90531110763549805)), F(7.90531110763549805))
    x2 = xc * xc
    p = F(-2.76076847742355e-16)
    p = p * x2 + F(2.00018790482477e-13)
    p = p * x2 + F(-8.60467152213735e-11)
    p = p * x2 + F(5.12229709037114e-08)
    p = p * x2 + F(1.48572235717979e-05)
    p = p * x2 + F(6.37261928875436e-04)
    p = p * x2 + F(4.89352455891786e-03)
    q = F(1.19825839466702e-06)
    q = q * x2 + F(1.18534705686654e-04)
    q = q * x2 + F(2.26843463243900e-03)
    q = q * x2 + F(4.89352518554385e-03)
    y = xc * p / q
    return x if x != x else y


def fast_erf(x):
    """erf(x) for float32 x (absolute error ≤ 5e-7)."""
    xc = min(max(x, F(-4.0)), F(4.0))
    x2 = xc * xc
    p = F(-2.72614225801306e-10)
    p = p * x2 + F(2.77068142495902e-08)
    p = p * x2 + F(-2.10102402082508e-06)
    p = p * x2 + F(-5.69250639462346e-05)
    p = p * x2 + F(-7.34990630326855e-04)
    p = p * x2 + F(-2.95459980854025e-03)
    p = p * x2 + F(-1.60960333262415e-02)
    q = F(-1.45660718464996e-05)
    q = q * x2 + F(-2.13374055278905e-04)
    q = q * x2 + F(-1.68282697438203e-03)
    q = q * x2 + F(-7.37332916720468e-03)
    q = q * x2 + F(-1.42647390514189e-02)
    y = xc * p / q
    return x if x != x else y


FAST_FUNCTIONS = {"exp": "fast_exp", "tanh": "fast_tanh", "erf": "fast_erf"}
"""Unary tasklet op → the float32 form that replaces it in CPU kernels."""


def source_of(name: str) -> str:
    """The source text of one of the functions above (copied into kernel modules)."""
    if name not in ERROR_BOUNDS:
        raise KeyError(name)
    return inspect.getsource(globals()[name])
