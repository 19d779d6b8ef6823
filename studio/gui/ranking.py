"""Ranked matches for the transformations pane, on a fixed graph, cancellable: no Qt here.

The same grouping as ``Session.matches`` (*Selection*, *Viewport*, *Whole graph*; a
match listed once, in the first group that has it; best predicted bytes saved
first, failed checks last with their reason), but on a graph snapshot (a session
state's graph is never edited after it is made, so a worker thread may read it
while the GUI applies the next step), one candidate at a time so the worker can
report progress and stop when cancelled, and handing out each group as soon as it
is ranked. ``preview`` applies one match to a clone and describes the difference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ir.errors import StudioError
from ir.graph import Graph
from ir.movement import Estimate
from ir.printer import node_to_text
from studio.cli import human_bytes
from studio.gui.jobs import CancelToken, Progress, no_progress
from transforms import engine
from transforms.base import Match, Transformation
from transforms.registry import TRANSFORMATIONS

GROUPS = ("Selection", "Viewport", "Whole graph")


def candidates(graph: Graph, within: Iterable[str] | None) -> Iterator[tuple[Transformation, Match]]:
    ids = None if within is None else list(within)
    for name in sorted(TRANSFORMATIONS):
        for t in TRANSFORMATIONS[name].instances():
            yield from ((t, m) for m in t.matches(graph, ids))


def _key(r: engine.Ranked):
    return (not r.ok, -r.bytes_saved, r.transformation.name, r.match.anchors)


def rank_groups(graph: Graph, selection: Iterable[str] | None, viewport: Iterable[str] | None, *,
                token: CancelToken | None = None, progress: Progress = no_progress,
                on_group: Callable[[str, list[engine.Ranked]], None] | None = None,
                known: dict | None = None) -> dict[str, list[engine.Ranked]]:
    """Groups of ranked matches (see the module docstring); empty groups are left out. ``on_group`` gets
    each group twice: checked but not yet predicted (``delta`` None), then ranked. ``known`` (match key ->
    Ranked, for this same graph) skips matches ranked before and receives the new ones."""
    token = token or CancelToken()
    known = {} if known is None else known
    seen: set[tuple] = set()
    out: dict[str, list[engine.Ranked]] = {}
    for label, ids in zip(GROUPS, (selection, viewport, None)):
        if ids is None and label != "Whole graph":
            continue
        checked = []
        for t, m in candidates(graph, ids):
            key = (t.name, repr(t), m.anchors)
            if key not in seen:
                seen.add(key)
                token.check("ranking the matches")
                if key in known:
                    checked.append(known[key])
                    continue
                res = t.check(graph, m)
                checked.append(engine.Ranked(t, m, res.ok, res.reason, None))
        if not checked:
            continue
        if on_group is not None:
            on_group(label, sorted(checked, key=_key))
        out[label] = sorted(_predict(graph, checked, label, token, progress, known), key=_key)
        if on_group is not None:
            on_group(label, out[label])
    return out


def _predict(graph: Graph, checked: list[engine.Ranked], label: str, token: CancelToken,
             progress: Progress, known: dict) -> list[engine.Ranked]:
    """The predicted Δ of every match whose check passed (on a clone; a failing rewrite becomes its reason)."""
    out = []
    for k, r in enumerate(checked):
        token.check("ranking the matches")
        if r.ok and r.delta is None:
            try:
                r = engine.Ranked(r.transformation, r.match, True, "", engine.preview(graph, r.transformation,
                                                                                        r.match).delta)
            except StudioError as e:
                r = engine.Ranked(r.transformation, r.match, False, e.summary, None)
        known[(r.transformation.name, repr(r.transformation), r.match.anchors)] = r
        out.append(r)
        progress(k + 1, len(checked), f"ranking {label.lower()} matches")
    return out


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
    """Apply ``t`` at ``match`` to a clone; the diff and a readable summary with the new kernels' IR."""
    work = graph.clone()
    app = engine.apply(work, t, match)
    added, removed, changed = engine.diff(graph, work)
    lines = [f"{t.name} at {', '.join(match.anchors)}",
             f"bytes moved {_signed_bytes(app.delta.bytes)} · FLOPs {app.delta.flops:+,d}", ""]
    for title, ids in (("removed", removed), ("changed", changed), ("added", added)):
        lines.append(f"{title} ({len(ids)}): " + (", ".join(ids) if ids else "—"))
    for ident in added + changed:
        lines += ["", node_to_text(work.nodes[ident])]
    return Preview(t.name, match.anchors, added, removed, changed, app.delta, "\n".join(lines))


def _signed_bytes(n: int) -> str:
    return ("−" if n < 0 else "+") + human_bytes(abs(n))
