"""The float64 erf (``ir.special.erf64``) of tasklets and reference kernels against ``math.erf``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from codegen.numpy_ref.elementwise import erf
from ir.special import ERF_BLOCK, erf64


def _ref(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape)


def test_erf64_is_within_a_few_ulps_of_math_erf_on_every_interval():
    # every interval of Cody's approximation, its edges, subnormals, and more than one block
    x = np.concatenate([np.linspace(-8, 8, 3 * ERF_BLOCK + 7), np.geomspace(1e-310, 30, 20_001),
                        [0.46875, np.nextafter(0.46875, 1), 4.0, np.nextafter(4.0, 5), 5.999, 6.0, 26.6, 1e300]])
    x = np.concatenate([x, -x])
    want, got = _ref(x), erf64(x)
    rel = np.abs(got - want) / np.abs(want).clip(np.finfo(np.float64).tiny)   # subnormals: absolute < 1e-323
    assert rel.max() < 1e-15, f"worst at x = {x[rel.argmax()]!r}: {got[rel.argmax()]!r} vs {want[rel.argmax()]!r}"


def test_erf64_special_values_and_shapes():
    x = np.array([[0.0, -0.0, np.inf], [-np.inf, np.nan, 1e-300]])
    got = erf64(x)
    assert got.shape == x.shape and got.dtype == np.float64
    assert np.array_equal(got[:, :2], np.array([[0.0, -0.0], [-1.0, np.nan]]), equal_nan=True)
    assert np.signbit(got[0, 1]) and got[0, 2] == 1.0 and got[1, 2] == math.erf(1e-300)
    assert erf64(np.float32(0.5)).shape == () and erf64(np.float32(0.5)) == pytest.approx(math.erf(0.5), rel=1e-15)


def test_erf64_of_a_transposed_view():
    """``empty_like`` of a transposed array is Fortran-ordered, so its ``reshape(-1)`` was a copy and the
    result was left unwritten: the reference's Erf of a transposed view was garbage."""
    x = np.random.default_rng(2).standard_normal((30, 7))
    assert np.array_equal(erf64(x.T), erf64(x).T) and np.array_equal(erf64(x[:, ::2]), erf64(x)[:, ::2])
    assert np.abs(erf64(x.T) - _ref(x.T)).max() < 1e-15


def test_the_erf_kernel_uses_it():
    x = np.random.default_rng(0).standard_normal((64, 33)) * 3
    assert np.array_equal(erf(x), erf64(x))
    assert np.abs(erf(x) - _ref(x)).max() < 1e-15


def test_tasklet_erf_is_it_in_float64_and_rounded_once_in_float32():
    """A tasklet's erf (``ir.expr.erf``) was a Chebyshev form 1.2e-7 off: 10⁸ ulp in float64, 900 in float32 near 0."""
    from ir.expr import erf as tasklet_erf
    x = np.random.default_rng(1).standard_normal(1000) * 2
    assert np.array_equal(tasklet_erf(x), erf64(x))
    assert tasklet_erf(np.arange(3)).dtype == np.float64
    x32 = x.astype(np.float32)
    got = tasklet_erf(x32)
    assert got.dtype == np.float32
    ulps = np.abs(got.astype(np.float64) - _ref(x32.astype(np.float64))) / np.spacing(np.abs(got))
    assert ulps.max() <= 0.5, ulps.max()
