"""Rewiring: pointing kernels at other containers, with or without re-indexing.

The level-3 transformations (``constant_folding``, ``reshape_elimination``,
``transpose_elimination``, ``layout_select``) never build new kernels from
scratch; they edit *copies* of the kernels that touch a container and swap the
copies in. The pieces:

- ``copy_node`` deep-copies a kernel (``check`` plans on copies, never on the graph);
- ``rename`` makes a kernel read/write container ``new`` wherever it named ``old``
  (same shape: subsets are kept);
- ``reindex_map`` rewrites every tasklet access of ``old`` inside a map as an
  access of ``new`` through an index function (views re-linearize, layouts permute);
- ``replace`` swaps a kernel for its edited copy at the same position of
  ``graph.nodes``; ``drop_unused`` removes containers nothing uses any more.

``IndexFn`` maps the per-dimension index expressions of ``old`` to those of ``new``.
"""
from __future__ import annotations

import copy
from typing import Callable, Iterable

from ir import expr as E
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet

ComputeNode = OpNode | MapNode
IndexFn = Callable[[tuple[E.Expr, ...]], tuple[E.Expr, ...]]


class RewireError(Exception):
    """Why an access cannot be rewired (message only; callers name the nodes)."""


def copy_node(node: ComputeNode) -> ComputeNode:
    """A deep copy (new statement objects; memlets and expressions are immutable anyway)."""
    return copy.deepcopy(node)


def _renamed(m: Memlet | None, old: str, new: str) -> Memlet | None:
    return m.with_container(new) if m is not None and m.container == old else m


def rename(node: ComputeNode, old: str, new: str) -> ComputeNode:
    """``node`` (edited in place) accessing ``new`` wherever it accessed ``old``."""
    node.inputs = [_renamed(m, old, new) for m in node.inputs]
    node.outputs = [_renamed(m, old, new) for m in node.outputs]
    if isinstance(node, MapNode):
        for stmt, _ in node.walk():
            if isinstance(stmt, Tasklet):
                stmt.inputs = {k: _renamed(m, old, new) for k, m in stmt.inputs.items()}
                stmt.output = _renamed(stmt.output, old, new)
    return node


def _point(m: Memlet, rank: int) -> tuple[E.Expr, ...]:
    if m.subset is None:
        if rank == 0:
            return ()
        raise RewireError(f"a tasklet reads all of '{m.container}' at once")
    if any(isinstance(ix, Range) for ix in m.subset):
        raise RewireError(f"a tasklet accesses a range of '{m.container}'")
    return tuple(m.subset)


def reindex_map(m: MapNode, old: str, old_rank: int, new: str, fn: IndexFn) -> MapNode:
    """``m`` (edited in place): every tasklet access ``old[e]`` becomes ``new[fn(e)]``.

    The map's propagated memlets are stale afterwards: call ``finalize(m, graph)``
    once ``new`` has its final shape in the graph (``refresh``)."""
    for stmt, _ in m.walk():
        if not isinstance(stmt, Tasklet):
            continue
        for conn, mem in list(stmt.inputs.items()):
            if mem.container == old:
                stmt.inputs[conn] = Memlet(new, fn(_point(mem, old_rank)), mem.volume, mem.wcr)
        out = stmt.output
        if out.container == old:
            stmt.output = Memlet(new, fn(_point(out, old_rank)), out.volume, out.wcr)
    return m


def refresh(graph: Graph, node: ComputeNode) -> ComputeNode:
    """Recompute a map's propagated memlets (no-op for library nodes)."""
    return finalize(node, graph) if isinstance(node, MapNode) else node


def replace(graph: Graph, node: ComputeNode) -> None:
    """Put ``node`` where the graph's node with the same id is (use-def updated)."""
    graph.replace_node(node.id, node)
    if isinstance(node, OpNode):
        graph.opsets.setdefault(node.domain, node.opset)   # e.g. a MatMul that became FusedMatMul


def drop_unused(graph: Graph, names: Iterable[str]) -> None:
    """Remove the containers among ``names`` that nothing reads or writes and that are not
    graph inputs or outputs (their initializer values go with them)."""
    for name in dict.fromkeys(names):
        if name not in graph.containers or name in graph.inputs or name in graph.outputs:
            continue
        if graph.producer(name) is None and not graph.consumers(name):
            graph.remove_container(name)


def accessors(graph: Graph, container: str) -> list[ComputeNode]:
    """The producer (first, if any) and the consumers of ``container``, in graph order."""
    prod = graph.producer(container)
    users = sorted((c for c in graph.consumers(container) if prod is None or c.id != prod.id),
                   key=lambda n: graph.nodes.label(n.id))
    return ([prod] if prod is not None else []) + users


__all__ = ["IndexFn", "RewireError", "accessors", "copy_node", "drop_unused", "refresh", "rename",
           "reindex_map", "replace"]
