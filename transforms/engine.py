"""Applying transformations with contracts, Δ-estimates, previews and ranking.

``apply(graph, t, match, step)``:

1. ``requires``: ``t.check`` must pass (else ``MatchFailure`` with the reason);
2. the figures of the ``affected`` kernels are taken, ``t.rewrite`` edits the graph;
3. ``ensures``: removed/changed ⊆ affected, created ids are new, and ``ir.verify``
   passes (else ``PostconditionError`` — the graph is then restored from a clone);
4. the Δ-estimate (created + changed after − removed + changed before) is the
   incremental recount; it equals a full recount's difference (tested).

``preview`` applies to a clone and returns the ``Diff``; ``ranked`` orders
matches by predicted bytes saved, with ``why_not`` reasons for failed checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ir.errors import GraphError, MatchFailure, PostconditionError, StudioError
from ir.graph import Graph
from ir.movement import Estimate, kernel_estimate
from ir.serialize import _node_to_json
from ir.verify import verify
from transforms.base import Application, Match, Transformation


def _figures(graph: Graph, ids: Iterable[str]) -> dict[str, Estimate]:
    return {i: kernel_estimate(graph, graph.nodes[i]) for i in ids if i in graph.nodes}


def apply(graph: Graph, t: Transformation, match: Match, step: int = 0, *,
          check_verify: bool = True, backup: bool = True) -> Application:
    """Apply ``t`` at ``match`` in place; return the Application (see module docstring).
    ``backup=False`` skips the rollback copy, for callers that work on a throw-away clone."""
    res = t.check(graph, match)
    if not res.ok:
        node = graph.nodes.get(res.nodes[0]) if res.nodes else None
        raise MatchFailure(f"{t.name} does not apply: {res.reason}", node, graph)
    affected = tuple(dict.fromkeys(t.affected(graph, match)))
    before = _figures(graph, affected)
    reports_figures = type(t).figures is not Transformation.figures   # needs the graph before the rewrite
    saved = graph.clone() if backup or reports_figures else None
    try:
        touched = t.rewrite(graph, match, step)
        _ensure(graph, t, affected, before, touched, check_verify)
    except StudioError:
        _restore(graph, saved)
        raise
    except Exception as e:  # noqa: BLE001 - a rewrite bug must not leave a half-edited graph
        _restore(graph, saved)
        raise PostconditionError(f"{t.name} failed while rewriting: {type(e).__name__}: {e}", None, graph) from e
    after = _figures(graph, touched.created + touched.changed)
    delta = sum(after.values(), Estimate()) - sum((before[i] for i in touched.removed + touched.changed), Estimate())
    return Application(t.name, t.params(), match.anchors, touched.created, touched.removed, touched.changed,
                       delta, step, t.figures(saved, graph) if reports_figures else {})


def _ensure(graph: Graph, t: Transformation, affected, before, touched, check_verify: bool) -> None:
    stray = [i for i in touched.removed + touched.changed if i not in before]
    if stray:
        raise PostconditionError(f"{t.name} touched {stray}, outside its affected set {list(affected)}", None, graph)
    missing = [i for i in touched.created + touched.changed if i not in graph.nodes]
    if missing or any(i in graph.nodes for i in touched.removed):
        raise PostconditionError(f"{t.name} reported ids inconsistently (missing {missing})", None, graph)
    if check_verify:
        try:
            verify(graph, maps=touched.created + touched.changed)
        except GraphError as e:
            raise PostconditionError(f"{t.name} produced an invalid graph: {e.summary}", e.node, graph) from e


def _restore(graph: Graph, saved: Graph | None) -> None:
    if saved is not None:
        graph.__dict__.update(saved.__dict__)


@dataclass(frozen=True)
class Diff:
    """Nodes added, removed and changed by a (previewed) application."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    delta: Estimate


def diff(before: Graph, after: Graph) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    added = tuple(i for i in after.nodes if i not in before.nodes)
    removed = tuple(i for i in before.nodes if i not in after.nodes)
    changed = tuple(i for i in after.nodes if i in before.nodes
                    and _node_to_json(after.nodes[i]) != _node_to_json(before.nodes[i]))
    return added, removed, changed


def preview(graph: Graph, t: Transformation, match: Match) -> Diff:
    """Apply to a clone and report the difference; ``graph`` is untouched."""
    work = graph.clone()
    app = apply(work, t, match)
    added, removed, changed = diff(graph, work)
    return Diff(added, removed, changed, app.delta)


@dataclass(frozen=True)
class Ranked:
    """A match with its check result and predicted Δ (None when the check fails)."""

    transformation: Transformation
    match: Match
    ok: bool
    reason: str
    delta: Estimate | None

    @property
    def bytes_saved(self) -> int:
        return -self.delta.bytes if self.delta is not None else 0


def ranked(graph: Graph, candidates: Iterable[tuple[Transformation, Match]], *,
           predict: bool = True) -> list[Ranked]:
    """Check every candidate and predict its Δ on a clone; best bytes saved first, failures last."""
    out = []
    for t, m in candidates:
        res = t.check(graph, m)
        delta = None
        if res.ok and predict:
            try:
                delta = preview(graph, t, m).delta
            except StudioError as e:
                out.append(Ranked(t, m, False, e.summary, None))
                continue
        out.append(Ranked(t, m, res.ok, res.reason, delta))
    return sorted(out, key=lambda r: (not r.ok, -r.bytes_saved, r.transformation.name, r.match.anchors))
