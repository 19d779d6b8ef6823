"""``memory_reuse`` (level 4): transients share buffers when their lifetimes allow it.

Before → after (lifetimes in kernel positions; ``t`` dies at ``%b``, which reads it only
at the point it writes ``u``)::

    %a = map[i0=0:1024] { a/out: t[i0] = (x[i0] * 2.0) }          t: kernels 0–1
    %b = map[i0=0:1024] { b/out: u[i0] = (t[i0] + 1.0) }          u: kernels 1–2
    %c = MatMul(u, w) -> (v)                                      v: kernels 2–3
    %d = map[i0=0:1024] { d/out: z[i0] = tanh(v[i0]) }
    →
    (the same kernels)
    buffer buf0 (4096 B): t, u      # %b runs in place: u overwrites t
    buffer buf1 (4096 B): v, …      # any later transient whose lifetime is disjoint

The sharing is recorded in ``graph.meta['buffers']`` (JSON ``{buffer: [containers]}``); it
serializes with the graph and ``ir.memory`` honours it (see its docstring for the memory
model and when sharing is valid). Anchors choose the scope:

- **no anchors** — plan every transient: greedy by size (largest first; each joins the
  best-fitting existing buffer it is compatible with, preferring an in-place partner,
  else opens a new buffer), the "greedy by size" shared-object plan of Pisarchyk & Lee,
  *Efficient Memory Management for Deep Neural Net Inference* (2020). Existing valid
  buffers are kept and extended.
- **one kernel** ``(K,)`` — run ``K`` in place: each transient output takes the buffer of
  a transient input of the same size that dies at ``K``.
- **params** ``first``/``second`` (anchors: their producers) — ``second`` joins the buffer
  of ``first`` (same or smaller size, compatible with every member).

Bytes moved do not change. ``figures`` reports ``peak_before``/``peak_after``
(``ir.memory.peak_bytes``: lower only through in-place sharing) and
``arena_before``/``arena_after`` (``ir.memory.arena_bytes``: the static plan). Plan memory
last: transformations that move reads (``recompute``) or change sizes refuse planned
containers, and sharing that later becomes invalid is ignored by ``ir.memory``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Iterator

from ir import memory
from ir.dtypes import itemsize
from ir.graph import Graph
from ir.pacing import paced
from ir.memory import Lifetime, Sharing
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.registry import register

Table = dict[str, list[str]]


@dataclass
class _Buffer:
    name: str | None            # None: opened by this plan (named when the plan is written)
    members: list[Lifetime]
    size: int


def _owner(table: Table) -> dict[str, str]:
    return {c: buf for buf, members in table.items() for c in members}


def _fresh_name(table: Table) -> str:
    k = 0
    while f"buf{k}" in table:
        k += 1
    return f"buf{k}"


def _join(table: Table, x: str, y: str) -> Table:
    """``y`` joins the buffer of ``x`` (a new buffer if ``x`` has none)."""
    out = {buf: list(ms) for buf, ms in table.items()}
    buf = _owner(out).get(x)
    if buf is None:
        buf = _fresh_name(out)
        out[buf] = [x]
    out[buf].append(y)
    return out


def _first_conflict(sh: Sharing, members: Iterable[str], y: str) -> str | None:
    for m in members:
        why = sh.conflict(sh.lives[m], sh.lives[y])
        if why is not None:
            return why
    return None


def greedy_plan(sh: Sharing) -> Table:
    """Every plannable transient placed in a buffer (see the module docstring)."""
    graph = sh.graph
    seeds = sh.valid_buffers()
    bufs = [_Buffer(name, [sh.lives[c] for c in ms], max(sh.lives[c].nbytes for c in ms))
            for name, ms in seeds.items()]
    placed = {c for ms in seeds.values() for c in ms}
    todo = sorted((life for name, life in sh.lives.items()
                   if memory.is_plannable(graph, name) and name not in placed),
                  key=lambda life: (-life.nbytes, life.start, life.container))
    for life in todo:
        best: tuple[tuple, _Buffer] | None = None
        for k, buf in enumerate(bufs):
            if buf.size < life.nbytes:
                continue
            if any(sh.conflict(m, life) is not None for m in buf.members):
                continue
            inplace = any(m.end == life.start or life.end == m.start for m in buf.members)
            key = (not inplace, buf.size, k)
            if best is None or key < best[0]:
                best = (key, buf)
        if best is not None:
            best[1].members.append(life)
        else:
            bufs.append(_Buffer(None, [life], life.nbytes))
    plan: Table = {b.name: [] for b in bufs if b.name is not None}
    for b in bufs:
        if len(b.members) > 1:
            plan[b.name or _fresh_name(plan)] = [m.container for m in sorted(b.members, key=_by_start)]
    return {name: ms for name, ms in plan.items() if len(ms) > 1}


def _by_start(life: Lifetime) -> tuple[int, str]:
    return life.start, life.container


@register
@dataclass(frozen=True)
class MemoryReuse(Transformation):
    name: ClassVar[str] = "memory_reuse"
    level: ClassVar[int] = 4
    first: str = ""
    second: str = ""

    local_matches: ClassVar[bool] = False   # buffer sharing depends on every lifetime in the schedule
    moves_bytes: ClassVar[bool] = False     # kernels read and write the same bytes, only where differs

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        if self.first or self.second:
            yield from self._pair_matches(graph, within)
            return
        sh = memory.sharing(graph)
        owner = _owner(memory.read_buffers(graph))
        free = [n for n in sh.lives if memory.is_plannable(graph, n) and n not in owner]
        if within is None and len(free) > 1:
            yield self.match(label=f"plan the buffers of {len(free)} transients (greedy by size)")
        for node in paced(scope(graph, within)):
            if _inplace_candidate(sh, node, owner):
                yield self.match(node.id, label=f"run '{node.id}' in place")

    def _pair_matches(self, graph: Graph, within: Iterable[str] | None) -> Iterator[Match]:
        p, q = graph.producer(self.first), graph.producer(self.second)
        if p is not None and q is not None and (within is None or {p.id, q.id} & set(within)):
            yield self.match(p.id, q.id, label=f"'{self.second}' reuses the buffer of '{self.first}'")

    def _plan(self, graph: Graph, match: Match) -> Table | MatchResult:
        if self.first or self.second:
            return self._pair_plan(graph, match)
        if not match.anchors:
            sh = memory.sharing(graph)
            before = memory.read_buffers(graph)
            plan = greedy_plan(sh)
            if plan == {b: ms for b, ms in before.items() if len(ms) > 1}:
                return fail("no further transients can share a buffer (every pair of lifetimes overlaps "
                            "or is already planned)")
            return plan
        if len(match.anchors) != 1:
            return fail("memory_reuse takes no anchors (whole graph), one kernel (in place), or the "
                        "producers of params first/second")
        return _inplace_plan(graph, match.anchors[0])

    def _pair_plan(self, graph: Graph, match: Match) -> Table | MatchResult:
        x, y = self.first, self.second
        for name in (x, y):
            if name not in graph.containers:
                return fail(f"no container '{name}'")
            if not memory.is_plannable(graph, name):
                c = graph.containers[name]
                return fail(f"'{name}' is not a transient ({c.role.value}"
                            f"{', graph output' if name in graph.outputs else ''}): its memory is not planned")
        producers = tuple(p.id for p in (graph.producer(x), graph.producer(y)) if p is not None)
        if tuple(match.anchors) != producers:
            return fail(f"anchors {list(match.anchors)} are not the producers {list(producers)} of '{x}', '{y}'")
        sh = memory.sharing(graph)
        table = memory.read_buffers(graph)
        owner = _owner(table)
        if y in owner:
            return fail(f"'{y}' already shares buffer '{owner[y]}'", *producers)
        members = table[owner[x]] if x in owner else [x]
        size, need = memory.buffer_size(graph, members), sh.lives[y].nbytes
        if need > size:
            return fail(f"'{y}' ({need} B) is larger than the buffer of '{x}' ({size} B)", *producers)
        why = _first_conflict(sh, members, y)
        if why is not None:
            return fail(why, *producers)
        return _join(table, x, y)

    def check(self, graph: Graph, match: Match) -> MatchResult:
        if not (match.anchors or self.first or self.second) and _disjoint_pair(memory.sharing(graph)):
            return OK                  # the greedy plan places the later of two such transients with the other
        plan = self._plan(graph, match)
        return plan if isinstance(plan, MatchResult) else OK

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        return ()

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        plan = self._plan(graph, match)
        if isinstance(plan, MatchResult):
            raise ValueError(plan.reason)
        memory.write_buffers(graph, plan)
        return Touched()

    def figures(self, before: Graph, after: Graph) -> dict[str, Any]:
        table = memory.buffers(after)
        return {"peak_before": memory.peak_bytes(before), "peak_after": memory.peak_bytes(after),
                "arena_before": memory.arena_bytes(before), "arena_after": memory.arena_bytes(after),
                "buffers": len(table), "shared_containers": sum(len(ms) for ms in table.values())}


def _disjoint_pair(sh: Sharing) -> bool:
    """Whether two plannable transients in no buffer yet have disjoint lifetimes (one dies before the
    other is born): then the whole-graph plan differs from the recorded one. A linear test; the plan
    itself compares every transient with every buffer."""
    placed = {c for ms in memory.read_buffers(sh.graph).values() for c in ms}
    free = [life for name, life in sh.lives.items() if name not in placed and memory.is_plannable(sh.graph, name)]
    if len(free) < 2:
        return False
    first_end = min(free, key=lambda life: life.end)
    last_start = max(free, key=lambda life: life.start)
    return first_end is not last_start and first_end.end < last_start.start


def _inplace_candidate(sh: Sharing, node, owner: dict[str, str]) -> bool:
    """Cheap precheck: a transient input dying at ``node`` and an unplanned output of its size."""
    pos = sh.position[node.id]
    graph = sh.graph
    view = isinstance(node, OpNode) and node.op_type in memory.VIEW_OPS

    def size(name: str) -> tuple:
        c = graph.containers[name]
        return (c.nbytes(graph.bindings),) if view else (itemsize(c.dtype), c.concrete_shape(graph.bindings))

    dying = {size(m.container) for m in node.inputs if m is not None and m.container in sh.lives
             and sh.lives[m.container].end == pos and memory.is_plannable(graph, m.container)}
    return any(m is not None and m.container not in owner and memory.is_plannable(graph, m.container)
               and size(m.container) in dying for m in node.outputs)


def _inplace_plan(graph: Graph, anchor: str) -> Table | MatchResult:
    node = graph.nodes.get(anchor)
    if node is None:
        return fail(f"no node '{anchor}'", anchor)
    sh = memory.sharing(graph)
    table = memory.read_buffers(graph)
    pos, used, reasons = sh.position[node.id], set(), []
    outs = [m.container for m in node.outputs if m is not None and memory.is_plannable(graph, m.container)]
    ins = [n for n in dict.fromkeys(m.container for m in node.inputs if m is not None)
           if memory.is_plannable(graph, n) and sh.lives[n].end == pos]
    if not ins:
        return fail(f"no transient input of '{node.id}' dies there (each is read later or is "
                    "not a transient)", node.id)
    for y in outs:
        owner = _owner(table)
        if y in owner:
            continue
        for x in ins:
            members = table[owner[x]] if x in owner else [x]
            why = _first_conflict(sh, members, y) if x not in used else f"'{x}' is already taken"
            if why is None and sh.lives[y].nbytes > memory.buffer_size(graph, members):
                why = f"'{y}' is larger than the buffer of '{x}'"
            if why is None:
                table = _join(table, x, y)
                used.add(x)
                break
            reasons.append(why)
    if not used:
        return fail(reasons[0] if reasons else f"'{node.id}' writes no unplanned transient", node.id)
    return table


__all__ = ["MemoryReuse", "greedy_plan"]
