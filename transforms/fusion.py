"""The fusion operations shared by the L2/L4 transformations.

- ``fuse_point``: producer map ``P`` and consumer map ``C`` over the same space, where
  ``C`` reads ``T`` only at the point ``P`` writes it: one map running ``P``'s body
  then ``C``'s, with ``T`` passed through a local (``map_fusion``).
- ``inline_producer``: a pointwise producer's computation of ``T`` is copied in front
  of every read of ``T`` in ``C``, at the read's own index (``reduction_fusion``:
  softmax(scale·x+mask), bias+dropout+residual+layernorm).
- ``absorb_consumer``: a pointwise consumer of ``T`` runs right where ``P`` writes ``T``
  (epilogues of reductions, the optimizer update after a gradient reduction).

Each returns the new kernel (not yet in the graph) or raises ``FusionError`` with a
reason; ``keep`` says whether ``T`` must still be written to global memory (it has
other readers or is a graph output).
"""
from __future__ import annotations

from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet
from ir.nodes import MapNode, Tasklet
from transforms.scopes import (accesses, copy_body, fresh, insert_after, insert_before, kernel_names,
                               point_write, reads, same_space, scope_of, writes)


class FusionError(Exception):
    """Why two kernels cannot be fused (message only; callers name the nodes)."""


def keeps_global(graph: Graph, container: str, consumers_fused: set[str]) -> bool:
    """True if ``container`` is still needed in global memory after fusing ``consumers_fused``."""
    if container in graph.outputs:
        return True
    return any(c.id not in consumers_fused for c in graph.consumers(container))


def creates_cycle(graph: Graph, producer: str, consumer: str) -> bool:
    """True if ``consumer`` also depends on ``producer`` through some other kernel."""
    start = [s.id for s in graph.successors(graph.nodes[producer]) if s.id != consumer]
    seen, stack = set(start), list(start)
    while stack:
        node = graph.nodes[stack.pop()]
        if node.id == consumer:
            return True
        for s in graph.successors(node):
            if s.id not in seen:
                seen.add(s.id)
                stack.append(s.id)
    return False


def _local_for(graph: Graph, container: str, taken: set[str]) -> Container:
    c = graph.container(container)
    base = "_" + "".join(ch if ch.isalnum() else "_" for ch in container.split("/")[-1])[-24:]
    return Container(fresh(base, taken), (), c.dtype)


def _rename_map(kernel: MapNode, reserved_params: set[str], reserved_locals: set[str],
                fixed: dict[str, E.Expr]) -> tuple[dict, dict]:
    """Fresh names for ``kernel``'s nested params and locals, avoiding the reserved sets."""
    params, locs, _ = kernel_names(kernel)
    pmap: dict[str, E.Expr] = dict(fixed)
    for p in sorted(params - set(fixed)):
        pmap[p] = E.Var(fresh(p, reserved_params))
    lmap = {loc: fresh(loc, reserved_locals) for loc in sorted(locs)}
    return pmap, lmap


def fuse_point(graph: Graph, p: MapNode, c: MapNode, container: str, new_id: str) -> MapNode:
    """``map_fusion``: P then C in one map, ``container`` through a local (see module doc)."""
    w = point_write(p, container)
    if w is None or len(w.scopes) != 1:
        raise FusionError(f"'{p.id}' does not write '{container}' once, at its own map point")
    if not same_space(p, c, graph):
        raise FusionError(f"'{p.id}' and '{c.id}' have different iteration spaces")
    rs = reads(c, container)
    first = rs[0].memlet.subset if rs else None
    if not rs or any(r.memlet.subset != first for r in rs):
        raise FusionError(f"'{c.id}' reads '{container}' at more than one index")
    if any(not isinstance(ix, E.Var) or ix.name not in c.param_names for ix in first):
        raise FusionError(f"'{c.id}' reads '{container}' at an index that is not its map point")
    fixed = {ix.name: E.Var(wx.name) for ix, wx in zip(first, w.memlet.subset)}
    if set(fixed) != set(c.param_names):
        raise FusionError(f"'{c.id}' reads '{container}' at a point that does not cover its map")
    p_params, p_locals, _ = kernel_names(p)
    local = _local_for(graph, container, p_locals | set(graph.containers))
    pmap, lmap = _rename_map(c, set(p_params), p_locals, fixed)
    lmap[container] = local.name
    keep = keeps_global(graph, container, {c.id})
    body_p = copy_body(p.body, {}, {})
    _redirect_write(body_p, w.tasklet.id, container, local.name, keep)
    body_c = copy_body(c.body, pmap, lmap)
    _scalar_reads(body_c, local.name)
    locals_ = {**p.locals, **{lmap[k]: Container(lmap[k], v.shape, v.dtype) for k, v in c.locals.items()},
               local.name: local}
    fused = MapNode(new_id, list(p.params), body_p + body_c, locals=locals_,
                    label=f"{p.label}+{c.label}", name=new_id)
    return finalize(fused, graph)


def _redirect_write(body: list, tasklet_id: str, container: str, local: str, keep: bool) -> None:
    """Make tasklet ``tasklet_id`` write ``local``; if ``keep``, also copy it to ``container``."""
    for k, stmt in enumerate(body):
        if isinstance(stmt, Tasklet) and stmt.id == tasklet_id:
            old = stmt.output
            stmt.output = Memlet(local, ())
            if keep:
                body.insert(k + 1, Tasklet(f"{tasklet_id}/store", E.Var("v"), {"v": Memlet(local, ())}, old))
            return
        if isinstance(stmt, MapNode):
            _redirect_write_nested(stmt, tasklet_id, container, local, keep)


def _redirect_write_nested(m: MapNode, tasklet_id: str, container: str, local: str, keep: bool) -> None:
    _redirect_write(m.body, tasklet_id, container, local, keep)


def _scalar_reads(body: list, local: str) -> None:
    """Reads of a renamed container that became a scalar local index it with ``()``."""
    for stmt in body:
        if isinstance(stmt, MapNode):
            _scalar_reads(stmt.body, local)
        else:
            for conn, mem in stmt.inputs.items():
                if mem.container == local:
                    stmt.inputs[conn] = Memlet(local, ())


def pointwise(m: MapNode) -> bool:
    """A map whose body is only top-level tasklets writing at the map point (no reductions)."""
    if not all(isinstance(s, Tasklet) for s in m.body):
        return False
    for s in m.body:
        out = s.output
        if out.wcr is not None:
            return False
        if out.container not in m.locals and point_write(m, out.container) is None:
            return False
    return True


def _slice_for(m: MapNode, container: str) -> list[Tasklet]:
    """The tasklets of pointwise ``m`` needed to compute ``container`` (in body order)."""
    need = {container}
    keep: list[Tasklet] = []
    for s in reversed(m.body):
        if s.output.container in need:
            keep.append(s)
            need.update(mem.container for mem in s.inputs.values() if mem.container in m.locals)
    return list(reversed(keep))


def inline_producer(graph: Graph, p: MapNode, c: MapNode, container: str, new_id: str) -> MapNode:
    """``reduction_fusion`` (producer side): recompute pointwise P's ``container`` at C's reads."""
    if not pointwise(p):
        raise FusionError(f"'{p.id}' is not a pointwise map")
    w = point_write(p, container)
    if w is None:
        raise FusionError(f"'{p.id}' does not write '{container}' at its map point")
    work = copy_body([c], {}, {})[0]
    work.id = new_id
    c_params, c_locals, c_ids = kernel_names(work)
    taken_locals = c_locals | set(graph.containers)
    chain = _slice_for(p, container)
    for k, acc in enumerate(reads(work, container)):
        fixed = {wx.name: ix for wx, ix in zip(w.memlet.subset, acc.memlet.subset)}
        lmap = {loc: fresh(loc, taken_locals) for loc in sorted(p.locals)}
        value = fresh("_" + container.split("/")[-1][-20:].replace(".", "_"), taken_locals)
        lmap[container] = value
        copies = copy_body(chain, fixed, lmap, id_prefix=f"{acc.tasklet.id}/in{k}:")
        for t in copies:
            if t.output.container == value:
                t.output = Memlet(value, ())
        _scalar_reads(copies, value)
        for t in copies:
            for conn, mem in t.inputs.items():
                if mem.container in lmap.values():
                    t.inputs[conn] = Memlet(mem.container, ())
        owner = scope_of(work, acc.tasklet)
        for name in list(lmap.values()):
            dt = p.locals[_inverse(lmap, name)].dtype if _inverse(lmap, name) in p.locals \
                else graph.container(container).dtype
            owner.locals[name] = Container(name, (), dt)
        insert_before(work, acc.tasklet, copies)
        acc.tasklet.inputs[acc.connector] = Memlet(value, ())
    work.label = f"{p.label}>{c.label}"
    return finalize(work, graph)


def _inverse(mapping: dict[str, str], value: str) -> str:
    return next(k for k, v in mapping.items() if v == value)


def absorb_consumer(graph: Graph, p: MapNode, c: MapNode, container: str, new_id: str) -> MapNode:
    """``reduction_fusion``/``optimizer_fusion`` (consumer side): run pointwise C where P writes."""
    if not pointwise(c):
        raise FusionError(f"'{c.id}' is not a pointwise map")
    work = copy_body([p], {}, {})[0]
    work.id = new_id
    _localize_wcr(work, container, graph)
    w = point_write(work, container)
    if w is None:
        raise FusionError(f"'{p.id}' does not write '{container}' once at distinct parameters")
    rs = reads(c, container)
    first = rs[0].memlet.subset if rs else None
    if not rs or any(r.memlet.subset != first for r in rs):
        raise FusionError(f"'{c.id}' reads '{container}' at more than one index")
    if any(not isinstance(ix, E.Var) for ix in first) or {ix.name for ix in first} != set(c.param_names):
        raise FusionError(f"'{c.id}' reads '{container}' at an index that is not its map point")
    produced = {a.memlet.container for node, _ in work.walk() if isinstance(node, Tasklet)
                for a in [node.output]}
    clash = [m.container for s in c.body for m in s.inputs.values()
             if m.container in produced and m.container != container]
    if clash:
        raise FusionError(f"'{c.id}' also reads '{clash[0]}', which '{p.id}' writes")
    p_params, p_locals, _ = kernel_names(work)
    taken = p_locals | set(graph.containers)
    local = _local_for(graph, container, taken)
    fixed = {ix.name: wx for ix, wx in zip(first, w.memlet.subset)}
    lmap = {loc: fresh(loc, taken) for loc in sorted(c.locals)}
    lmap[container] = local.name
    copies = copy_body(c.body, fixed, lmap, id_prefix=f"{new_id}/")
    _scalar_reads(copies, local.name)
    for t in copies:
        for conn, mem in t.inputs.items():
            if mem.container in lmap.values():
                t.inputs[conn] = Memlet(mem.container, ())
        if t.output.container in lmap.values():
            t.output = Memlet(t.output.container, ())
    owner = scope_of(work, w.tasklet)
    owner.locals[local.name] = local
    for k, v in c.locals.items():
        owner.locals[lmap[k]] = Container(lmap[k], v.shape, v.dtype)
    keep = keeps_global(graph, container, {c.id})
    old = w.tasklet.output
    w.tasklet.output = Memlet(local.name, ())
    extra = [Tasklet(f"{w.tasklet.id}/store", E.Var("v"), {"v": Memlet(local.name, ())}, old)] if keep else []
    insert_after(work, w.tasklet, extra + copies)
    work.label = f"{p.label}>{c.label}"
    return finalize(work, graph)


def _localize_wcr(m: MapNode, container: str, graph: Graph) -> None:
    """Turn ``out[outer] (wcr) = …`` inside a nested map into a local accumulator plus a plain
    ``out[outer] = acc`` after that nested map, so consumers can run at the outer point."""
    ws = writes(m, container)
    if len(ws) != 1 or ws[0].memlet.wcr is None or len(ws[0].scopes) < 2:
        return
    acc = ws[0]
    inner = acc.scopes[-1]
    outer_params = {p for s in acc.scopes[:-1] for p in s.param_names}
    names = E.free_vars(E.Const(0)) if acc.memlet.subset is None else set().union(
        *(E.free_vars(ix) for ix in acc.memlet.subset))
    if not names <= outer_params:
        return
    holder = acc.scopes[-2]
    _, locs, _ = kernel_names(m)
    name = fresh("_acc", locs | set(graph.containers))
    holder.locals[name] = Container(name, (), graph.container(container).dtype)
    old = acc.memlet
    acc.tasklet.output = Memlet(name, (), None, old.wcr)
    store = Tasklet(f"{acc.tasklet.id}/store", E.Var("v"), {"v": Memlet(name, ())}, Memlet(container, old.subset))
    insert_after(m, inner, [store])
