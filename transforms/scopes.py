"""Editing map scopes: renaming, copying, finding accesses, fusing bodies.

The fusions (``map_fusion``, ``reduction_fusion``, ``optimizer_fusion``) are built
from these pieces:

- ``copy_body`` deep-copies statements, renaming parameters and locals;
- ``accesses`` lists every tasklet read/write of a container with its scope chain;
- ``point_write`` finds the single plain (no wcr) write of a container at
  distinct parameters — the point a consumer can be fused onto;
- ``fresh`` gives names that clash with nothing in a kernel or the graph.

Invariant kept by all fusions: parameter names and local names are unique within
one top-level kernel, and tasklet ids are unique within it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Mapping

from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet


def rename_index(ix, params: Mapping[str, E.Expr]):
    if isinstance(ix, Range):
        return Range(E.substitute(ix.start, params), E.substitute(ix.stop, params), ix.step)
    return E.substitute(ix, params)


def rename_memlet(m: Memlet, params: Mapping[str, E.Expr], containers: Mapping[str, str]) -> Memlet:
    subset = None if m.subset is None else tuple(rename_index(ix, params) for ix in m.subset)
    return Memlet(containers.get(m.container, m.container), subset, m.volume, m.wcr)


def copy_body(items: Iterable, params: Mapping[str, E.Expr], containers: Mapping[str, str],
              id_prefix: str = "") -> list:
    """Deep copies of ``items`` with params substituted, containers renamed, ids prefixed."""
    out = []
    for item in items:
        if isinstance(item, MapNode):
            new_params = [(params[p].name if isinstance(params.get(p), E.Var) else p, rename_index(r, params))
                          for p, r in item.params]
            locs = {containers.get(k, k): Container(containers.get(k, k), c.shape, c.dtype, c.role)
                    for k, c in item.locals.items()}
            out.append(MapNode(id_prefix + item.id, new_params, copy_body(item.body, params, containers, id_prefix),
                               locals=locs, label=item.label, name=item.name, provenance=item.provenance))
        else:
            ins = {k: rename_memlet(m, params, containers) for k, m in item.inputs.items()}
            expr = E.substitute(item.expr, {k: v for k, v in params.items() if k not in item.inputs})
            out.append(Tasklet(id_prefix + item.id, expr, ins, rename_memlet(item.output, params, containers),
                               name=item.name, provenance=item.provenance))
    return out


def kernel_names(m: MapNode) -> tuple[set[str], set[str], set[str]]:
    """(parameter names, local names, tasklet/map ids) used anywhere in kernel ``m``."""
    params, locs, ids = set(m.param_names), set(m.locals), {m.id}
    for node, _ in m.walk():
        ids.add(node.id)
        if isinstance(node, MapNode):
            params.update(node.param_names)
            locs.update(node.locals)
    return params, locs, ids


class Taken:
    """Names in use: a kernel's own (a set that ``fresh`` adds to) and a graph's containers, read through
    without copying them (a copy per fusion cost O(containers): 4 s of a 64-step GRU's recipe)."""

    def __init__(self, own: Iterable[str], containers: Mapping[str, object]) -> None:
        self.own, self.containers = set(own), containers

    def __contains__(self, name: str) -> bool:
        return name in self.own or name in self.containers

    def add(self, name: str) -> None:
        self.own.add(name)


def fresh(base: str, taken: set[str] | Taken) -> str:
    """``base`` or ``base_1``, ``base_2``… — the first not in ``taken`` (which is updated)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


@dataclass(frozen=True)
class Access:
    tasklet: Tasklet
    connector: str | None       # None for the tasklet's output
    memlet: Memlet
    scopes: tuple[MapNode, ...]  # enclosing maps, outermost first (the kernel itself first)


def accesses(m: MapNode, container: str) -> list[Access]:
    """Every tasklet access (reads and the output) of ``container`` inside kernel ``m``."""
    out = []
    for node, scopes in m.walk():
        if isinstance(node, Tasklet):
            for conn, mem in node.inputs.items():
                if mem.container == container:
                    out.append(Access(node, conn, mem, scopes))
            if node.output.container == container:
                out.append(Access(node, None, node.output, scopes))
    return out


def reads(m: MapNode, container: str) -> list[Access]:
    return [a for a in accesses(m, container) if a.connector is not None]


def writes(m: MapNode, container: str) -> list[Access]:
    return [a for a in accesses(m, container) if a.connector is None]


def point_write(m: MapNode, container: str) -> Access | None:
    """The single plain write of ``container`` whose index is distinct parameters of its scopes."""
    ws = writes(m, container)
    if len(ws) != 1 or ws[0].memlet.wcr is not None or ws[0].memlet.subset is None:
        return None
    names = [ix.name if isinstance(ix, E.Var) else None for ix in ws[0].memlet.subset]
    scope_params = {p for s in ws[0].scopes for p in s.param_names}
    if None in names or len(set(names)) != len(names) or not set(names) <= scope_params:
        return None
    return ws[0]


def parents(m: MapNode) -> dict[int, list]:
    """id(body list owner) helper: maps every statement to the body list that holds it."""
    out: dict[int, list] = {id(s): m.body for s in m.body}
    for node, _ in m.walk():
        if isinstance(node, MapNode):
            out.update({id(s): node.body for s in node.body})
    return out


def scope_of(m: MapNode, stmt) -> MapNode:
    """The innermost map whose body holds ``stmt``."""
    if any(s is stmt for s in m.body):
        return m
    for node, _ in m.walk():
        if isinstance(node, MapNode) and any(s is stmt for s in node.body):
            return node
    raise KeyError(stmt.id)


def insert_after(m: MapNode, anchor, new_items: list) -> None:
    """Insert ``new_items`` right after statement ``anchor`` in its body list."""
    body = parents(m)[id(anchor)]
    pos = next(k for k, s in enumerate(body) if s is anchor)
    body[pos + 1:pos + 1] = new_items


def insert_before(m: MapNode, anchor, new_items: list) -> None:
    body = parents(m)[id(anchor)]
    pos = next(k for k, s in enumerate(body) if s is anchor)
    body[pos:pos] = new_items


def replace_input(t: Tasklet, conn: str, memlet: Memlet) -> None:
    t.inputs[conn] = memlet


def same_space(a: MapNode, b: MapNode, graph: Graph) -> bool:
    """Top-level iteration spaces of equal rank and extents (names may differ)."""
    from ir.maps import range_bounds
    if len(a.params) != len(b.params):
        return False
    return all(range_bounds(ra, graph.bindings) == range_bounds(rb, graph.bindings)
               for (_, ra), (_, rb) in zip(a.params, b.params))


def extents(m: MapNode, graph: Graph) -> dict[str, tuple[int, int, int]]:
    from ir.maps import range_bounds
    out = {}
    for p, r in m.params:
        out[p] = range_bounds(r, graph.bindings)
    for node, _ in m.walk():
        if isinstance(node, MapNode):
            for p, r in node.params:
                out[p] = range_bounds(r, graph.bindings)
    return out


def clone_kernel(m: MapNode) -> MapNode:
    """A deep copy of a kernel (new statement objects, same names)."""
    return copy.deepcopy(m)
