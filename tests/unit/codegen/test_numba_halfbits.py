"""bfloat16/float16 as uint16 bits in numba kernels (``codegen/numba_cpu/halfbits.py``):
compiled with @njit, the conversions agree bit for bit with ml_dtypes / NumPy ``astype``
over every half value and over float32 values around every rounding boundary."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.numba_cpu import halfbits  # noqa: E402


def _vectorized(name):
    scalar = numba.njit(getattr(halfbits, name))

    @numba.njit
    def run(a, out):
        for i in range(a.size):
            out[i] = scalar(a[i])
    return run


def _boundary_floats() -> np.ndarray:
    """Every bf16/f16 value, every midpoint between neighbours, and ±2 float32 ulp around
    each, plus specials (the float32 bits are walked in int64 and kept in range)."""
    halves = np.arange(0, 1 << 16, dtype=np.uint32)
    values = []
    for dtype in (np.float16, ml_dtypes.bfloat16):
        with np.errstate(invalid="ignore"):
            v = halves.astype(np.uint16).view(dtype).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        values += [v, (v[1:] + v[:-1]) / 2]
    base = np.concatenate(values).astype(np.float32)
    bits = base.view(np.uint32).astype(np.int64)
    near = np.concatenate([bits + d for d in (-2, -1, 0, 1, 2)])
    near = near[(near >= 0) & (near < 1 << 32)].astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 1e-8, -1e-8, 3e38],
                        np.float32)
    return np.concatenate([near, specials])


@pytest.mark.parametrize("dtype,load", [(ml_dtypes.bfloat16, "_bf16_f32"), (np.float16, "_f16_f32")])
def test_load_is_exact_for_every_value(dtype, load):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = bits.view(dtype).astype(np.float32)
    got = np.empty(bits.size, np.float32)
    _vectorized(load)(bits, got)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), bits[~same][:5]


@pytest.mark.parametrize("dtype,store", [(ml_dtypes.bfloat16, "_f32_bf16"), (np.float16, "_f32_f16")])
def test_store_rounds_to_nearest_even_like_astype(dtype, store):
    x = _boundary_floats()
    with np.errstate(over="ignore"):
        want = x.astype(dtype).view(np.uint16)
    got = np.empty(x.size, np.uint16)
    _vectorized(store)(x, got)
    nan = np.isnan(x)
    assert np.isnan(got[nan].view(dtype).astype(np.float32)).all()
    bad = (got != want) & ~nan
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5]))


def test_sources_are_copyable():
    for name in halfbits.HELPERS:
        assert halfbits.source_of(name).startswith(f"def {name}(")
    with pytest.raises(KeyError):
        halfbits.source_of("open")
