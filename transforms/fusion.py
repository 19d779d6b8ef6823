"""The fusion operations shared by the L2/L4 transformations.

- ``fuse_point``: producer map ``P`` and consumer map ``C`` over the same space, where
  ``C`` reads ``T`` only at the point ``P`` writes it: one map running ``P``'s body
  then ``C``'s, with ``T`` passed through a local (``map_fusion``).
- ``inline_producer``: a pointwise producer's computation of ``T`` is copied in front
  of every read of ``T`` in ``C``, at the read's own index (``reduction_fusion``:
  softmax(scale·x+mask), bias+dropout+residual+layernorm). Results of ``P`` that are
  still needed (``T`` with other readers, ``P``'s other outputs) are stored by the copy
  in front of a *covering* read, one that visits every element of ``T`` exactly once,
  so ``P`` disappears.
- ``absorb_consumer``: a consumer ``C`` of one or more results of ``P`` runs right
  where ``P`` writes them (epilogues of reductions, a bias-gradient reduction inside
  the kernel that produces its input, the optimizer update after a gradient
  reduction). ``C`` is pointwise or a *single sweep*: a perfect nest whose statements
  all sit in the innermost map (``ReduceSum`` into its output with a wcr); each of its
  reads of a shared result must visit every element once. A wcr reduction of ``P``
  into ``T`` inside a nested map first becomes a local accumulator.
- ``merge_siblings`` / ``host_sibling``: two independent maps that read the same
  tensor become one map (same space: both bodies; otherwise a single-sweep guest runs
  inside the host, right after the host's covering read of the tensor).
- ``fuse_epilogue``: a pointwise consumer of a contraction (plain, or with an epilogue
  already) becomes (part of) its epilogue (``ir.fused_ops``).

Each returns the new kernel (not yet in the graph) or raises ``FusionError`` with a
reason naming the kernels; ``keeps_global`` says whether a container must still be
written to global memory (it has other readers or is a graph output). ``swap_kernels``,
``drop_dead`` and ``touched`` put the new kernel in place of the ones it replaces.
(About 500 lines: the operations share the index-binding helpers ``full_index``,
``_binding`` and ``_as_locals``; split off the sibling and epilogue operations if it grows.)
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ir import expr as E
from ir import fused_ops
from ir.containers import Container
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, index_to_text
from ir.nodes import MapNode, OpNode, Tasklet
from transforms.base import Touched
from transforms.scopes import (Access, Taken, copy_body, extents, fresh, insert_after, insert_before,
                               kernel_names, point_write, reads, same_space, scope_of, writes)


class FusionError(Exception):
    """Why two kernels cannot be fused (message only; callers name the nodes)."""


def keeps_global(graph: Graph, container: str, consumers_fused: set[str]) -> bool:
    """True if ``container`` is still needed in global memory after fusing ``consumers_fused``."""
    if container in graph.outputs:
        return True
    return any(c.id not in consumers_fused for c in graph.consumers(container))


def creates_cycle(graph: Graph, producer: str, consumer: str) -> bool:
    """True if ``consumer`` also depends on ``producer`` through some other kernel."""
    return graph.depends(producer, consumer, indirectly=True)


def reaches(graph: Graph, src: str, dst: str) -> bool:
    """True if kernel ``dst`` depends, directly or transitively, on kernel ``src``."""
    return graph.depends(src, dst)


def _local_for(graph: Graph, container: str, taken: Taken) -> Container:
    c = graph.container(container)
    base = "_" + "".join(ch if ch.isalnum() else "_" for ch in container.split("/")[-1])[-24:]
    return Container(fresh(base, taken), (), c.dtype)


def _rename_map(kernel: MapNode, reserved_params: set[str], reserved_locals: Taken,
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
    taken = Taken(p_locals, graph.containers)      # one set: the new local and C's renamed locals
    local = _local_for(graph, container, taken)     # must differ from each other (issue 10)
    pmap, lmap = _rename_map(c, set(p_params), taken, fixed)
    lmap[container] = local.name
    keep = keeps_global(graph, container, {c.id})
    body_p = copy_body(p.body, {}, {})
    _redirect_write(body_p, w.tasklet.id, container, local.name, keep)
    body_c = copy_body(c.body, pmap, lmap, _id_prefix(p, c.body, c.id))
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
    """A map whose body is only top-level tasklets, each writing a local or one element of a
    global at the map point (all parameters, distinct): no reductions, no broadcasts."""
    if not all(isinstance(s, Tasklet) for s in m.body):
        return False
    for s in m.body:
        out = s.output
        if out.wcr is not None:
            return False
        if out.container in m.locals:
            continue
        w = point_write(m, out.container)
        if w is None or len(w.memlet.subset) != len(m.params):
            return False
    return True


def flat_nest(m: MapNode) -> list[MapNode] | None:
    """The maps ``m ⊃ … ⊃ innermost`` of a perfect nest whose statements all sit in the
    innermost map (``[m]`` for a pointwise map), or None."""
    nest = [m]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], MapNode):
        if nest[-1].locals:
            return None
        nest.append(nest[-1].body[0])
    return nest if all(isinstance(s, Tasklet) for s in nest[-1].body) else None


def _params(scopes: Sequence[MapNode]) -> list[str]:
    return [p for s in scopes for p in s.param_names]


def full_index(subset, params: Sequence[str]) -> list[str] | None:
    """The index names if ``subset`` is distinct parameters covering ``params``, else None."""
    if subset is None or len(subset) != len(params):
        return None
    names = [ix.name if isinstance(ix, E.Var) else None for ix in subset]
    return names if None not in names and set(names) == set(params) else None


def _index_text(mem: Memlet) -> str:
    return mem.container + ("" if mem.subset is None else "[" + ", ".join(index_to_text(i) for i in mem.subset) + "]")


def _check_sweep(c: MapNode, nest: list[MapNode]) -> None:
    """A single sweep's plain writes of globals must visit each element once (no races)."""
    params = _params(nest)
    for t in nest[-1].body:
        out = t.output
        if out.wcr is None and out.container not in nest[-1].locals and full_index(out.subset, params) is None:
            raise FusionError(f"'{c.id}' writes {_index_text(out)} without a wcr at fewer points than it visits")


def _binding(rs: Iterable[Access], targets: dict[str, list[str]], params: Sequence[str],
             ext_src: dict, ext_dst: dict, who: str) -> dict[str, E.Expr]:
    """Map the params of kernel ``who`` onto the ``targets`` index names through reads that
    visit each element once; ranges must agree."""
    out: dict[str, str] = {}
    for r in rs:
        names = full_index(r.memlet.subset, params)
        if names is None:
            raise FusionError(f"'{who}' reads {_index_text(r.memlet)}, not once per element of its iteration space")
        for cp, tp in zip(names, targets[r.memlet.container]):
            if out.setdefault(cp, tp) != tp:
                raise FusionError(f"'{who}' reads '{r.memlet.container}' at inconsistent points")
            if ext_src[cp] != ext_dst[tp]:
                raise FusionError(f"'{who}' iterates '{cp}' over {ext_src[cp][:2]}, but the element it reads is "
                                  f"produced over {ext_dst[tp][:2]}")
    return {k: E.Var(v) for k, v in out.items()}


def _as_locals(items: list, names: set[str]) -> None:
    """Accesses of renamed containers that became scalar locals index them with ``()``."""
    for t in items:
        for conn, mem in t.inputs.items():
            if mem.container in names:
                t.inputs[conn] = Memlet(mem.container, ())
        if t.output.container in names:
            t.output = Memlet(t.output.container, (), None, t.output.wcr)


def _id_prefix(kernel: MapNode, items: list, base: str) -> str:
    """'' when the statement ids of ``items`` are new in ``kernel``, else ``base + '/'``."""
    taken = kernel_names(kernel)[2]
    ids = {n.id for n, _ in MapNode("_", [], items).walk()}
    return f"{base}/" if ids & taken else ""


def _slice_for(m: MapNode, need: set[str]) -> list[Tasklet]:
    """The tasklets of pointwise ``m`` needed to compute the containers ``need``."""
    need = set(need)
    keep: list[Tasklet] = []
    for s in reversed(m.body):
        if s.output.container in need:
            keep.append(s)
            need.update(mem.container for mem in s.inputs.values() if mem.container in m.locals)
    return list(reversed(keep))


# --- replacing kernels in the graph -----------------------------------------------------------

def swap_kernels(graph: Graph, old: Iterable[str], new, provenance: tuple[str, int]) -> None:
    """Swap kernels ``old`` for ``new``, whose id is made unique among the remaining ids."""
    for ident in old:
        graph.remove_node(ident)
    new.id = graph.ids.claim(new.id)
    graph.ids.release(new.id)
    new.name, new.provenance = new.id, provenance
    graph.splice((), (new,))


def drop_dead(graph: Graph, names: Iterable[str]) -> None:
    """Remove containers that nothing writes or reads any more (and are no graph output)."""
    for name in dict.fromkeys(names):
        if name in graph.containers and name not in graph.outputs and name not in graph.inputs \
                and graph.producer(name) is None and not graph.consumers(name):
            graph.remove_container(name)


def touched(anchors: tuple[str, ...], new_id: str) -> Touched:
    """The anchors are replaced by ``new_id`` (changed if it reuses an anchor's id)."""
    if new_id in anchors:
        return Touched(removed=tuple(a for a in anchors if a != new_id), changed=(new_id,))
    return Touched(created=(new_id,), removed=tuple(anchors))


# --- producer inlining -----------------------------------------------------------------------

def inline_producer(graph: Graph, p: MapNode, c: MapNode, container: str, new_id: str) -> MapNode:
    """``reduction_fusion`` (producer side): recompute pointwise P's ``container`` at C's reads;
    whatever of P is still needed is stored at a covering read, so P can be removed."""
    if not pointwise(p):
        raise FusionError(f"'{p.id}' is not a pointwise map")
    w = point_write(p, container)
    if w is None:
        raise FusionError(f"'{p.id}' does not write '{container}' at its map point")
    both = [o for o in p.output_names() if o != container and o in c.input_names()]
    if both:
        raise FusionError(f"'{c.id}' reads several results of '{p.id}' ({container}, {both[0]})")
    store = [n for n in p.output_names() if keeps_global(graph, n, {c.id} if n == container else set())]
    work = copy_body([c], {}, {})[0]
    work.id = new_id
    rs = reads(work, container)
    if not rs:
        raise FusionError(f"'{c.id}' does not read '{container}' in its body")
    cover = _covering(graph, rs, w, work, p)
    if store and cover is None:
        raise FusionError(f"'{store[0]}' of '{p.id}' is still needed after the fusion, and no read of "
                          f"'{container}' in '{c.id}' visits each element once to store it")
    taken = Taken(kernel_names(work)[1], graph.containers)
    for k, acc in enumerate(rs):
        _inline_at(graph, p, w, work, acc, k, store if k == cover else [], taken)
    work.label = f"{p.label}>{c.label}"
    return finalize(work, graph)


def _covering(graph: Graph, rs: list[Access], w: Access, work: MapNode, p: MapNode) -> int | None:
    """Position of the first read that visits each element of the container exactly once."""
    ext_c, ext_p = extents(work, graph), extents(p, graph)
    for k, acc in enumerate(rs):
        names = full_index(acc.memlet.subset, _params(acc.scopes))
        if names and all(ext_c[n] == ext_p[wx.name] for n, wx in zip(names, w.memlet.subset)):
            return k
    return None


def _inline_at(graph: Graph, p: MapNode, w: Access, work: MapNode, acc: Access, k: int,
               store: list[str], taken: Taken) -> None:
    """Copy P's slice for the read ``acc`` (and the results in ``store``) in front of it."""
    container = w.memlet.container
    chain = _slice_for(p, {container, *store})
    fixed = {wx.name: ix for wx, ix in zip(w.memlet.subset, acc.memlet.subset)}
    used = sorted({m.container for t in chain for m in [*t.inputs.values(), t.output] if m.container in p.locals})
    lmap = {loc: fresh(loc, taken) for loc in used}
    value = _local_for(graph, container, taken).name
    lmap[container] = value
    copies = copy_body(chain, fixed, lmap, id_prefix=f"{acc.tasklet.id}/in{k}:")
    _as_locals(copies, set(lmap.values()))
    if container in store:
        copies.append(Tasklet(f"{acc.tasklet.id}/in{k}:store", E.Var("v"), {"v": Memlet(value, ())},
                              Memlet(container, acc.memlet.subset)))
    owner = scope_of(work, acc.tasklet)
    for loc, name in lmap.items():
        src = p.locals.get(loc) or graph.container(container)
        owner.locals[name] = Container(name, p.locals[loc].shape if loc in p.locals else (), src.dtype)
    insert_before(work, acc.tasklet, copies)
    acc.tasklet.inputs[acc.connector] = Memlet(value, ())


# --- consumer absorption ---------------------------------------------------------------------

def absorb_consumer(graph: Graph, p: MapNode, c: MapNode, containers: str | Sequence[str],
                    new_id: str) -> MapNode:
    """Run consumer C (pointwise or a single sweep) right where P writes ``containers``."""
    names = [containers] if isinstance(containers, str) else list(containers)
    nest = flat_nest(c)
    if nest is None:
        raise FusionError(f"'{c.id}' is neither pointwise nor a single sweep (all statements in one innermost map)")
    _check_sweep(c, nest)
    work = copy_body([p], {}, {})[0]
    work.id = new_id
    points = _point_writes(graph, work, p.id, names)
    targets = {n: [ix.name for ix in a.memlet.subset] for n, a in points.items()}
    rs = [r for n in names for r in reads(c, n)]
    binding = _binding(rs, targets, _params(nest), extents(c, graph), extents(work, graph), c.id)
    produced = {a.tasklet.output.container for a in _all_writes(work)} - set(names)
    clash = sorted({m.container for t in nest[-1].body for m in t.inputs.values()} & produced)
    if clash:
        raise FusionError(f"'{c.id}' also reads '{clash[0]}', which '{p.id}' writes")
    owner = scope_of(work, points[names[0]].tasklet)
    taken = Taken(kernel_names(work)[1], graph.containers)
    lmap = {n: _local_for(graph, n, taken).name for n in names}
    lmap.update({loc: fresh(loc, taken) for loc in sorted(nest[-1].locals)})
    marks = _redirect_writes(graph, work, owner, points, lmap, c.id)
    copies = copy_body(nest[-1].body, binding, lmap, _id_prefix(work, nest[-1].body, c.id))
    _as_locals(copies, set(lmap.values()))
    for loc, cont in nest[-1].locals.items():
        owner.locals[lmap[loc]] = Container(lmap[loc], cont.shape, cont.dtype)
    last = max(k for k, s in enumerate(owner.body) if any(s is m for m in marks))
    owner.body[last + 1:last + 1] = copies
    work.label = f"{p.label}>{c.label}"
    return finalize(work, graph)


def _all_writes(m: MapNode) -> list[Access]:
    return [Access(n, None, n.output, s) for n, s in m.walk() if isinstance(n, Tasklet)]


def _point_writes(graph: Graph, work: MapNode, p_id: str, names: list[str]) -> dict[str, Access]:
    """The single write of each container, once per element at a point of its scopes."""
    out = {}
    for n in names:
        _localize_wcr(work, n, graph)
        ws = writes(work, n)
        if len(ws) != 1 or ws[0].memlet.wcr is not None or \
                full_index(ws[0].memlet.subset, _params(ws[0].scopes)) is None:
            raise FusionError(f"'{p_id}' does not write '{n}' once per element at its own point")
        out[n] = ws[0]
    if len({id(scope_of(work, a.tasklet)) for a in out.values()}) > 1:
        raise FusionError(f"'{p_id}' writes {', '.join(names)} in different scopes")
    return out


def _redirect_writes(graph: Graph, work: MapNode, owner: MapNode, points: dict[str, Access],
                     lmap: dict[str, str], consumer: str) -> list:
    """Writes of the shared containers go to locals (plus a store if still needed)."""
    marks = []
    for n, w in points.items():
        old = w.tasklet.output
        w.tasklet.output = Memlet(lmap[n], ())
        owner.locals[lmap[n]] = Container(lmap[n], (), graph.container(n).dtype)
        marks.append(w.tasklet)
        if keeps_global(graph, n, {consumer}):
            store = Tasklet(f"{w.tasklet.id}/store", E.Var("v"), {"v": Memlet(lmap[n], ())}, old)
            insert_after(work, w.tasklet, [store])
            marks.append(store)
    return marks


def _localize_wcr(m: MapNode, container: str, graph: Graph) -> None:
    """Turn ``out[outer] (wcr) = …`` inside a nested map into a local accumulator plus a plain
    ``out[outer] = acc`` after that nested map, so consumers can run at the outer point."""
    ws = writes(m, container)
    if len(ws) != 1 or ws[0].memlet.wcr is None or len(ws[0].scopes) < 2:
        return
    acc = ws[0]
    inner = acc.scopes[-1]
    outer_params = {p for s in acc.scopes[:-1] for p in s.param_names}
    names = set() if acc.memlet.subset is None else set().union(*(E.free_vars(ix) for ix in acc.memlet.subset))
    if acc.memlet.subset is None or not names <= outer_params:
        return
    holder = acc.scopes[-2]
    _, locs, _ = kernel_names(m)
    name = fresh("_acc", Taken(locs, graph.containers))
    holder.locals[name] = Container(name, (), graph.container(container).dtype)
    old = acc.memlet
    acc.tasklet.output = Memlet(name, (), None, old.wcr)
    store = Tasklet(f"{acc.tasklet.id}/store", E.Var("v"), {"v": Memlet(name, ())}, Memlet(container, old.subset))
    insert_after(m, inner, [store])


# --- siblings --------------------------------------------------------------------------------

def merge_siblings(graph: Graph, a: MapNode, b: MapNode, new_id: str) -> MapNode:
    """Independent maps ``a`` and ``b`` over the same space: one map running both bodies."""
    if not same_space(a, b, graph):
        raise FusionError(f"'{a.id}' and '{b.id}' have different iteration spaces")
    a_params, a_locals, _ = kernel_names(a)
    fixed = {pb: E.Var(pa) for (pb, _), (pa, _) in zip(b.params, a.params)}
    pmap, lmap = _rename_map(b, set(a_params), Taken(a_locals, graph.containers), fixed)
    body_b = copy_body(b.body, pmap, lmap, _id_prefix(a, b.body, b.id))
    locals_ = {**a.locals, **{lmap[k]: Container(lmap[k], v.shape, v.dtype) for k, v in b.locals.items()}}
    m = MapNode(new_id, list(a.params), copy_body(a.body, {}, {}) + body_b, locals=locals_,
                label=f"{a.label}|{b.label}", name=new_id)
    return finalize(m, graph)


def host_sibling(graph: Graph, host: MapNode, guest: MapNode, container: str, new_id: str) -> MapNode:
    """Run single-sweep ``guest`` inside ``host``, right after host's covering read of ``container``."""
    nest = flat_nest(guest)
    if nest is None:
        raise FusionError(f"'{guest.id}' is neither pointwise nor a single sweep")
    _check_sweep(guest, nest)
    work = copy_body([host], {}, {})[0]
    work.id = new_id
    spots = [a for a in reads(work, container) if full_index(a.memlet.subset, _params(a.scopes))]
    if not spots:
        raise FusionError(f"'{host.id}' reads '{container}' nowhere once per element")
    spot = spots[0]
    targets = {container: [ix.name for ix in spot.memlet.subset]}
    binding = _binding(reads(guest, container), targets, _params(nest), extents(guest, graph),
                       extents(work, graph), guest.id)
    taken = Taken(kernel_names(work)[1], graph.containers)
    lmap = {loc: fresh(loc, taken) for loc in sorted(nest[-1].locals)}
    copies = copy_body(nest[-1].body, binding, lmap, _id_prefix(work, nest[-1].body, guest.id))
    _as_locals(copies, set(lmap.values()))
    owner = scope_of(work, spot.tasklet)
    for loc, cont in nest[-1].locals.items():
        owner.locals[lmap[loc]] = Container(lmap[loc], cont.shape, cont.dtype)
    insert_after(work, spot.tasklet, copies)
    work.label = f"{host.label}|{guest.label}"
    return finalize(work, graph)


# --- contraction epilogues -------------------------------------------------------------------

def fuse_epilogue(graph: Graph, g: OpNode, c: MapNode, new_id: str) -> OpNode:
    """Pointwise ``c`` runs on the product of contraction ``g`` as (part of) its epilogue."""
    if not pointwise(c):
        raise FusionError(f"'{c.id}' is not a pointwise map")
    shared = [n for n in g.output_names() if n is not None and n in c.input_names()]
    if not shared:
        raise FusionError(f"'{c.id}' reads nothing that '{g.id}' writes")
    acc = fused_ops.accumulator(graph, g)
    if acc.name in graph.containers:
        raise FusionError(f"the graph has a container named '{acc.name}', the name of a raw product")
    view = fused_ops.overlay(graph, acc)
    fused = absorb_consumer(view, fused_ops.epilogue_map(graph, g), c, shared, new_id)
    return fused_ops.epilogue_op(view, new_id, g, fused, acc)
