"""Activation expansions and their elementwise gradients (one map over the output's shape).

Ops with a bias input (BiasGelu, FastGelu with bias, BiasGeluGrad_dX) first
write ``x + bias`` to a per-point local, so that ``x`` is not summed twice;
QuickGeluGrad and FastGeluGrad likewise keep the sigmoid / tanh in a local.

FLOPs per output element (``count_flops`` convention):

- Relu 1; LeakyRelu 3; PRelu 3; ThresholdedRelu 2; Elu 4; Selu 5; Celu 6; Sigmoid 4
  (1/(1+exp(−x))); HardSigmoid 4; HardSwish 5; Softplus 6 (max(x,0)+log1p(exp(−|x|)));
  Softsign 3; Shrink 6; Mish 8; Swish 4; QuickGelu 4 (x/(1+exp(−αx)))
- Gelu, erf form (default domain approximate='none', com.microsoft Gelu):
  0.5·x·(1 + erf(x·√½)) = **5**; tanh form (approximate='tanh', FastGelu):
  0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x·x))) = **9**; +1 with a bias input
- ReluGrad 2; SigmoidGrad 3; TanhGrad 3; GeluGrad 11; BiasGeluGrad_dX 12;
  QuickGeluGrad 10 (sigmoid 4 + 6); FastGeluGrad 18 (tanh 6 + 12)
"""
from __future__ import annotations

import math

from ir import expr as E
from ir.lowering.builder import (KernelBuilder, NotExpandable, Pointwise, Reads, add, div, mul,
                                 select, sub, un)
from ir.lowering.registry import expansion
from ir.nodes import MapNode

MS = "com.microsoft"
SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
GELU_C = 0.044715


def _gt0(k: KernelBuilder, x: E.Expr, op: str = "gt") -> E.Expr:
    return E.Bin(op, x, k.c(0))


def softplus(k: KernelBuilder, x: E.Expr) -> E.Expr:
    """max(x, 0) + log1p(exp(−|x|)): 6 FLOPs, stable for large |x|."""
    return add(E.Bin("max", x, k.c(0)), un("log1p", un("exp", un("neg", un("abs", x)))))


def gelu_erf(k: KernelBuilder, x: E.Expr) -> E.Expr:
    """0.5·x·(1 + erf(x·√½)): 5 FLOPs."""
    return mul(mul(k.c(0.5), x), add(k.c(1), un("erf", mul(x, k.c(SQRT1_2)))))


def gelu_tanh(k: KernelBuilder, x: E.Expr) -> E.Expr:
    """0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x·x))): 9 FLOPs."""
    inner = mul(x, add(k.c(1), mul(mul(k.c(GELU_C), x), x)))
    return mul(mul(k.c(0.5), x), add(k.c(1), un("tanh", mul(k.c(SQRT_2_OVER_PI), inner))))


def gelu_grad(k: KernelBuilder, dy: E.Expr, x: E.Expr) -> E.Expr:
    """dY·(0.5·(1 + erf(x·√½)) + x·exp(−0.5·x·x)/√(2π)): 11 FLOPs."""
    cdf = mul(k.c(0.5), add(k.c(1), un("erf", mul(x, k.c(SQRT1_2)))))
    pdf_x = mul(x, mul(un("exp", mul(mul(k.c(-0.5), x), x)), k.c(INV_SQRT_2PI)))
    return mul(dy, add(cdf, pdf_x))


def _one(k: KernelBuilder, expr_of) -> MapNode:
    pw = Pointwise(k)
    r = pw.reads()
    pw.store(0, expr_of(r, r.load("x", 0)), r)
    return pw.kernel()


UNARY_ACTIVATIONS = {
    "Relu": lambda k, r, x: E.Bin("max", x, k.c(0)),
    "LeakyRelu": lambda k, r, x: select(_gt0(k, x, "ge"), x, mul(k.c(k.attr("alpha", 0.01)), x)),
    "ThresholdedRelu": lambda k, r, x: select(E.Bin("gt", x, k.c(k.attr("alpha", 1.0))), x, k.c(0)),
    "Elu": lambda k, r, x: select(_gt0(k, x), x, mul(k.c(k.attr("alpha", 1.0)), un("expm1", x))),
    "Selu": lambda k, r, x: mul(k.c(k.attr("gamma", 1.05070102214813232421875)), select(
        _gt0(k, x), x, mul(k.c(k.attr("alpha", 1.67326319217681884765625)), un("expm1", x)))),
    "Celu": lambda k, r, x: add(E.Bin("max", x, k.c(0)), E.Bin("min", mul(
        k.c(k.attr("alpha", 1.0)), un("expm1", div(x, k.c(k.attr("alpha", 1.0))))), k.c(0))),
    "Sigmoid": lambda k, r, x: un("recip", add(k.c(1), un("exp", un("neg", x)))),
    "HardSigmoid": lambda k, r, x: E.Bin("max", E.Bin("min", add(mul(
        k.c(k.attr("alpha", 0.2)), x), k.c(k.attr("beta", 0.5))), k.c(1)), k.c(0)),
    "HardSwish": lambda k, r, x: mul(x, E.Bin("max", E.Bin("min", add(div(x, k.c(6)), k.c(0.5)),
                                                           k.c(1)), k.c(0))),
    "Softplus": lambda k, r, x: softplus(k, x),
    "Softsign": lambda k, r, x: div(x, add(k.c(1), un("abs", x))),
    "Shrink": lambda k, r, x: select(
        E.Bin("lt", x, k.c(-k.attr("lambd", 0.5))), add(x, k.c(k.attr("bias", 0.0))),
        select(E.Bin("gt", x, k.c(k.attr("lambd", 0.5))), sub(x, k.c(k.attr("bias", 0.0))), k.c(0))),
    "Mish": lambda k, r, x: mul(x, un("tanh", softplus(k, x))),
    "Swish": lambda k, r, x: div(x, add(k.c(1), un("exp", mul(x, k.c(-k.attr("alpha", 1.0)))))),
    "PRelu": lambda k, r, x: select(E.Bin("lt", x, k.c(0)), mul(r.load("slope", 1), x), x),
}


@expansion(*UNARY_ACTIVATIONS)
def activation(k: KernelBuilder, impl: str) -> MapNode:
    fn = UNARY_ACTIVATIONS[k.node.op_type]
    return _one(k, lambda r, x: fn(k, r, x))


@expansion("Gelu")
def onnx_gelu(k: KernelBuilder, impl: str) -> MapNode:
    form = k.attr("approximate", "none")
    if form not in ("none", "tanh"):
        raise NotExpandable(f"unsupported attribute value approximate={form!r}")
    return _one(k, lambda r, x: gelu_tanh(k, x) if form == "tanh" else gelu_erf(k, x))


@expansion("Gelu", domain=MS)
def ms_gelu(k: KernelBuilder, impl: str) -> MapNode:
    return _one(k, lambda r, x: gelu_erf(k, x))


@expansion("QuickGelu", domain=MS)
def quick_gelu(k: KernelBuilder, impl: str) -> MapNode:
    alpha = k.attr("alpha", 1.702)
    return _one(k, lambda r, x: div(x, add(k.c(1), un("exp", mul(x, k.c(-alpha))))))


def _biased(k: KernelBuilder, pw: Pointwise, x_index: int, bias_index: int) -> tuple[Reads, E.Expr]:
    """Reads for the output tasklet and the expression of x (+ bias via a local)."""
    if k.in_name(bias_index, required=False) is None:
        r = pw.reads()
        return r, r.load("x", x_index)
    rb = pw.reads()
    xb = pw.let("xb", add(rb.load("x", x_index), rb.load("bias", bias_index)), rb)
    r = pw.reads()
    return r, r.local("xb", xb)


@expansion("BiasGelu", "FastGelu", domain=MS)
def biased_gelu(k: KernelBuilder, impl: str) -> MapNode:
    pw = Pointwise(k)
    r, x = _biased(k, pw, 0, 1)
    pw.store(0, gelu_erf(k, x) if k.node.op_type == "BiasGelu" else gelu_tanh(k, x), r)
    return pw.kernel()


@expansion("GeluGrad", "BiasGeluGrad_dX", domain=MS)
def gelu_grad_rule(k: KernelBuilder, impl: str) -> MapNode:
    pw = Pointwise(k)
    r, x = _biased(k, pw, 1, 2)
    pw.store(0, gelu_grad(k, r.load("dy", 0), x), r)
    return pw.kernel()


@expansion("FastGeluGrad", domain=MS)
def fast_gelu_grad(k: KernelBuilder, impl: str) -> MapNode:
    pw = Pointwise(k)
    rt = pw.reads()
    x = rt.load("x", 1)
    t = pw.let("t", un("tanh", mul(k.c(SQRT_2_OVER_PI), mul(x, add(k.c(1), mul(mul(
        k.c(GELU_C), x), x))))), rt)
    r = pw.reads()
    x, tv = r.load("x", 1), r.local("t", t)
    slope = mul(mul(mul(x, sub(k.c(1), mul(tv, tv))), k.c(SQRT_2_OVER_PI)),
                add(k.c(1), mul(mul(k.c(3 * GELU_C), x), x)))
    pw.store(0, mul(r.load("dy", 0), mul(k.c(0.5), add(add(k.c(1), tv), slope))), r)
    return pw.kernel()


@expansion("QuickGeluGrad", domain=MS)
def quick_gelu_grad(k: KernelBuilder, impl: str) -> MapNode:
    alpha = k.attr("alpha", 1.702)
    pw = Pointwise(k)
    rs = pw.reads()
    s = pw.let("s", un("recip", add(k.c(1), un("exp", mul(rs.load("x", 1), k.c(-alpha))))), rs)
    r = pw.reads()
    sv = r.local("s", s)
    pw.store(0, mul(mul(r.load("dy", 0), sv), add(k.c(1), mul(mul(r.load("x", 1), k.c(alpha)),
                                                             sub(k.c(1), sv)))), r)
    return pw.kernel()


GRADS = {
    "ReluGrad": lambda k, r: select(_gt0(k, r.load("x", 1)), r.load("dy", 0), k.c(0)),
    "SigmoidGrad": lambda k, r: mul(mul(r.load("dy", 0), r.load("y", 1)), sub(k.c(1), r.load("y", 1))),
    "TanhGrad": lambda k, r: mul(r.load("dy", 0), sub(k.c(1), mul(r.load("y", 1), r.load("y", 1)))),
}


@expansion(*GRADS, domain=MS)
def simple_grad(k: KernelBuilder, impl: str) -> MapNode:
    fn = GRADS[k.node.op_type]
    pw = Pointwise(k)
    r = pw.reads()
    pw.store(0, fn(k, r), r)
    return pw.kernel()


__all__ = ["GRADS", "UNARY_ACTIVATIONS", "gelu_erf", "gelu_grad", "gelu_tanh", "softplus"]
