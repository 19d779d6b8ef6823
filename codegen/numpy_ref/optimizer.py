"""Per-tensor optimizer reference kernels of the ai.dcstudio domain: AdamW, SGD, Lion.

``AdamW`` is one tensor's step of onnxruntime-training's com.microsoft
``AdamWOptimizer`` (adam_mode 0 = PyTorch, 1 = HuggingFace), evaluated in the
parameter's dtype in ORT's order of operations. ``SGD`` follows torch.optim.SGD
and ``Lion`` the Lion paper. Inputs are never mutated; updated copies are returned.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import STUDIO_DOMAIN, Inputs, OpContext, kernel


def _scalar(x: Any) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def adamw_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, step: int,
               attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One AdamW update of one tensor, exactly as ORT's CPU AdamWOptimizer computes it."""
    dt = p.dtype.type
    b1, b2 = dt(attrs.get("alpha", 0.9)), dt(attrs.get("beta", 0.999))
    eps, wd = dt(attrs.get("epsilon", 1e-8)), dt(attrs.get("weight_decay", 0.0))
    lr_t = dt(lr)
    g = g.astype(p.dtype)
    c1, c2, lr_corr = dt(1), dt(1), lr_t
    if attrs.get("correct_bias", 1) == 1:
        c1 = dt(1) - dt(math.pow(float(b1), step))
        c2 = dt(1) - dt(math.pow(float(b2), step))
        lr_corr = lr_t * (dt(np.sqrt(c2)) / c1)
    mode = attrs.get("adam_mode", 0)
    if mode == 0:
        p = p - p * lr_t * wd
    m_new = b1 * m + (dt(1) - b1) * g
    v_new = b2 * v + (dt(1) - b2) * g * g
    if mode == 0:
        denom = np.sqrt(v_new / c2) + eps
        p_new = p - (lr_t * m_new) / (c1 * denom)
    elif mode == 1:
        denom = np.sqrt(v_new) + eps
        p_new = p - lr_corr * m_new / denom
        p_new = p_new - lr_t * wd * p_new
    else:
        raise ValueError(f"AdamW: unsupported adam_mode {mode}")
    return p_new.astype(p.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)


@kernel("AdamW", domain=STUDIO_DOMAIN)
def adamw(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(lr, step, p, g, m, v; alpha, beta, epsilon, weight_decay, adam_mode, correct_bias)
    -> (p_new, m_new, v_new)."""
    lr, step = _scalar(inputs[0]), int(_scalar(inputs[1]))
    p, g, m, v = (np.asarray(x) for x in inputs[2:6])
    return list(adamw_step(p, g, m, v, lr, step, attrs))


@kernel("SGD", domain=STUDIO_DOMAIN)
def sgd(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(lr, p, g, m; momentum, weight_decay, nesterov, dampening) -> (p_new, m_new).

    torch.optim.SGD with the momentum buffer ``m`` given explicitly (zeros before
    the first step). torch seeds the buffer with g on its first step, which equals
    this formula only when dampening == 0."""
    lr = _scalar(inputs[0])
    p, g, m = (np.asarray(x) for x in inputs[1:4])
    dt = p.dtype.type
    mom, wd = dt(attrs.get("momentum", 0.0)), dt(attrs.get("weight_decay", 0.0))
    damp = dt(attrs.get("dampening", 0.0))
    d = g.astype(p.dtype)
    if wd != 0:
        d = d + wd * p
    m_new = m.copy()
    if mom != 0:
        m_new = (mom * m + (dt(1) - damp) * d).astype(m.dtype)
        d = d + mom * m_new if attrs.get("nesterov", 0) else m_new
    return [(p - dt(lr) * d).astype(p.dtype), m_new]


@kernel("Lion", domain=STUDIO_DOMAIN)
def lion(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(lr, p, g, m; beta1, beta2, weight_decay) -> (p_new, m_new):
    c = b1*m + (1-b1)*g; p -= lr*(sign(c) + wd*p); m = b2*m + (1-b2)*g."""
    lr = _scalar(inputs[0])
    p, g, m = (np.asarray(x) for x in inputs[1:4])
    dt = p.dtype.type
    b1, b2 = dt(attrs.get("beta1", 0.9)), dt(attrs.get("beta2", 0.99))
    wd = dt(attrs.get("weight_decay", 0.0))
    g = g.astype(p.dtype)
    c = b1 * m + (dt(1) - b1) * g
    p_new = p - dt(lr) * (np.sign(c) + wd * p)
    m_new = b2 * m + (dt(1) - b2) * g
    return [p_new.astype(p.dtype), m_new.astype(m.dtype)]
