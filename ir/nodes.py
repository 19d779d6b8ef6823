"""Graph nodes: access nodes, library nodes (``OpNode``), map scopes and tasklets.

Semantics per kind (one table, as torch.fx does for its opcodes):

============  ==========================================================================
kind          meaning
============  ==========================================================================
ACCESS        a read/write point of one container (drawn as a data node; implied by memlets)
OP            a library node: ONNX ``op_type``/``domain``/``attrs`` plus an ``impl`` choice.
              ``inputs``/``outputs`` are memlets in ONNX order (``None`` = omitted optional).
MAP           a parallel scope: ``params`` with ranges, a ``body`` of tasklets and nested maps
              executed in order for every point, ``locals`` (transients private to one point),
              and propagated ``inputs``/``outputs`` memlets of the global containers it touches.
TASKLET       one scalar expression (``ir.expr``) with named input memlets and one output
              memlet (optionally with ``wcr``) — only inside a map body.
============  ==========================================================================

Nodes are identity objects with a stable string ``id``; ``provenance`` records which
transformation step created them (``None`` for imported nodes).
"""
from __future__ import annotations

from enum import Enum
from typing import Any

from ir import expr as E
from ir.containers import Container
from ir.memlet import Memlet, Range


class NodeKind(Enum):
    ACCESS = "access"
    OP = "op"
    MAP = "map"
    TASKLET = "tasklet"


class Node:
    """Base: a stable ``id``, a human ``name`` and optional ``provenance`` (rule, step)."""

    kind: NodeKind
    __slots__ = ("id", "name", "provenance")

    def __init__(self, id: str, name: str = "", provenance: tuple[str, int] | None = None) -> None:
        self.id = id
        self.name = name or id
        self.provenance = provenance

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


class AccessNode(Node):
    kind = NodeKind.ACCESS
    __slots__ = ("container",)

    def __init__(self, id: str, container: str) -> None:
        super().__init__(id, container)
        self.container = container


class OpNode(Node):
    kind = NodeKind.OP
    __slots__ = ("op_type", "domain", "attrs", "impl", "opset", "inputs", "outputs")

    def __init__(self, id: str, op_type: str, inputs: list[Memlet | None],
                 outputs: list[Memlet | None], *, domain: str = "", attrs: dict[str, Any] | None = None,
                 impl: str = "default", opset: int = 17, name: str = "",
                 provenance: tuple[str, int] | None = None) -> None:
        super().__init__(id, name, provenance)
        self.op_type = op_type
        self.domain = "" if domain == "ai.onnx" else domain
        self.attrs = dict(attrs or {})
        self.impl = impl
        self.opset = opset
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    @property
    def qualified_type(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    def input_names(self) -> list[str | None]:
        return [m.container if m is not None else None for m in self.inputs]

    def output_names(self) -> list[str | None]:
        return [m.container if m is not None else None for m in self.outputs]


class Tasklet(Node):
    kind = NodeKind.TASKLET
    __slots__ = ("expr", "inputs", "output")

    def __init__(self, id: str, expr: E.Expr, inputs: dict[str, Memlet], output: Memlet, *,
                 name: str = "", provenance: tuple[str, int] | None = None) -> None:
        super().__init__(id, name, provenance)
        self.expr = expr
        self.inputs = dict(inputs)
        self.output = output


BodyNode = "Tasklet | MapNode"


class MapNode(Node):
    kind = NodeKind.MAP
    __slots__ = ("params", "body", "locals", "inputs", "outputs", "label")

    def __init__(self, id: str, params: list[tuple[str, Range]], body: list["Tasklet | MapNode"],
                 *, locals: dict[str, Container] | None = None, inputs: list[Memlet] | None = None,
                 outputs: list[Memlet] | None = None, label: str = "", name: str = "",
                 provenance: tuple[str, int] | None = None) -> None:
        super().__init__(id, name, provenance)
        self.params = list(params)
        self.body = list(body)
        self.locals = dict(locals or {})
        self.inputs = list(inputs or [])
        self.outputs = list(outputs or [])
        self.label = label or name or id

    @property
    def param_names(self) -> list[str]:
        return [p for p, _ in self.params]

    def walk(self):
        """Yield (node, enclosing maps) for every tasklet and nested map, in body order."""
        yield from _walk(self, (self,))

    def input_names(self) -> list[str]:
        return [m.container for m in self.inputs]

    def output_names(self) -> list[str]:
        return [m.container for m in self.outputs]


def _walk(m: MapNode, scopes: tuple[MapNode, ...]):
    for n in m.body:
        yield n, scopes
        if isinstance(n, MapNode):
            yield from _walk(n, scopes + (n,))


ComputeNode = OpNode | MapNode
