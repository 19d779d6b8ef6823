"""Side-by-side comparison of two graphs of one session (a history step against another): no Qt here.

``compare(before, after, bytes_before, bytes_after)`` is the record the Compare
window shows: the ``graph_diff.diff`` (kernels removed: left only; added: right
only; changed: same id, different op, memlets, impl or body), the marks for each
side, and the summary line ("3 removed, 1 added, 2 changed; bytes 1.2 GB → 1.1 GB").
``counterpart`` finds what stands for an item of one side on the other: the same
kernel id when both have it, else the item realizing its scope group there (the
nearest enclosing scope that the other side has), so selection and expansion can be
mirrored between the two views (``mirrored``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.graph import Graph
from studio.cli import human_bytes
from studio.gui.graph_diff import GraphDiff, diff
from studio.gui.scope_tree import ROOT, ScopeTree, raw_ancestors


@dataclass(frozen=True)
class Comparison:
    diff: GraphDiff
    bytes_before: int
    bytes_after: int

    @property
    def left_marks(self) -> dict[str, set[str]]:
        return {"removed": set(self.diff.removed), "changed": set(self.diff.changed)}

    @property
    def right_marks(self) -> dict[str, set[str]]:
        return {"added": set(self.diff.added), "changed": set(self.diff.changed)}

    def summary(self) -> str:
        d = self.diff
        return (f"{len(d.removed)} removed, {len(d.added)} added, {len(d.changed)} changed; "
                f"bytes {human_bytes(self.bytes_before)} → {human_bytes(self.bytes_after)}")


def compare(before: Graph, after: Graph, bytes_before: int, bytes_after: int) -> Comparison:
    return Comparison(diff(before, after), bytes_before, bytes_after)


def counterpart(item: str, this: ScopeTree, other: ScopeTree) -> str | None:
    """The item of ``other`` standing for ``item`` of ``this`` (see the module docstring)."""
    if item in other.order or item in other.groups:
        return item
    raw = this.raw_parent.get(item)
    if raw is None:                                  # a group of ``this``: its raw key is its own key
        raw = item if item.startswith(ROOT) else None
    if raw is None:
        return None
    for key in raw_ancestors(raw):
        found = other.realized.get(key)
        if found is not None:
            return found
    return None


def counterparts(items, this: ScopeTree, other: ScopeTree) -> list[str]:
    """``counterpart`` of each item, without repeats (items with none are left out)."""
    out = {}
    for item in items:
        c = counterpart(item, this, other)
        if c is not None:
            out[c] = None
    return list(out)


def mirrored(items, this: ScopeTree, other: ScopeTree, other_open: set[str]) -> list[str]:
    """What to select on the other side for ``items`` selected on this one: their counterparts; a
    counterpart group the other side shows open (a frame, not a box) stands for its kernels this side
    lacks (what replaced the selection), or all its kernels when it has none of those."""
    out: dict[str, None] = {}
    for c in counterparts(items, this, other):
        if other.is_group(c) and c in other_open:
            members = other.members(c)
            out.update(dict.fromkeys([k for k in members if k not in this.order] or members))
        else:
            out[c] = None
    return list(out)
