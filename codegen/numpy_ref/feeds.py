"""Deterministic inputs for checking a graph numerically (replay ``--check``, exported ``--check``).

Floats are small normal values, optimizer moments and running statistics non-negative, ``learning_rate``
1e-3 and ``step`` 1, integer inputs 0/1 (valid class ids and masks), booleans
random. Parameters of rank 2 and more (weights a model takes as inputs, as onnxruntime-training
artifacts do) are drawn as torch initializes Linear and Conv weights, uniform within ±1/√fan_in
(``fan_in``: the product of all but the first dimension): with N(0, ¼) weights the bundled BERT layer's
attention scores ran into the hundreds, its softmax saturated, and its score gradient was 74 % zeros and
9 % subnormals — the check barely exercised that backward, and its GEMM ran 10x slower on an Intel
Xeon (a microcode assist per subnormal), so timings measured what training never sees. The same seed
gives the same feeds in any process. ``names`` makes only those inputs
(a profiling cutout needs a few, not every optimizer moment of the model), each drawn from its
own stream keyed by the seed and its name: deterministic, but not the whole set's values.
"""
from __future__ import annotations

import math
import zlib
from typing import Iterable

import numpy as np

from ir.containers import Role
from ir.dtypes import to_numpy
from ir.graph import Graph


def feeds_for(graph: Graph, seed: int = 0, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    only = None if names is None else set(names)
    shared = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        if name in graph.values or (only is not None and name not in only):
            continue
        rng = shared if only is None else np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
        c = graph.containers[name]
        shape = c.concrete_shape(graph.bindings)
        dt = to_numpy(c.dtype)
        if name == "learning_rate":
            feeds[name] = np.full(shape, 1e-3, dt)
        elif name == "step":
            feeds[name] = np.full(shape, 1, dt)
        elif dt == np.bool_:
            feeds[name] = rng.random(shape) < 0.9
        elif dt.kind in "iu":
            feeds[name] = rng.integers(0, 2, shape).astype(dt)
        elif c.role == Role.PARAMETER and len(shape) >= 2:
            bound = 1.0 / math.sqrt(max(1, math.prod(shape[1:])))
            feeds[name] = rng.uniform(-bound, bound, shape).astype(dt)
        elif c.role in (Role.OPTIMIZER_STATE, Role.STATISTIC):
            feeds[name] = (np.abs(rng.standard_normal(shape)) * 1e-3).astype(dt)
        else:
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(dt)
    return feeds


SCALE_FLOOR = 1e-3


def compare(before: dict[str, np.ndarray], after: dict[str, np.ndarray], rtol: float) -> list[str]:
    """Outputs that differ by more than ``rtol`` × the larger of the output's largest magnitude and
    ``SCALE_FLOOR`` (a gradient that is zero up to rounding must not count as a mismatch)."""
    problems = []
    for name, ref in before.items():
        got = after.get(name)
        if got is None:
            problems.append(f"{name}: missing")
            continue
        ref64, got64 = np.asarray(ref, np.float64), np.asarray(got, np.float64)
        if ref64.shape != got64.shape:
            problems.append(f"{name}: shape {got64.shape} != {ref64.shape}")
            continue
        scale = max(float(np.abs(ref64).max(initial=0.0)), SCALE_FLOOR)
        err = float(np.abs(ref64 - got64).max(initial=0.0)) / scale
        if not err <= rtol:
            problems.append(f"{name}: relative error {err:.3g} > {rtol:g}")
    return problems
