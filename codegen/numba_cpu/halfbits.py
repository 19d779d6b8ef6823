"""16-bit float storage for numba kernels: bfloat16 and float16 as raw ``uint16`` bits.

numba (0.68) has no float16 type on the CPU and NumPy has no bfloat16, so kernels see a
low-precision container as a ``uint16`` array and convert on every load and store; all
arithmetic stays float32 (``mixed_precision``'s contract). The program stores bfloat16
tensors as ``uint16`` arrays (contractions widen them with ``library.widen``) and float16
tensors as ``np.float16`` arrays, passed to kernels as ``.view(np.uint16)``.

The conversions are exact inverses of the IEEE/bfloat16 encodings and round to nearest,
ties to even, like ``ml_dtypes`` and ``ndarray.astype``: tested bit for bit over all 65,536
half values and over float32 values at every rounding boundary
(``tests/unit/codegen/test_numba_halfbits.py``). NaNs stay NaN (quietened), infinities and
signed zeros are kept, float32 values beyond the float16 range become ±inf, and float16
subnormals are produced and read exactly.

The functions are plain Python over NumPy scalars so that their text can be copied into
kernel modules (``kernel_cache.helper_source``) and compiled there with ``@njit``.
"""
from __future__ import annotations

import inspect

import numpy as np


def _bf16_f32(bits):
    return np.uint32(np.uint32(bits) << np.uint32(16)).view(np.float32)


def _f32_bf16(x):
    u = np.float32(x).view(np.uint32)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))


def _f16_f32(bits):
    h = np.uint32(bits)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exp = (h >> np.uint32(10)) & np.uint32(0x1F)
    mant = h & np.uint32(0x3FF)
    if exp == np.uint32(0x1F):
        return np.uint32(sign | np.uint32(0x7F800000) | (mant << np.uint32(13))).view(np.float32)
    if exp != np.uint32(0):
        return np.uint32(sign | ((exp + np.uint32(112)) << np.uint32(23)) | (mant << np.uint32(13))).view(np.float32)
    value = np.float32(mant) * np.float32(5.9604644775390625e-08)          # mant · 2^-24 (exact)
    return -value if sign else value


def _f32_f16(x):
    f = np.float32(x)
    u = f.view(np.uint32)
    sign = (u >> np.uint32(16)) & np.uint32(0x8000)
    a = u & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x7F800000):                                           # inf, nan
        return np.uint16(sign | np.uint32(0x7C00) | (np.uint32(0x200) if a > np.uint32(0x7F800000) else np.uint32(0)))
    if a >= np.uint32(0x477FF000):                                           # >= 65520: rounds to inf
        return np.uint16(sign | np.uint32(0x7C00))
    if a < np.uint32(0x38800000):                                            # below 2^-14: subnormal or zero
        m = np.uint32(np.rint(np.abs(f) * np.float32(16777216.0)))           # exact scaling, ties to even
        return np.uint16(sign | m)
    a = a - np.uint32(0x38000000)                                            # rebias the exponent 127 -> 15
    a = a + np.uint32(0x0FFF) + ((a >> np.uint32(13)) & np.uint32(1))
    return np.uint16(sign | (a >> np.uint32(13)))


LOAD = {"bfloat16": "_bf16_f32", "float16": "_f16_f32"}
STORE = {"bfloat16": "_f32_bf16", "float16": "_f32_f16"}
HELPERS = frozenset(LOAD.values()) | frozenset(STORE.values())


def source_of(name: str) -> str:
    """The source text of one conversion (copied into kernel modules)."""
    if name not in HELPERS:
        raise KeyError(name)
    return inspect.getsource(globals()[name])
