"""One shared check for transformation tests (STYLE.md: five assertions per transformation).

``assert_applies(graph, t, match, rtol)`` applies ``t`` at ``match`` on a clone and asserts:
the check passes; the graph verifies; the reference executor gives the same outputs
before and after (within ``rtol`` of each output's scale); and the predicted Δ equals a
full recount's difference (``rtol`` defaults to 1e-5, or the
transformation's own stated tolerance when that is looser). It returns the Application and the new graph.
``outputs_problems(work)``, when given, replaces the output comparison: it returns what is wrong
with the transformed graph's outputs (the random-graph tests reuse one run of the original and
judge ill-conditioned outputs against a float64 truth).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir.graph import Graph
from ir.movement import report
from ir.verify import verify
from transforms import engine
from transforms.base import Application, Match, Transformation

OutputsProblems = Callable[[Graph], list[str]]


def assert_applies(graph: Graph, t: Transformation, match: Match, rtol: float | None = None,
                   feeds: dict | None = None, outputs_problems: OutputsProblems | None = None
                   ) -> tuple[Application, Graph]:
    res = t.check(graph, match)
    assert res.ok, f"{t.name} should apply at {match.anchors}: {res.reason}"
    work = graph.clone()
    before_total = report(work).total
    app = engine.apply(work, t, match, step=1)
    verify(work)
    after_total = report(work).total
    assert after_total - before_total == app.delta, (
        f"predicted Δ {app.delta} != recount {after_total - before_total}")
    if outputs_problems is not None:
        problems = outputs_problems(work)
    else:
        feeds = feeds if feeds is not None else feeds_for(graph)
        problems = compare(run(graph, feeds), run(work, feeds), rtol if rtol is not None else _default_rtol(t))
    assert not problems, f"{t.name} changed outputs: {problems}"
    return app, work


def _default_rtol(t: Transformation) -> float:
    """1e-5 for exact rewrites; a lossy one (mixed_precision) is held to its stated tolerance."""
    return 1e-5 if t.tolerance <= 1e-4 else t.tolerance


def assert_fails(graph: Graph, t: Transformation, match: Match, *needles: str) -> str:
    res = t.check(graph, match)
    assert not res.ok, f"{t.name} should not apply at {match.anchors}"
    for needle in needles:
        assert needle in res.reason, f"{needle!r} not in reason {res.reason!r}"
    return res.reason


def outputs_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray], rtol: float = 1e-5) -> bool:
    return not compare(a, b, rtol)
