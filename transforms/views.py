"""Views: kernels that only re-describe memory, and the index algebra that removes them.

A *view* ``Y = view(X)`` keeps X's row-major bytes and gives them another shape:
``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze`` and ``Identity`` library nodes,
and *copy maps* (one tasklet ``Y[i0, …] = X[i0, …]`` over the whole shape, i.e. an
expanded Identity). ``Expand`` is not a view: it replicates data.

Removing a view means reading (or writing) X where Y was accessed, at the same
linear position. ``blocks`` factors the two shapes into groups of dimensions with
equal products (size-1 dimensions stand alone), e.g.::

    (8, 128, 768) → (1024, 768):   [(0, 1) → (0,)], [(2,) → (1,)]
    (8, 128, 768) → (8, 128, 12, 64): [(0,) → (0,)], [(1,) → (1,)], [(2,) → (2, 3)]

and ``reindex(from_shape, to_shape)`` rewrites an index of one shape as an index of
the other, block by block: linearize (Horner: ``i0 * 128 + i1``), then delinearize
(``(l // 64) % 12``, the outermost digit without ``%``, the innermost without ``//``).
A size-1 dimension's index is 0; ``reindex`` passes the source's size-1 indices (those that
name a parameter first) on to the target's size-1 dimensions rather than writing the
constant, so that a map over a ``[1]`` tensor that now writes its ``[1, 1]`` view writes
``y[i0, 0]``, not ``y[0, 0]``: a store at constant indices from a map with parameters is one
the reference executor's vectorized stores cannot do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ir import expr as E
from ir.graph import Graph
from ir.memory import VIEW_OPS
from ir.nodes import MapNode, Tasklet
from transforms.rewiring import IndexFn

Shape = tuple[int, ...]


@dataclass(frozen=True)
class View:
    """``target = view(source)``: node ``node_id``, both containers and their static shapes."""

    node_id: str
    source: str
    target: str
    source_shape: Shape
    target_shape: Shape
    extra_inputs: tuple[str, ...] = ()   # shape/axes operands of the view op

    @property
    def same_shape(self) -> bool:
        return self.source_shape == self.target_shape


def static_shape(graph: Graph, name: str) -> Shape | None:
    try:
        return graph.container(name).concrete_shape(graph.bindings)
    except KeyError:
        return None


def _int(v: int) -> E.Const:
    return E.Const(int(v), "int64")


def _is_point(subset, params: list[str]) -> bool:
    return subset is not None and len(subset) == len(params) and all(
        isinstance(ix, E.Var) and ix.name == p for ix, p in zip(subset, params))


def copy_statement(m: MapNode) -> Tasklet | None:
    """The only statement of ``m`` if it is a plain copy ``dst[…] = src[…]`` (no locals, no wcr)."""
    if len(m.body) != 1 or m.locals or not isinstance(m.body[0], Tasklet):
        return None
    t = m.body[0]
    if not isinstance(t.expr, E.Var) or list(t.inputs) != [t.expr.name] or t.output.wcr:
        return None
    return t


def covers(m: MapNode, shape: Shape | None) -> bool:
    """True if ``m``'s parameters run over exactly ``0:d`` for each ``d`` of ``shape``."""
    return shape is not None and len(m.params) == len(shape) and all(
        isinstance(r.start, E.Const) and r.start.value == 0 and r.step == 1 and
        isinstance(r.stop, E.Const) and r.stop.value == d for (_, r), d in zip(m.params, shape))


def copy_map_containers(graph: Graph, m: MapNode) -> tuple[str, str] | None:
    """(source, target) if ``m`` is ``target[i] = source[i]`` over the whole (equal) shape."""
    t = copy_statement(m)
    if t is None:
        return None
    src, dst = t.inputs[t.expr.name], t.output
    if not (_is_point(src.subset, m.param_names) and _is_point(dst.subset, m.param_names)):
        return None
    shape = static_shape(graph, dst.container)
    if not covers(m, shape) or static_shape(graph, src.container) != shape:
        return None
    if graph.container(src.container).dtype != graph.container(dst.container).dtype:
        return None
    return src.container, dst.container


def view_reason(graph: Graph, node) -> str | None:
    """None if ``node`` is a view (see ``view_of``), else why not, naming it."""
    if isinstance(node, MapNode):
        if copy_map_containers(graph, node) is None:
            return f"map '{node.id}' is not a plain copy (one tasklet target[i] = source[i])"
        return None
    if node.domain or node.op_type not in VIEW_OPS:
        extra = "; it replicates data" if node.op_type == "Expand" else ""
        return f"'{node.id}' ({node.qualified_type}) is not a view op ({', '.join(sorted(VIEW_OPS))}){extra}"
    if not node.inputs or node.inputs[0] is None or len([o for o in node.outputs if o is not None]) != 1:
        return f"'{node.id}' ({node.op_type}) has no data input or not exactly one output"
    src, dst = node.inputs[0].container, node.outputs[0].container
    for name in (src, dst):
        if static_shape(graph, name) is None:
            return f"'{node.id}' ({node.op_type}): '{name}' has a symbolic or unknown shape"
    a, b = static_shape(graph, src), static_shape(graph, dst)
    if math.prod(a) != math.prod(b) or math.prod(a) == 0:
        return f"'{node.id}' ({node.op_type}) maps {list(a)} to {list(b)}: not the same (non-empty) data"
    return None


def view_of(graph: Graph, node) -> View | None:
    """The view ``node`` is, or None (``view_reason`` says why)."""
    if view_reason(graph, node) is not None:
        return None
    if isinstance(node, MapNode):
        src, dst = copy_map_containers(graph, node)
        extra: tuple[str, ...] = ()
    else:
        src, dst = node.inputs[0].container, node.outputs[0].container
        extra = tuple(m.container for m in node.inputs[1:] if m is not None)
    return View(node.id, src, dst, static_shape(graph, src), static_shape(graph, dst), extra)


def blocks(a: Shape, b: Shape) -> list[tuple[list[int], list[int]]] | None:
    """Groups of dimensions of ``a`` and ``b`` with equal products (see module docstring);
    size-1 dimensions belong to no group. None if the element counts differ."""
    if math.prod(a) != math.prod(b) or 0 in a or 0 in b:
        return None
    ia = [k for k, d in enumerate(a) if d != 1]
    ib = [k for k, d in enumerate(b) if d != 1]
    out, i, j = [], 0, 0
    while i < len(ia):
        ga, gb = [ia[i]], [ib[j]]
        pa, pb = a[ia[i]], b[ib[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(ia[i])
                pa, i = pa * a[ia[i]], i + 1
            else:
                gb.append(ib[j])
                pb, j = pb * b[ib[j]], j + 1
        out.append((ga, gb))
    return out


def linearize(index: list[E.Expr], sizes: list[int]) -> E.Expr:
    """Row-major position of ``index`` within a block of ``sizes`` (Horner form)."""
    lin = index[0]
    for ix, size in zip(index[1:], sizes[1:]):
        lin = E.Bin("add", E.Bin("mul", lin, _int(size)), ix)
    return lin


def delinearize(lin: E.Expr, sizes: list[int]) -> list[E.Expr]:
    """The per-dimension digits of position ``lin`` within a block of ``sizes``."""
    out = []
    for k, size in enumerate(sizes):
        stride = math.prod(sizes[k + 1:])
        digit = E.Bin("floordiv", lin, _int(stride)) if stride > 1 else lin
        out.append(E.Bin("mod", digit, _int(size)) if k > 0 else digit)
    return out


def reindex(from_shape: Shape, to_shape: Shape) -> IndexFn:
    """Index of a ``from_shape`` tensor → index of the same element in its ``to_shape`` view."""
    groups = blocks(from_shape, to_shape)
    if groups is None:
        raise ValueError(f"{list(from_shape)} and {list(to_shape)} hold different numbers of elements")

    ones_from = [k for k, d in enumerate(from_shape) if d == 1]
    ones_to = [k for k, d in enumerate(to_shape) if d == 1]

    def fn(index: tuple[E.Expr, ...]) -> tuple[E.Expr, ...]:
        out: list[E.Expr] = [_int(0)] * len(to_shape)
        named = sorted(ones_from, key=lambda k: isinstance(index[k], E.Const))   # parameters first
        for kf, kt in zip(named, ones_to):   # 0 either way; kept so a write still names its map parameters
            out[kt] = index[kf]
        for ga, gb in groups:
            lin = linearize([index[k] for k in ga], [from_shape[k] for k in ga])
            for k, digit in zip(gb, delinearize(lin, [to_shape[k] for k in gb])):
                out[k] = digit
        return tuple(out)
    return fn


__all__ = ["VIEW_OPS", "View", "blocks", "copy_map_containers", "copy_statement", "covers", "delinearize",
           "linearize", "reindex", "static_shape", "view_of", "view_reason"]
