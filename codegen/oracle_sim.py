"""A generic fp32 implementation's error, simulated: the oracle's second baseline.

The reference executor's fp32 run rounds each kernel's result once (it accumulates in
float64), so its error is the *least* an fp32 implementation can have; onnxruntime, where it
loads the model, is one real implementation. Neither says how far a correct fp32 kernel that
sums in another order (a numba loop, a blocked GEMM, an approximate ``exp``) may land. This
module measures that for the graph at hand: the original graph runs in float64 while every
float32 value a kernel reads (constants and scalars excepted: an implementation reads those
exactly, and a perturbed exponent of ``Pow`` would turn a negative base into NaN) carries a random
relative error of ``u·√r`` (``u`` = 2⁻²⁴, ``r`` =
the kernel's arithmetic operations per output element, from ``ir.movement``: ``2K`` for a
contraction over K, ``n`` for a sum over n, a handful for an activation). That is the error
model of fp32 rounding (Higham: a dot product of length K carries ``γ_K``; random rounding
grows like ``√K``), and because it perturbs the *terms*, a sum whose result cancels (the mean
of a normalized tensor) gets the large relative error that cancellation really causes.

``simulated_fp32(graph, feeds)`` returns the outputs of that run (float64 arrays). The oracle
takes each output's tolerance from the worse of this and its fp32 baseline. The draw is seeded:
the same graph and feeds give the same tolerances.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from codegen.numpy_ref.executor import run as run_reference
from codegen.numpy_ref.widen import NARROW, widen_feeds, widened
from ir.containers import Role
from ir.graph import Graph
from ir.movement import kernel_estimate

U32 = 2.0 ** -24
SEED = 20261124


def operations_per_output(graph: Graph, node) -> float:
    """Arithmetic operations behind each output element of kernel ``node`` (at least 1)."""
    try:
        flops = kernel_estimate(graph, node).flops
    except Exception:  # noqa: BLE001 - a kernel without a count rounds like an elementwise one
        return 1.0
    outs = 0
    for m in node.outputs:
        if m is not None and m.container in graph.containers:
            try:
                outs += int(np.prod(graph.containers[m.container].concrete_shape(graph.bindings)))
            except KeyError:
                return 1.0
    return max(1.0, flops / outs) if outs else 1.0


def simulated_fp32(graph: Graph, feeds: Mapping[str, np.ndarray], seed: int = SEED) -> dict[str, np.ndarray]:
    """The original ``graph`` in float64 with fp32 rounding simulated (see the module docstring)."""
    narrow = {n for n, c in graph.containers.items() if c.dtype == NARROW and c.role is not Role.CONSTANT}
    sigma = {ident: U32 * math.sqrt(operations_per_output(graph, node)) for ident, node in graph.nodes.items()}
    rng = np.random.default_rng(seed)

    def perturb(node, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        s = sigma.get(node.id, U32)
        out = {}
        for name, v in values.items():
            if name in narrow and isinstance(v, np.ndarray) and v.dtype == np.float64 and v.size > 1:
                out[name] = v * (1.0 + s * rng.uniform(-1.0, 1.0, v.shape))
        return out

    return run_reference(widened(graph), widen_feeds(feeds), perturb=perturb)
