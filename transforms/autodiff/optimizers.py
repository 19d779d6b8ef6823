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
Outputs are ``<p>.new`` and ``<state>.new``. Shared scalars (the bias corrections, ``lr``) are built once per
parameter element type, in that type.
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
    """Scalars shared by every parameter of one element type, built on first use."""

    def __init__(self, em: Emitter, opts: TrainingOptions) -> None:
        self.em = em
        self.opts = opts
        self._values: dict[tuple[str, int], str] = {}

    def get(self, key: str, elem: int) -> str:
        if (key, elem) not in self._values:
            scope, self.em.scope = self.em.scope, "update"
            self._values[(key, elem)] = self._build(key, elem)
            self.em.scope = scope
        return self._values[(key, elem)]

    def _const(self, value: float, elem: int) -> str:
        return self.em.const(np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(elem)), "scalar")

    def _build(self, key: str, elem: int) -> str:
        em = self.em
        if key in ("lr", "step"):
            return em.cast(LEARNING_RATE if key == "lr" else STEP, elem, TensorProto.FLOAT)
        one = self._const(1.0, elem)
        b1, b2 = self.opts.betas or (0.0, 0.0)
        if key == "step_size":      # lr / (1 - b1^t)
            return em.div(self.get("lr", elem), em.sub(one, em.op("Pow", self._const(b1, elem),
                                                                   self.get("step", elem))))
        if key == "inv_sqrt_bc2":   # 1 / sqrt(1 - b2^t)
            bc2 = em.sub(one, em.op("Pow", self._const(b2, elem), self.get("step", elem)))
            return em.op("Reciprocal", em.op("Sqrt", bc2))
        if key == "decay":          # 1 - lr wd
            return em.sub(one, em.mul(self.get("lr", elem), self._const(self.opts.weight_decay, elem)))
        raise KeyError(key)


def state_names(optimizer: str | None, momentum: float) -> tuple[str, ...]:
    if optimizer == "sgd" and momentum == 0:
        return ()
    return STATE_NAMES.get(optimizer or "", ())


def build_update(em: Emitter, opts: TrainingOptions, params: list[str], grads: dict[str, str]) -> UpdateGraph:
    """Emit the update of every parameter; see the module docstring."""
    out = UpdateGraph()
    em.scope = "update"
    scalars = _Scalars(em, opts)
    em.claim(LEARNING_RATE)
    scalar_inputs = [helper.make_tensor_value_info(LEARNING_RATE, TensorProto.FLOAT, [])]
    if opts.optimizer == "adamw":
        em.claim(STEP)
        scalar_inputs.append(helper.make_tensor_value_info(STEP, TensorProto.FLOAT, []))
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
    out.inputs.extend(scalar_inputs)
    return out


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
