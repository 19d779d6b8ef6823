"""Feeds and expectations for the shared fixture graphs (one helper for every peer test)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ir.containers import Role
from ir.graph import Graph

ORT_MODELS = {"mlp": "mlp/legacy", "tiny_resnet": "tiny_resnet/legacy",
              "bert_layer_small": "bert_layer_small/legacy_ln3"}
BATCHNORM = {"tiny_resnet"}
LR, STEP = 1e-3, 1


def ort_feeds(graph: Graph, ref: np.lib.npyio.NpzFile) -> dict[str, np.ndarray]:
    """Feeds for an ORT artifact graph from its reference.npz (zero moments, lr 1e-3, step 1)."""
    feeds: dict[str, np.ndarray] = {}
    data = [n for n in graph.inputs if graph.containers[n].role is Role.INPUT
            and n not in ("learning_rate", "step")]
    feeds[data[0]], feeds[data[1]] = ref["input0"], ref["labels"]
    for name in graph.inputs:
        c = graph.containers[name]
        if c.role is Role.PARAMETER:
            feeds[name] = ref[f"param0/{name}"]
        elif c.role is Role.OPTIMIZER_STATE:
            feeds[name] = np.zeros(c.concrete_shape(), np.float32)
        elif name == "learning_rate":
            feeds[name] = np.full(c.concrete_shape(), LR, np.float32)
        elif name == "step":
            from ir.dtypes import to_numpy
            feeds[name] = np.full(c.concrete_shape(), STEP, to_numpy(c.dtype))
    return feeds


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random feeds for every graph input (labels as valid class ids)."""
    from ir.dtypes import to_numpy
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        c = graph.containers[name]
        shape = c.concrete_shape(graph.bindings)
        dt = to_numpy(c.dtype)
        if name == "learning_rate":
            feeds[name] = np.full(shape, LR, dt)
        elif name == "step":
            feeds[name] = np.full(shape, STEP, dt)
        elif dt.kind in "iu":
            feeds[name] = rng.integers(0, 2, shape).astype(dt)
        elif c.role is Role.OPTIMIZER_STATE:
            feeds[name] = np.abs(rng.standard_normal(shape)).astype(dt) * 1e-3
        else:
            feeds[name] = (rng.standard_normal(shape) * 0.05).astype(dt)
    return feeds


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, what: str, scale: float | None = None) -> None:
    """allclose with an absolute floor of rtol × scale (so exact-zero gradients don't explode)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = scale if scale is not None else float(np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-30), err_msg=what)


def fixture_path(root: Path, rel: str) -> Path:
    return root / rel
