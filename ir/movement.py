"""Data movement, FLOPs and the compulsory lower bound (DESIGN §3).

- A *kernel* is a top-level ``OpNode`` or ``MapNode`` (one launch).
- ``bytes_read``/``bytes_written``: unique bytes of each global container the
  kernel reads/writes — every operand read once, every result written once.
  Map locals cost 0. ``Shape``/``Size`` read only metadata (0 bytes).
- ``accesses``: access volume in elements, as DaCe and Substation count it
  (accesses per iteration × iterations; a broadcast bias counts per access).
- ``flops``: closed forms for library ops (MatMul, Gemm, Conv, …: ``ir.flops``); for other
  ops the FLOPs of their expansion into a map (``ir.lowering``), so op level and
  map level agree; for maps Σ tasklet ops (+1 per wcr update) × iterations.
- The compulsory bound: every graph input, parameter, optimizer state and
  constant that is read, read once, plus every graph output written once.
All figures are ``Estimate`` records, which add.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable

from ir import expr as E
from ir import lowering
from ir.containers import Container
from ir.errors import ShapeError
from ir.flops import library_flops
from ir.graph import Graph
from ir.maps import footprint_elems, tasklet_accesses, trip_count
from ir.memory import is_alias
from ir.nodes import MapNode, OpNode

METADATA_OPS = frozenset({"Shape", "Size"})


@dataclass(frozen=True, slots=True)
class Estimate:
    """Addable figures of one kernel or a sum of kernels."""

    bytes_read: int = 0
    bytes_written: int = 0
    accesses: int = 0
    flops: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def __add__(self, other: "Estimate") -> "Estimate":
        return Estimate(self.bytes_read + other.bytes_read, self.bytes_written + other.bytes_written,
                        self.accesses + other.accesses, self.flops + other.flops)

    def __sub__(self, other: "Estimate") -> "Estimate":
        return Estimate(self.bytes_read - other.bytes_read, self.bytes_written - other.bytes_written,
                        self.accesses - other.accesses, self.flops - other.flops)

    def to_json(self) -> dict:
        return {"bytes": self.bytes, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "accesses": self.accesses, "flops": self.flops, "intensity": round(self.intensity, 6)}


@dataclass(frozen=True, slots=True)
class KernelFigures:
    node_id: str
    label: str
    estimate: Estimate


@dataclass(frozen=True)
class Report:
    """Per-kernel figures, their total and the compulsory bound."""

    kernels: tuple[KernelFigures, ...]
    total: Estimate
    bound_bytes: int
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """bytes moved / compulsory bound (1.0 is optimal)."""
        return self.total.bytes / self.bound_bytes if self.bound_bytes else math.inf

    def to_json(self) -> dict:
        return {"kernels": [{"id": k.node_id, "op": k.label, **k.estimate.to_json()} for k in self.kernels],
                "total": self.total.to_json(), "bound_bytes": self.bound_bytes,
                "ratio": round(self.ratio, 6)}


def _nbytes(graph: Graph, c: Container) -> int:
    try:
        return c.nbytes(graph.bindings)
    except KeyError as e:
        if e.args[0] in ("?", "..."):
            raise ShapeError(f"the shape of container '{c.name}' is data-dependent (unknown until run time)",
                             None, graph, hint="Byte counts need static shapes: re-export the model with "
                             "fixed shapes, or bind its symbolic inputs with --bind") from None
        raise ShapeError(f"symbolic dimension '{e.args[0]}' of container '{c.name}' is unbound", None, graph,
                         hint=f"Bind it, e.g. --bind {e.args[0]}=8") from None


def _numel(graph: Graph, name: str) -> int:
    c = graph.container(name)
    return _nbytes(graph, c) // max(1, _itemsize(c))


def _itemsize(c: Container) -> int:
    from ir.dtypes import itemsize
    return itemsize(c.dtype)


def kernel_estimate(graph: Graph, node: OpNode | MapNode) -> Estimate:
    """The figures of one top-level kernel."""
    if isinstance(node, MapNode):
        return _map_estimate(graph, node)
    return _op_estimate(graph, node)


def _op_estimate(graph: Graph, node: OpNode) -> Estimate:
    if is_alias(node):               # transforms.view_alias: the output is the input's bytes
        return Estimate(0, 0, 0, 0)
    read_names = {m.container for m in node.inputs if m is not None}
    write_names = {m.container for m in node.outputs if m is not None}
    if node.op_type in METADATA_OPS:
        read = 0
    else:
        read = sum(_nbytes(graph, graph.container(n)) for n in read_names)
    written = sum(_nbytes(graph, graph.container(n)) for n in write_names)
    flops = library_flops(graph, node)
    accesses = None
    if flops is None:
        mapped = _expansion_estimate(graph, node)
        if mapped is not None:
            flops, accesses = mapped.flops, mapped.accesses
        else:
            flops = 0
    if accesses is None:
        accesses = sum(_numel(graph, m.container) for m in node.inputs if m is not None) \
            + sum(_numel(graph, m.container) for m in node.outputs if m is not None)
    return Estimate(read, written, accesses, flops)


def _map_estimate(graph: Graph, node: MapNode) -> Estimate:
    read = sum(footprint_elems(m, graph) * _itemsize(graph.container(m.container)) for m in node.inputs)
    written = sum(footprint_elems(m, graph) * _itemsize(graph.container(m.container)) for m in node.outputs)
    flops = 0
    accesses = 0
    for tasklet, mem, is_write, params, is_local in tasklet_accesses(node):
        if not is_local:
            accesses += trip_count(params, graph.bindings)
        if is_write:
            ops = E.count_flops(tasklet.expr) + (1 if mem.wcr else 0)
            flops += ops * trip_count(params, graph.bindings)
    return Estimate(read, written, accesses, flops)


_EXPANSION_CACHE: dict[str, Estimate | None] = {}


def _signature(graph: Graph, node: OpNode) -> str:
    def desc(m):
        if m is None:
            return None
        c = graph.container(m.container)
        return [list(c.concrete_shape(graph.bindings)), c.dtype, m.container in graph.values]
    attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in node.attrs.items()}
    consts = [graph.values[m.container].tolist() for m in node.inputs
              if m is not None and m.container in graph.values and graph.values[m.container].size <= 16]
    return json.dumps([node.domain, node.op_type, node.opset, attrs, [desc(m) for m in node.inputs],
                       [desc(m) for m in node.outputs], consts], sort_keys=True, default=str)


def _expansion_estimate(graph: Graph, node: OpNode) -> Estimate | None:
    """FLOPs/accesses of the op's map expansion (cached by op signature), or None."""
    key = _signature(graph, node)
    if key not in _EXPANSION_CACHE:
        if lowering.can_expand(graph, node) is not None:
            _EXPANSION_CACHE[key] = None
        else:
            _EXPANSION_CACHE[key] = _map_estimate(graph, lowering.expand(graph, node))
    return _EXPANSION_CACHE[key]


BOUND_KEY = "compulsory_bytes"


def lower_bound(graph: Graph) -> int:
    """Compulsory bytes: interface and constant containers read once, outputs written once.

    The bound is a property of the model, not of how a step computes it: ``freeze_bound`` records
    it at import (``graph.meta['compulsory_bytes']``) and every transformed graph reports that
    figure. Counted afresh, it would drift with the implementation — a folded constant is a new
    initializer, a scalar absorbed into a tasklet is no longer read."""
    frozen = graph.meta.get(BOUND_KEY)
    return int(frozen) if frozen is not None else _count_bound(graph)


def freeze_bound(graph: Graph) -> None:
    """Record the imported graph's bound (skipped while a symbolic dimension is unbound)."""
    try:
        graph.meta[BOUND_KEY] = str(_count_bound(graph))
    except ShapeError:
        pass


def _count_bound(graph: Graph) -> int:
    used_reads = {m.container for n in graph.nodes.values() for m in n.inputs if m is not None}
    total = 0
    for name in dict.fromkeys(list(graph.inputs) + list(graph.values)):
        if name in used_reads:
            total += _nbytes(graph, graph.container(name))
    for name in dict.fromkeys(graph.outputs):
        total += _nbytes(graph, graph.container(name))
    return total


def report(graph: Graph, kernels: Iterable | None = None) -> Report:
    """Figures for every kernel (in topological order), their total and the bound."""
    nodes = list(kernels) if kernels is not None else graph.topo_order()
    figs = []
    total = Estimate()
    for node in nodes:
        est = kernel_estimate(graph, node)
        label = node.qualified_type if isinstance(node, OpNode) else f"map[{node.label}]"
        figs.append(KernelFigures(node.id, label, est))
        total = total + est
    return Report(tuple(figs), total, lower_bound(graph))


__all__ = ["Estimate", "KernelFigures", "Report", "freeze_bound", "kernel_estimate", "lower_bound", "report"]


class Ledger:
    """Per-kernel figures kept up to date incrementally (only touched kernels are recounted)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.kernels: dict[str, Estimate] = {n.id: kernel_estimate(graph, n) for n in graph.nodes.values()}
        self.total = sum(self.kernels.values(), Estimate())

    def update(self, removed: Iterable[str], changed: Iterable[str], created: Iterable[str]) -> Estimate:
        """Recount only the touched kernels; return the change of the total."""
        before = self.total
        for ident in list(removed) + list(changed):
            self.total = self.total - self.kernels.pop(ident)
        for ident in list(changed) + list(created):
            est = kernel_estimate(self.graph, self.graph.nodes[ident])
            self.kernels[ident] = est
            self.total = self.total + est
        return self.total - before

    def copy(self) -> "Ledger":
        new = Ledger.__new__(Ledger)
        new.graph, new.kernels, new.total = self.graph, dict(self.kernels), self.total
        return new
