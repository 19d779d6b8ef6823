"""Vectorizable float32 forms of exp, tanh, erf and GELU, with tested error bounds.

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
  kernels' reassociation; results near 2^-126 are scaled in two steps so they stay
  exact). Relative error ≤ 4e-7 for normal results; below x = −87.3365 (subnormal
  results, |exp(x)| < 1.18e-38) the result is 0, so the absolute error is ≤ 1.2e-38; x > 88.7228
  gives inf, NaN stays NaN. Flushing instead of rounding subnormals is deliberate: vectorized,
  both sides of the selects run, and any lane that makes a subnormal costs a microcode assist;
  a lane that returns 0 computes exp(0) instead. Attention softmax rows (most scores far below
  the row's max) ran 2–3× slower with correctly rounded subnormals.
- ``fast_tanh``: Eigen's odd rational minimax form x·P(x²)/Q(x²) on |x| ≤ 7.9053
  (beyond it tanh rounds to ±1 in float32). Relative and absolute error ≤ 4e-7.
- ``fast_erf``: Eigen's rational form x·P(x²)/Q(x²) on |x| ≤ 4 (erf(4) = 1 − 1.5e-8).
  Absolute error ≤ 5e-7 (relative ≤ 5e-7 away from 0); measured 3.3e-7.
- ``fast_gelu``: x·Φ(x) with Φ(u) = ½ + u·P(u²)/Q(u²), P of degree 4 and Q of degree 5 in
  u², Q(0) = 1: a minimax fit of erf(v) ≈ v·P̃(v²)/Q̃(v²) on 0 ≤ v ≤ 3.85 (Lawson-reweighted
  linear least squares on 10⁴ Chebyshev nodes in float64, fit error 2.4e-7; erfc(3.85) = 5e-8),
  rescaled to u = v·√2 (P(t) = P̃(t/2)/(2√2), Q(t) = Q̃(t/2)). Φ = 0 below u = −3.85·√2, and
  u is clamped at +3.85·√2 only (below the select discards it; NaN passes the min). Error
  ≤ 4e-7·max(1, |x|) (measured 3.5e-7, at x ≈ 5.25); for erf this is ≤ 7e-7 absolute. The
  kernel printer uses it for GELU's erf expansion ``(0.5·x)·(1 + erf(x·√½))``: the bias + GELU
  + residual loop is 26 instructions per 8 elements, 32 through ``fast_erf`` and the expansion.

Clamps propagate NaN without a select: numba's (and Python's) ``max(x, lo)`` is
``lo if lo > x else x``, so a NaN x passes through ``min(max(x, lo), hi)``.

**The opaque zero ``z``.** Every constant is written ``F(c) + z``. Kernels pass ``z0``, a
float32 made from an extent argument the caller sets to 0 (``loopnest.ZERO``); plain calls
default to 0. LLVM cannot fold ``c + z0``, so the ~15 coefficients become loop-invariant
values: spilled once and read as memory operands of the FMAs. As literal constants they
exceed AVX2's 16 registers and LLVM (numba's large code model) rematerializes each one in
the loop as ``movabs`` + ``vbroadcastss``: the bias+GELU+residual loop was 53 instructions
per 8 elements with literals, 28 with ``z0`` (1.3x faster; FACTS.md "CPU kernels").

The functions are plain Python on NumPy scalars (they run without numba too); the
kernel modules copy their source (``source_of``) and compile it with
``@njit(inline="always")``.
"""
from __future__ import annotations

import inspect

import numpy as np

F = np.float32
ERROR_BOUNDS = {"fast_exp": 4e-7, "fast_tanh": 4e-7, "fast_erf": 5e-7, "fast_gelu": 4e-7}
"""Relative error bounds (absolute for erf, absolute/max(1, |x|) for GELU) that the tests assert; see the
module docstring."""
FORMS = tuple(ERROR_BOUNDS)
"""The helper functions kernels may call (all take the opaque zero ``z`` as second argument)."""


def fast_exp(x, z=F(0.0)):
    """exp(x) for float32 x (relative error ≤ 4e-7 for normal results)."""
    xc = min(max(x, F(-87.3365448) + z), F(88.7228394) + z)
    xc = z if x < F(-87.3365448) else xc    # a lane that returns 0 computes exp(0): no subnormal on the way
    n = np.floor(xc * (F(1.44269504088896341) + z) + (F(0.5) + z))
    r = xc - n * (F(0.693359375) + z) - n * (F(-2.12194440e-4) + z)
    p = F(1.9875691500e-4) + z
    p = p * r + (F(1.3981999507e-3) + z)
    p = p * r + (F(8.3334519073e-3) + z)
    p = p * r + (F(4.1665795894e-2) + z)
    p = p * r + (F(1.6666665459e-1) + z)
    p = p * r + (F(5.0000001201e-1) + z)
    y = p * r * r + r + (F(1.0) + z)
    k = np.int32(n)
    low = k < np.int32(-125)
    k = k + np.int32(64) if low else k
    y = np.int32(F(y).view(np.int32) + (k << np.int32(23))).view(np.float32)
    y = y * F(5.421010862427522e-20) if low else y
    y = F(0.0) if x < F(-87.3365448) else y
    y = F(np.inf) if x > F(88.7228394) else y
    return x if x != x else y


def fast_tanh(x, z=F(0.0)):
    """tanh(x) for float32 x (error ≤ 4e-7)."""
    xc = min(max(x, F(-7.90531110763549805) + z), F(7.90531110763549805) + z)   # NaN stays NaN
    x2 = xc * xc
    p = F(-2.76076847742355e-16) + z
    p = p * x2 + (F(2.00018790482477e-13) + z)
    p = p * x2 + (F(-8.60467152213735e-11) + z)
    p = p * x2 + (F(5.12229709037114e-08) + z)
    p = p * x2 + (F(1.48572235717979e-05) + z)
    p = p * x2 + (F(6.37261928875436e-04) + z)
    p = p * x2 + (F(4.89352455891786e-03) + z)
    q = F(1.19825839466702e-06) + z
    q = q * x2 + (F(1.18534705686654e-04) + z)
    q = q * x2 + (F(2.26843463243900e-03) + z)
    q = q * x2 + (F(4.89352518554385e-03) + z)
    return xc * p / q


def fast_erf(x, z=F(0.0)):
    """erf(x) for float32 x (absolute error ≤ 5e-7)."""
    xc = min(max(x, F(-4.0) + z), F(4.0) + z)   # NaN stays NaN
    x2 = xc * xc
    p = F(-2.72614225801306e-10) + z
    p = p * x2 + (F(2.77068142495902e-08) + z)
    p = p * x2 + (F(-2.10102402082508e-06) + z)
    p = p * x2 + (F(-5.69250639462346e-05) + z)
    p = p * x2 + (F(-7.34990630326855e-04) + z)
    p = p * x2 + (F(-2.95459980854025e-03) + z)
    p = p * x2 + (F(-1.60960333262415e-02) + z)
    q = F(-1.45660718464996e-05) + z
    q = q * x2 + (F(-2.13374055278905e-04) + z)
    q = q * x2 + (F(-1.68282697438203e-03) + z)
    q = q * x2 + (F(-7.37332916720468e-03) + z)
    q = q * x2 + (F(-1.42647390514189e-02) + z)
    return xc * p / q


def fast_gelu(x, z=F(0.0)):
    """GELU(x) = x·Φ(x) = ½x(1 + erf(x/√2)) for float32 x (error ≤ 4e-7·max(1, |x|))."""
    u = min(x, F(5.444722215136417) + z)   # 3.85·√2; below −3.85·√2 the select makes Φ = 0
    u2 = u * u
    p = F(7.070764289096239e-06) + z
    p = p * u2 + (F(0.00039240552120151746) + z)
    p = p * u2 + (F(0.006032977449819833) + z)
    p = p * u2 + (F(0.056628909999116815) + z)
    p = p * u2 + (F(0.3989416423875828) + z)
    q = F(5.843661043686971e-07) + z
    q = q * u2 + (F(0.00014086160060772452) + z)
    q = q * u2 + (F(0.0031588019314219293) + z)
    q = q * u2 + (F(0.04157478146066052) + z)
    q = q * u2 + (F(0.3086041838593877) + z)
    q = q * u2 + (F(1.0) + z)
    phi = u * (p / q) + (F(0.5) + z)
    phi = phi if x >= F(-5.444722215136417) + z else F(0.0)   # Φ < 3e-8 there; x·0 keeps −inf·0 = NaN
    return x * phi


FAST_FUNCTIONS = {"exp": "fast_exp", "tanh": "fast_tanh", "erf": "fast_erf"}
"""Unary tasklet op → the float32 form that replaces it in CPU kernels."""


def source_of(name: str) -> str:
    """The source text of one of the functions above (copied into kernel modules)."""
    if name not in ERROR_BOUNDS:
        raise KeyError(name)
    return inspect.getsource(globals()[name])
