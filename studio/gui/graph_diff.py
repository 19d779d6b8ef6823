"""The difference between two graphs of one session (two history states): no Qt here.

``diff(before, after)`` lists the kernels only ``before`` has (*removed*), only
``after`` has (*added*), and those in both whose op, memlets, impl, attributes or
body differ (*changed*). It agrees with ``transforms.engine.diff`` (the preview's; tested),
which compares the nodes' JSON: 6 ms on the 309-kernel BERT layer, too slow for every
apply. ``same_node`` compares the node objects field by field instead, and a state's
clone shares its memlets, expressions and arrays with the state before, so most
fields compare by identity. Recent results are kept (the view and the docks ask for
the same pair, and undo for the reverse of an apply's), and ``hint`` records an
applied step's own account (its ``Application``), which ``changes`` prefers. The view uses ``touched`` to update its scope tree and boxes incrementally after an
apply, undo, redo or revert (a state's graph is never edited after its step, so
two states can be compared at any time); the Compare window shows the whole record.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ir.graph import Graph
from ir.movement import Ledger
from ir.nodes import MapNode
from transforms import engine


@dataclass(frozen=True)
class GraphDiff:
    removed: tuple[str, ...]
    added: tuple[str, ...]
    changed: tuple[str, ...]

    @property
    def touched(self) -> set[str]:
        return set(self.removed) | set(self.added) | set(self.changed)

    def __bool__(self) -> bool:
        return bool(self.removed or self.added or self.changed)


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slots(cls) -> tuple[str, ...]:
    if cls not in _SLOTS:
        _SLOTS[cls] = tuple(dict.fromkeys(n for c in reversed(cls.__mro__) for n in getattr(c, "__slots__", ())))
    return _SLOTS[cls]


def same_node(a, b) -> bool:
    """Whether two kernels (or map body nodes) are equal in every field (see the module docstring)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    for slot in _SLOTS.get(type(a)) or _slots(type(a)):
        x, y = getattr(a, slot), getattr(b, slot)
        if x is y:
            continue
        if slot == "body" and isinstance(a, MapNode):
            if len(x) != len(y) or not all(same_node(p, q) for p, q in zip(x, y)):
                return False
            continue
        try:
            if x != y:
                return False
        except ValueError:                           # arrays that are not the same object: compare as JSON
            return not engine.diff(_one(a), _one(b))[2]
    return True


def _one(node) -> Graph:
    g = Graph("node")
    g.nodes[node.id] = node
    return g


class _Memo:
    """The last few results by graph pair (kept with the graphs, so ids are not reused); a pair's
    reverse is the same record with removed and added swapped (undo after apply, redo after undo)."""

    def __init__(self, size: int = 64) -> None:
        self.items: OrderedDict = OrderedDict()
        self.size = size

    def get(self, before: Graph, after: Graph) -> GraphDiff | None:
        for a, b, flip in ((before, after, False), (after, before, True)):
            hit = self.items.get((id(a), id(b)))
            if hit is not None and hit[0] is a and hit[1] is b:
                d = hit[2]
                return GraphDiff(d.added, d.removed, d.changed) if flip else d
        return None

    def put(self, before: Graph, after: Graph, d: GraphDiff) -> GraphDiff:
        self.items[(id(before), id(after))] = (before, after, d)
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return d


_exact, _hints = _Memo(), _Memo()


def diff(before: Graph, after: Graph) -> GraphDiff:
    """Kernels removed, added and changed from ``before`` to ``after`` (each in its graph's order)."""
    if before is after:
        return GraphDiff((), (), ())
    hit = _exact.get(before, after)
    if hit is not None:
        return hit
    old, new = before.nodes, after.nodes
    return _exact.put(before, after, GraphDiff(
        tuple(i for i in old if i not in new), tuple(i for i in new if i not in old),
        tuple(i for i, n in new.items() if i in old and not same_node(old[i], n))))


def hint(before: Graph, after: Graph, application) -> None:
    """Record what one applied step did (``Application``: removed, created, changed kernels), so
    ``changes`` between its two graphs (either way: undo) needs no comparison."""
    _hints.put(before, after, GraphDiff(tuple(application.removed), tuple(application.created),
                                        tuple(application.changed)))


def changes(before: Graph, after: Graph) -> GraphDiff:
    """What differs from ``before`` to ``after``: a recorded step (``hint``; its *changed* may list a
    kernel the step rewrote to an equal one) or else ``diff``. For incremental updates."""
    return _hints.get(before, after) or diff(before, after)


def refigured(before: Ledger, after: Ledger, kernels) -> set[str]:
    """Kernels (of ``kernels``, present in both) whose figures differ between two ledgers."""
    a, b = before.kernels, after.kernels
    return {i for i in kernels if i in a and i in b and a[i] != b[i]}
