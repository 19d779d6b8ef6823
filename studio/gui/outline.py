"""The Outline: a training step as layers × phases, with their figures (no Qt here).

Rows are the layers of the step's repeated families (``transforms.layers``: ``layer 0`` … ``layer 11``,
``blocks 3``), then the kernels outside every layer ("outside layers": embeddings, loss, head); a model without repeated
layers is one row, "whole step". Each
row's children are its phases:

- **forward**: kernels the loss depends on (``transforms.phases.forward_kernels``);
- **update**: other kernels that write new parameters or optimizer state (the optimizer);
- **grad**: the rest (the backward pass).

Each row has its kernels, bytes moved (the ledger), measured time (the current profile's medians, for
the kernels it measured) and its share of the step's bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ir.containers import Role
from ir.graph import Graph
from ir.movement import Ledger
from transforms.layers import layer_of
from transforms.phases import forward_kernels

PHASES = ("forward", "grad", "update")
OUTSIDE = "outside layers"
WHOLE = "whole step"          # a model without repeated layers: one row, split by phase
_UPDATED = (Role.PARAMETER, Role.OPTIMIZER_STATE, Role.STATISTIC)


@dataclass
class OutlineRow:
    label: str
    kernels: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float | None = None
    share: float = 0.0
    children: list["OutlineRow"] = field(default_factory=list)


def phase_of(graph: Graph, ident: str, forward: set[str]) -> str:
    if ident in forward:
        return "forward"
    node = graph.nodes[ident]
    writes = (graph.containers[m.container].role for m in node.outputs if m is not None)
    return "update" if any(role in _UPDATED for role in writes) else "grad"


def outline(graph: Graph, ledger: Ledger, seconds: Mapping[str, float] | None = None) -> list[OutlineRow]:
    """The rows of the Outline (see the module docstring), layers in family and index order."""
    forward = forward_kernels(graph)
    rows: dict[tuple, dict[str, OutlineRow]] = {}
    for ident in graph.nodes:
        hit = layer_of(ident)
        key = (0, hit[0].stem, hit[1]) if hit is not None else (1, OUTSIDE, 0)
        phases = rows.setdefault(key, {p: OutlineRow(p) for p in PHASES})
        phases[phase_of(graph, ident, forward)].kernels.append(ident)
    if sum(1 for k in rows if k[0] == 0) < 2:          # no repeated layers: one row per phase of the whole step
        merged = {p: OutlineRow(p) for p in PHASES}
        for phases in rows.values():
            for p, row in phases.items():
                merged[p].kernels += row.kernels
        rows = {(1, WHOLE, 0): merged}
    total = sum(e.bytes for e in ledger.kernels.values()) or 1
    out = []
    for (_, stem, index), phases in sorted(rows.items()):
        children = [_figures(row, ledger, seconds, total) for row in phases.values() if row.kernels]
        kernels = [i for row in children for i in row.kernels]
        label = stem if stem in (OUTSIDE, WHOLE) else f"{stem} {index}"
        out.append(_figures(OutlineRow(label, kernels, children=children), ledger, seconds, total))
    return out


def _figures(row: OutlineRow, ledger: Ledger, seconds: Mapping[str, float] | None, total: int) -> OutlineRow:
    row.bytes = sum(ledger.kernels[i].bytes for i in row.kernels if i in ledger.kernels)
    row.share = row.bytes / total
    timed = [seconds[i] for i in row.kernels if seconds is not None and i in seconds]
    row.seconds = sum(timed) if timed else None
    return row


def matches(row: OutlineRow, text: str) -> bool:
    """The filter: a row shows when its label (or a child's) contains ``text`` (case-insensitive)."""
    text = text.strip().lower()
    return not text or text in row.label.lower() or any(text in c.label.lower() for c in row.children)
