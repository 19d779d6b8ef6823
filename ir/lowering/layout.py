"""Transpose as a map: a pure re-indexing copy, 0 FLOPs per element.

``y[i0, …, i{r-1}] = x[…]`` where input axis ``perm[k]`` is indexed by ``i{k}``.
Expanding it lets a later fusion fold the permutation into a consumer's memlet
(the classic transpose-into-elementwise fusion). Every other shape or
data-movement op stays a library call (see ``registry.LIBRARY_REASONS``).
"""
from __future__ import annotations

from ir.lowering.builder import KernelBuilder, NotExpandable, Pointwise
from ir.lowering.registry import expansion
from ir.nodes import MapNode


@expansion("Transpose")
def transpose(k: KernelBuilder, impl: str) -> MapNode:
    x = k.in_name(0)
    rank = len(k.shape(x))
    perm = [int(p) % max(rank, 1) for p in (k.attr("perm") or range(rank - 1, -1, -1))]
    if sorted(perm) != list(range(rank)):
        raise NotExpandable(f"unsupported attribute value perm={perm}")
    k.dtype(x)
    pw = Pointwise(k)
    index = [""] * rank
    for out_axis, in_axis in enumerate(perm):
        index[in_axis] = pw.names[out_axis]
    r = pw.reads()
    pw.store(0, r.read("x", k.at(x, index)), r)
    return pw.kernel()


__all__ = ["transpose"]
