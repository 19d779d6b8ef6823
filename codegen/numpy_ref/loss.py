"""Loss reference kernels: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.

Both take scores/log-probabilities shaped (N, C, d1, …) and integer targets
(N, d1, …), an optional class weight (C,), ``ignore_index`` and ``reduction``
(none | sum | mean; mean divides by the summed weights of non-ignored targets).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .nn import log_softmax
from .registry import Inputs, OpContext, kernel


def target_weights(target: np.ndarray, weight: np.ndarray | None, n_classes: int,
                   ignore_index: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-element weight (0 where ignored) and targets clipped into [0, C)."""
    t = target.astype(np.int64)
    keep = np.ones(t.shape, dtype=bool) if ignore_index is None else t != ignore_index
    safe = np.where(keep, t, 0)
    safe = np.clip(safe, 0, n_classes - 1)
    w = np.ones(t.shape, np.float64) if weight is None else \
        np.asarray(weight, np.float64)[safe]
    return np.where(keep, w, 0.0), safe


def nll_loss(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
             ignore_index: int | None, reduction: str) -> np.ndarray:
    """Weighted negative log-likelihood in float64 (ONNX NegativeLogLikelihoodLoss)."""
    w, safe = target_weights(target, weight, logp.shape[1], ignore_index)
    picked = np.take_along_axis(logp.astype(np.float64), safe[:, None], axis=1)[:, 0]
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    total = w.sum()
    return np.asarray(loss.sum() / total if total != 0 else loss.sum() * np.nan)


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                                 ) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    weight = inputs[2] if len(inputs) > 2 else None
    loss = nll_loss(x, np.asarray(inputs[1]), weight, attrs.get("ignore_index"),
                    attrs.get("reduction", "mean"))
    return [loss.astype(x.dtype)]


@kernel("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                               ) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    weight = inputs[2] if len(inputs) > 2 else None
    logp = log_softmax(x.astype(np.float64), axis=1)
    loss = nll_loss(logp, np.asarray(inputs[1]), weight, attrs.get("ignore_index"),
                    attrs.get("reduction", "mean"))
    return [loss.astype(x.dtype), logp.astype(x.dtype)]
