"""FLOPs in closed form: library ops (2 per multiply-add) and fused contraction nodes (their
contractions plus epilogue operations), for ``ir.movement``'s figures and the schedules."""
from __future__ import annotations

import math

from ir.fused_ops import (CONTRACTIONS, GROUP, accumulator, contraction, epilogue_flops, has_epilogue, is_group,
                          members, overlay)
from ir.graph import Graph
from ir.nodes import OpNode


def library_flops(graph: Graph, node: OpNode) -> int | None:
    """Closed-form FLOPs of library ops (2 per multiply-add); None for other ops."""
    if node.domain == "ai.dcstudio":              # contraction(s) in closed form + epilogue
        if node.op_type == GROUP or any(op == node.op_type for _, op in CONTRACTIONS):
            return fused_flops(graph, node)
    shape = lambda k: graph.container(node.inputs[k].container).concrete_shape(graph.bindings)  # noqa: E731
    op = node.op_type
    if op not in ("MatMul", "FusedMatMul", "Gemm", "Conv", "ConvTranspose", "ConvGrad", "ConvWeightGrad", "Einsum"):
        return None
    if op == "Einsum":
        return _einsum_flops(graph, node)
    first = next(m for m in node.outputs if m is not None)
    out_shape = graph.container(first.container).concrete_shape(graph.bindings)
    if op in ("MatMul", "FusedMatMul"):
        a = shape(0)
        if op == "FusedMatMul" and node.attrs.get("transBatchA") and len(a) > 2:
            a = a[1:-1] + (a[0], a[-1])            # transBatch moves axis 0 to rank-2 first
        k = a[-2] if node.attrs.get("transA") else a[-1]
        return 2 * math.prod(out_shape) * k
    if op == "Gemm":
        a = shape(0)
        k = a[0] if node.attrs.get("transA") else a[1]
        bias = math.prod(out_shape) if len(node.inputs) > 2 and node.inputs[2] is not None else 0
        return 2 * math.prod(out_shape) * k + bias
    if op in ("Conv", "ConvTranspose"):
        w = shape(1)
        x_or_y = out_shape if op == "Conv" else shape(0)
        return 2 * math.prod(w[1:]) * math.prod(x_or_y)
    if op == "ConvWeightGrad":                        # (X, dY) -> dW: one multiply-add per dW term per dY point
        return 2 * math.prod(out_shape[1:]) * math.prod(shape(1))
    if op == "ConvGrad":
        w = shape(2)
        dy = shape(0)
        return 2 * 2 * math.prod(w[1:]) * math.prod(dy)  # dX and dW, each one conv's worth
    raise AssertionError(op)


def _einsum_flops(graph: Graph, node: OpNode) -> int | None:
    """A two-operand Einsum: one multiply-add (2 FLOPs) per point of the space of all its letters."""
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    terms = eq.split("->")[0].split(",")
    if "->" not in eq or "..." in eq or len(terms) != 2 or len(node.inputs) != 2:
        return None
    sizes: dict[str, int] = {}
    for term, m in zip(terms, node.inputs):
        sizes.update(zip(term, graph.container(m.container).concrete_shape(graph.bindings)))
    return 2 * math.prod(sizes.values())


def fused_flops(graph: Graph, node: OpNode) -> int:
    """FLOPs of a fused node: contraction(s) in closed form plus epilogue operations."""
    if is_group(node):
        return sum(fused_flops(graph, m) for m in members(node))
    if not has_epilogue(node):
        return library_flops(graph, node) or 0
    base = contraction(node)
    return (library_flops(overlay(graph, accumulator(graph, node)), base) or 0) + epilogue_flops(node)
