"""One error hierarchy for the whole project (STYLE.md "Errors that name the offending node").

Message format: ``<kind> '<name>' (<op_type>, id=<id>) in <graph>: <what is wrong>. <how to fix>``.
Errors carry a one-line ``summary`` (what the CLI prints) and may carry notes
(``add_note``) with a printed window of the graph around the node.
"""
from __future__ import annotations

from typing import Any, Iterable


class NodeRef:
    """A node-like view of an ONNX NodeProto for error messages (``describe_node``): its name, else its
    first output, else ``#index``."""

    kind = None

    def __init__(self, node: Any, index: int | None = None) -> None:
        self.name = node.name or (node.output[0] if node.output else f"#{index}")
        self.id = self.name
        self.op_type = node.op_type


class StudioError(Exception):
    """Base of every error dcstudio raises on purpose. ``str(e)`` is one line."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

    @property
    def summary(self) -> str:
        """The first line of the message (what the CLI prints without --debug)."""
        return str(self).splitlines()[0]


def describe_node(node: Any) -> str:
    """``node 'name' (op_type, id=...)`` for any node-like object."""
    if node is None:
        return "graph"
    kind = getattr(node, "kind", None)
    kind_name = getattr(kind, "value", None) or "node"
    name = getattr(node, "name", None) or getattr(node, "id", "?")
    op_type = getattr(node, "op_type", None) or kind_name
    return f"{kind_name} '{name}' ({op_type}, id={getattr(node, 'id', '?')})"


class GraphError(StudioError):
    """Something is wrong with one node of a graph."""

    def __init__(self, message: str, node: Any = None, graph: Any = None, *,
                 hint: str = "", path: str | None = None) -> None:
        self.node = node
        self.graph = graph
        gname = getattr(graph, "name", None)
        if node is not None:
            text = f"{describe_node(node)}{f' in {gname}' if gname else ''}: {message}"
        else:
            text = f"{gname}: {message}" if gname else message
        if hint:
            text += f". {hint}" if not text.endswith(".") else f" {hint}"
        super().__init__(text, path=path)


class ModelImportError(GraphError):
    """A model file cannot be imported (malformed, unsafe, inconsistent)."""


class UnsupportedOpError(GraphError):
    """An op the importer or executor does not support."""

    def __init__(self, op_type: str, node: Any = None, graph: Any = None, *,
                 supported: Iterable[str] = (), path: str | None = None,
                 domain: str = "") -> None:
        self.op_type = op_type
        qual = f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type
        hint = "Replace the op with supported ops or remove it from the model"
        names = sorted(supported)
        if names:
            shown = ", ".join(names[:12]) + (", …" if len(names) > 12 else "")
            hint += f" (supported in this domain: {shown}; full list: `dcstudio ops`)"
        super().__init__(f"unsupported op {qual}", node, graph, hint=hint, path=path)


class ShapeError(GraphError):
    """A shape or dtype mismatch, or a symbolic dimension left unbound."""


class VerificationError(GraphError):
    """``ir.verify`` found a structural problem."""


class MatchFailure(GraphError):
    """A transformation does not apply; the reason names the nodes."""


class PreconditionError(GraphError):
    """A pass was called on a graph that does not meet its ``requires``."""


class PostconditionError(GraphError):
    """A pass produced a graph that does not meet its ``ensures``."""


class KernelError(GraphError):
    """Executing one kernel failed (wraps the original error with ``from``)."""
