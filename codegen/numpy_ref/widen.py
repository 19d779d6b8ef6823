"""``widened(graph)``: a copy of a float32 graph that the reference executor runs in float64.

The oracle's truth (``codegen.oracle``) is the original graph evaluated in float64: every
float32 container becomes float64, float32 initializers are cast up, and a ``Cast`` to
float32 casts to float64 instead. Other dtypes (integers, fp16/bf16 storage, float64) are
kept, so a mixed-precision graph keeps its low-precision containers. The executor casts
every kernel's result to its container's dtype, so constants and random draws come out in
float64 too. The input graph is not changed (``Graph.clone`` plus replaced containers).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
from onnx import TensorProto

from ir.graph import Graph
from ir.nodes import OpNode

NARROW, WIDE = "float32", "float64"


def widened(graph: Graph) -> Graph:
    """``graph`` with float32 containers, values and Cast targets widened to float64."""
    g = graph.clone()
    g.containers = {n: replace(c, dtype=WIDE) if c.dtype == NARROW else c for n, c in g.containers.items()}
    g.values = {n: widen_array(v) for n, v in g.values.items()}
    for node in g.nodes.values():
        if isinstance(node, OpNode) and node.op_type == "Cast" and node.attrs.get("to") == TensorProto.FLOAT:
            node.attrs["to"] = TensorProto.DOUBLE
    return g


def widen_array(value) -> np.ndarray:
    arr = np.asarray(value)
    return arr.astype(np.float64) if arr.dtype == np.float32 else arr


def widen_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {n: widen_array(v) for n, v in feeds.items()}
