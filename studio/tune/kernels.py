"""Kernel cutouts for ``dcstudio tune --objective time``: each candidate's kernels timed on recorded inputs,
one measurement per distinct kernel, remembered across runs.

Between the search (scored by the calibrated roofline) and the finalists' whole-step A/B timings, the best
``cutouts`` candidates and the hand recipe are priced by measurement: the sum of their kernels' median
times on this machine. A kernel's identity is its *structure key* (``statement_keys``): what the exported
CPU program runs for it — a numba kernel's content-addressed name (its text), or a BLAS call's op,
attributes and operand shapes — with every array's shape and dtype. Equal kernels in different
candidates, or in the twelve equal layers of a BERT, share one key and are measured once. Keys not yet
in the results database are measured together as one cutout of the candidate's graph
(``codegen.timing.profiler.profile_graph(kernels=…)``: the selection compiled and timed on the values
the full step feeds it, out of process) and stored with their median, spread (coefficient of
variation) and the load average at measurement time, under a context of the machine fingerprint, thread
count and dcstudio's code. A second run with the same database measures only what it has not seen.
"""
from __future__ import annotations

import hashlib
import json
import os

from ir.graph import Graph
from ir.statements import FREE_KINDS
from studio.tune.types import CutoutPrice, KernelTime



def _shape_of(graph: Graph, name: str) -> list:
    c = graph.container(name)
    return [list(c.concrete_shape(graph.bindings)), c.dtype]


def statement_keys(graph: Graph) -> dict[str, str]:
    """Per top-level kernel id that runs work (views and folded constants cost nothing): its structure key."""
    from codegen.numba_cpu.backend import program
    prog = program(graph)
    keys = {}
    for st in prog.statements:
        if st.kind in FREE_KINDS:
            continue
        node = graph.nodes.get(st.node_id)
        about = {
            "kind": st.kind,
            "op": getattr(node, "qualified_type", type(node).__name__),
            "attrs": json.dumps(getattr(node, "attrs", {}), sort_keys=True, default=str),
            "impl": getattr(node, "impl", ""),
            "kernels": sorted({line.split("(", 1)[0] for line in st.lines if line.lstrip().startswith("K.")}),
            "calls": [[callee, [_shape_of(graph, c) if c in graph.containers else prog.nbytes(c) for c in cs]]
                      for callee, cs in st.calls],
            "allocs": [[a.kind, _shape_of(graph, a.container) if a.container in graph.containers else None]
                       for a in st.allocs],
        }
        keys[st.node_id] = hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()[:32]
    return keys


def context_of(threads: int | None) -> tuple[str, dict]:
    """The context kernel times are comparable in: this machine (the calibration fingerprint), the thread
    count and dcstudio's code."""
    from codegen.numba_cpu.threads import default_threads
    from codegen.timing.calibrate import fingerprint
    from studio.tune.evaluate import code_fingerprint
    n = threads or default_threads()
    about = {"machine": fingerprint(n), "threads": n, "backend": "cpu", "code": code_fingerprint()}
    return hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()[:24], about


def measure_kernels(model, candidate, transfer: bool, known: frozenset, threads: int | None,
                    reps: int) -> tuple[dict[str, str], list[KernelTime]]:
    """A timing task: ``candidate``'s graph, its kernels' keys, and the times of the kernels whose keys are
    not in ``known`` (one cutout of the first kernel of each such key, timed out of process)."""
    from codegen.timing.profiler import profile_graph
    from studio.tune.evaluate import applied
    graph = applied(model, candidate, transfer).graph
    keys = statement_keys(graph)
    first: dict[str, str] = {}
    for node_id, key in keys.items():
        if key not in known:
            first.setdefault(key, node_id)
    if not first:
        return keys, []
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    profile = profile_graph(graph, None, kernels=list(first.values()), reps=reps, warmup=2, threads=threads)
    timings = profile.by_id()
    out = []
    for key, node_id in first.items():
        t = timings.get(node_id)
        if t is None or not t.ok:
            continue                    # a kernel that failed or timed out is not priced (nor stored)
        s = t.samples
        out.append(KernelTime(key, s.median_s, s.cv, load, t.label))
    return keys, out


def price(candidate_key: str, keys: dict[str, str], times: dict[str, KernelTime], measured: int,
          reused: int) -> CutoutPrice | None:
    """The candidate's kernel-time sum, or None when one of its kernels has no time (it failed to run)."""
    if any(k not in times for k in keys.values()):
        return None
    return CutoutPrice(candidate_key, sum(times[k].median_s for k in keys.values()), measured, reused, len(keys))
