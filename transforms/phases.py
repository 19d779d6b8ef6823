"""Phases of a training step: which kernels belong to the forward pass.

The forward pass is every kernel the loss depends on — the transitive producers of the
graph outputs whose role is ``output`` (the loss; gradients, new parameters and new
optimizer state have other roles). Every other kernel belongs to the backward pass or the
optimizer. This needs no naming convention (ORT's ``_Grad`` suffixes, autodiff prefixes)
and survives fusion: a fused kernel is forward if the loss depends on it.

Used by ``recompute`` (backward readers of forward activations) and ``mixed_precision``
(float16 gradients underflow without loss scaling).
"""
from __future__ import annotations

from ir import memory
from ir.containers import Role
from ir.graph import Graph


def has_loss(graph: Graph) -> bool:
    """True if some graph output has role ``output`` (a loss)."""
    return any(graph.containers[n].role is Role.OUTPUT for n in graph.outputs)


def forward_kernels(graph: Graph) -> frozenset[str]:
    """Ids of the kernels the loss depends on (empty when the graph has no loss); built once while the graph
    is held (``ir.memory.holding``: a ranking checks many recomputations on one graph)."""
    return memory.analysis(graph, "forward_kernels", lambda: _forward_kernels(graph))


def _forward_kernels(graph: Graph) -> frozenset[str]:
    stack = [graph.producer(n) for n in graph.outputs if graph.containers[n].role is Role.OUTPUT]
    seen: set[str] = set()
    while stack:
        node = stack.pop()
        if node is None or node.id in seen:
            continue
        seen.add(node.id)
        stack.extend(graph.predecessors(node))
    return frozenset(seen)


__all__ = ["forward_kernels", "has_loss"]
