"""Ranked matches for the transformations pane, on a fixed graph, cancellable: no Qt here.

The same grouping as ``Session.matches`` (*Selection*, *Viewport*, *Whole graph*; a
match listed once, in the first group that has it; best predicted bytes saved
first, failed checks last with their reason), but on a graph snapshot (a session
state's graph is never edited after it is made, so a worker thread may read it
while the GUI applies the next step), one candidate at a time so the worker can
report progress and stop when cancelled, and handing out each group as soon as it
is ranked. In the Whole graph group, the matches of one class of equal layers are one row (its first
layer's match, the others as ``copies``). ``preview`` applies one match to a sharing copy and describes
what it did.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator

from ir import memory
from ir.graph import Graph
from ir.movement import Estimate
from ir.pacing import paced
from ir.printer import node_to_text
from studio.text import human_bytes
from studio.gui.jobs import CancelToken, Progress, no_progress
from transforms import engine
from transforms.base import Match, Transformation
from transforms.layers import layer_of
from transforms.match_index import MatchIndex, key_of
from transforms.registry import TRANSFORMATIONS

GROUPS = ("Selection", "Viewport", "Whole graph")


def candidates(graph: Graph, within: Iterable[str] | None) -> Iterator[tuple[Transformation, Match]]:
    ids = None if within is None else list(within)
    for name in sorted(TRANSFORMATIONS):
        for t in TRANSFORMATIONS[name].instances():
            yield from ((t, m) for m in t.matches(graph, ids))


_key = engine.rank_key


def rank_groups(graph: Graph, selection: Iterable[str] | None, viewport: Iterable[str] | None, *,
                token: CancelToken | None = None, progress: Progress = no_progress,
                on_group: Callable[[str, list[engine.Ranked]], None] | None = None,
                index: MatchIndex | None = None) -> dict[str, list[engine.Ranked]]:
    """Groups of ranked matches (see the module docstring); empty groups are left out. ``on_group`` gets
    each group twice: checked but not yet predicted (``delta`` None), then ranked. ``index`` (the
    session's ``MatchIndex`` of ``graph``; a fresh one when None) supplies the candidates and keeps
    the rankings, so matches ranked before (for another selection, or before an apply elsewhere)
    are not ranked again."""
    token = token or CancelToken()
    index = MatchIndex(graph) if index is None else index
    with memory.holding(graph):                  # one lifetime analysis for every memory_reuse check
        return _rank_groups(graph, selection, viewport, token, progress, on_group, index)


def _rank_groups(graph: Graph, selection, viewport, token: CancelToken, progress: Progress, on_group,
                 index: MatchIndex) -> dict[str, list[engine.Ranked]]:
    seen: set[tuple] = set()
    out: dict[str, list[engine.Ranked]] = {}
    for label, ids in zip(GROUPS, (selection, viewport, None)):
        if ids is None and label != "Whole graph":
            continue
        checked = []
        for t, m in index.candidates(ids):
            key = key_of(t, m)
            if key not in seen:
                seen.add(key)
                token.check("ranking the matches")
                checked.append(index.check(t, m))
        if not checked:
            continue
        if on_group is not None:
            on_group(label, sorted(checked, key=_key))
        ranked = _predict(index, checked, label, token, progress)
        out[label] = sorted(_by_class(index, ranked) if label == "Whole graph" else ranked, key=_key)
        if on_group is not None:
            on_group(label, out[label])
    return out


def _predict(index: MatchIndex, checked: list[engine.Ranked], label: str, token: CancelToken,
             progress: Progress) -> list[engine.Ranked]:
    """The predicted Δ of every match whose check passed (``MatchIndex.rank``: a trial rewrite on a
    sharing copy; a failing rewrite becomes its reason)."""
    out = []
    for k, r in enumerate(checked):
        token.check("ranking the matches")
        if r.ok and r.delta is None:
            r = index.rank(r.transformation, r.match)
        out.append(r)
        progress(k + 1, len(checked), f"ranking {label.lower()} matches")
    return out


def _by_class(index: MatchIndex, rows: list[engine.Ranked]) -> list[engine.Ranked]:
    """One row per class of equal layers (``MatchIndex.class_key``): its first member, with the others as
    ``copies`` (listed "× N"; applying it repeats the step on their layers)."""
    classes: dict[tuple, list[engine.Ranked]] = {}
    out: list[engine.Ranked | tuple] = []
    for r in paced(rows, every=256):
        cls = index.class_key(r.transformation, r.match)
        if cls is None:
            out.append(r)
        elif cls in classes:
            classes[cls].append(r)
        else:
            classes[cls] = [r]
            out.append(cls)
    return [x if isinstance(x, engine.Ranked) else _collapse(classes[x]) for x in out]


def _collapse(members: list[engine.Ranked]) -> engine.Ranked:
    members = sorted(members, key=lambda r: layer_of(r.match.anchors[0])[1])
    return replace(members[0], copies=tuple(r.match for r in members[1:]))


def copy_layers(r: engine.Ranked) -> list[str]:
    """The layers of a class row's copies (``layer.1``, …), for ``Session.transfer``."""
    return [family.key(index) for family, index in (layer_of(m.anchors[0]) for m in r.copies)]


@dataclass(frozen=True)
class Preview:
    """What applying a match would do, computed on a clone (the graph is untouched)."""

    transformation: str
    anchors: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    delta: Estimate
    text: str


def preview(graph: Graph, t: Transformation, match: Match) -> Preview:
    """Apply ``t`` at ``match`` to a copy (``engine.trial``); the Application's ids and a readable
    summary with the new kernels' IR."""
    app, work = engine.trial(graph, t, match)
    added, removed, changed = app.created, app.removed, app.changed
    lines = [f"{t.name} at {', '.join(match.anchors)}",
             f"bytes moved {_signed_bytes(app.delta.bytes)} · FLOPs {app.delta.flops:+,d}", ""]
    for title, ids in (("removed", removed), ("changed", changed), ("added", added)):
        lines.append(f"{title} ({len(ids)}): " + (", ".join(ids) if ids else "—"))
    for ident in added + changed:
        lines += ["", node_to_text(work.nodes[ident])]
    return Preview(t.name, match.anchors, added, removed, changed, app.delta, "\n".join(lines))


def _signed_bytes(n: int) -> str:
    return ("−" if n < 0 else "+") + human_bytes(abs(n))
