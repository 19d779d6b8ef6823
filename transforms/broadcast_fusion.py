"""``broadcast_fusion`` (level 2): a pointwise consumer of per-row results runs as one more sweep of the
reduction kernel that produces them.

A reduction kernel ``P`` over outer points ``o`` (a channel, a row) computes per-point results ``T[o]``
after its sweeps (a BatchNorm gradient's ``Σdy`` and ``Σdy·x̂`` per channel); a pointwise ``C`` over the
whole tensor reads them broadcast (``T[0, c, 0, 0]`` at every ``n, h, w``), often beside elementwise values
``E`` that ``P`` stored in a sweep (``dy``, ``x̂``). ``C`` runs inside ``P``, once per outer point, as a new
sweep over its remaining parameters: ``T`` is read from the local that holds it, and ``E`` is computed
again from ``P``'s own operands at the same point (the sweep's statements that produce it), so neither is
stored for ``C``. Before → after (a BatchNorm gradient, cuDNN's two-phase backward)::

    %red = map[c=0:64] {
      map[n=0:4, h=0:16, w=0:16] { local _dy; _dy = dz[n, c, h, w] * s[n, c, h, w]; dy[n, c, h, w] = _dy;
                                   sdy[0, c, 0, 0] (wcr=sum) = _dy; … }
    }
    %dx = map[i0=0:4, i1=0:64, i2=0:16, i3=0:16] { dx[i0, i1, i2, i3] = (dy[i0, i1, i2, i3] - sdy[0, i1, 0, 0] * k) … }
    →
    %fused:red = map[c=0:64] {
      local _acc
      map[n=0:4, h=0:16, w=0:16] { …; _acc (wcr=sum) = _dy; … }
      map[i0=0:4, i2=0:16, i3=0:16] { local _dy_1; _dy_1 = dz[i0, c, i2, i3] * s[i0, c, i2, i3];
                                      dx[i0, c, i2, i3] = (_dy_1 - _acc * k) … }
    }

Consumers over a per-point space (``[1, 64, 1, 1]`` beside a kernel over ``c=0:64``) run as statements
after ``P``'s sweeps, with no new sweep.

Algebra: ``C`` at a point reads only final per-point results of ``P`` (stored after the sweep that
accumulates them), values ``P`` computes from operands nobody in ``P`` writes (so computing them again gives
the same numbers), and containers outside ``P``; ``C``'s points are split by outer point, each visited
once. Bytes: −(``T``'s and ``E``'s writes and reads) when ``C`` was their last reader, else −(their reads)
(their reads are footprints ``P`` already reads); FLOPs rise by the statements computed again.

Refused, with the reason: ``C`` not pointwise; ``P`` without per-point results ``C`` reads;
a read of ``T`` or ``E`` at a point that is not ``C``'s own (or pins a parameter ``P`` loops over); an ``E``
whose statements read an accumulator, a value ``P`` changes later, or a container ``P`` writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.maps import finalize
from ir.nodes import MapNode, Tasklet
from transforms.base import Match, MatchResult, Touched, fail
from transforms.fusion import (FusionError, _as_locals, _index_text, _local_for, _localize_wcr, _redirect_writes,
                               _slice_for, creates_cycle, drop_dead, full_index, keeps_global, pointwise,
                               swap_kernels, touched)
from transforms.kernel_slices import all_locals, drop_writes
from transforms.map_fusion import edges, fused_id
from transforms.planned import PlannedFusion, two_maps
from transforms.reduction_fusion import is_reduction
from transforms.registry import register
from transforms.scopes import Access, Taken, copy_body, extents, fresh, kernel_names, reads, writes


@register
@dataclass(frozen=True)
class BroadcastFusion(PlannedFusion):
    name: ClassVar[str] = "broadcast_fusion"
    level: ClassVar[int] = 2

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        seen = set()
        for p, c, _ in edges(graph, within):
            if (p.id, c.id) not in seen and is_reduction(p) and pointwise(c):
                seen.add((p.id, c.id))
                yield self.match(p.id, c.id, label=f"sweep: run {c.label} inside {p.label}")

    def _plan(self, graph: Graph, match: Match):
        maps = two_maps(graph, match, self.name)
        if isinstance(maps, MatchResult):
            return maps
        p, c = maps
        if not is_reduction(p):
            return fail(f"'{p.id}' is not a reduction kernel (no sweeps, no accumulation)", p.id)
        if not pointwise(c):
            return fail(f"'{c.id}' is not pointwise (every statement writing its own point)", c.id)
        shared = list(dict.fromkeys(m.container for m in c.inputs if graph.producer(m.container) is p))
        if not shared:
            return fail(f"'{c.id}' reads nothing that '{p.id}' writes", p.id, c.id)
        if creates_cycle(graph, p.id, c.id):
            return fail(f"'{c.id}' also depends on '{p.id}' through another kernel; fusing would "
                        "create a cycle", p.id, c.id)
        return p, c, shared

    def _build(self, graph: Graph, plan) -> MapNode:
        p, c, shared = plan
        return run_as_sweep(graph, p, c, shared, fused_id(graph, p.id))

    def _swap(self, graph: Graph, match: Match, step: int, plan, fused) -> Touched:
        p, c, shared = plan
        swap_kernels(graph, (p.id, c.id), fused, (self.name, step))
        drop_dead(graph, shared)
        return touched(match.anchors, fused.id)


def run_as_sweep(graph: Graph, p: MapNode, c: MapNode, shared: list[str], new_id: str) -> MapNode:
    """``C`` inside ``P`` (see the module docstring); raises ``FusionError`` saying why not."""
    work = copy_body([p], {}, {})[0]
    work.id = new_id
    outer = work.param_names
    per_point, swept = {}, {}
    for name in shared:
        _localize_wcr(work, name, graph)
        ws = writes(work, name)
        if len(ws) != 1 or ws[0].memlet.wcr is not None or ws[0].memlet.subset is None or len(ws[0].scopes) > 2:
            raise FusionError(f"'{p.id}' does not write '{name}' once per element, after its sweeps or in one")
        if reads(work, name):
            raise FusionError(f"'{p.id}' reads '{name}' back after writing it")
        (swept if len(ws[0].scopes) == 2 else per_point)[name] = ws[0]
    ext_c, ext_p = extents(c, graph), extents(work, graph)
    binding = _bind_outer(c, per_point, swept, outer, ext_c, ext_p)
    inner = [(q, r) for q, r in c.params if q not in binding and ext_c[q][1] - ext_c[q][0] > 1]
    pinned = [q for q, _ in c.params if q not in binding and ext_c[q][1] - ext_c[q][0] <= 1]
    binding.update({q: E.Const(ext_c[q][0], "int64") for q in pinned})     # extent 1: the start itself
    params, locs, ids = kernel_names(work)
    taken = Taken(locs, graph.containers)
    binding.update({q: E.Var(fresh(q, params)) for q, _ in inner})
    values = _redirect_per_point(graph, work, per_point, c.id, taken)
    body, sweep_locals = [], {}
    for k, (name, w) in enumerate(swept.items()):
        value = _local_for(graph, name, taken).name
        body += _recomputed(graph, work, w, c, binding, ext_c, ext_p, value, taken, sweep_locals,
                            fresh(f"{c.id}/again{k}", ids))
        sweep_locals[value] = Container(value, (), graph.container(name).dtype)
        values[name] = value
    cmap = {loc: fresh(loc, taken) for loc in sorted(c.locals)}
    copies = copy_body(c.body, binding, {**cmap, **values}, fresh(f"{c.id}/", ids))
    _as_locals(copies, set(values.values()) | set(cmap.values()))
    sweep_locals.update({cmap[k]: Container(cmap[k], v.shape, v.dtype) for k, v in c.locals.items()})
    if inner:
        sweep = MapNode(fresh(f"{c.id}/sweep", ids), [(binding[q].name, r) for q, r in inner], body + copies,
                        locals=sweep_locals, label=c.label, name=c.id)
        work.body.append(sweep)
    else:
        work.locals.update(sweep_locals)
        work.body += body + copies
    dropped = {n for n in swept if not keeps_global(graph, n, {c.id})}
    drop_writes(work, _written_globals(work) - dropped)
    work.label = f"{p.label}>{c.label}"
    return finalize(work, graph)


def _bind_outer(c: MapNode, per_point: dict[str, Access], swept: dict[str, Access], outer: list[str],
                ext_c: dict, ext_p: dict) -> dict[str, E.Expr]:
    """C's parameters that run over P's outer parameters (each outer one exactly once), from C's reads of
    what P writes: a read must index a written parameter by a parameter of C over the same range."""
    binding: dict[str, E.Expr] = {}
    for t in c.body:
        for mem in t.inputs.values():
            w = per_point.get(mem.container) or swept.get(mem.container)
            if w is None:
                continue
            if mem.subset is None or len(mem.subset) != len(w.memlet.subset):
                raise FusionError(f"'{c.id}' reads {_index_text(mem)}, not at the point '{w.tasklet.id}' writes")
            for wx, rx in zip(w.memlet.subset, mem.subset):
                if isinstance(rx, E.Var) and rx.name not in ext_c:
                    raise FusionError(f"'{c.id}' reads {_index_text(mem)} at '{rx.name}', not one of its parameters")
                if isinstance(wx, E.Var) and not isinstance(rx, E.Var):
                    raise FusionError(f"'{c.id}' reads {_index_text(mem)}: a fixed index where the producer "
                                      f"loops over '{wx.name}'")
                if isinstance(wx, E.Var) and wx.name in outer:
                    if binding.setdefault(rx.name, wx).name != wx.name or ext_c[rx.name] != ext_p[wx.name]:
                        raise FusionError(f"'{c.id}' reads {_index_text(mem)} at inconsistent points")
                elif not isinstance(wx, E.Var) and not _pinned(rx, wx, ext_c):
                    raise FusionError(f"'{c.id}' reads {_index_text(mem)}, beyond the written element")
    if sorted(v.name for v in binding.values()) != sorted(outer):
        raise FusionError(f"'{c.id}' does not run once per point of {', '.join(outer)}")
    return binding


def _pinned(rx: E.Expr, wx: E.Expr, ext_c: dict) -> bool:
    """The read index takes only the written constant (a constant, or a parameter of extent 1)."""
    if not isinstance(wx, E.Const):
        return False                                  # written at a computed index
    if isinstance(rx, E.Var):
        return ext_c[rx.name][:2] == (int(wx.value), int(wx.value) + 1)
    return isinstance(rx, E.Const) and rx == wx


def _redirect_per_point(graph: Graph, work: MapNode, per_point: dict[str, Access], consumer: str,
                        taken: Taken) -> dict[str, str]:
    """Per-point results are written at P's top level: each goes to a local C reads (and is still
    stored when another kernel reads it, ``fusion._redirect_writes``)."""
    values = {name: _local_for(graph, name, taken).name for name in per_point}
    _redirect_writes(graph, work, work, per_point, values, consumer)
    return values


def _recomputed(graph: Graph, work: MapNode, w: Access, c: MapNode, binding: dict, ext_c: dict, ext_p: dict,
                value: str, taken: Taken, sweep_locals: dict, prefix: str) -> list[Tasklet]:
    """The sweep statements computing the element ``w`` writes, at C's point, into local ``value``."""
    sweep = w.scopes[1]
    if full_index(w.memlet.subset, work.param_names + sweep.param_names) is None:
        raise FusionError(f"'{work.id}' does not write '{w.memlet.container}' once per point of its sweep")
    if not all(isinstance(s, Tasklet) for s in sweep.body):
        raise FusionError(f"'{work.id}' computes '{w.memlet.container}' in a sweep with nested loops")
    read = next(m.subset for t in c.body for m in t.inputs.values() if m.container == w.memlet.container)
    at = {}
    for wx, rx in zip(w.memlet.subset, read):
        if wx.name in sweep.param_names:
            if ext_c[rx.name] != ext_p[wx.name]:
                raise FusionError(f"'{c.id}' iterates '{rx.name}' over {ext_c[rx.name][:2]}, but '{work.id}' "
                                  f"computes '{w.memlet.container}' over {ext_p[wx.name][:2]}")
            at[wx.name] = binding[rx.name]
        else:
            at[wx.name] = E.Var(wx.name)
    if any(m.subset != read for t in c.body for m in t.inputs.values() if m.container == w.memlet.container):
        raise FusionError(f"'{c.id}' reads '{w.memlet.container}' at more than one point")
    chain = _slice_for(sweep, {w.memlet.container})
    _check_chain(work, sweep, chain, w.memlet.container)
    used = {m.container for t in chain for m in [*t.inputs.values(), t.output]} & set(sweep.locals)
    lmap = {loc: fresh(loc, taken) for loc in sorted(used)}
    copies = copy_body(chain, at, {**lmap, w.memlet.container: value}, prefix + ":")
    _as_locals(copies, set(lmap.values()) | {value})
    sweep_locals.update({new: Container(new, sweep.locals[old].shape, sweep.locals[old].dtype)
                         for old, new in lmap.items()})
    return copies


def _check_chain(work: MapNode, sweep: MapNode, chain: list[Tasklet], name: str) -> None:
    """The statements computing ``name`` read no accumulator, no outer value P changes after the sweep
    starts, and no container P writes: computed again later, they give the same value."""
    written = _written_globals(work)
    start = next(k for k, s in enumerate(work.body) if s is sweep)
    later = {t.output.container for s in work.body[start:] for t, _ in _walk(s)}
    for t in chain:
        if t.output.wcr is not None:
            raise FusionError(f"'{name}' is computed by an accumulation ('{t.id}')")
        for mem in t.inputs.values():
            if mem.container in sweep.locals:
                continue
            if mem.container in work.locals and mem.container in later:
                raise FusionError(f"'{name}' reads '{mem.container}', which '{work.id}' changes during or "
                                  "after the sweep")
            if mem.container in written:
                raise FusionError(f"'{name}' reads '{mem.container}', which '{work.id}' writes")


def _walk(stmt):
    return stmt.walk() if isinstance(stmt, MapNode) else [(stmt, ())]


def _written_globals(m: MapNode) -> set[str]:
    return {t.output.container for t, _ in m.walk() if isinstance(t, Tasklet)} - all_locals(m)
