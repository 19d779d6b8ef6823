"""The vectorizable float32 exp/tanh/erf/GELU of the CPU backend meet their documented error bounds,
keep inf/NaN right, and really vectorize inside a numba loop (``codegen/numba_cpu/fastmath.py``)."""
from __future__ import annotations

import functools
import math
import platform
import re

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.numba_cpu import fastmath  # noqa: E402
from codegen.numba_cpu.loopnest import FASTMATH  # noqa: E402

FM = set(FASTMATH)


@functools.lru_cache(maxsize=None)
def _apply(name: str):
    """A numba loop applying fastmath.<name> elementwise, called as kernels call it: with the opaque
    zero from a runtime argument (``loopnest.ZERO``)."""
    fn = numba.njit(inline="always", error_model="numpy", fastmath=FM)(getattr(fastmath, name))

    @numba.njit(error_model="numpy", fastmath=FM)
    def apply(x, out, n_zero):
        z = np.float32(n_zero)
        for i in range(x.shape[0]):
            out[i] = fn(x[i], z)
    return apply


@numba.njit
def _erf64(x, out):
    for i in range(x.shape[0]):
        out[i] = math.erf(x[i])


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    """Every 1031st float32 bit pattern (all exponents and signs), finite ones only."""
    bits = np.arange(0, 2**32, 1031, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    return x[np.isfinite(x)]


def _run(name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _apply(name)(x, out, 0)
    return out.astype(np.float64)


@numba.njit
def _gelu64(x, out):
    for i in range(x.shape[0]):
        out[i] = 0.5 * x[i] * (1.0 + math.erf(x[i] / math.sqrt(2.0)))


def test_exp_relative_error_bound(sample):
    got = _run("fast_exp", sample)
    with np.errstate(over="ignore"):
        ref = np.exp(sample.astype(np.float64))
    normal = (ref >= np.finfo(np.float32).tiny) & (ref <= np.finfo(np.float32).max)
    rel = np.abs(got - ref)[normal] / ref[normal]
    assert rel.max() <= fastmath.ERROR_BOUNDS["fast_exp"], rel.max()
    sub = ref < np.finfo(np.float32).tiny
    assert np.abs(got[sub] - ref[sub]).max() <= 1.2e-38
    assert np.all(np.isinf(got[sample > 88.7228394]))


def test_tanh_error_bound(sample):
    got = _run("fast_tanh", sample)
    ref = np.tanh(sample.astype(np.float64))
    err = np.abs(got - ref)
    assert err.max() <= fastmath.ERROR_BOUNDS["fast_tanh"]
    tiny = np.abs(ref) > 1e-30
    assert (err[tiny] / np.abs(ref[tiny])).max() <= fastmath.ERROR_BOUNDS["fast_tanh"]


def test_erf_error_bound(sample):
    got = _run("fast_erf", sample)
    x64 = sample.astype(np.float64)
    ref = np.empty_like(x64)
    _erf64(x64, ref)
    assert np.abs(got - ref).max() <= fastmath.ERROR_BOUNDS["fast_erf"]


def test_gelu_error_bound(sample):
    """|fast_gelu(x) − GELU(x)| ≤ bound·max(1, |x|): absolute near 0, relative for large |x|."""
    got = _run("fast_gelu", sample)
    x64 = sample.astype(np.float64)
    ref = np.empty_like(x64)
    _gelu64(x64, ref)
    err = np.abs(got - ref) / np.maximum(1.0, np.abs(x64))
    assert err.max() <= fastmath.ERROR_BOUNDS["fast_gelu"], (err.max(), sample[err.argmax()])
    assert np.all(got[sample < -5.66] == 0.0)


def _coefficients(name: str, poly: str) -> list[float]:
    """The coefficients of polynomial ``poly`` (``p`` or ``q``) in fastmath.<name>, highest first."""
    lines = [ln.strip() for ln in fastmath.source_of(name).splitlines()]
    return [float(re.search(r"F\(([^)]*)\)", ln).group(1)) for ln in lines if ln.startswith(f"{poly} = ")]


def test_gelu_rational_is_the_documented_fit():
    """In float64, ½ + u·P(u²)/Q(u²) is within 1.25e-7 of Φ(u) on |u| ≤ 3.85·√2 (erf's fit error
    2.4e-7 halved), Q(0) = 1, and Φ beyond the clamp is within 3e-8 of 1: the float32 bound above
    is this plus rounding."""
    p, q = _coefficients("fast_gelu", "p"), _coefficients("fast_gelu", "q")
    assert (len(p), len(q), q[-1]) == (5, 6, 1.0)
    u = np.linspace(-3.85 * math.sqrt(2), 3.85 * math.sqrt(2), 200_001)
    phi = 0.5 + u * np.polyval(p, u * u) / np.polyval(q, u * u)
    exact = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in u])
    assert np.abs(phi - exact).max() <= 1.25e-7
    assert 0.5 * math.erfc(3.85) <= 3e-8


def test_gelu_from_fast_erf_is_within_float32_noise():
    """GELU is built from erf in the expansion; with fast_erf it stays within 1e-6 of float64."""
    x = np.linspace(-10, 10, 200_001).astype(np.float32)
    erf32 = _run("fast_erf", (x * np.float32(1 / math.sqrt(2))).astype(np.float32))
    gelu = 0.5 * x * (1 + erf32)
    x64 = x.astype(np.float64)
    e64 = np.empty_like(x64)
    _erf64(x64 / math.sqrt(2), e64)
    assert np.abs(gelu - 0.5 * x64 * (1 + e64)).max() <= 1e-5 * 10


@pytest.mark.parametrize("name", sorted(fastmath.ERROR_BOUNDS))
def test_special_values(name):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    got = _run(name, x)
    assert np.isnan(got[0])
    want = {"fast_exp": [np.inf, 0.0, 1.0, 1.0], "fast_tanh": [1.0, -1.0, 0.0, 0.0], "fast_erf": [1.0, -1.0, 0.0, 0.0],
            "fast_gelu": [np.inf, np.nan, 0.0, 0.0]}   # GELU(−inf) = −inf·0 = NaN, as in the reference
    np.testing.assert_allclose(got[1:], want[name], atol=3e-7)


@pytest.mark.parametrize("name", sorted(fastmath.ERROR_BOUNDS))
def test_plain_python_agrees_with_compiled(name):
    """The same source runs without numba (NumPy scalars), as the module promises."""
    x = np.float32([-7.5, -3.7, -0.2, 0.0, 0.5, 2.25, 40.0])
    py = np.array([float(getattr(fastmath, name)(v)) for v in x])
    # GELU's bound is absolute (·max(1, |x|)): Φ = ½ + u·P/Q cancels for negative x, where fused
    # multiply-adds (compiled) and separate roundings (Python) differ by a few 1e-8
    atol = fastmath.ERROR_BOUNDS[name] if name == "fast_gelu" else 1e-30
    np.testing.assert_allclose(py, _run(name, x), rtol=1e-6, atol=atol)


@pytest.mark.parametrize("name", sorted(fastmath.ERROR_BOUNDS))
def test_loop_vectorizes(name):
    """The whole point: a loop calling the form compiles to SIMD (no libm call per element)."""
    apply = _apply(name)
    x = np.ones(64, np.float32)
    apply(x, np.empty_like(x), 0)
    ir = apply.inspect_llvm(apply.signatures[0])
    assert "x float>" in ir, f"{name}: the loop did not vectorize"
    assert "@expf" not in ir and "@tanhf" not in ir and "@erff" not in ir


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86-64 assembly")
def test_opaque_zero_keeps_constants_out_of_the_loop():
    """With the runtime zero, the ~15 coefficients are not rematerialized in the vector loop
    (``movabs`` + ``vbroadcastss`` each, numba's large code model): the reason for ``z``."""
    apply = _apply("fast_gelu")
    x = np.ones(64, np.float32)
    apply(x, np.empty_like(x), 0)
    asm = apply.inspect_asm(apply.signatures[0]).splitlines()
    at = next(i for i, ln in enumerate(asm) if "vdivps" in ln and ("ymm" in ln or "zmm" in ln))   # AVX2 or AVX-512
    start = max(i for i in range(at) if re.match(r"^\.LBB\d+_\d+:", asm[i]))
    end = next(i for i in range(at, len(asm)) if re.match(r"^\s+j\w+\s", asm[i]))
    loop = asm[start:end + 1]
    assert not any("movabs" in ln for ln in loop), "\n".join(loop)
    assert len(loop) < 40, "\n".join(loop)


def test_source_of_is_the_function_text():
    assert fastmath.source_of("fast_exp").startswith("def fast_exp(x, z=F(0.0)):")
    with pytest.raises(KeyError):
        fastmath.source_of("eval")
