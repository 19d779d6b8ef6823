"""Elementwise maps over short rows as one flat loop.

A pointwise map whose every array access is the map point itself (``a[i0, i1, i2, i3]`` on an
array of exactly the map's extents) or a scalar (``h[()]``, a local) touches each array as one
contiguous run, whatever its rank. Its loop nest, though, follows the rank: on a 3×3 conv weight
``(512, 256, 3, 3)`` the innermost loop runs 3 times, which neither vectorizes nor amortizes the
loop, and the optimizer update of a ResNet ran at a third of the bandwidth of a copy. ``plan``
returns the same map over one parameter, ``i0 in 0:prod(extents)``, reading and writing 1-d views
of those arrays (``Flat.containers``: the program passes ``x.reshape(-1)``, a view of a planned
contiguous buffer; an input a caller passes strided is copied, which reads right).

Only maps whose last extent is below ``SHORT`` are flattened: long rows already vectorize, and
their kernels (and the modules that name them) stay as they are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

SHORT = 64


@dataclass(frozen=True)
class Flat:
    map: MapNode
    containers: tuple[Container, ...]     # the 1-d stand-ins (same names) of the flattened arrays


def _extents(m: MapNode) -> tuple[int, ...] | None:
    out = []
    for _, r in m.params:
        if not (isinstance(r.start, E.Const) and r.start.value == 0 and isinstance(r.stop, E.Const) and r.step == 1):
            return None
        out.append(int(r.stop.value))
    return tuple(out)


def plan(m: MapNode, graph: Graph) -> Flat | None:
    """``m`` over one flat parameter, or None when it is not such an elementwise map (module docstring)."""
    extents = _extents(m)
    if extents is None or len(extents) < 2 or extents[-1] >= SHORT or any(isinstance(n, MapNode) for n in m.body):
        return None
    point = tuple(E.Var(p) for p in m.param_names)
    flat: set[str] = set()
    for t in m.body:
        for mem in list(t.inputs.values()) + [t.output]:
            if mem.wcr is not None and mem is t.output:
                return None
            if mem.container in m.locals:
                continue
            if mem.subset == point and graph.container(mem.container).concrete_shape(graph.bindings) == extents:
                flat.add(mem.container)
            elif not (mem.subset in ((), None) and not graph.container(mem.container).shape):
                return None
    if not flat:
        return None
    p = m.param_names[0]
    size = math.prod(extents)
    one = (E.Var(p),)

    def memlet(mem: Memlet, whole: bool) -> Memlet:
        if mem.container not in flat:
            return mem
        return Memlet(mem.container, (Range.of(0, size),) if whole else one, mem.volume, mem.wcr)

    body = [Tasklet(t.id, t.expr, {k: memlet(v, False) for k, v in t.inputs.items()}, memlet(t.output, False),
                    name=t.name, provenance=t.provenance) for t in m.body]
    new = MapNode(m.id, [(p, Range.of(0, size))], body, locals=dict(m.locals),
                  inputs=[memlet(x, True) for x in m.inputs], outputs=[memlet(x, True) for x in m.outputs],
                  label=m.label, name=m.name, provenance=m.provenance)
    stand_ins = tuple(Container(c, (size,), graph.container(c).dtype, graph.container(c).role) for c in sorted(flat))
    return Flat(new, stand_ins)
