"""The reverse sweep: from the loss's seed gradients to one gradient per parameter.

``differentiable_paths`` finds the values that depend on a parameter (``active``, float
only, through each rule's differentiable inputs) and, of those, the ones the loss
depends on (``needed``). ``backward`` then walks the forward nodes in reverse
topological order; for each node with a needed output it sums the gradient
contributions of its outputs (``Sum`` when a value fans out), calls the op's rule from
``GRADIENTS`` and records the input gradients it returns. A node on a needed path
whose op has no rule raises ``NoGradientError`` before anything is emitted.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from onnx import NodeProto

from ir.errors import GraphError
from ir.onnx_attrs import attrs_from_onnx
from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GRADIENTS, GradRequest, NodeRef, NoGradientError


def _differentiable(node: NodeProto, k: int) -> bool:
    rule = GRADIENTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    return rule is None or rule.differentiable(k)


def differentiable_paths(nodes: Sequence[NodeProto], wrt: Iterable[str], seeds: Iterable[str],
                         em: Emitter) -> tuple[set[str], set[str]]:
    """(active, needed): values depending on ``wrt``; those of them the seeds depend on."""
    active = set(wrt)
    for node in nodes:
        if any(i in active and _differentiable(node, k) for k, i in enumerate(node.input)):
            active.update(o for o in node.output if o and (o not in em.types or em.is_float(o)))
    needed = {s for s in seeds if s in active}
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            needed.update(i for k, i in enumerate(node.input)
                          if i in active and _differentiable(node, k))
    return active, needed


def backward(em: Emitter, nodes: Sequence[NodeProto], wrt: Sequence[str],
             seeds: dict[str, str]) -> dict[str, str | None]:
    """Emit the backward pass; return each parameter's total gradient (None: unreachable)."""
    _, needed = differentiable_paths(nodes, wrt, seeds, em)
    work = [(k, n) for k, n in enumerate(nodes) if any(o in needed for o in n.output)]
    for k, node in work:
        if node.domain not in ("", "ai.onnx") or node.op_type not in GRADIENTS:
            raise NoGradientError(node, k)
    acc: dict[str, list[str]] = {name: [g] for name, g in seeds.items()}
    for k, node in reversed(work):
        dys = tuple(_total(em, acc, o) if o in needed else None for o in node.output)
        if all(d is None for d in dys):
            continue
        rule = GRADIENTS[node.op_type]
        wants = tuple(bool(i) and i in needed and rule.differentiable(j) and em.is_float(i)
                      for j, i in enumerate(node.input))
        em.scope = f"grad/{NodeRef(node, k).name}"
        try:
            grads = rule.build(em, GradRequest(node, attrs_from_onnx(node), dys, wants))
        except GraphError as e:
            if e.node is None:
                e.node = NodeRef(node, k)
                e.args = (f"{e.args[0]} (while differentiating node '{NodeRef(node, k).name}' "
                          f"({node.op_type}))",)
            raise
        for j, g in enumerate(grads):
            if g is not None and j < len(wants) and wants[j]:
                acc.setdefault(node.input[j], []).append(g)
    em.scope = "grad"
    return {p: _total(em, acc, p) for p in wrt}


def _total(em: Emitter, acc: dict[str, list[str]], name: str) -> str | None:
    parts = acc.get(name)
    if not parts:
        return None
    if len(parts) > 1:
        scope, em.scope = em.scope, f"grad/{name}"
        parts[:] = [em.op("Sum", *parts)]
        em.scope = scope
    return parts[0]
