"""Progressive lowering: an ``OpNode`` (one library kernel) → one ``MapNode`` of tasklets.

Package map (data flow: ``OpNode`` → rule from ``EXPANSIONS`` → ``KernelBuilder``
→ ``MapNode`` → ``ir.maps.finalize`` → spliced into the graph):

- ``builder.py``      KernelBuilder (operands, fresh params, broadcast memlets, tasklets,
                      locals, nested maps), ``Reads``, ``NotExpandable``
- ``registry.py``     ``EXPANSIONS`` + ``@expansion`` decorator, library-call reasons
- ``rows.py``         Rows/Sweep: a map over kept axes with nested sweeps over reduced axes
- ``elementwise.py``  arithmetic, comparisons, logic, casts, Where/Clip, variadic Max/Min/Sum/Mean,
                      Identity, Dropout (inference), Scale, DropoutGrad
- ``activation.py``   activations (Relu … Gelu family) and their elementwise gradients
- ``layout.py``       Transpose (a pure re-indexing copy)
- ``reduce.py``       Reduce* over constant axes, keepdims, noop_with_empty_axes
- ``softmax.py``      Softmax / LogSoftmax (impls ``two_pass``, ``online``), SoftmaxGrad(_13),
                      LogSoftmaxGrad(_13)
- ``norm.py``         LayerNormalization (+ Mean/InvStdDev), SimplifiedLayerNormalization,
                      RMSNormalization, LayerNormalizationGrad, BatchNormalization (inference)
- ``optimizer.py``    ai.dcstudio AdamW, SGD, Lion

Public API: ``can_expand`` (None or a reason naming the node), ``expand`` (build the map,
graph untouched), ``expand_node`` (replace the op in place), ``expand_all``, ``impls``.
FLOP convention (``ir.movement``): Σ over tasklets of (``count_flops(expr)`` + 1 if the
output has a wcr) × iterations of its enclosing params; each family file documents its counts.
"""
from __future__ import annotations

from ir.errors import GraphError, PreconditionError, describe_node
from ir.graph import Graph
from ir.lowering.builder import KernelBuilder, NotExpandable
from ir.lowering.library import LIBRARY_IMPLS, library_impls  # noqa: F401
from ir.lowering.registry import EXPANSIONS, LIBRARY_REASONS, Expansion, expansion, lookup
from ir.maps import finalize
from ir.nodes import MapNode, OpNode

from ir.lowering import (  # noqa: F401  (the family modules fill EXPANSIONS)
    activation, elementwise, layout, norm, optimizer, reduce, softmax)


def impls(node: OpNode) -> tuple[str, ...]:
    """The implementation choices of ``node`` (first = default): of its expansion, or of the
    library call for MatMul/Gemm/FusedMatMul/Conv (``library.LIBRARY_IMPLS``); () if none."""
    rule = lookup(node.domain, node.op_type) if isinstance(node, OpNode) else None
    return rule.impls if rule is not None else library_impls(node)


def _resolve_impl(rule: Expansion, node: OpNode, impl: str | None, graph: Graph) -> str:
    if impl is None:
        return node.impl if node.impl in rule.impls else rule.default_impl
    if impl == "default":
        return rule.default_impl
    if impl not in rule.impls:
        raise PreconditionError(f"unknown implementation {impl!r}", node, graph,
                                hint=f"Choose one of {', '.join(rule.impls)}")
    return impl


def _build(graph: Graph, node: OpNode, impl: str | None) -> MapNode:
    """The unfinalized map, or ``NotExpandable``/``LookupError`` with the reason."""
    if not isinstance(node, OpNode):
        raise LookupError("is already a map")
    rule = lookup(node.domain, node.op_type)
    if rule is None:
        if node.op_type in LIBRARY_REASONS:
            raise LookupError(LIBRARY_REASONS[node.op_type])
        dom = node.domain or "ai.onnx"
        raise LookupError(f"has no expansion rule ({dom}::{node.op_type}): it stays a library call")
    return rule.build(KernelBuilder(graph, node), _resolve_impl(rule, node, impl, graph))


def can_expand(graph: Graph, node: OpNode, impl: str | None = None) -> str | None:
    """None if ``node`` can be expanded into a map (with ``impl``; None: its own choice or the
    default), else a reason that names it."""
    try:
        _build(graph, node, impl)
    except LookupError as e:
        return f"{describe_node(node)} {e.args[0]}"
    except (NotExpandable, PreconditionError) as e:
        return f"{describe_node(node)} cannot be expanded: {e.args[0]}"
    return None


def expand(graph: Graph, node: OpNode, impl: str | None = None) -> MapNode:
    """The finalized map computing ``node``'s outputs (the graph is not changed)."""
    try:
        m = _build(graph, node, impl)
    except (LookupError, NotExpandable) as e:
        raise PreconditionError(f"cannot be expanded: {e.args[0]}", node, graph,
                                hint="Check lowering.can_expand first") from None
    finalize(m, graph)
    _check_interface(graph, node, m)
    return m


def _check_interface(graph: Graph, node: OpNode, m: MapNode) -> None:
    want = {n for n in node.output_names() if n is not None}
    if set(m.output_names()) != want:
        raise GraphError(f"expansion writes {sorted(m.output_names())} instead of {sorted(want)}",
                         node, graph, hint="This is a bug in the expansion rule; report it")
    extra = set(m.input_names()) - {n for n in node.input_names() if n is not None}
    if extra:
        raise GraphError(f"expansion reads {sorted(extra)}, which are not inputs of the op", node,
                         graph, hint="This is a bug in the expansion rule; report it")


def expand_node(graph: Graph, node_id: str, impl: str | None = None) -> MapNode:
    """Replace op ``node_id`` by its map, at the same position of ``graph.nodes``."""
    node = graph.node(node_id)
    m = expand(graph, node, impl)
    if m.id in graph.nodes:
        raise GraphError(f"the map id '{m.id}' is already taken", node, graph,
                         hint="Remove or rename the existing node first")
    graph.replace_node(node_id, m)
    return m


def expand_all(graph: Graph) -> list[str]:
    """Expand every expandable op (default implementations); return the new map ids."""
    created = []
    for node in list(graph.nodes.values()):
        if isinstance(node, OpNode) and can_expand(graph, node) is None:
            created.append(expand_node(graph, node.id).id)
    return created


__all__ = ["EXPANSIONS", "Expansion", "KernelBuilder", "NotExpandable", "can_expand", "expand",
           "expand_all", "expand_node", "expansion", "impls"]
