"""A cutout: the selected kernels of a graph as a graph of their own, fed recorded inputs.

``cutout(graph, kernels, feeds)`` runs the NumPy reference executor over the part of the
step the selection depends on, keeping what the selected kernels read from outside the
selection, and returns ``(sub, sub_feeds)``: a graph holding just those kernels (in the
original order, same ids, containers and weights), whose inputs are the recorded values
and whose outputs are everything the selection writes. Compiling ``sub`` compiles the
selection only — at 12 BERT layers, four kernels instead of thousands — so "Profile
selection" costs the selection.

The recording run costs at most one NumPy step and no compiling: it runs only the kernels the
recorded values depend on (the first layer's forward, for a first-layer selection). Without
``feeds``, only the graph inputs that part reads are made (``feeds_for(..., names=)``:
deterministic values of the same kind), not every optimizer moment of the model. It reports
``on_progress(done, total)`` per kernel and stops with ``ProfileCancelled`` when ``cancel()``.

A ``Recording`` of one graph version (default feeds only) keeps every value its recording runs
made, up to ``RECORDING_BUDGET`` bytes (a quarter of the memory, at most 8 GiB; what does not fit is
made again when needed), so the next selection of that graph runs only the kernels
whose values are not recorded yet: layer 11 of a 12-layer step costs one upstream run the first
time and nothing after it.
"""
from __future__ import annotations

import os
from collections import ChainMap
from dataclasses import replace
from threading import Lock
from typing import Callable, Iterable, Mapping

import numpy as np

from codegen.numpy_ref.executor import run as reference_run
from codegen.numpy_ref.feeds import feeds_for
from codegen.timing.cancel import ProfileCancelled
from ir.containers import Role
from ir.errors import GraphError
from ir.graph import Graph


def _budget() -> int:
    """Bytes of recorded values one graph version keeps: a quarter of the memory, at most 8 GiB (a
    12-layer BERT-base-width step's forward values, op by op, take about 2.1 GB)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        memory = 8 << 30
    return min(memory // 4, 8 << 30)


RECORDING_BUDGET = _budget()


def _names(memlets) -> list[str]:
    return [m.container for m in memlets if m is not None]


class Recording:
    """Values of ``graph``'s reference step on its default feeds, kept across cutouts of that graph
    (see the module). Thread-safe; a recording of another graph is not used."""

    def __init__(self, graph: Graph, budget: int = RECORDING_BUDGET) -> None:
        self.graph, self.budget = graph, budget
        self.values: dict[str, np.ndarray] = {}
        self.nbytes = 0
        self.lock = Lock()

    def keep(self, values: Mapping[str, np.ndarray]) -> None:
        for name, value in values.items():
            if name not in self.values and self.nbytes + value.nbytes <= self.budget:
                self.values[name] = value
                self.nbytes += value.nbytes

    def needed(self, recorded: Iterable[str]) -> set[str]:
        """The kernels that still have to run to make ``recorded``: the walk upstream stops at
        recorded values, graph inputs and initializers."""
        graph, todo, out = self.graph, list(recorded), set()
        while todo:
            name = todo.pop()
            if name in self.values or name in graph.values or name in graph.inputs:
                continue
            p = graph.producer(name)
            if p is not None and p.id not in out:
                out.add(p.id)
                todo.extend(_names(p.inputs))
        return out


def _record(graph: Graph, read: set[str], recorded: list[str], feeds, recording: Recording | None, each):
    """The values of ``recorded`` and the feeds of the graph inputs in ``read`` (see ``cutout``),
    from ``recording`` where it has them."""
    if recording is None or feeds is not None or recording.graph is not graph:
        upstream = graph.ancestors(p.id for c in recorded if (p := graph.producer(c)) is not None)
        if feeds is None:                          # only the inputs the recording run and the cutout read
            reads = {c for k in upstream for c in _names(graph.nodes[k].inputs)} | read
            feeds = feeds_for(graph, names=[c for c in graph.inputs if c in reads])
        values = dict(reference_run(graph, feeds, outputs=recorded, only=upstream, on_kernel=each)) \
            if recorded else {}
        return values, feeds
    with recording.lock:
        run = recording.needed(recorded)
        reads = {c for k in run for c in _names(graph.nodes[k].inputs)} | read
        known = ChainMap(feeds_for(graph, names=[c for c in graph.inputs if c in reads and c not in recording.values]),
                         recording.values)
        recording.keep(known.maps[0])
        if run:
            made = [c for k in run for c in _names(graph.nodes[k].outputs)]
            known.maps.insert(0, reference_run(graph, {c: known[c] for c in reads if c in known},
                                               outputs=list(dict.fromkeys(made)), only=run, on_kernel=each))
            recording.keep(known.maps[0])
        return {c: known[c] for c in recorded}, {c: known[c] for c in graph.inputs if c in known}


def cutout(graph: Graph, kernels: Iterable[str], feeds: Mapping[str, np.ndarray] | None = None, *,
           on_progress: Callable[[int, int], None] | None = None,
           cancel: Callable[[], bool] | None = None,
           recording: Recording | None = None) -> tuple[Graph, dict[str, np.ndarray]]:
    """The selected kernels as their own graph, and the feeds that graph needs (see the module);
    ``recording`` (of ``graph``, default feeds) supplies and keeps the recorded values."""
    wanted = set(kernels)
    chosen = [n for n in graph.topo_order() if n.id in wanted]
    unknown = sorted(wanted - {n.id for n in chosen})
    if unknown:
        raise GraphError(f"no kernel with id {unknown[0]!r} in the graph to cut out", None, graph,
                         hint="The selection may be stale: select the kernels again")
    written = {c for n in chosen for c in _names(n.outputs)}
    read = {c for n in chosen for c in _names(n.inputs)}
    outside = sorted(read - written)
    recorded = [c for c in outside if c not in graph.values and c not in graph.inputs]

    def each(done: int, total: int) -> None:
        if cancel is not None and cancel():
            raise ProfileCancelled("profiling cancelled while recording the selection's inputs")
        if on_progress is not None:
            on_progress(done, total)
    values, feeds = _record(graph, read, recorded, feeds, recording, each)
    sub = Graph(f"{graph.name} (cutout of {len(chosen)} kernel{'s' if len(chosen) != 1 else ''})")
    sub.bindings, sub.opsets, sub.meta = dict(graph.bindings), dict(graph.opsets), dict(graph.meta)
    for name in sorted(read | written):
        c = graph.container(name)
        if name in recorded and c.role is Role.TRANSIENT:
            c = replace(c, role=Role.INPUT)
        elif name in written and c.role is Role.TRANSIENT:
            c = replace(c, role=Role.OUTPUT)
        sub.add_container(c)
    for name in outside:
        if name in graph.values:
            sub.values[name] = graph.values[name]
    sub.inputs = [c for c in outside if c in recorded or c in graph.inputs]
    sub.outputs = sorted(written)
    for node in chosen:
        sub.add_node(node)
    sub = sub.clone()                              # the nodes are the cutout's own, not shared
    fed = {c: values[c] if c in values else feeds[c] for c in sub.inputs if c in values or c in feeds}
    return sub, fed
