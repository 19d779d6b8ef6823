"""Elementwise expansions: arithmetic, comparisons, logic, casts, Where, Clip, variadic ops.

Every op here becomes one map over the output's shape (``i0, i1, …``) with one
tasklet per output; operands are read with NumPy broadcasting (a size-1
dimension indexes with 0, missing leading dimensions are dropped) and
1-element constant operands are folded into the expression.

FLOPs per output element (``count_flops`` convention):

- Add Sub Mul Div Pow Mod, comparisons, And Or Xor: 1; Neg Abs Sqrt Reciprocal Exp Log
  Tanh Erf Sin Cos … Floor Ceil Sign Round Not IsNaN: 1
- Identity, Cast, CastLike, Dropout (inference: output and mask): 0
- Where 1; Clip 1 per bound (2 with both); Max/Min/Sum of n inputs n−1; Mean n
- Scale (com.microsoft, x·s or x/s) 1; DropoutGrad (dY·mask / (1−ratio)) 2, 0 when ratio = 0
"""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir import expr as E
from ir.lowering.builder import KernelBuilder, NotExpandable, Pointwise, div, mul
from ir.lowering.registry import expansion
from ir.nodes import MapNode

MS = "com.microsoft"

UNARY = {"Neg": "neg", "Abs": "abs", "Sqrt": "sqrt", "Reciprocal": "recip", "Exp": "exp",
         "Log": "log", "Tanh": "tanh", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Tan": "tan",
         "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
         "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Floor": "floor", "Ceil": "ceil",
         "Sign": "sign", "Round": "round", "Not": "not", "IsNaN": "isnan"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "and", "Or": "or",
          "Xor": "xor", "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
          "GreaterOrEqual": "ge"}
VARIADIC = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}


def _single(k: KernelBuilder, expr_of) -> MapNode:
    """One map, one tasklet: output 0 = ``expr_of(reads)``."""
    pw = Pointwise(k)
    r = pw.reads()
    pw.store(0, expr_of(r), r)
    return pw.kernel()


@expansion(*UNARY)
def unary(k: KernelBuilder, impl: str) -> MapNode:
    op = UNARY[k.node.op_type]
    return _single(k, lambda r: E.Un(op, r.load("x", 0)))


@expansion(*BINARY)
def binary(k: KernelBuilder, impl: str) -> MapNode:
    op = BINARY[k.node.op_type]
    return _single(k, lambda r: E.Bin(op, r.load("a", 0), r.load("b", 1)))


@expansion("Mod")
def mod(k: KernelBuilder, impl: str) -> MapNode:
    op = "fmod" if k.attr("fmod", 0) else "mod"
    return _single(k, lambda r: E.Bin(op, r.load("a", 0), r.load("b", 1)))


@expansion("Pow")
def pow_(k: KernelBuilder, impl: str) -> MapNode:
    xdt, ydt = k.dtype(k.in_name(0)), k.dtype(k.in_name(1))

    def expr(r) -> E.Expr:
        if xdt not in dtypes.FLOAT_TYPES and ydt in dtypes.FLOAT_TYPES:
            return E.Bin("pow", r.load("x", 0, "float64"), r.load("y", 1))
        return E.Bin("pow", r.load("x", 0), r.load("y", 1, xdt))
    return _single(k, expr)


@expansion("IsInf")
def isinf(k: KernelBuilder, impl: str) -> MapNode:
    pos, neg = k.attr("detect_positive", 1), k.attr("detect_negative", 1)
    if pos and neg:
        return _single(k, lambda r: E.Un("isinf", r.load("x", 0)))
    if not (pos or neg):
        return _single(k, lambda r: k.c(False, "bool"))
    return _single(k, lambda r: E.Bin("eq", r.load("x", 0), k.c(np.inf if pos else -np.inf)))


@expansion(*VARIADIC)
def variadic(k: KernelBuilder, impl: str) -> MapNode:
    op = VARIADIC[k.node.op_type]
    count = len([m for m in k.node.inputs if m is not None])

    def expr(r) -> E.Expr:
        acc = r.load("a", 0)
        for j in range(1, count):
            acc = E.Bin(op, acc, r.load(f"a_{j}", j))
        return div(acc, k.c(count)) if k.node.op_type == "Mean" and count > 1 else acc
    return _single(k, expr)


@expansion("Identity")
def identity(k: KernelBuilder, impl: str) -> MapNode:
    return _single(k, lambda r: r.load("x", 0))


@expansion("Where")
def where(k: KernelBuilder, impl: str) -> MapNode:
    return _single(k, lambda r: E.Select(r.load("c", 0), r.load("x", 1), r.load("y", 2)))


def _cast_target(k: KernelBuilder, dt: str) -> str:
    if dt not in dtypes.NUMERIC_TYPES:
        raise NotExpandable(f"cast to {dt} has no tasklet form")
    return dt


@expansion("Cast")
def cast(k: KernelBuilder, impl: str) -> MapNode:
    try:
        dt = _cast_target(k, dtypes.from_onnx(int(k.attr("to"))))
    except ValueError as e:
        raise NotExpandable(str(e)) from None
    return _single(k, lambda r: E.Cast(r.load("x", 0), dt))


@expansion("CastLike")
def cast_like(k: KernelBuilder, impl: str) -> MapNode:
    dt = _cast_target(k, k.dtype(k.in_name(1)))
    return _single(k, lambda r: E.Cast(r.load("x", 0), dt))


@expansion("Clip")
def clip(k: KernelBuilder, impl: str) -> MapNode:
    xdt = k.dtype(k.in_name(0))

    def expr(r) -> E.Expr:
        out = r.load("x", 0)
        if k.node.opset < 11:
            lo, hi = k.attr("min"), k.attr("max")
            lo = None if lo is None else k.c(lo, xdt)
            hi = None if hi is None else k.c(hi, xdt)
        else:
            lo = r.scalar("lo", 1, xdt) if k.in_name(1, required=False) else None
            hi = r.scalar("hi", 2, xdt) if k.in_name(2, required=False) else None
        if lo is not None:
            out = E.Bin("max", out, lo)
        return E.Bin("min", out, hi) if hi is not None else out
    return _single(k, expr)


def _dropout_is_training(k: KernelBuilder) -> bool:
    if k.node.opset < 12:
        return k.node.opset < 7 and not k.attr("is_test", 0)
    mode = k.require_constant(2, "training_mode")
    if mode is None or not bool(mode.reshape(-1)[0]):
        return False
    ratio = k.constant(1)
    return not (ratio is not None and float(ratio.reshape(-1)[0]) == 0.0)


@expansion("Dropout")
def dropout(k: KernelBuilder, impl: str) -> MapNode:
    """Inference (or ratio 0): output = data, mask = true."""
    if _dropout_is_training(k):
        raise NotExpandable("training-mode Dropout draws a random mask, which is not available as "
                            "an input tensor (only an output); it stays a library call")
    pw = Pointwise(k)
    r = pw.reads()
    pw.store(0, r.load("x", 0), r)
    pw.store(1, k.c(True, "bool"), pw.reads(), label="mask")
    return pw.kernel()


@expansion("Scale", domain=MS)
def scale(k: KernelBuilder, impl: str) -> MapNode:
    xdt = k.dtype(k.in_name(0))
    op = "div" if k.attr("scale_down", 0) else "mul"
    return _single(k, lambda r: E.Bin(op, r.load("x", 0), r.scalar("s", 1, xdt)))


@expansion("DropoutGrad", domain=MS)
def dropout_grad(k: KernelBuilder, impl: str) -> MapNode:
    """dX = dY·mask / (1 − ratio); dY when ratio = 0 or training_mode is false."""
    ratio = k.require_constant(2, "ratio")
    ratio = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    mode = k.require_constant(3, "training_mode")
    dt = k.dtype(k.out_name(0))
    if ratio == 0.0 or (mode is not None and not bool(mode.reshape(-1)[0])):
        return _single(k, lambda r: r.load("dy", 0))
    return _single(k, lambda r: div(mul(r.load("dy", 0), r.load("mask", 1, dt)),
                                    k.c(1.0 - ratio, dt)))


__all__ = ["BINARY", "UNARY", "VARIADIC"]
