"""Optimizer expansions (ai.dcstudio AdamW, SGD, Lion): one elementwise map per tensor.

Semantics and order of operations follow the NumPy kernels in
``codegen/numpy_ref/optimizer.py`` (AdamW = onnxruntime-training's
AdamWOptimizer for one tensor). Scalars (``lr``, ``step``) are read once per
element; bias corrections are recomputed per element from ``step`` (a
backend may hoist them: they depend on no map parameter). New moments are
kept in per-point locals and copied to their outputs (0 FLOPs).

FLOPs per element (b1 = alpha, b2 = beta, t = step):

- AdamW, both modes: m' = b1·m + (1−b1)·g 3; v' = b2·v + (1−b2)·g·g 4;
  adam_mode 1 (HuggingFace): p − lr·(√(1−b2^t)/(1−b1^t))·m'/(√v' + ε) 12 (5 without
  correct_bias), then p' − lr·wd·p' 3 if wd ≠ 0 ⇒ 19 (+3);
  adam_mode 0 (PyTorch): p − p·lr·wd 3 if wd ≠ 0, then
  p − lr·m'/((1−b1^t)·(√(v'/(1−b2^t)) + ε))
  11 (5 without correct_bias) ⇒ 18 (+3)
- SGD: p − lr·d 2; d = g + wd·p +2; momentum m' = μ·m + (1−dampening)·d 2 (+1 if
  dampening ≠ 0); nesterov d = d + μ·m' +2
- Lion: p − lr·sign(b1·m + (1−b1)·g) 6, +2 with weight decay; m' = b2·m + (1−b2)·g 3
"""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir import expr as E
from ir.lowering.builder import KernelBuilder, NotExpandable, Pointwise, add, div, mul, sub, un
from ir.lowering.registry import expansion
from ir.nodes import MapNode

STUDIO = "ai.dcstudio"


def _one_minus(k: KernelBuilder, beta: float, dt: str) -> E.Const:
    """The constant 1 − beta, rounded in ``dt`` as the kernels compute it."""
    np_dt = dtypes.to_numpy(dt)
    return k.c(float(np.asarray(1, np_dt) - np.asarray(beta, np_dt)), dt)


def _ema(k: KernelBuilder, beta: float, old: E.Expr, new: E.Expr, dt: str) -> E.Expr:
    """beta·old + (1 − beta)·new (3 FLOPs)."""
    return add(mul(k.c(beta, dt), old), mul(_one_minus(k, beta, dt), new))


def _moments(k: KernelBuilder, pw: Pointwise, dt: str) -> tuple[str, str]:
    b1, b2 = k.attr("alpha", 0.9), k.attr("beta", 0.999)
    r = pw.reads()
    m1 = pw.let("m_new", _ema(k, b1, r.load("m", 4), r.load("g", 3, dt), dt), r)
    r = pw.reads()
    g = r.load("g", 3, dt)
    v1 = pw.let("v_new", add(mul(k.c(b2, dt), r.load("v", 5)), mul(mul(_one_minus(k, b2, dt), g), g)), r)
    for index, name in ((1, m1), (2, v1)):
        rr = pw.reads()
        pw.store(index, rr.local("v", name), rr, label=f"{name.lstrip('_')}_out")
    return m1, v1


def _bias_correction(k: KernelBuilder, r, beta: float, dt: str) -> E.Expr:
    """1 − beta^t (2 FLOPs)."""
    return sub(k.c(1, dt), E.Bin("pow", k.c(beta, dt), r.scalar("step", 1, dt)))


@expansion("AdamW", domain=STUDIO)
def adamw(k: KernelBuilder, impl: str) -> MapNode:
    mode, correct = int(k.attr("adam_mode", 0)), int(k.attr("correct_bias", 1)) == 1
    if mode not in (0, 1):
        raise NotExpandable(f"unsupported attribute value adam_mode={mode}")
    b1, b2, wd = k.attr("alpha", 0.9), k.attr("beta", 0.999), float(k.attr("weight_decay", 0.0))
    dt = k.dtype(k.in_name(2))
    eps = k.c(k.attr("epsilon", 1e-8), dt)
    pw = Pointwise(k)
    p_src = None
    if mode == 0 and wd != 0.0:
        r = pw.reads()
        p, lr = r.load("p", 2), r.scalar("lr", 0, dt)
        p_src = pw.let("p_decayed", sub(p, mul(mul(p, lr), k.c(wd, dt))), r)
    m1, v1 = _moments(k, pw, dt)
    r = pw.reads()
    p = r.local("p", p_src) if p_src else r.load("p", 2)
    lr, m, v = r.scalar("lr", 0, dt), r.local("m", m1), r.local("v", v1)
    if mode == 0:
        c1 = _bias_correction(k, r, b1, dt) if correct else None
        vv = div(v, _bias_correction(k, r, b2, dt)) if correct else v
        denom = add(un("sqrt", vv), eps)
        pw.store(0, sub(p, div(mul(lr, m), mul(c1, denom) if c1 else denom)), r)
        return pw.kernel()
    step = mul(lr, div(un("sqrt", _bias_correction(k, r, b2, dt)), _bias_correction(k, r, b1, dt))) \
        if correct else lr
    update = sub(p, div(mul(step, m), add(un("sqrt", v), eps)))
    if wd == 0.0:
        pw.store(0, update, r)
        return pw.kernel()
    p1 = pw.let("p_step", update, r)
    r = pw.reads()
    pv = r.local("p", p1)
    pw.store(0, sub(pv, mul(mul(r.scalar("lr", 0, dt), k.c(wd, dt)), pv)), r)
    return pw.kernel()


@expansion("SGD", domain=STUDIO)
def sgd(k: KernelBuilder, impl: str) -> MapNode:
    """(lr, p, g, m) → (p', m'): torch.optim.SGD with an explicit momentum buffer."""
    dt = k.dtype(k.in_name(1))
    mom, wd = float(k.attr("momentum", 0.0)), float(k.attr("weight_decay", 0.0))
    damp, nesterov = float(k.attr("dampening", 0.0)), bool(k.attr("nesterov", 0))
    pw = Pointwise(k)
    decayed = None
    if wd != 0.0:
        r = pw.reads()
        decayed = pw.let("d", add(r.load("g", 2, dt), mul(k.c(wd, dt), r.load("p", 1))), r)

    def grad(r) -> E.Expr:
        return r.local("d", decayed) if decayed else r.load("g", 2, dt)
    r = pw.reads()
    if mom == 0.0:
        if k.out_name(1) is not None:
            rm = pw.reads()
            pw.store(1, rm.load("m", 3), rm, label="m_out")
        d = grad(r)
    else:
        d = grad(r)
        scaled = d if damp == 0.0 else mul(_one_minus(k, damp, dt), d)
        m1 = pw.let("m_new", add(mul(k.c(mom, dt), r.load("m", 3)), scaled), r)
        rm = pw.reads()
        pw.store(1, rm.local("v", m1), rm, label="m_out")
        r = pw.reads()
        mv = r.local("m", m1)
        d = add(grad(r), mul(k.c(mom, dt), mv)) if nesterov else mv
    pw.store(0, sub(r.load("p", 1), mul(r.scalar("lr", 0, dt), d)), r)
    return pw.kernel()


@expansion("Lion", domain=STUDIO)
def lion(k: KernelBuilder, impl: str) -> MapNode:
    """(lr, p, g, m) → (p', m'): p' = p − lr·(sign(b1·m + (1−b1)·g) + wd·p)."""
    dt = k.dtype(k.in_name(1))
    b1, b2, wd = k.attr("beta1", 0.9), k.attr("beta2", 0.99), float(k.attr("weight_decay", 0.0))
    pw = Pointwise(k)
    r = pw.reads()
    p = r.load("p", 1)
    direction = un("sign", _ema(k, b1, r.load("m", 3), r.load("g", 2, dt), dt))
    if wd != 0.0:
        direction = add(direction, mul(k.c(wd, dt), p))
    pw.store(0, sub(p, mul(r.scalar("lr", 0, dt), direction)), r)
    rm = pw.reads()
    pw.store(1, _ema(k, b2, rm.load("m", 3), rm.load("g", 2, dt), dt), rm, label="m_out")
    return pw.kernel()


__all__ = ["adamw", "lion", "sgd"]
