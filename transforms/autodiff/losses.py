"""Losses: each emits the ``loss`` output and the seed gradient of the prediction.

- ``cross_entropy``: ``SoftmaxCrossEntropyLoss`` semantics (logits ``(N, C, d…)``, int64
  labels ``(N, d…)``, mean over the counted labels, optional ``ignore_index``). Its
  gradient is ``(softmax(logits) - onehot(labels)) * valid / count``, built from the
  op's ``log_prob`` output.
- ``mse``: ``mean((prediction - labels)^2)`` over all elements; ``d = 2 (p - t) / numel``.
- ``weighted_sum`` (used by the gradient tests): ``sum_k sum(y_k * w_k)`` over chosen
  outputs with constant weights, so ``d y_k = w_k``.
The labels input is called ``labels``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Callable, Sequence

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper

from transforms.autodiff.emitter import Emitter

LOSS_NAME = "loss"
LABELS = "labels"


@dataclass(frozen=True, slots=True)
class LossGraph:
    """What a loss adds: the scalar ``loss`` value, the seeds and any new graph inputs."""

    loss: str
    seeds: dict[str, str]
    inputs: list[ValueInfoProto] = field(default_factory=list)


LossBuilder = Callable[[Emitter, Sequence[str]], LossGraph]


def cross_entropy(ignore_index: int | None = None) -> LossBuilder:
    """The cross-entropy loss builder (see module docstring)."""
    def build(em: Emitter, outputs: Sequence[str]) -> LossGraph:
        pred = outputs[0]
        sp = em.shape(pred)
        labels_shape = (sp[0],) + tuple(sp[2:])
        em.claim(LABELS)
        loss, log_prob = em.op("SoftmaxCrossEntropyLoss", pred, LABELS, n_out=2,
                               outputs=[em.claim(LOSS_NAME), em.fresh("loss/log_prob")],
                               reduction="mean", ignore_index=ignore_index)
        classes = np.arange(sp[1], dtype=np.int64).reshape((1, sp[1]) + (1,) * (len(sp) - 2))
        hit = em.op("Equal", em.op("Unsqueeze", LABELS, em.ints([1])), em.const(classes, "loss/classes"))
        diff = em.sub(em.op("Exp", log_prob), em.cast(hit, em.elem(pred)))
        if ignore_index is None:
            seed = em.mul(diff, em.scalar(1.0 / prod(labels_shape), pred))
        else:
            valid = em.cast(em.op("Not", em.op("Equal", LABELS, em.const(np.asarray(ignore_index, np.int64)))),
                            em.elem(pred))
            count = em.op("ReduceSum", valid, keepdims=0)
            seed = em.div(em.mul(diff, em.op("Unsqueeze", valid, em.ints([1]))), count)
        label_vi = helper.make_tensor_value_info(LABELS, TensorProto.INT64, list(labels_shape))
        return LossGraph(loss, {pred: seed}, [label_vi])
    return build


def mse() -> LossBuilder:
    """The mean-squared-error loss builder (labels have the prediction's type and shape)."""
    def build(em: Emitter, outputs: Sequence[str]) -> LossGraph:
        pred = outputs[0]
        sp = em.shape(pred)
        em.claim(LABELS)
        diff = em.sub(pred, LABELS)
        total = em.op("ReduceSum", em.mul(diff, diff), keepdims=0)
        loss = em.op("Mul", total, em.scalar(1.0 / prod(sp), pred), outputs=[em.claim(LOSS_NAME)])
        seed = em.mul(diff, em.scalar(2.0 / prod(sp), pred))
        label_vi = helper.make_tensor_value_info(LABELS, em.elem(pred), list(sp))
        return LossGraph(loss, {pred: seed}, [label_vi])
    return build


def weighted_sum(weights: dict[str, np.ndarray]) -> LossBuilder:
    """``sum(y * w)`` over the named outputs (a test loss whose gradient is ``w``)."""
    def build(em: Emitter, outputs: Sequence[str]) -> LossGraph:
        terms, seeds = [], {}
        for name, w in weights.items():
            w_name = em.const(np.asarray(w, dtype=em.np_dtype(name)), "loss/weights")
            terms.append(em.op("ReduceSum", em.mul(name, w_name), keepdims=0))
            seeds[name] = w_name
        loss = em.op("Sum", *terms, outputs=[em.claim(LOSS_NAME)])
        return LossGraph(loss, seeds)
    return build


def loss_builder(kind: str, ignore_index: int | None) -> LossBuilder:
    """The builder for a ``TrainingOptions.loss`` name."""
    return cross_entropy(ignore_index) if kind == "cross_entropy" else mse()
