"""Structural verification of a graph (``verify(graph)``).

Checks: every memlet names an existing container; every container has at most
one writer and graph inputs/initializers have none; every read container is a
graph input, an initializer or written by a node; the graph is acyclic; graph
outputs are produced; map bodies only use their own params, locals and the
map's global containers; tasklet inputs bind every free variable of the
expression; wcr kinds are known. Errors name the node and carry a printed
window of the graph around it (``add_note``), as JAX's ``check_jaxpr`` does.
"""
from __future__ import annotations

from typing import Iterable

from ir import expr as E
from ir.errors import GraphError, VerificationError
from ir.graph import Graph
from ir.memlet import WCR_KINDS, Range
from ir.nodes import MapNode, Tasklet
from ir.printer import node_to_text

WINDOW = 10


def _fail(graph: Graph, node, message: str, hint: str = "") -> VerificationError:
    err = VerificationError(message, node, graph, hint=hint)
    err.add_note(window(graph, node.id if node is not None else None))
    return err


def window(graph: Graph, node_id: str | None, radius: int = WINDOW) -> str:
    """Printed kernels around ``node_id`` (±radius), the node marked with '>>'."""
    ids = list(graph.nodes)
    at = ids.index(node_id) if node_id in ids else 0
    lines = ["in graph:"]
    for ident in ids[max(0, at - radius): at + radius + 1]:
        mark = ">> " if ident == node_id else "   "
        text = node_to_text(graph.nodes[ident]).splitlines()
        lines.append(mark + text[0] + (" …" if len(text) > 1 else ""))
    return "\n".join(lines)


def verify(graph: Graph, maps: Iterable[str] | None = None) -> None:
    """Raise ``VerificationError`` on the first structural problem found. ``maps`` limits the
    check of map bodies to those ids (the kernels a rewrite created or changed; every other
    body is as it was when last verified); the graph-level checks always run in full."""
    bodies = None if maps is None else set(maps)
    writer: dict[str, str] = {}
    defined = set(graph.inputs) | set(graph.values)
    for node in graph.nodes.values():
        _check_memlets(graph, node)
        for m in node.outputs:
            if m is None:
                continue
            if m.container in writer:
                raise _fail(graph, node, f"container '{m.container}' is also written by '{writer[m.container]}'",
                            "Every container has exactly one writer")
            if m.container in defined:
                raise _fail(graph, node, f"writes '{m.container}', which is a graph input or initializer")
            writer[m.container] = node.id
        if isinstance(node, MapNode) and (bodies is None or node.id in bodies):
            _verify_map(graph, node)
    for node in graph.nodes.values():
        for m in node.inputs:
            if m is not None and m.container not in defined and m.container not in writer:
                raise _fail(graph, node, f"reads '{m.container}', which nothing defines")
    for name in graph.outputs:
        if name not in writer and name not in defined:
            raise _fail(graph, None, f"graph output '{name}' is never produced")
    _check_acyclic(graph)


def verify_edit(graph: Graph, nodes: Iterable[str], containers: Iterable[str]) -> None:
    """``verify`` restricted to what an edit can have broken, for a graph that verified before it:
    the ``nodes`` it created or changed (memlets name known containers, each output is written by
    that node only and is no input or initializer, every read is defined, map bodies), the
    ``containers`` a removed or changed node wrote (still defined wherever read, graph outputs
    still produced), and the order (the graph's remembered topological order, else a sort).
    Cost: the edit's size, not the graph's (the whole check took 10 ms per apply at 12 layers)."""
    defined = set(graph.inputs)
    for ident in nodes:
        node = graph.nodes[ident]
        _check_memlets(graph, node)
        for m in node.outputs:
            if m is None:
                continue
            writer = graph.producer(m.container)
            if writer is not None and writer.id != node.id:
                raise _fail(graph, node, f"container '{m.container}' is also written by '{writer.id}'",
                            "Every container has exactly one writer")
            if m.container in defined or m.container in graph.values:
                raise _fail(graph, node, f"writes '{m.container}', which is a graph input or initializer")
        for m in node.inputs:
            if m is not None and not _defined(graph, m.container, defined):
                raise _fail(graph, node, f"reads '{m.container}', which nothing defines")
        if isinstance(node, MapNode):
            _verify_map(graph, node)
    for name in containers:
        if _defined(graph, name, defined):
            continue
        readers = graph.consumers(name)
        if readers:
            raise _fail(graph, readers[0], f"reads '{name}', which nothing defines")
        if name in graph.outputs:
            raise _fail(graph, None, f"graph output '{name}' is never produced")
    if not graph.is_sorted():
        _check_acyclic(graph)


def _check_memlets(graph: Graph, node) -> None:
    for m in node.inputs + node.outputs:
        if m is not None and m.container not in graph.containers:
            raise _fail(graph, node, f"memlet names unknown container '{m.container}'")


def _check_acyclic(graph: Graph) -> None:
    try:
        graph.topo_order()
    except GraphError as e:
        raise _fail(graph, e.node, "the graph has a cycle through this node") from None


def _defined(graph: Graph, name: str, inputs: set[str]) -> bool:
    return name in inputs or name in graph.values or graph.producer(name) is not None


def _verify_map(graph: Graph, m: MapNode) -> None:
    outer_in = {x.container for x in m.inputs}
    outer_out = {x.container for x in m.outputs}
    for node, scopes in m.walk():
        params = {p for s in scopes for p, _ in s.params}
        if isinstance(node, MapNode):
            clash = params & set(node.param_names)
            if clash:
                raise _fail(graph, m, f"nested map {node.id} reuses parameter(s) {sorted(clash)}")
            continue
        locs = {name for s in scopes for name in s.locals}
        _verify_tasklet(graph, m, node, params, locs, outer_in, outer_out)


def _verify_tasklet(graph, m: MapNode, t: Tasklet, params, locs, outer_in, outer_out) -> None:
    missing = E.free_vars(t.expr) - set(t.inputs) - params
    if missing:
        raise _fail(graph, m, f"tasklet {t.id} uses unbound variable(s) {sorted(missing)}")
    for conn, mem in list(t.inputs.items()) + [("<out>", t.output)]:
        is_out = conn == "<out>"
        allowed = locs | (outer_out if is_out else outer_in | outer_out)
        if mem.container not in allowed:
            role = "writes" if is_out else "reads"
            raise _fail(graph, m, f"tasklet {t.id} {role} '{mem.container}', which is neither a local nor "
                        f"a propagated {'output' if is_out else 'input'} of the map",
                        "Call ir.maps.finalize(map, graph) after editing its body")
        for ix in mem.subset or ():
            names = E.free_vars(ix) if not isinstance(ix, Range) else frozenset()
            unknown = names - params - set(graph.bindings)
            if unknown:
                raise _fail(graph, m, f"tasklet {t.id}: index of '{mem.container}' uses {sorted(unknown)}, "
                            "not parameters of an enclosing map")
    if t.output.wcr is not None and t.output.wcr not in WCR_KINDS:
        raise _fail(graph, m, f"tasklet {t.id} has unknown wcr '{t.output.wcr}'")


__all__ = ["verify", "window"]
