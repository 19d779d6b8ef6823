"""Passes: one transformation applied to a fixpoint, recorded as one history step.

A recipe used to record every application as its own step (5,800 steps on MobileNet-V3),
and each step paid for a copy of the graph, a full verification, a hash and a report:
work linear in the graph, per application. ``run_pass(graph, t, step)`` instead sweeps
the graph: it takes ``t``'s matches in graph order, applies each one whose anchors still
exist and whose check passes (``engine.apply`` without the per-application
verification and rollback copy), and sweeps again until a sweep applies nothing. The
order is deterministic, so replaying the step on the same graph gives the same graph; the
history records the number of applications and the resulting graph hash, and replay
checks both. ``ir.verify`` runs once, on the pass's result.

The pass's ``Application`` is the net effect: kernels that exist only after the pass
(``created``), only before it (``removed``), kernels present before and after whose
content a rewrite touched (``changed``), and the summed Δ-estimate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ir.errors import MatchFailure, PostconditionError, VerificationError
from ir.graph import Graph
from ir.movement import Estimate
from ir.verify import verify
from transforms import engine
from transforms.base import Application, Transformation
from transforms.layers import members, parse_key

SWEEPS = 1_000         # a fixpoint is reached long before this; more means a transformation oscillates


@dataclass(frozen=True)
class PassResult:
    application: Application
    applications: int


def run_pass(graph: Graph, t: Transformation, step: int, *, limit: int = 100_000,
             stop: Callable[[], bool] | None = None,
             on_apply: Callable[[Application], None] | None = None, scope: str | None = None) -> PassResult:
    """Apply ``t`` to a fixpoint in place (see the module docstring). ``on_apply`` hears each
    application (bisection inside a pass names one); ``stop`` ends the pass early; ``scope`` (a
    layer name, ``transforms.layers``) limits it to matches whose anchors are all in that layer."""
    before = set(graph.nodes)
    touched: set[str] = set()
    parents: dict[str, tuple[str, ...]] = {}
    delta, count, sweeps = Estimate(), 0, 0
    while count < limit and sweeps < SWEEPS and not (stop and stop()):
        sweeps += 1
        applied = 0
        for match in _matches(graph, t, scope):
            if count >= limit or any(a not in graph.nodes for a in match.anchors):
                continue
            try:
                app = engine.apply(graph, t, match, step, check_verify=False, backup=False)
            except MatchFailure:                  # its check fails (now): not an application
                continue
            touched.update(app.created + app.changed)
            compose_parents(parents, app)
            delta = delta + app.delta
            count, applied = count + 1, applied + 1
            if on_apply is not None:
                on_apply(app)
        if not applied:
            break
    try:
        verify(graph)
    except VerificationError as e:
        raise PostconditionError(f"{t.name} pass produced an invalid graph: {e.summary}", e.node, graph) from e
    return PassResult(net_application(graph, before, touched, t.name, t.params(), delta, step, parents), count)


def compose_parents(parents: dict[str, tuple[str, ...]], app: Application) -> None:
    """Fold ``app``'s lineage into ``parents`` (kernel → the kernels before the first application it
    was made from), in place."""
    new = {x: tuple(dict.fromkeys(p for s in app.parents.get(x, (x,)) for p in parents.get(s, (s,))))
           for x in app.created + app.changed}
    parents.update(new)


def net_application(graph: Graph, before: set[str], touched: set[str], name: str, params: dict,
                    delta: Estimate, step: int, parents: dict[str, tuple[str, ...]] | None = None) -> Application:
    """The net effect of many applications on ``graph`` (see the module docstring): ``before``, the
    kernel ids before them; ``touched``, the ids they created or changed; ``parents``, their
    composed lineage (``compose_parents``)."""
    after = set(graph.nodes)
    created = tuple(i for i in graph.nodes if i not in before)
    removed = tuple(sorted(before - after))
    changed = tuple(i for i in graph.nodes if i in before and i in touched)
    lineage = {i: parents[i] for i in created + changed if parents and i in parents}
    return Application(name, params, (), created, removed, changed, delta, step, {}, lineage)


def _matches(graph: Graph, t: Transformation, scope: str | None) -> list:
    if scope is None:
        return list(t.matches(graph))
    family, index = parse_key(scope)
    ids = members(graph, family, index)
    inside = set(ids)
    return [m for m in t.matches(graph, ids) if m.anchors and all(a in inside for a in m.anchors)]
