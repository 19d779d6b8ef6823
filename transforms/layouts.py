"""Layouts: transposes, permutation algebra, and re-laying out the kernels that access a tensor.

Conventions (NumPy's): ``transpose(x, p)`` has axis ``k`` = axis ``p[k]`` of ``x``;
``transpose(transpose(x, q), p) = transpose(x, compose(p, q))`` with
``compose(p, q)[k] = q[p[k]]``.

A *transpose* is a ``Transpose`` library node or a *transpose map* (one copy tasklet
``y[i0, …] = x[i_perm…]`` over the whole output, i.e. an expanded Transpose).

``relayout(graph, node, old, new, q)`` returns a copy of ``node`` that accesses
``new`` instead of ``old``, where ``old = transpose(new, q)``:

- maps: every tasklet index ``old[e]`` becomes ``new[e']`` with ``e'[q[k]] = e[k]``;
- contractions (MatMul, Gemm, FusedMatMul, Einsum): the operand/output letters move
  (``contractions.permute``) and the node is re-emitted with transposition flags,
  or as an Einsum when flags cannot say it;
- ``Transpose`` nodes: reading gives ``perm' = compose(perm, q)``, writing gives
  ``perm' = compose(inverse(q), perm)`` (``perm_after``); an identity ``perm'`` means
  the transpose *vanishes* (its readers can read its source directly).
Any other kernel raises ``LayoutError`` with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir import expr as E
from ir.graph import Graph
from ir.nodes import MapNode, OpNode
from transforms.contractions import ContractionError, emit, is_contraction, permute, spec_of
from transforms.rewiring import RewireError, copy_node, reindex_map, rename
from transforms.views import copy_statement, covers, static_shape

Perm = tuple[int, ...]


class LayoutError(Exception):
    """Why a kernel cannot access a tensor in another layout (message names the kernel)."""


@dataclass(frozen=True)
class Transpose:
    """``target = transpose(source, perm)`` computed by kernel ``node_id``."""

    node_id: str
    source: str
    target: str
    perm: Perm


def compose(p: Perm, q: Perm) -> Perm:
    return tuple(q[k] for k in p)


def inverse(p: Perm) -> Perm:
    out = [0] * len(p)
    for k, axis in enumerate(p):
        out[axis] = k
    return tuple(out)


def is_identity(p: Perm) -> bool:
    return tuple(p) == tuple(range(len(p)))


def permuted_shape(shape: tuple, p: Perm) -> tuple:
    return tuple(shape[k] for k in p)


def _op_perm(graph: Graph, node: OpNode) -> Perm | None:
    shape = static_shape(graph, node.inputs[0].container) if node.inputs and node.inputs[0] else None
    if shape is None:
        return None
    rank = len(shape)
    perm = node.attrs.get("perm")
    perm = tuple(int(p) % max(rank, 1) for p in perm) if perm else tuple(range(rank - 1, -1, -1))
    return perm if sorted(perm) == list(range(rank)) else None


def _map_perm(graph: Graph, m: MapNode) -> tuple[str, str, Perm] | None:
    t = copy_statement(m)
    if t is None:
        return None
    src, dst, names = t.inputs[t.expr.name], t.output, m.param_names
    if dst.subset is None or [getattr(ix, "name", None) for ix in dst.subset] != names:
        return None
    reads = [getattr(ix, "name", None) for ix in (src.subset or ())]
    if sorted(r for r in reads if r is not None) != sorted(names) or len(reads) != len(names):
        return None
    perm = tuple(reads.index(p) for p in names)
    sshape, dshape = static_shape(graph, src.container), static_shape(graph, dst.container)
    if sshape is None or not covers(m, dshape) or permuted_shape(sshape, perm) != dshape:
        return None
    return src.container, dst.container, perm


def transpose_of(graph: Graph, node) -> Transpose | None:
    """The transpose ``node`` computes (identity permutations included), or None."""
    if isinstance(node, OpNode):
        if node.domain or node.op_type != "Transpose" or not node.outputs or node.outputs[0] is None:
            return None
        perm = _op_perm(graph, node)
        return None if perm is None else Transpose(node.id, node.inputs[0].container,
                                                   node.outputs[0].container, perm)
    found = _map_perm(graph, node) if isinstance(node, MapNode) else None
    return None if found is None else Transpose(node.id, *found)


def _map_fn(q: Perm):
    def fn(index: tuple[E.Expr, ...]) -> tuple[E.Expr, ...]:
        out: list[E.Expr] = [E.Const(0, "int64")] * len(q)
        for k, ix in enumerate(index):
            out[q[k]] = ix
        return tuple(out)
    return fn


def _relayout_transpose(node: OpNode, t: Transpose, old: str, new: str, q: Perm) -> OpNode:
    node.attrs["perm"] = list(perm_after(t, old, q))
    return rename(node, old, new)


def relayout(graph: Graph, node, old: str, new: str, q: Perm, allow_einsum: bool = True):
    """A copy of ``node`` accessing ``new`` where ``old = transpose(new, q)`` (see module doc).

    Maps are returned with stale propagated memlets (``rewiring.refresh`` after the
    graph's containers are final)."""
    what = f"'{node.id}' ({node.qualified_type if isinstance(node, OpNode) else 'map'})"
    t = transpose_of(graph, node) if isinstance(node, OpNode) else None
    if t is not None:
        return _relayout_transpose(copy_node(node), t, old, new, q)
    if isinstance(node, MapNode):
        try:
            return reindex_map(copy_node(node), old, len(q), new, _map_fn(q))
        except RewireError as e:
            raise LayoutError(f"{what}: {e}") from None
    if is_contraction(node):
        try:
            return emit(graph, node, permute(spec_of(graph, node), old, new, q), allow_einsum)
        except ContractionError as e:
            raise LayoutError(f"{what} cannot access '{old}' permuted by {list(q)}: {e}") from None
    raise LayoutError(f"{what} cannot access '{old}' in another layout (only maps, contractions and "
                      "Transposes can)")


def perm_after(t: Transpose, old: str, q: Perm) -> Perm:
    """The permutation transpose ``t`` computes once ``old = transpose(new, q)`` is relaid."""
    perm = t.perm
    if t.source == old:
        perm = compose(perm, q)
    if t.target == old:
        perm = compose(inverse(q), perm)
    return perm


__all__ = ["LayoutError", "Perm", "Transpose", "compose", "inverse", "is_identity", "permuted_shape",
           "perm_after", "relayout", "transpose_of"]
