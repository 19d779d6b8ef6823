"""Gradient rule for Dropout, through its explicit mask.

``y = x * mask / (1 - ratio)`` in training mode, so ``dx = dy * mask / (1 - ratio)``,
with the boolean ``mask`` output of the same forward node (the generator adds it when
the model left it out, so forward and backward see one random draw). Out of training
mode, or with ``ratio == 0``, Dropout is the identity. A ratio or training flag that is
not constant is handled in the graph (``Where(training_mode, 1/(1-ratio), 1)``).
"""
from __future__ import annotations

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


@gradient("Dropout", inputs=(0,))
def dropout(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    ratio_name, mode_name = req.input(1), req.input(2)
    mode = em.const_value(mode_name) if mode_name else False
    ratio = em.const_value(ratio_name) if ratio_name else 0.5
    if mode is not None and not bool(mode):
        return [req.dy(), None, None]
    if ratio is not None and float(ratio) == 0.0:
        return [req.dy(), None, None]
    mask = em.cast(req.node.output[1], em.elem(x))
    if ratio is not None:
        scale = em.scalar(1.0 / (1.0 - float(ratio)), x)
    else:
        one = em.scalar(1.0, x)
        scale = em.div(one, em.sub(one, em.cast(ratio_name, em.elem(x), em.elem(ratio_name))))
    if mode is None:
        scale = em.op("Where", mode_name, scale, em.scalar(1.0, x))
    return [em.mul(req.dy(), em.mul(mask, scale)), None, None]
