"""Transfer tuning: steps tuned on one layer, re-applied to every structurally equal layer.

A whole model repeats its layers, so tuning one and repeating the result is how a 12-layer step
is tuned in the time of one (the seeds' answer to whole models). A transfer step names the tuned
layer, how many steps before it were spent on it, and the layers to repeat them on::

    {"transformation": "transfer", "params": {"layer": "encoder/layer.0", "steps": 13,
     "to": ["encoder/layer.1", …]}, "transfer": {"applications": 3900, "graph_hash": "…"}}

``apply_transfer`` re-applies each of those steps to each target layer in turn, with every id
renamed from the tuned layer to the target (``Family.rename``): a single-match step's anchors
(ids the earlier steps created included: a fused kernel's id derives from the ones it fused), a
pass step's scope. The steps must lie inside the tuned layer (``check_source``) and the targets
must be equal to it as it was before them (``transforms.layers.layer_hash``), which the Session
checks when it records a transfer; replay then checks the number of applications and the graph
hash, like a pass. The result is one undoable step whose ``Application`` is the net effect.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ir.errors import MatchFailure, StudioError
from ir.graph import Graph
from ir.movement import Estimate
from transforms import engine
from transforms.base import Application, Match
from transforms.history import TRANSFER, Step
from transforms.layers import Family, layer_of, parse_key
from transforms.passes import compose_parents, net_application, run_pass
from transforms.registry import create


class TransferError(StudioError):
    """A transfer that cannot be made or replayed (the message says which layer and step)."""


def source_steps(step: Step, earlier: Sequence[Step]) -> list[Step]:
    """The steps a transfer step repeats: the ``steps`` steps right before it."""
    k = int(step.params["steps"])
    if k > len(earlier):
        raise TransferError(f"it repeats the {k} steps before it, but only {len(earlier)} come before it")
    return list(earlier[len(earlier) - k:])


def check_source(steps: Sequence[Step], layer: str) -> None:
    """Every step must lie inside ``layer``: a pass scoped to it, or a match anchored in it only."""
    family, index = parse_key(layer)
    for k, s in enumerate(steps, start=1):
        if s.is_transfer:
            raise TransferError(f"step {k} of the {len(steps)} to repeat is itself a transfer")
        if s.is_pass:
            if s.scope != layer:
                where = f"layer {s.scope}" if s.scope else "the whole graph"
                raise TransferError(f"step {k} of the {len(steps)} to repeat ({s.transformation} pass) ran on "
                                    f"{where}, not on {layer}")
            continue
        outside = [a for a in s.anchors if layer_of(a) != (family, index)]
        if outside or not s.anchors:
            raise TransferError(f"step {k} of the {len(steps)} to repeat ({s.transformation}) is anchored "
                                f"outside {layer} (at {', '.join(outside) or 'the graph'})")


def renamed(s: Step, family: Family, a: int, b: int) -> Step:
    """Step ``s`` (inside layer ``a``) as it applies to layer ``b``."""
    if s.is_pass:
        return replace(s, scope=family.key(b), graph_hash=None, bytes_after=None)
    return replace(s, anchors=tuple(family.rename(x, a, b) for x in s.anchors), bytes_after=None)


def apply_transfer(graph: Graph, step: Step, earlier: Sequence[Step], number: int) -> tuple[Application, int]:
    """Re-apply the transfer's source steps to each target layer, in place; (net Application,
    number of applications). Raises ``TransferError`` naming the layer and step that fails."""
    steps = source_steps(step, earlier)
    layer = step.params["layer"]
    check_source(steps, layer)
    family, a = parse_key(layer)
    before = set(graph.nodes)
    touched: set[str] = set()
    parents: dict[str, tuple[str, ...]] = {}
    delta, count = Estimate(), 0
    for target in step.params["to"]:
        fam_b, b = parse_key(target)
        if fam_b != family or b == a:
            raise TransferError(f"'{target}' is not another layer of the family of {layer}")
        for k, s in enumerate(steps, start=1):
            mapped = renamed(s, family, a, b)
            try:
                app, n = _apply(graph, mapped, number)
            except StudioError as e:
                raise TransferError(f"on {target}, step {k} of {len(steps)} ({s.transformation}) does not apply: "
                                    f"{e.summary} (is {target} still equal to {layer}?)") from None
            touched.update(app.created + app.changed)
            compose_parents(parents, app)
            delta, count = delta + app.delta, count + n
    return net_application(graph, before, touched, TRANSFER, dict(step.params), delta, number, parents), count


def _apply(graph: Graph, s: Step, number: int) -> tuple[Application, int]:
    """One renamed step: its (net) Application and its number of applications."""
    t = create(s.transformation, s.params)
    if s.is_pass:
        res = run_pass(graph, t, number, scope=s.scope)
        return res.application, res.applications
    gone = [x for x in s.anchors if x not in graph.nodes]
    if gone:
        raise MatchFailure(f"no kernel {', '.join(repr(x) for x in gone)} in this layer", None, graph)
    return engine.apply(graph, t, Match(t.name, s.anchors), number, backup=False), 1
