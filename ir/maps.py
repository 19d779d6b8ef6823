"""Map scopes: building them and propagating their memlets outward.

``finalize(map_node, graph)`` recomputes a map's external ``inputs`` and
``outputs`` from the memlets of its tasklets: for every global container the
union of the accessed points over the map's iteration space becomes one
``Range`` per dimension (the footprint), and ``volume`` is the number of
accesses (iterations × accesses per iteration). Locals never appear outside.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from ir import expr as E
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet


def range_bounds(r: Range, bindings: Mapping[str, int]) -> tuple[int, int, int]:
    """Concrete (start, stop, step) of a range; symbols resolved through ``bindings``."""
    env = {k: int(v) for k, v in bindings.items()}
    start = int(E.evaluate(r.start, env))
    stop = int(E.evaluate(r.stop, env))
    return start, stop, r.step


def param_counts(params: Iterable[tuple[str, Range]], bindings: Mapping[str, int]) -> list[tuple[str, int, int, int]]:
    """(param, start, step, trip count) of each of ``params``."""
    counts = []
    for p, r in params:
        start, stop, step = range_bounds(r, bindings)
        counts.append((p, start, step, max(0, -(-(stop - start) // step))))
    return counts


def trip_count(params: Iterable[tuple[str, Range]], bindings: Mapping[str, int]) -> int:
    """Number of points in the iteration space of ``params``."""
    return math.prod(c for *_, c in param_counts(params, bindings))


def trip_count_or(params: Iterable[tuple[str, Range]], bindings: Mapping[str, int], unknown: int) -> int:
    """``trip_count``, or ``unknown`` where a bound names a size the bindings do not give."""
    try:
        return trip_count(params, bindings)
    except (KeyError, TypeError, ValueError):
        return unknown


def tasklet_accesses(m: MapNode):
    """Yield (tasklet, memlet, is_write, enclosing params) for every tasklet memlet in ``m``."""
    for node, scopes in m.walk():
        if not isinstance(node, Tasklet):
            continue
        params = [p for s in scopes for p in s.params]
        local_names = {name for s in scopes for name in s.locals}
        for mem in node.inputs.values():
            yield node, mem, False, params, mem.container in local_names
        yield node, node.output, True, params, node.output.container in local_names


def finalize(m: MapNode, graph: Graph) -> MapNode:
    """Recompute ``m.inputs``/``m.outputs`` (footprint and volume per global container)."""
    reads: dict[str, list] = {}
    writes: dict[str, list] = {}
    wcr_of: dict[str, str | None] = {}
    for _, mem, is_write, params, is_local in tasklet_accesses(m):
        if is_local:
            continue
        bucket = writes if is_write else reads
        bucket.setdefault(mem.container, []).append((mem, params))
        if is_write:
            wcr_of[mem.container] = mem.wcr
    m.inputs = [_propagate(name, accs, graph, None) for name, accs in reads.items()]
    m.outputs = [_propagate(name, accs, graph, wcr_of[name]) for name, accs in writes.items()]
    return m


def _propagate(name: str, accesses: list, graph: Graph, wcr: str | None) -> Memlet:
    cont = graph.container(name)
    volume = 0
    lo: list[int] | None = None
    hi: list[int] | None = None
    try:
        for mem, params in accesses:
            volume += trip_count(params, graph.bindings)
            ranges = {p: _incl(r, graph.bindings) for p, r in params}
            if mem.subset is None:
                box = [(0, d - 1) for d in cont.concrete_shape(graph.bindings)]
            else:
                box = [E.bounds(ix, ranges) if not isinstance(ix, Range) else _incl(ix, graph.bindings)
                       for ix in mem.subset]
            lo = [b[0] for b in box] if lo is None else [min(a, b[0]) for a, b in zip(lo, box)]
            hi = [b[1] for b in box] if hi is None else [max(a, b[1]) for a, b in zip(hi, box)]
    except (KeyError, ValueError):
        return Memlet(name, None, None, wcr)  # symbolic or non-affine: whole container
    shape = cont.concrete_shape(graph.bindings)
    if lo is None or all(a == 0 and b == d - 1 for a, b, d in zip(lo, hi, shape)):
        return Memlet(name, None, volume, wcr)
    subset = tuple(Range.of(a, b + 1) for a, b in zip(lo, hi))
    return Memlet(name, subset, volume, wcr)


def _incl(r: Range, bindings: Mapping[str, int]) -> tuple[int, int]:
    start, stop, step = range_bounds(r, bindings)
    last = start + ((stop - start - 1) // step) * step
    return start, last


def footprint_elems(mem: Memlet, graph: Graph) -> int:
    """Elements covered by a (propagated, top-level) memlet's subset."""
    cont = graph.container(mem.container)
    if mem.subset is None:
        return cont.numel(graph.bindings)
    return trip_count((("", ix) for ix in mem.subset if isinstance(ix, Range)), graph.bindings)


def params_for(shape: tuple[int | str, ...], prefix: str = "i") -> list[tuple[str, Range]]:
    """One parameter per dimension: ``i0=0:d0, i1=0:d1, …``."""
    return [(f"{prefix}{k}", Range.of(0, d)) for k, d in enumerate(shape)]


def volume_of(params: list[tuple[str, Range]], bindings: Mapping[str, int]) -> int:
    return trip_count(params, bindings) if params else 1


__all__ = ["finalize", "footprint_elems", "params_for", "range_bounds", "trip_count",
           "tasklet_accesses", "volume_of"]
