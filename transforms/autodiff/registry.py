"""The ``GRADIENTS`` registry: one gradient rule per ONNX op type.

A rule builds the backward nodes of one forward node; it never computes numbers::

    @gradient("Tanh")
    def tanh(em: Emitter, req: GradRequest) -> Grads:
        y, = req.node.output
        return [em.op("Mul", req.dys[0], em.op("Sub", em.scalar(1, y), em.op("Mul", y, y)))]

``req.dys[k]`` is the gradient of output ``k`` (``None`` when no gradient reaches it);
``req.wants[i]`` says whether input ``i`` needs one. The rule returns one entry per
input: a value name, or ``None`` for no gradient. ``inputs`` on the decorator lists the
differentiable input positions (default: every input); integer and bool inputs never
get a gradient whatever it says. Rule files live in ``transforms/autodiff/rules/``,
one per op family.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from onnx import NodeProto

from ir.errors import GraphError, NodeRef, UnsupportedOpError

if TYPE_CHECKING:
    from transforms.autodiff.emitter import Emitter

Grads = Sequence["str | None"]


@dataclass(frozen=True, slots=True)
class GradRequest:
    """What a rule is asked: the forward node, its output gradients and the wanted inputs."""

    node: NodeProto
    attrs: dict[str, Any]
    dys: tuple[str | None, ...]
    wants: tuple[bool, ...]

    def dy(self, k: int = 0) -> str | None:
        """The gradient of output ``k`` (None if no gradient reaches it)."""
        return self.dys[k] if k < len(self.dys) else None

    def input(self, i: int) -> str | None:
        """The name of input ``i``, or None when the optional input is absent."""
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def want(self, i: int) -> bool:
        return i < len(self.wants) and self.wants[i]


RuleFn = Callable[["Emitter", GradRequest], Grads]


class NoGradientError(UnsupportedOpError):
    """An op (or a variant of it) on the path from a parameter to the loss has no gradient rule."""

    def __init__(self, node: NodeProto, index: int | None = None, *, variant: str = "", hint: str = "") -> None:
        self.op_type = node.op_type
        qual = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        if not hint:
            ops = supported_ops()
            hint = (f"Gradient rules exist for {len(ops)} ops: {', '.join(ops)}. Replace the op, or leave "
                    "the parameters that reach it out of `trainable`")
        message = f"no gradient rule for op {qual}{' ' + variant if variant else ''}"
        GraphError.__init__(self, f"{message}, which lies between a trainable parameter and the loss",
                            NodeRef(node, index), hint=hint)


@dataclass(frozen=True, slots=True)
class GradientRule:
    """A registered rule: the op type, the builder and its differentiable input positions."""

    op_type: str
    build: RuleFn
    inputs: tuple[int, ...] | None  # None: every input

    def differentiable(self, i: int) -> bool:
        return self.inputs is None or i in self.inputs


GRADIENTS: dict[str, GradientRule] = {}


def gradient(*op_types: str, inputs: tuple[int, ...] | None = None) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the gradient rule of each op type (default ONNX domain)."""
    def deco(fn: RuleFn) -> RuleFn:
        for op_type in op_types:
            if op_type in GRADIENTS:
                raise ValueError(f"duplicate gradient rule for {op_type}")
            GRADIENTS[op_type] = GradientRule(op_type, fn, inputs)
        return fn
    return deco


def supported_ops() -> list[str]:
    """The op types that have a gradient rule, sorted."""
    from transforms.autodiff import rules as _rules  # noqa: F401  (fills GRADIENTS)
    return sorted(GRADIENTS)
