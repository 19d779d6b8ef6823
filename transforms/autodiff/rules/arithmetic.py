"""Gradient rules for arithmetic ops: Add Sub Mul Div Pow Neg Sqrt Reciprocal Exp Log Abs Sin Cos Sum Mean.

Binary ops broadcast (NumPy rules), so each input gradient is summed back to the
input's shape with ``Emitter.sum_to``. With ``y = f(x)``:
``Sqrt: dx = dy / (2y)``, ``Reciprocal: dx = -dy y^2``, ``Exp: dx = dy y``,
``Log: dx = dy / x``, ``Pow: da = dy b a^(b-1)``, ``db = dy y log a`` (0 where a <= 0).
"""
from __future__ import annotations

import numpy as np

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


def _to_input(em: Emitter, req: GradRequest, g: str, i: int) -> str:
    return em.sum_to(g, em.shape(req.node.output[0]), em.shape(req.node.input[i]))


@gradient("Add", "Sub")
def add_sub(em: Emitter, req: GradRequest) -> Grads:
    dy = req.dy()
    da = _to_input(em, req, dy, 0) if req.want(0) else None
    db = None
    if req.want(1):
        db = _to_input(em, req, dy, 1)
        db = em.neg(db) if req.node.op_type == "Sub" else db
    return [da, db]


@gradient("Mul")
def mul(em: Emitter, req: GradRequest) -> Grads:
    a, b = req.node.input[:2]
    dy = req.dy()
    da = _to_input(em, req, em.mul(dy, b), 0) if req.want(0) else None
    db = _to_input(em, req, em.mul(dy, a), 1) if req.want(1) else None
    return [da, db]


@gradient("Div")
def div(em: Emitter, req: GradRequest) -> Grads:
    b = req.node.input[1]
    y = req.node.output[0]
    full = em.div(req.dy(), b)
    da = _to_input(em, req, full, 0) if req.want(0) else None
    db = em.neg(_to_input(em, req, em.mul(full, y), 1)) if req.want(1) else None
    return [da, db]


@gradient("Pow")
def pow_(em: Emitter, req: GradRequest) -> Grads:
    a, b = req.node.input[:2]
    y = req.node.output[0]
    dy = req.dy()
    da = db = None
    if req.want(0):
        da = _to_input(em, req, em.mul(dy, _pow_slope(em, a, b)), 0)
    if req.want(1):
        zero = em.scalar(0, a)
        positive = em.op("Greater", a, zero)
        safe = em.op("Where", positive, a, em.scalar(1, a))
        log_a = em.op("Where", positive, em.op("Log", safe), zero)
        db = _to_input(em, req, em.mul(dy, em.mul(y, log_a)), 1)
    return [da, db]


def _pow_slope(em: Emitter, a: str, b: str) -> str:
    """d(a^b)/da = b a^(b-1), with the exponent folded when it is a constant."""
    k = em.const_value(b)
    if k is not None and k.size == 1:
        e = float(np.asarray(k).reshape(()))
        if e == 1.0:
            return em.scalar(1, a)
        if e == 2.0:
            return em.mul(a, em.scalar(2, a))
        return em.mul(em.op("Pow", a, em.scalar(e - 1, a)), em.scalar(e, a))
    bf = em.cast(b, em.elem(a), em.elem(b))
    return em.mul(bf, em.op("Pow", a, em.sub(bf, em.scalar(1, a))))


@gradient("Neg")
def neg(em: Emitter, req: GradRequest) -> Grads:
    return [em.neg(req.dy())]


@gradient("Sqrt")
def sqrt(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    return [em.div(em.mul(req.dy(), em.scalar(0.5, y)), y)]


@gradient("Reciprocal")
def reciprocal(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    return [em.neg(em.mul(req.dy(), em.mul(y, y)))]


@gradient("Exp")
def exp(em: Emitter, req: GradRequest) -> Grads:
    return [em.mul(req.dy(), req.node.output[0])]


@gradient("Log")
def log(em: Emitter, req: GradRequest) -> Grads:
    return [em.div(req.dy(), req.node.input[0])]


@gradient("Abs")
def abs_(em: Emitter, req: GradRequest) -> Grads:
    return [em.mul(req.dy(), em.op("Sign", req.node.input[0]))]


@gradient("Sin")
def sin(em: Emitter, req: GradRequest) -> Grads:
    return [em.mul(req.dy(), em.op("Cos", req.node.input[0]))]


@gradient("Cos")
def cos(em: Emitter, req: GradRequest) -> Grads:
    return [em.neg(em.mul(req.dy(), em.op("Sin", req.node.input[0])))]


@gradient("Sum", "Mean")
def sum_mean(em: Emitter, req: GradRequest) -> Grads:
    dy = req.dy()
    n = len(req.node.input)
    if req.node.op_type == "Mean" and n > 1:
        dy = em.mul(dy, em.scalar(1.0 / n, req.node.output[0]))
    return [_to_input(em, req, dy, i) if req.want(i) else None for i in range(n)]
