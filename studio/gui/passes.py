"""Which pass each kernel belongs to: forward, backward or optimizer (for the mirrored layout).

- **forward**: the kernels the loss depends on (ancestors of the graph outputs whose
  role is ``output``). A graph without such a loss beside other outputs (a plain
  forward model) is all forward.
- **optimizer**: the other kernels that read optimizer state or descend from one
  that does, plus those that depend on no forward kernel and only feed optimizer
  kernels (bias corrections such as ``1 - beta1^t``).
- **backward**: everything else. Kernels between a gradient and the state update
  that read no state (AdamW's ``g*g``) count as backward: structurally they cannot
  be told apart from the weight-gradient kernels that only feed the optimizer (the
  input of a layer needs no gradient), and the difference only changes a colour
  and an edge direction in the layout.

The view lays backward kernels out with reversed edges so the backward pass sits
mirrored beside the forward pass (FACTS.md "Graph layout").
"""
from __future__ import annotations

from enum import Enum

from ir.containers import Role
from ir.graph import Graph


class Pass(Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


def _forward(graph: Graph) -> set[str]:
    losses = [o for o in graph.outputs if graph.containers[o].role is Role.OUTPUT]
    if not losses or len(losses) == len(graph.outputs):
        return set(graph.nodes)
    seeds = [p.id for o in losses if (p := graph.producer(o)) is not None]
    return graph.ancestors(seeds)


def _hyperparameter_feeders(rest: list, preds: dict[str, set[str]], forward: set[str],
                            optimizer: set[str]) -> set[str]:
    """Kernels depending on no forward kernel whose users are all optimizer kernels (``1 - beta1^t``).
    ``rest`` are the kernels outside ``forward`` in graph order, ``preds`` their predecessors' ids; a
    kernel of ``rest`` has all its users in ``rest`` (a user in ``forward`` would make it an ancestor
    of the loss)."""
    touches_forward: set[str] = set()
    users: dict[str, list[str]] = {n.id: [] for n in rest}
    for node in rest:
        p = preds[node.id]
        if not p.isdisjoint(forward) or not p.isdisjoint(touches_forward):
            touches_forward.add(node.id)
        for q in p:
            if q in users:
                users[q].append(node.id)
    out = set(optimizer)
    for node in reversed(rest):
        u = users[node.id]
        if node.id not in touches_forward and u and all(x in out for x in u):
            out.add(node.id)
    return out


def classify(graph: Graph) -> dict[str, Pass]:
    """``node id -> Pass`` for every kernel (see the module docstring)."""
    forward = _forward(graph)
    rest = [n for n in graph.nodes.values() if n.id not in forward]      # topological
    preds = {n.id: graph.predecessor_ids(n) for n in rest}
    state = {c.name for c in graph.containers.values() if c.role is Role.OPTIMIZER_STATE}
    optimizer: set[str] = set()
    for node in rest:                               # seeds and their descendants
        if any(m is not None and m.container in state for m in node.inputs) or not preds[node.id].isdisjoint(optimizer):
            optimizer.add(node.id)
    optimizer = _hyperparameter_feeders(rest, preds, forward, optimizer)
    return {ident: (Pass.FORWARD if ident in forward else Pass.OPTIMIZER if ident in optimizer else Pass.BACKWARD)
            for ident in graph.nodes}
