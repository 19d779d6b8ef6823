"""Ops whose gradient is zero wherever it exists: Floor Ceil Round Sign, and the shape and index
producers Shape Size Range.

They are registered with no differentiable input, so a path from a parameter to the loss stops
at them (as in torch, where ``floor``/``round``/``sign`` give zero gradients): a parameter that
reaches the loss only through them does not reach it, and ``trainable='parameters'`` leaves it
constant. The builder is never called.
"""
from __future__ import annotations

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


@gradient("Floor", "Ceil", "Round", "Sign", "Shape", "Size", "Range", inputs=())
def zero_almost_everywhere(em: Emitter, req: GradRequest) -> Grads:
    return [None] * len(req.node.input)
