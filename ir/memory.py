"""Memory footprint over a schedule: liveness, shared buffers, peak and arena bytes.

The model (one table, used by ``memory_reuse``, ``recompute``, the reports and the GUI):

- **Schedule.** Kernels run in ``graph.topo_order()``; kernel ``k`` occupies slot ``k+1``
  (slot 0 is the entry, slot ``n+1`` the exit).
- **Lifetimes.** Graph inputs and initializers are live from the entry; every other
  container from the kernel that produces it. Interface containers (any role but
  ``transient``) and graph outputs stay live to the exit; a transient is freed after its
  last reader (or right after its producer if nothing reads it). A kernel's inputs and
  outputs are both live while it runs: ``Lifetime(start, end)`` is inclusive.
- **Buffers.** ``graph.meta['buffers']`` is a JSON string ``{buffer: [containers]}``
  written by ``memory_reuse``: its members share one allocation. Sharing is valid when
  two members' lifetimes are disjoint, or *touch* at one kernel that may run in place —
  it produces the later member where the earlier one dies, and reads the earlier one
  only at elements it has not yet overwritten (``inplace_reason``). Sharing that a later
  transformation made invalid is ignored (``buffers`` keeps, per buffer, the members
  compatible with every earlier one) — plan memory last.
- **peak_bytes** (dynamic allocation): the largest sum of live bytes at any slot; the
  members of one buffer count once (the largest live one), so sharing lowers the peak
  through in-place kernels. A GEMM with a fused epilogue also holds its raw product
  (``acc_shape``) while it runs. **arena_bytes** (static plan): one allocation per buffer
  (sized by its largest member) and per unshared container.

Both are sweeps over start/end events: O(containers + kernels).
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator, Sequence

from ir import expr as E
from ir import fused_ops, lowering
from ir.containers import Role
from ir.dtypes import itemsize
from ir.graph import Graph
from ir.maps import range_bounds
from ir.memlet import Range
from ir.nodes import MapNode, OpNode, Tasklet

ComputeNode = OpNode | MapNode
BUFFERS_KEY = "buffers"
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
ALIAS = "alias"
"""``OpNode.impl`` of a view op that ``transforms.view_alias`` made an alias of its input (moves no bytes)."""


def is_alias(node) -> bool:
    """A standard-domain view op whose output is its input's bytes (``impl`` ``"alias"``)."""
    return isinstance(node, OpNode) and not node.domain and node.op_type in VIEW_OPS and node.impl == ALIAS


@dataclass(frozen=True)
class Lifetime:
    container: str
    start: int          # index of the producing kernel (-1: live on entry)
    end: int            # index of the last reading kernel (len(order): live on exit)
    nbytes: int


def schedule(graph: Graph) -> list[ComputeNode]:
    """The kernels in execution order (``graph.topo_order()``)."""
    return graph.topo_order()


def lifetimes(graph: Graph, order: Sequence[ComputeNode] | None = None) -> dict[str, Lifetime]:
    """Lifetime of every used container (see the module docstring); built once per graph inside
    ``holding(graph)`` when ``order`` is the default schedule (do not edit the result)."""
    if order is None:
        return _once(graph, "lifetimes", lambda: lifetimes(graph, schedule(graph)))
    last = len(order)
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for k, node in enumerate(order):
        for m in node.outputs:
            if m is not None:
                start.setdefault(m.container, k)
        for m in node.inputs:
            if m is not None:
                end[m.container] = k
    entry = set(graph.inputs) | set(graph.values)
    exits = set(graph.outputs)
    out = {}
    for name, c in graph.containers.items():
        if name not in start and name not in end and name not in entry:
            continue
        s = -1 if name in entry else start.get(name, -1)
        e = last if name in exits or c.role is not Role.TRANSIENT else end.get(name, s)
        out[name] = Lifetime(name, s, max(e, s), c.nbytes(graph.bindings))
    return out


def is_plannable(graph: Graph, name: str) -> bool:
    """Transients that are not graph inputs/outputs/initializers may share buffers."""
    c = graph.containers.get(name)
    return (c is not None and c.role is Role.TRANSIENT and name not in graph.values
            and not _is_interface(graph, name))


def _is_interface(graph: Graph, name: str) -> bool:
    """``name`` is a graph input or output (a set of them is kept while ``graph`` is held)."""
    if not _is_held(graph):
        return name in graph.outputs or name in graph.inputs
    return name in _once(graph, "interface", lambda: frozenset(graph.inputs + graph.outputs))


# --- the recorded table ------------------------------------------------------------------

def read_buffers(graph: Graph) -> dict[str, list[str]]:
    """``graph.meta['buffers']`` decoded: buffer -> members that still exist (as recorded)."""
    text = graph.meta.get(BUFFERS_KEY)
    if not text:
        return {}
    table = json.loads(text) if isinstance(text, str) else text
    return {buf: [c for c in members if c in graph.containers] for buf, members in table.items()}


def write_buffers(graph: Graph, table: dict[str, list[str]]) -> None:
    """Record ``table`` (buffers with at least two members) as a JSON string in ``graph.meta``."""
    kept = {buf: list(members) for buf, members in sorted(table.items()) if len(members) > 1}
    if kept:
        graph.meta[BUFFERS_KEY] = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    else:
        graph.meta.pop(BUFFERS_KEY, None)


def buffer_size(graph: Graph, members: Sequence[str]) -> int:
    return max((graph.container(c).nbytes(graph.bindings) for c in members), default=0)


def buffers_to_text(graph: Graph) -> list[str]:
    """One line per recorded buffer: ``buffer buf0 (3145728 B): a, b, c``."""
    return [f"buffer {buf} ({buffer_size(graph, members)} B): {', '.join(members)}"
            for buf, members in read_buffers(graph).items()]


# --- in-place execution ------------------------------------------------------------------

def inplace_reason(graph: Graph, node: ComputeNode, x: str, y: str) -> str | None:
    """None if ``node`` may write its output ``y`` over its input ``x``; else why not.

    View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity) alias their input. Other
    library nodes qualify through their expansion (``ir.lowering``); a map qualifies when
    it writes every element of ``y`` exactly once, plainly, and reads ``x`` only before that
    write and only within the same point of its top-level iteration space (at exactly the
    written element when the read shares the write's loop).
    """
    cx, cy = graph.container(x), graph.container(y)
    if x not in {m.container for m in node.inputs if m is not None}:
        return f"'{node.id}' does not read '{x}'"
    if y not in {m.container for m in node.outputs if m is not None}:
        return f"'{node.id}' does not write '{y}'"
    if itemsize(cx.dtype) != itemsize(cy.dtype) or cx.numel(graph.bindings) != cy.numel(graph.bindings):
        return f"'{x}' ({cx.dtype}{list(cx.shape)}) and '{y}' ({cy.dtype}{list(cy.shape)}) differ in size"
    if isinstance(node, OpNode):
        if node.op_type in VIEW_OPS and not node.domain and node.inputs[0].container == x:
            return None
        if lowering.can_expand(graph, node) is not None:
            return f"'{node.id}' ({node.op_type}) is a library call; it cannot run in place"
        node = lowering.expand(graph, node)
    if cx.concrete_shape(graph.bindings) != cy.concrete_shape(graph.bindings):
        return f"'{x}' and '{y}' have different shapes"
    return _map_inplace_reason(graph, node, x, y)


def _map_inplace_reason(graph: Graph, m: MapNode, x: str, y: str) -> str | None:
    stmts = [(t, sc) for t, sc in m.walk() if isinstance(t, Tasklet)]
    writers = [k for k, (t, _) in enumerate(stmts) if t.output.container == y]
    if len(writers) != 1:
        return f"'{m.id}' writes '{y}' in {len(writers)} places"
    kw = writers[0]
    tw, sw = stmts[kw]
    why = _covering_write(graph, tw, sw, y)
    if why:
        return f"'{m.id}' {why}"
    loops = {id(s) for s in sw[1:]}
    for k, (t, sc) in enumerate(stmts):
        for mem in t.inputs.values():
            if mem.container != x:
                continue
            if k > kw:
                return f"'{m.id}' reads '{x}' after writing '{y}'"
            same_loop = k == kw or any(id(s) in loops for s in sc[1:])
            if same_loop and mem.subset != tw.output.subset:
                return f"'{m.id}' reads '{x}' at another element than the one it writes"
            if not same_loop and not _same_point(mem.subset, tw.output.subset, set(m.param_names)):
                return f"'{m.id}' reads '{x}' outside the map point it writes"
    return None


def _covering_write(graph: Graph, t: Tasklet, scopes, y: str) -> str | None:
    """Why the write of ``y`` is not one plain store per element of ``y`` (None if it is)."""
    out = t.output
    if out.wcr is not None or out.subset is None or not all(isinstance(ix, E.Var) for ix in out.subset):
        return f"does not write '{y}' plainly at its map point"
    ranges = {p: r for s in scopes for p, r in s.params}
    names = [ix.name for ix in out.subset]
    if len(set(names)) != len(names) or set(names) != set(ranges):
        return f"does not write '{y}' once per iteration point"
    shape = graph.container(y).concrete_shape(graph.bindings)
    for name, dim in zip(names, shape):
        if range_bounds(ranges[name], graph.bindings) != (0, dim, 1):
            return f"writes only part of '{y}'"
    return None


def _same_point(read, write, top: set[str]) -> bool:
    """The read stays within the top-level point of the write: equal top-level indices,
    and the other dimensions do not depend on top-level parameters."""
    if read is None or len(read) != len(write):
        return False
    for r, w in zip(read, write):
        if isinstance(w, E.Var) and w.name in top:
            if r != w:
                return False
        elif isinstance(r, Range) or E.free_vars(r) & top:
            return False
    return True


# --- validity of sharing -----------------------------------------------------------------

class Sharing:
    """Sharing checks over one schedule (``order``, ``position``, ``lives``), with in-place
    answers cached per kernel."""

    def __init__(self, graph: Graph, order: Sequence[ComputeNode] | None = None) -> None:
        self.graph = graph
        self.order = schedule(graph) if order is None else list(order)
        self.position = {node.id: k for k, node in enumerate(self.order)}
        self.lives = lifetimes(graph, self.order)
        self._inplace: dict[tuple[str, str, str], str | None] = {}

    def conflict(self, a: Lifetime, b: Lifetime) -> str | None:
        """None if ``a`` and ``b`` may share one buffer; else a reason naming both."""
        if (a.start, a.end) > (b.start, b.end):
            a, b = b, a
        if a.end < b.start:
            return None
        if a.end == b.start and 0 <= b.start < len(self.order) and a.start < b.start:
            node = self.order[b.start]
            key = (node.id, a.container, b.container)
            if key not in self._inplace:
                self._inplace[key] = inplace_reason(self.graph, node, a.container, b.container)
            why = self._inplace[key]
            if why is None:
                return None
            return f"'{a.container}' dies where '{b.container}' is born, but {why}"
        return (f"the lifetimes of '{a.container}' (kernels {a.start}–{a.end}) and "
                f"'{b.container}' (kernels {b.start}–{b.end}) overlap")

    def valid_buffers(self) -> dict[str, list[str]]:
        """Recorded buffers, each keeping the members compatible with all earlier ones."""
        out = {}
        for buf, members in read_buffers(self.graph).items():
            lives = sorted((self.lives[c] for c in members if c in self.lives and is_plannable(self.graph, c)),
                           key=lambda life: (life.start, life.end, life.container))
            kept: list[Lifetime] = []
            for life in lives:
                if all(self.conflict(k, life) is None for k in kept):
                    kept.append(life)
            if len(kept) > 1:
                out[buf] = [life.container for life in kept]
        return out


def buffers(graph: Graph) -> dict[str, list[str]]:
    """The valid buffer sharing of ``graph`` (what code generators may allocate)."""
    if not graph.meta.get(BUFFERS_KEY):
        return {}
    return Sharing(graph).valid_buffers()


def buffer_groups(graph: Graph) -> dict[str, str]:
    """container -> buffer, for the valid sharing only."""
    return {c: buf for buf, members in buffers(graph).items() for c in members}


# --- figures -----------------------------------------------------------------------------

def live_profile(graph: Graph) -> list[int]:
    """Live bytes at every slot (entry, each kernel, exit), honouring in-place sharing."""
    check = Sharing(graph)
    n = len(check.order)
    delta = [0] * (n + 3)

    def add(first: int, last: int, nbytes: int) -> None:   # slots first..last inclusive
        delta[first] += nbytes
        delta[last + 1] -= nbytes

    for life in check.lives.values():
        add(life.start + 1, min(life.end, n) + 1, life.nbytes)
    for members in check.valid_buffers().values():
        lives = sorted((check.lives[c] for c in members), key=lambda life: (life.start, life.end))
        for a, b in zip(lives, lives[1:]):
            if a.end == b.start:                          # in place: the buffer counts once
                add(a.end + 1, a.end + 1, -min(a.nbytes, b.nbytes))
    for k, node in enumerate(check.order):
        acc = _accumulator_bytes(graph, node)
        if acc:                                           # a GEMM's raw product, before its epilogue
            add(k + 1, k + 1, acc)
    profile, running = [], 0
    for k in range(n + 2):
        running += delta[k]
        profile.append(running)
    return profile


def _accumulator_bytes(graph: Graph, node) -> int:
    """Bytes of the raw products a GEMM with a fused epilogue (each such member of a grouped
    GEMM) holds while its kernel runs (``ir.fused_ops.accumulator``)."""
    parts = fused_ops.members(node) if fused_ops.is_group(node) else [node]
    return sum(fused_ops.accumulator(graph, p).nbytes(graph.bindings) for p in parts if fused_ops.has_epilogue(p))


def peak_bytes(graph: Graph) -> int:
    """Peak of live bytes over the schedule (dynamic allocation, in-place sharing honoured)."""
    return max(live_profile(graph), default=0)


def arena_bytes(graph: Graph) -> int:
    """Bytes of a static allocation plan: one allocation per buffer and per unshared container."""
    check = Sharing(graph)
    shared = check.valid_buffers()
    members = {c for ms in shared.values() for c in ms}
    total = sum(life.nbytes for name, life in check.lives.items() if name not in members)
    return total + sum(max(check.lives[c].nbytes for c in ms) for ms in shared.values())


__all__ = ["ALIAS", "Lifetime", "Sharing", "VIEW_OPS", "arena_bytes", "buffer_groups", "buffer_size", "buffers",
           "buffers_to_text", "is_alias", "inplace_reason", "is_plannable", "lifetimes", "live_profile",
           "peak_bytes", "read_buffers", "schedule", "write_buffers"]


# --- one analysis per unchanging graph ------------------------------------------------------

_held: ContextVar[tuple[Graph, dict] | None] = ContextVar("ir_memory_held", default=None)


@contextmanager
def holding(graph: Graph) -> Iterator[None]:
    """While this block runs (in this thread), ``sharing(graph)`` and ``lifetimes(graph)`` of this very
    graph object are built once: the caller promises ``graph`` does not change meanwhile (a session's committed state,
    ranked by a worker). Other graphs, such as the copies a trial rewrite edits, are unaffected."""
    token = _held.set((graph, {}))
    try:
        yield
    finally:
        _held.reset(token)


_alias: ContextVar[Graph | None] = ContextVar("ir_memory_alias", default=None)


@contextmanager
def same_as(copy: Graph, original: Graph) -> Iterator[None]:
    """While this block runs (in this thread), ``copy`` — a clone of ``original`` not edited yet (a trial
    rewrite's copy, before its rewrite) — shares the analyses held for ``original`` (see ``holding``).
    Nothing is shared when ``original`` is not held. The caller promises ``copy`` is not edited inside."""
    held = _held.get()
    token = _alias.set(copy if held is not None and held[0] is original else None)
    try:
        yield
    finally:
        _alias.reset(token)


def sharing(graph: Graph) -> Sharing:
    """``Sharing(graph)``, or the one already built for ``graph`` inside ``holding(graph)``."""
    return _once(graph, "sharing", lambda: Sharing(graph))


def analysis(graph: Graph, what: str, make):
    """``make()``, built once per graph while ``graph`` is held (see ``holding``): for other analyses of an
    unchanging graph than lifetimes (the forward kernels, schedule positions). Do not edit the result."""
    return _once(graph, what, make)


def _is_held(graph: Graph) -> bool:
    held = _held.get()
    return held is not None and (held[0] is graph or _alias.get() is graph)


def _once(graph: Graph, what: str, make):
    """``make()``, kept under ``what`` while ``graph`` is held (see ``holding``)."""
    if not _is_held(graph):
        return make()
    held = _held.get()
    if what not in held[1]:
        held[1][what] = make()
    return held[1][what]
