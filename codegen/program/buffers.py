"""Static buffer planning: intermediates live in a few reused byte buffers.

Freshly allocated memory costs a page fault per 4 KiB page on first touch; on this VM
that made writing a new 9 MB tensor 4–15× slower than writing a warm one. So kernel and
BLAS outputs that are intermediates are carved from ``slots``: flat byte buffers the
``Model`` allocates once and reuses in every step, and across tensors whose lifetimes do
not overlap (greedy, in statement order: a tensor takes the smallest free slot that fits,
else a new slot; its slot is free again after the last use of every array that may share
its memory).

Sharing (alias groups): a view (Identity, Reshape, Expand, …) shares its data input's memory;
a reference kernel or an extern node may return views of its inputs, so its outputs are
grouped with its inputs. A group that contains a graph output is never shared: those
arrays are returned to the caller. They get their own ``out_slots``, which a ``Model``
made with ``recycle_outputs=True`` reuses every other step (double buffering: a step's
outputs stay valid through the next step, so ``train_step`` can feed them back as inputs).

Recorded sharing (``graph.meta['buffers']``, from ``memory_reuse``): the buffers
``shared_buffers.recorded_plan`` accepts are planned as one unit each: at its first
member's allocation the buffer takes one slot (the smallest free one that fits its
largest member, else a new one), every member is a view of that slot — a member that
runs in place is born in the statement where the previous one dies — and the slot is
free again only after the buffer's last use. No other tensor enters it meanwhile.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from codegen.program.aliases import alias_groups
from codegen.program.program import Statement
from codegen.program.shared_buffers import SharedBuffer


@dataclass
class Plan:
    slots: list[int] = field(default_factory=list)        # bytes per slot
    slot_of: dict[str, int] = field(default_factory=dict)  # planned container -> slot
    out_slots: list[int] = field(default_factory=list)     # bytes per recyclable output buffer
    out_slot_of: dict[str, int] = field(default_factory=dict)
    shared: list[SharedBuffer] = field(default_factory=list)   # honoured recorded buffers
    shared_slot: dict[str, int] = field(default_factory=dict)  # recorded buffer -> its slot
    refused: dict[str, str] = field(default_factory=dict)      # recorded member -> why it is not shared
    covered: dict[str, str] = field(default_factory=dict)      # recorded member -> the member it is a view of

    @property
    def nbytes(self) -> int:
        """The arena: bytes of all intermediate slots (graph outputs excluded)."""
        return sum(self.slots)

    def buffer_of(self, container: str) -> SharedBuffer | None:
        return next((b for b in self.shared if container in b.members), None)


def _take(result: Plan, free: list[int], size: int) -> int:
    """The smallest free slot of at least ``size`` bytes, else a new slot."""
    fits = sorted((result.slots[s], s) for s in free if result.slots[s] >= size)
    if fits:
        free.remove(fits[0][1])
        return fits[0][1]
    result.slots.append(size)
    return len(result.slots) - 1


def plan(statements: list[Statement], keep: Iterable[str], nbytes: Callable[[str], int],
         shared: Sequence[SharedBuffer] = ()) -> Plan:
    """Assign a slot to every planned allocation of ``statements``; ``keep`` are graph outputs;
    ``shared`` the recorded buffers to honour (one slot each, see the module docstring)."""
    groups = alias_groups(statements)
    escaping = {groups.find(c) for c in keep}
    last: dict[str, int] = {}
    for k, st in enumerate(statements):
        for c in st.reads + st.writes:
            last[groups.find(c)] = k
    result = Plan(shared=list(shared))
    buffer_of = {c: b for b in shared for c in b.members}
    free: list[int] = []
    owned: dict[str, list[int]] = {}      # group root (or "buffer:<name>") -> slots it holds
    for k, st in enumerate(statements):
        for a in st.allocs:
            root = groups.find(a.container)
            if root in escaping:
                result.out_slot_of[a.container] = len(result.out_slots)
                result.out_slots.append(nbytes(a.container))
                continue
            buf = buffer_of.get(a.container)
            if buf is None:
                slot = _take(result, free, nbytes(a.container))
                owned.setdefault(root, []).append(slot)
            elif buf.name not in result.shared_slot:
                slot = result.shared_slot[buf.name] = _take(result, free, buf.nbytes)
                last[f"buffer:{buf.name}"] = buf.end
                owned[f"buffer:{buf.name}"] = [slot]
            else:
                slot = result.shared_slot[buf.name]
            result.slot_of[a.container] = slot
        for root in [r for r, at in last.items() if at == k and r in owned]:
            free.extend(owned.pop(root))
    return result
