"""Static buffer planning: intermediates live in a few reused byte buffers.

Freshly allocated memory costs a page fault per 4 KiB page on first touch; on this VM
that made writing a new 9 MB tensor 4–15× slower than writing a warm one. So kernel and
BLAS outputs that are intermediates are carved from ``slots``: flat byte buffers the
``Model`` allocates once and reuses in every step, and across tensors whose lifetimes do
not overlap (greedy, in statement order: a tensor takes the smallest free slot that fits,
else a new slot; its slot is free again after the last use of every array that may share
its memory).

Sharing (alias groups): a view (Identity, Reshape, Expand, …) shares its input's memory;
a reference kernel or an extern node may return views of its inputs, so its outputs are
grouped with its inputs. A group that contains a graph output is never shared: those
arrays are returned to the caller. They get their own ``out_slots``, which a ``Model``
made with ``recycle_outputs=True`` reuses every other step (double buffering: a step's
outputs stay valid through the next step, so ``train_step`` can feed them back as inputs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from codegen.numba_cpu.program import Statement

ALIASING_KINDS = frozenset({"view", "reference", "extern"})


@dataclass
class Plan:
    slots: list[int] = field(default_factory=list)        # bytes per slot
    slot_of: dict[str, int] = field(default_factory=dict)  # planned container -> slot
    out_slots: list[int] = field(default_factory=list)     # bytes per recyclable output buffer
    out_slot_of: dict[str, int] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(self.slots)


class _Groups:
    """Union-find over container names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _alias_groups(statements: list[Statement]) -> _Groups:
    groups = _Groups()
    for st in statements:
        if st.kind in ALIASING_KINDS:
            for out in st.writes:
                for src in st.reads:
                    groups.union(out, src)
    return groups


def plan(statements: list[Statement], keep: Iterable[str], nbytes: Callable[[str], int]) -> Plan:
    """Assign a slot to every planned allocation of ``statements``; ``keep`` are graph outputs."""
    groups = _alias_groups(statements)
    escaping = {groups.find(c) for c in keep}
    last: dict[str, int] = {}
    for k, st in enumerate(statements):
        for c in st.reads + st.writes:
            last[groups.find(c)] = k
    result = Plan()
    free: list[int] = []
    owned: dict[str, list[int]] = {}      # group root -> slots it holds
    for k, st in enumerate(statements):
        for a in st.allocs:
            root = groups.find(a.container)
            if root in escaping:
                result.out_slot_of[a.container] = len(result.out_slots)
                result.out_slots.append(nbytes(a.container))
                continue
            size = nbytes(a.container)
            fits = sorted((result.slots[s], s) for s in free if result.slots[s] >= size)
            if fits:
                slot = fits[0][1]
                free.remove(slot)
            else:
                slot = len(result.slots)
                result.slots.append(size)
            result.slot_of[a.container] = slot
            owned.setdefault(root, []).append(slot)
        for root in [r for r, at in last.items() if at == k and r in owned]:
            free.extend(owned.pop(root))
    return result
