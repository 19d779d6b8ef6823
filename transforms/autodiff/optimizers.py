"""Optimizer update rules as graph builders; their state is graph inputs and outputs.

Every update reads ``learning_rate`` (float32 scalar) and, for AdamW, ``step`` (float32
scalar, the 1-based number of this update). For a parameter ``p`` with gradient ``g``:

- ``sgd`` (PyTorch ``SGD``, dampening 0): ``g' = g + wd p``; ``b = mu b + g'``
  (state ``p.momentum``; none when ``momentum == 0``); ``p <- p - lr b``.
- ``adamw`` (PyTorch ``AdamW``): ``p <- p (1 - lr wd)``; ``m = b1 m + (1-b1) g``;
  ``v = b2 v + (1-b2) g^2``; ``p <- p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``
  (state ``p.m``, ``p.v``).
- ``lion``: ``u = sign(b1 m + (1-b1) g)``; ``p <- p - lr (u + wd p)``;
  ``m = b2 m + (1-b2) g`` (state ``p.m``).
Outputs are ``<p>.new`` and ``<state>.new``. Scalars are computed once in float32 and
cast once per parameter dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.options import TrainingOptions

LEARNING_RATE = "learning_rate"
STEP = "step"
STATE_NAMES = {"sgd": ("momentum",), "adamw": ("m", "v"), "lion": ("m",)}


@dataclass(slots=True)
class UpdateGraph:
    """New graph inputs (state, learning_rate, step) and outputs (new params and state)."""

    inputs: list[ValueInfoProto] = field(default_factory=list)
    outputs: list[ValueInfoProto] = field(default_factory=list)


class _Scalars:
    """Shared scalar values, cast once per element type."""

    def __init__(self, em: Emitter) -> None:
        self.em = em
        self._values: dict[tuple[str, int], str] = {}
        self.f32: dict[str, str] = {}

    def get(self, key: str, elem: int) -> str:
        if elem == TensorProto.FLOAT:
            return self.f32[key]
        if (key, elem) not in self._values:
            self._values[(key, elem)] = self.em.cast(self.f32[key], elem)
        return self._values[(key, elem)]


def state_names(optimizer: str | None, momentum: float) -> tuple[str, ...]:
    if optimizer == "sgd" and momentum == 0:
        return ()
    return STATE_NAMES.get(optimizer or "", ())


def build_update(em: Emitter, opts: TrainingOptions, params: list[str], grads: dict[str, str]) -> UpdateGraph:
    """Emit the update of every parameter; see the module docstring."""
    out = UpdateGraph()
    em.scope = "update"
    scalars = _Scalars(em)
    em.claim(LEARNING_RATE)
    out.inputs.append(helper.make_tensor_value_info(LEARNING_RATE, TensorProto.FLOAT, []))
    scalars.f32["lr"] = LEARNING_RATE
    if opts.optimizer == "adamw":
        _adamw_scalars(em, opts, scalars)
        out.inputs.append(helper.make_tensor_value_info(STEP, TensorProto.FLOAT, []))
    names = state_names(opts.optimizer, opts.momentum)
    for p in params:
        elem, shape = em.elem(p), list(em.shape(p))
        states = [em.claim(f"{p}.{s}") for s in names]
        out.inputs.extend(helper.make_tensor_value_info(s, elem, shape) for s in states)
        new_p = em.claim(f"{p}.new")
        new_states = [em.claim(f"{s}.new") for s in states]
        em.scope = f"update/{p}"
        step = {"sgd": _sgd, "adamw": _adamw, "lion": _lion}[opts.optimizer]
        step(em, opts, scalars, p, grads[p], states, [new_p] + new_states)
        out.outputs.extend(helper.make_tensor_value_info(n, elem, shape) for n in [new_p] + new_states)
    return out


def _adamw_scalars(em: Emitter, opts: TrainingOptions, s: _Scalars) -> None:
    em.claim(STEP)
    b1, b2 = opts.betas
    one = em.const(_f32(1.0), "one")
    bc1 = em.sub(one, em.op("Pow", em.const(_f32(b1), "beta1"), STEP))
    bc2 = em.sub(one, em.op("Pow", em.const(_f32(b2), "beta2"), STEP))
    s.f32["step_size"] = em.div(LEARNING_RATE, bc1)
    s.f32["inv_sqrt_bc2"] = em.op("Reciprocal", em.op("Sqrt", bc2))
    if opts.weight_decay:
        s.f32["decay"] = em.sub(one, em.mul(LEARNING_RATE, em.const(_f32(opts.weight_decay), "wd")))


def _f32(v: float) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


def _blend(em: Emitter, p: str, state: str, g: str, beta: float, out: str | None = None) -> str:
    """``beta * state + (1 - beta) * g`` in the dtype of parameter ``p``."""
    a = em.mul(state, em.scalar(beta, p))
    b = em.mul(g, em.scalar(1.0 - beta, p))
    return em.op("Add", a, b, outputs=[out] if out else None)


def _sgd(em: Emitter, opts: TrainingOptions, s: _Scalars, p: str, g: str, states: list[str],
         outs: list[str]) -> None:
    if opts.weight_decay:
        g = em.add(g, em.mul(p, em.scalar(opts.weight_decay, p)))
    if states:
        g = em.op("Add", em.mul(states[0], em.scalar(opts.momentum, p)), g, outputs=[outs[1]])
    lr = s.get("lr", em.elem(p))
    em.op("Sub", p, em.mul(g, lr), outputs=[outs[0]])


def _adamw(em: Emitter, opts: TrainingOptions, s: _Scalars, p: str, g: str, states: list[str],
           outs: list[str]) -> None:
    b1, b2 = opts.betas
    elem = em.elem(p)
    m = _blend(em, p, states[0], g, b1, outs[1])
    v = _blend(em, p, states[1], em.mul(g, g), b2, outs[2])
    denom = em.add(em.mul(em.op("Sqrt", v), s.get("inv_sqrt_bc2", elem)), em.scalar(opts.eps, p))
    stepped = em.mul(em.div(m, denom), s.get("step_size", elem))
    base = em.mul(p, s.get("decay", elem)) if opts.weight_decay else p
    em.op("Sub", base, stepped, outputs=[outs[0]])


def _lion(em: Emitter, opts: TrainingOptions, s: _Scalars, p: str, g: str, states: list[str],
          outs: list[str]) -> None:
    b1, b2 = opts.betas
    u = em.op("Sign", _blend(em, p, states[0], g, b1))
    if opts.weight_decay:
        u = em.add(u, em.mul(p, em.scalar(opts.weight_decay, p)))
    em.op("Sub", p, em.mul(u, s.get("lr", em.elem(p))), outputs=[outs[0]])
    _blend(em, p, states[0], g, b2, outs[1])
