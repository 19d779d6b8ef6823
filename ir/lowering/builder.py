"""The kernel builder: the vocabulary expansion rules are written in.

A ``KernelBuilder`` wraps one ``OpNode`` of a graph and hands out what a rule
needs to write its map without touching the graph:

- operands: ``in_name``/``out_name``, concrete ``shape``/``dtype``, attributes,
  and ``constant`` inputs (CONSTANT-role initializers that are not graph inputs);
- index spaces: ``params`` gives fresh parameter names (``i0, i1`` for the top
  level, ``r0, r1, …`` for nested maps: unique within one kernel), and ``at``,
  ``bcast``, ``scalar`` build point memlets (NumPy broadcasting: a size-1
  operand dimension indexes with ``0``, missing leading dimensions are dropped);
- statements: ``tasklet``, ``nested`` maps, ``local`` temporaries, and ``kernel``
  for the top-level map (id ``<op id>/expanded``, label = op type).

A rule that cannot express the op raises ``NotExpandable(reason)``; the package
turns the reason into a message naming the node. ``Reads`` collects the input
memlets of one tasklet while its expression is written; a 1-element constant
operand (an initializer of role CONSTANT) is folded into the expression as a
``Const`` instead of being read, so a feed that overrides it no longer reaches
the map.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ir import dtypes
from ir import expr as E
from ir.containers import Container, Role
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet

Params = list[tuple[str, Range]]
Index = Sequence["str | int | E.Expr"]



class NotExpandable(Exception):
    """The op, with these attributes, inputs or shapes, has no map form here."""


# --- expression shorthands (every call is one FLOP in the ``count_flops`` convention) ------

def add(a: E.Expr, b: E.Expr) -> E.Bin:
    return E.Bin("add", a, b)


def sub(a: E.Expr, b: E.Expr) -> E.Bin:
    return E.Bin("sub", a, b)


def mul(a: E.Expr, b: E.Expr) -> E.Bin:
    return E.Bin("mul", a, b)


def div(a: E.Expr, b: E.Expr) -> E.Bin:
    return E.Bin("div", a, b)


def un(op: str, a: E.Expr) -> E.Un:
    return E.Un(op, a)


def select(cond: E.Expr, a: E.Expr, b: E.Expr) -> E.Select:
    return E.Select(cond, a, b)


def names_of(params: Params) -> list[str]:
    return [p for p, _ in params]


def interleave(rank: int, axes_a: Sequence[int], names_a: Sequence[str],
               axes_b: Sequence[int], names_b: Sequence[str]) -> list[str]:
    """Per-dimension index names of a tensor whose axes are split into two parameter sets."""
    out = [""] * rank
    for ax, n in list(zip(axes_a, names_a)) + list(zip(axes_b, names_b)):
        out[ax] = n
    return out


class KernelBuilder:
    """Builds the one map that an expansion of ``node`` produces (see module docstring)."""

    def __init__(self, graph: Graph, node: OpNode) -> None:
        self.graph = graph
        self.node = node
        self.base = f"{node.id}/expanded"
        self._counts: dict[str, int] = {}
        self._labels: set[str] = set()
        self._local_names: set[str] = set()

    # --- operands ---------------------------------------------------------------------
    def in_name(self, k: int, required: bool = True) -> str | None:
        ins = self.node.inputs
        name = ins[k].container if k < len(ins) and ins[k] is not None else None
        if name is None and required:
            raise NotExpandable(f"required input {k} is missing")
        return name

    def out_name(self, k: int) -> str | None:
        outs = self.node.outputs
        return outs[k].container if k < len(outs) and outs[k] is not None else None

    def shape(self, name: str) -> tuple[int, ...]:
        c = self.graph.container(name)
        try:
            return c.concrete_shape(self.graph.bindings)
        except KeyError as e:
            raise NotExpandable(f"dynamic shape: '{name}' has the unbound dimension {e.args[0]!r} "
                                "(bind it on import)") from None

    def dtype(self, name: str) -> str:
        dt = self.graph.container(name).dtype
        if dt not in dtypes.NUMERIC_TYPES:
            raise NotExpandable(f"'{name}' has dtype {dt}, which tasklets cannot compute with")
        return dt

    def attr(self, key: str, default: Any = None) -> Any:
        return self.node.attrs.get(key, default)

    def constant(self, k: int) -> np.ndarray | None:
        """The value of input ``k`` if it is a constant initializer (role CONSTANT, not a graph
        input): trainable parameters and inputs are never baked into an expansion."""
        name = self.in_name(k, required=False)
        if name is None or name not in self.graph.values or name in self.graph.inputs:
            return None
        if self.graph.container(name).role is not Role.CONSTANT:
            return None
        return np.asarray(self.graph.values[name])

    def require_constant(self, k: int, what: str) -> np.ndarray | None:
        """Constant input ``k``, None if absent; a runtime tensor is not expandable."""
        if self.in_name(k, required=False) is None:
            return None
        value = self.constant(k)
        if value is None:
            raise NotExpandable(f"{what} (input {k}, '{self.in_name(k)}') is a runtime tensor, "
                                "not a constant")
        return value

    def compute_dtype(self) -> str:
        """The dtype constants are written in: the first floating input's, else output 0's."""
        for m in self.node.inputs:
            if m is not None and self.graph.container(m.container).dtype in dtypes.FLOAT_TYPES:
                return self.dtype(m.container)
        return self.dtype(self.out_name(0))

    def c(self, value: float | int | bool, dtype: str | None = None) -> E.Const:
        """A constant in the compute dtype (or ``dtype``)."""
        dt = dtype or self.compute_dtype()
        if dt == "bool":
            return E.Const(bool(value), dt)
        return E.Const(float(value) if dt in dtypes.FLOAT_TYPES else int(value), dt)

    # --- index spaces -----------------------------------------------------------------
    def params(self, prefix: str, dims: Sequence[int]) -> Params:
        """Fresh parameters ``<prefix><n>`` over ``dims`` (numbering continues per prefix)."""
        start = self._counts.get(prefix, 0)
        self._counts[prefix] = start + len(dims)
        return [(f"{prefix}{start + k}", Range.of(0, int(d))) for k, d in enumerate(dims)]

    def at(self, name: str, index: Index, wcr: str | None = None) -> Memlet:
        """A point memlet; str entries are parameters, ints constant indices."""
        subset = tuple(E.Var(ix) if isinstance(ix, str) else
                       E.Const(int(ix), "int64") if isinstance(ix, (int, np.integer)) else ix
                       for ix in index)
        if len(subset) != len(self.shape(name)):
            raise AssertionError(f"index of rank {len(subset)} for '{name}' of shape {self.shape(name)}")
        return Memlet(name, subset, None, wcr)

    def bcast(self, name: str, out_shape: Sequence[int], out_names: Sequence[str]) -> Memlet:
        """Read ``name`` broadcast (NumPy rules) onto a point of ``out_shape``."""
        shape = self.shape(name)
        lead = len(out_shape) - len(shape)
        if lead < 0:
            raise NotExpandable(f"'{name}' has rank {len(shape)} > the output's {len(out_shape)}")
        index: list[str | int] = []
        for k, d in enumerate(shape):
            o = out_shape[lead + k]
            if d == o:
                index.append(out_names[lead + k])
            elif d == 1:
                index.append(0)
            else:
                raise NotExpandable(f"'{name}' {list(shape)} does not broadcast to {list(out_shape)}")
        return self.at(name, index)

    def scalar(self, name: str) -> Memlet:
        """The single element of a 1-element container."""
        shape = self.shape(name)
        if int(np.prod(shape, dtype=np.int64)) != 1:
            raise NotExpandable(f"'{name}' should hold one element but has shape {list(shape)}")
        return self.at(name, [0] * len(shape))

    # --- statements -------------------------------------------------------------------
    def _label(self, label: str) -> str:
        text, n = label, 1
        while text in self._labels:
            text, n = f"{label}_{n}", n + 1
        self._labels.add(text)
        return text

    def local(self, label: str, dtype: str) -> tuple[str, Container]:
        """A fresh local scalar (its name avoids every container of the graph)."""
        name, n = f"_{label}", 1
        while name in self.graph.containers or name in self._local_names:
            name, n = f"_{label}_{n}", n + 1
        self._local_names.add(name)
        return name, Container(name, (), dtype)

    def tasklet(self, label: str, expr: E.Expr, inputs: dict[str, Memlet], output: Memlet) -> Tasklet:
        return Tasklet(f"{self.base}/{self._label(label)}", expr, inputs, output)

    def nested(self, label: str, params: Params, body: list, locals_: Sequence[Container] = ()) -> MapNode:
        return MapNode(f"{self.base}/{self._label(label)}", params, body,
                       locals={c.name: c for c in locals_}, label=label)

    def kernel(self, params: Params, body: list, locals_: Sequence[Container] = ()) -> MapNode:
        """The top-level map of this expansion (not yet finalized)."""
        return MapNode(self.base, params, body, locals={c.name: c for c in locals_},
                       label=self.node.op_type, name=self.node.name)


class Reads:
    """Input memlets of one tasklet, collected while its expression is written."""

    def __init__(self, k: KernelBuilder, out_shape: Sequence[int], out_names: Sequence[str]) -> None:
        self.k = k
        self.out_shape = tuple(out_shape)
        self.out_names = list(out_names)
        self.memlets: dict[str, Memlet] = {}

    def load(self, conn: str, index: int, as_dtype: str | None = None) -> E.Expr:
        """Input ``index`` at the current point (broadcast); a 1-element constant is folded.

        With ``as_dtype`` the value is converted (a folded constant directly, else a Cast)."""
        name = self.k.in_name(index)
        dt = self.k.dtype(name)
        value = self.k.constant(index)
        if value is not None and value.size == 1:
            return self.k.c(value.reshape(-1)[0].item(), as_dtype or dt)
        self.memlets[conn] = self.k.bcast(name, self.out_shape, self.out_names)
        return E.Cast(E.Var(conn), as_dtype) if as_dtype and as_dtype != dt else E.Var(conn)

    def scalar(self, conn: str, index: int, as_dtype: str | None = None) -> E.Expr:
        """The one element of input ``index`` (folded when constant)."""
        name = self.k.in_name(index)
        dt = self.k.dtype(name)
        value = self.k.constant(index)
        if value is not None and value.size == 1:
            return self.k.c(value.reshape(-1)[0].item(), as_dtype or dt)
        self.memlets[conn] = self.k.scalar(name)
        return E.Cast(E.Var(conn), as_dtype) if as_dtype and as_dtype != dt else E.Var(conn)

    def read(self, conn: str, memlet: Memlet) -> E.Var:
        """An explicit memlet."""
        self.memlets[conn] = memlet
        return E.Var(conn)

    def local(self, conn: str, name: str) -> E.Var:
        """A local scalar of an enclosing map."""
        return self.read(conn, Memlet(name))


class Pointwise:
    """A top-level map over the shape of output ``out_index``: one point per element.

    ``let`` writes a per-point local (returned by name, read back with ``Reads.local``),
    ``store`` writes an output at the point; ``kernel`` returns the map.
    """

    def __init__(self, k: KernelBuilder, out_index: int = 0) -> None:
        self.k = k
        self.shape = k.shape(k.out_name(out_index))
        self.params = k.params("i", self.shape)
        self.names = names_of(self.params)
        self.body: list = []
        self.locals: list[Container] = []

    def reads(self) -> "Reads":
        return Reads(self.k, self.shape, self.names)

    def let(self, label: str, expr: E.Expr, reads: "Reads", dtype: str | None = None) -> str:
        name, cont = self.k.local(label, dtype or self.k.compute_dtype())
        self.locals.append(cont)
        self.body.append(self.k.tasklet(label, expr, reads.memlets, Memlet(name)))
        return name

    def store(self, out_index: int, expr: E.Expr, reads: "Reads", label: str = "out") -> None:
        name = self.k.out_name(out_index)
        if name is not None:
            self.body.append(self.k.tasklet(label, expr, reads.memlets, self.k.at(name, self.names)))

    def kernel(self) -> MapNode:
        return self.k.kernel(self.params, self.body, self.locals)


__all__ = ["KernelBuilder", "NotExpandable", "Params", "Pointwise", "Reads", "add", "div",
           "interleave", "mul", "names_of", "select", "sub", "un"]
