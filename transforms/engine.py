"""Applying transformations with contracts, Δ-estimates, previews and ranking.

``apply(graph, t, match, step)``:

1. ``requires``: ``t.check`` must pass (else ``MatchFailure`` with the reason);
2. the figures of the ``affected`` kernels are taken, ``t.rewrite`` edits the graph;
3. ``ensures``: removed/changed ⊆ affected, created ids are new, and ``ir.verify_edit``
   passes on what the rewrite touched (the graph verified before; else ``PostconditionError``
   — the graph is then restored from the copy taken before);
4. the Δ-estimate (created + changed after − removed + changed before) is the
   incremental recount; it equals a full recount's difference (tested).

``trial`` applies to a copy that shares the untouched nodes; ``preview`` returns its
``Diff`` (the Application's ids: no node is compared or serialized); ``ranked`` orders
matches by predicted bytes saved, with ``why_not`` reasons for failed checks. ``diff``
compares two whole graphs node by node (for comparing session states).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Iterable

from ir import memory
from ir.errors import GraphError, MatchFailure, PostconditionError, StudioError
from ir.graph import Graph
from ir.movement import Estimate, kernel_estimate
from ir.serialize import _node_to_json
from ir.verify import verify_edit
from transforms.base import Application, Match, Transformation


def _figures(graph: Graph, ids: Iterable[str]) -> dict[str, Estimate]:
    return {i: kernel_estimate(graph, graph.nodes[i]) for i in ids if i in graph.nodes}


def apply(graph: Graph, t: Transformation, match: Match, step: int = 0, *,
          check_verify: bool = True, backup: bool = True, figures: bool = True,
          copy_of: Graph | None = None) -> Application:
    """Apply ``t`` at ``match`` in place; return the Application (see module docstring).
    ``backup=False`` skips the rollback copy, for callers that work on a throw-away clone;
    ``figures=False`` skips the transformation's own figures (peak memory before and after: a
    whole-graph analysis each), for callers that want only the Δ-estimate (ranking). ``copy_of``: ``graph``
    is an unedited copy of that graph, whose held analyses (``ir.memory.holding``) the check may read."""
    with memory.same_as(graph, copy_of) if copy_of is not None else nullcontext():
        res, prepared = t.prepare(graph, match)
        affected = tuple(dict.fromkeys(t.affected_prepared(graph, match, prepared))) if res.ok else ()
    if not res.ok:
        node = graph.nodes.get(res.nodes[0]) if res.nodes else None
        raise MatchFailure(f"{t.name} does not apply: {res.reason}", node, graph)
    before = _figures(graph, affected)
    written = {m.container for i in affected if i in graph.nodes for m in graph.nodes[i].outputs if m is not None}
    reports_figures = figures and type(t).figures is not Transformation.figures   # needs the graph before
    # the rollback copy is whole (a faulty rewrite may edit a node outside ``affected`` in place); a copy
    # only for ``figures`` shares the nodes outside it (a rewrite replaces containers, never edits them)
    saved = graph.clone() if backup else graph.clone_sharing(affected) if reports_figures else None
    try:
        touched = t.rewrite_prepared(graph, match, step, prepared)
        _ensure(graph, t, affected, before, touched, check_verify, written)
    except StudioError:
        _restore(graph, saved)
        raise
    except Exception as e:  # noqa: BLE001 - a rewrite bug must not leave a half-edited graph
        _restore(graph, saved)
        raise PostconditionError(f"{t.name} failed while rewriting: {type(e).__name__}: {e}", None, graph) from e
    after = _figures(graph, touched.created + touched.changed)
    delta = sum(after.values(), Estimate()) - sum((before[i] for i in touched.removed + touched.changed), Estimate())
    return Application(t.name, t.params(), match.anchors, touched.created, touched.removed, touched.changed,
                       delta, step, t.figures(saved, graph) if reports_figures else {},
                       _parents(touched, match, before))


def _parents(touched, match: Match, before: dict) -> dict[str, tuple[str, ...]]:
    """Lineage of one rewrite: every kernel it created or changed was made from the kernels it
    removed or changed and its anchors (those that existed before it)."""
    made_from = tuple(i for i in dict.fromkeys(touched.removed + touched.changed + match.anchors) if i in before)
    return {i: made_from or (i,) for i in touched.created + touched.changed}


def _ensure(graph: Graph, t: Transformation, affected, before, touched, check_verify: bool,
            written: set[str]) -> None:
    stray = [i for i in touched.removed + touched.changed if i not in before]
    if stray:
        raise PostconditionError(f"{t.name} touched {stray}, outside its affected set {list(affected)}", None, graph)
    missing = [i for i in touched.created + touched.changed if i not in graph.nodes]
    if missing or any(i in graph.nodes for i in touched.removed):
        raise PostconditionError(f"{t.name} reported ids inconsistently (missing {missing})", None, graph)
    if check_verify:
        try:
            verify_edit(graph, touched.created + touched.changed, written)
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


def trial(graph: Graph, t: Transformation, match: Match, *, figures: bool = True) -> tuple[Application, Graph]:
    """Apply to a copy that shares every node the rewrite cannot touch (``Graph.clone_sharing``
    over ``affected``); ``graph`` is untouched. The Application and the copy: the cost is the
    rewrite plus a copy of the graph's indexes, not a copy of every node."""
    work = graph.clone_sharing(t.affected(graph, match))
    return apply(work, t, match, backup=False, figures=figures, copy_of=graph), work


def preview(graph: Graph, t: Transformation, match: Match) -> Diff:
    """What applying ``t`` at ``match`` would do (``trial``), by the Application's own ids."""
    app, _ = trial(graph, t, match)
    return Diff(app.created, app.removed, app.changed, app.delta)


@dataclass(frozen=True)
class Ranked:
    """A match with its check result and predicted Δ (None when the check fails). ``copies``: the
    same match in the layers structurally equal to this one's (``MatchIndex.class_key``), listed as
    one row "× N" whose Δ is this match's, per layer."""

    transformation: Transformation
    match: Match
    ok: bool
    reason: str
    delta: Estimate | None
    copies: tuple[Match, ...] = ()

    @property
    def bytes_saved(self) -> int:
        """Bytes saved by this match alone."""
        return -self.delta.bytes if self.delta is not None else 0

    @property
    def total_saved(self) -> int:
        """Bytes saved by this match and its copies in the equal layers."""
        return self.bytes_saved * (1 + len(self.copies))


def ranked(graph: Graph, candidates: Iterable[tuple[Transformation, Match]], *,
           predict: bool = True) -> list[Ranked]:
    """Check every candidate and predict its Δ (``trial``, whose apply runs the check); best bytes
    saved first, failures last."""
    return sorted((rank_one(graph, t, m, predict) for t, m in candidates), key=rank_key)


def rank_key(r: Ranked):
    return (not r.ok, -r.total_saved, r.transformation.name, r.match.anchors)


def rank_one(graph: Graph, t: Transformation, m: Match, predict: bool = True) -> Ranked:
    """One candidate's check and (``predict``) predicted Δ: one check, one rewrite on a sharing copy
    (without the transformation's figures: the ranking reads the Δ only). A transformation that never
    changes what kernels move (``moves_bytes`` false: buffer sharing) is predicted from its check alone:
    its Δ is zero; one that can predict its Δ without rewriting (``Transformation.predict``: expand) is
    checked, then predicted."""
    if not predict or not t.moves_bytes:
        res = t.check(graph, m)
        return Ranked(t, m, res.ok, res.reason, Estimate() if predict and res.ok else None)
    try:
        res = t.check(graph, m) if type(t).predict is not Transformation.predict else None
        if res is not None and not res.ok:
            return Ranked(t, m, False, res.reason, None)
        delta = t.predict(graph, m) if res is not None else None
        return Ranked(t, m, True, "", delta if delta is not None else trial(graph, t, m, figures=False)[0].delta)
    except MatchFailure as e:
        return Ranked(t, m, False, _reason(e), None)
    except StudioError as e:
        return Ranked(t, m, False, e.summary, None)


def _reason(e: MatchFailure) -> str:
    prefix = " does not apply: "
    return e.summary.split(prefix, 1)[1] if prefix in e.summary else e.summary
