"""Side-by-side comparison of two graphs of one session (a history step against another): no Qt here.

``compare(before, after, bytes_before, bytes_after, made_from)`` is the record the Compare
window shows: the ``graph_diff.diff`` (kernels removed: left only; added: right
only; changed: same id, different op, memlets, impl or body), the lineage of the right
side's new and changed kernels (``made_from``: right kernel → the left kernels it was
made from, ``Session.origins``), so a left kernel that became part of a right one is
*merged* (into ``merged[left]``), not *removed*; the marks for each side, the summary line
("296 merged into 30, 0 removed, 30 added, 2 changed; bytes 1.8 GB → 0.6 GB") and a
before/after table per scope (``scope_rows``).
``counterpart`` finds what stands for an item of one side on the other: the same
kernel id when both have it, else the item realizing its scope group there (the
nearest enclosing scope that the other side has), so selection and expansion can be
mirrored between the two views (``mirrored``).
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Mapping

from ir.graph import Graph
from ir.movement import Ledger
from studio.text import human_bytes
from studio.gui.graph_diff import GraphDiff, diff
from studio.gui.scope_tree import ROOT, ScopeTree, raw_ancestors, scope_path

SCOPE_DEPTH = 2          # the before/after table groups kernels by the first two scope levels


@dataclass(frozen=True)
class Comparison:
    diff: GraphDiff
    bytes_before: int
    bytes_after: int
    made_from: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # right kernel -> left kernels

    @property
    def merged(self) -> dict[str, tuple[str, ...]]:
        """Left kernels that are gone on the right but part of right kernels: left id -> those right ids."""
        gone = set(self.diff.removed)
        out: dict[str, list[str]] = {}
        for right, lefts in self.made_from.items():
            for left in lefts:
                if left in gone and left != right:
                    out.setdefault(left, []).append(right)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def left_marks(self) -> dict[str, set[str]]:
        merged = self.merged
        return {"removed": {i for i in self.diff.removed if i not in merged}, "merged": set(merged),
                "changed": set(self.diff.changed)}

    @property
    def right_marks(self) -> dict[str, set[str]]:
        return {"added": set(self.diff.added), "changed": set(self.diff.changed)}

    def linked(self, side: str, ident: str) -> tuple[str, ...]:
        """What kernel ``ident`` of ``side`` ("left" or "right") is on the other side: what it was made
        from (right) or became (left); the same id when both sides have it."""
        if side == "right":
            return tuple(self.made_from.get(ident, (ident,)))
        return self.merged.get(ident, (ident,))

    def summary(self) -> str:
        d, merged = self.diff, self.merged
        into = {r for rs in merged.values() for r in rs}
        head = f"{len(merged)} merged into {len(into)}, " if merged else ""
        return (f"{head}{len(d.removed) - len(merged)} removed, {len(d.added)} added, {len(d.changed)} changed; "
                f"bytes {human_bytes(self.bytes_before)} → {human_bytes(self.bytes_after)}")


def compare(before: Graph, after: Graph, bytes_before: int, bytes_after: int,
            made_from: Mapping[str, tuple[str, ...]] | None = None) -> Comparison:
    return Comparison(diff(before, after), bytes_before, bytes_after, dict(made_from or {}))


def scope_of(name: str, depth: int = SCOPE_DEPTH) -> str:
    """The first ``depth`` levels of a kernel name's scope ('(top level)' when it has none)."""
    segs, _leaf = scope_path(name)
    return "/".join(segs[:depth]) or "(top level)"


@dataclass(frozen=True)
class ScopeRow:
    scope: str
    kernels_before: int
    kernels_after: int
    bytes_before: int
    bytes_after: int
    time_before: float | None = None     # summed measured medians, seconds; None: that side is not timed
    time_after: float | None = None

    @property
    def ratio(self) -> float:
        return self.bytes_after / self.bytes_before if self.bytes_before else float("inf")

    @property
    def time_ratio(self) -> float | None:
        if self.time_before is None or self.time_after is None or not self.time_before:
            return None
        return self.time_after / self.time_before


def scope_rows(before: Graph, after: Graph, ledger_before: Ledger, ledger_after: Ledger,
               depth: int = SCOPE_DEPTH, times_before: Mapping[str, float] | None = None,
               times_after: Mapping[str, float] | None = None) -> list[ScopeRow]:
    """Kernels, bytes moved and (where that side was timed: ``times_*``, seconds per kernel id)
    measured time per scope, before and after, largest saving first (a fused kernel counts in the
    scope of its first kernel: its name keeps that scope)."""
    acc: dict[str, list] = {}
    for graph, ledger, times, k in ((before, ledger_before, times_before, 0), (after, ledger_after, times_after, 1)):
        for node in graph.nodes.values():
            row = acc.setdefault(scope_of(node.name or node.id, depth), [0, 0, 0, 0, None, None])
            row[k] += 1
            row[2 + k] += ledger.kernels[node.id].bytes if node.id in ledger.kernels else 0
            if times is not None:
                row[4 + k] = (row[4 + k] or 0.0) + times.get(node.id, 0.0)
    if times_before is not None and times_after is not None:
        for v in acc.values():                     # timed sides: a scope one side lacks took no time there
            v[4], v[5] = v[4] or 0.0, v[5] or 0.0
    rows = [ScopeRow(scope, *v) for scope, v in acc.items()]
    return sorted(rows, key=lambda r: (r.bytes_after - r.bytes_before, natural_key(r.scope)))


def natural_key(text: str) -> tuple:
    """Sort key reading runs of digits as numbers: layer/2 before layer/10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


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
