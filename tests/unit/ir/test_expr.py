"""ir.expr: evaluation, printers (NumPy, Python, CUDA, text), FLOP counts, bounds and JSON."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import expr as E

x, y = E.Var("x"), E.Var("y")
GELU = E.Bin("mul", E.Bin("mul", x, E.c(0.5)),
             E.Bin("add", E.c(1.0), E.Un("erf", E.Bin("mul", x, E.c(1 / math.sqrt(2))))))


def test_evaluate_broadcasts():
    e = E.Bin("add", E.Bin("mul", x, y), E.c(1.0))
    out = E.evaluate(e, {"x": np.arange(3, dtype=np.float32)[:, None], "y": np.ones((1, 4), np.float32)})
    assert out.shape == (3, 4) and out[2, 0] == 3.0


def test_erf_matches_math_erf_within_stated_bound():
    xs = np.linspace(-6, 6, 20001)
    ref = np.array([math.erf(v) for v in xs])
    assert np.max(np.abs(E.erf(xs) - ref)) < 1.2e-7


def test_integer_division_truncates_like_c():
    out = E.evaluate(E.Bin("div", x, y), {"x": np.array([-7, 7]), "y": np.array([2, 2])})
    assert out.tolist() == [-3, 3]


def test_count_flops():
    assert E.count_flops(GELU) == 5          # mul, mul, add, erf, mul
    assert E.count_flops(E.Cast(x, "float16")) == 0
    assert E.count_flops(E.Select(E.Bin("gt", x, E.c(0.0)), x, E.c(0.0))) == 2


def test_text_form():
    assert E.to_text(GELU).startswith("((x * 0.5) * (1.0 + erf(")


def test_bounds_of_index_expressions():
    ranges = {"i": (0, 7), "j": (0, 3)}
    assert E.bounds(E.Bin("add", E.Bin("mul", E.Var("i"), E.c(4, "int64")), E.Var("j")), ranges) == (0, 31)
    assert E.bounds(E.c(5, "int64"), ranges) == (5, 5)
    with pytest.raises(ValueError, match="cannot bound"):
        E.bounds(E.Un("exp", E.Var("i")), ranges)


def test_substitute_and_free_vars():
    e = E.substitute(E.Bin("add", x, y), {"y": E.Un("exp", x)})
    assert E.free_vars(e) == {"x"}


exprs = st.recursive(
    st.one_of(st.sampled_from([x, y]), st.floats(-4, 4, allow_nan=False).map(E.c)),
    lambda kids: st.one_of(
        st.tuples(st.sampled_from(["neg", "exp", "tanh", "abs", "erf"]), kids).map(lambda t: E.Un(*t)),
        st.tuples(st.sampled_from(["add", "sub", "mul", "max", "min"]), kids, kids).map(lambda t: E.Bin(*t))),
    max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(exprs)
def test_json_round_trip_is_exact(e):
    assert E.from_json(E.to_json(e)) == e


def test_json_rejects_unknown_ops():
    with pytest.raises(ValueError, match="unknown unary op"):
        E.from_json(["u", "__import__", ["v", "x"]])
    with pytest.raises(ValueError, match="bad constant"):
        E.from_json(["c", "os.system", "float32"])


def test_nonfinite_constants_round_trip():
    for val in (math.inf, -math.inf):
        assert E.from_json(E.to_json(E.c(val))) == E.c(val)
    assert math.isnan(E.from_json(E.to_json(E.c(math.nan))).value)
