"""Reduction reference kernels: Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK.

Reduce* take ``axes`` as an attribute before opset 18 (ReduceSum: 13) and as an
optional input after; empty axes reduce everything unless noop_with_empty_axes.
Sums, means, products and norms of floats accumulate in float64 and are cast back to the
input's dtype (NumPy's pairwise summation only covers the contiguous axis; a per-channel
sum over ~50k elements in fp32 is off by ~1e-5 relative), so the reference executor is
never the inaccurate side of a check (``codegen.oracle``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .registry import Inputs, OpContext, kernel

ReduceFn = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _reduce_axes(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext,
                 since: int) -> list[int] | None:
    if ctx.opset < since:
        return attrs.get("axes")
    if len(inputs) > 1 and inputs[1] is not None and np.asarray(inputs[1]).size:
        return [int(a) for a in np.asarray(inputs[1]).reshape(-1)]
    return None


def _extreme(x: np.ndarray, axes: tuple[int, ...], keep: bool, fn: Any, big: bool) -> np.ndarray:
    if x.size:
        return fn(x, axis=axes, keepdims=keep)
    if x.dtype.kind == "f":
        init = -np.inf if big else np.inf
    elif x.dtype == np.bool_:
        init = not big
    else:
        info = np.iinfo(x.dtype)
        init = info.min if big else info.max
    return fn(x, axis=axes, keepdims=keep, initial=init)


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    xd = x.astype(np.float64)
    if not xd.size:
        return np.log(np.sum(np.exp(xd), axis=axes, keepdims=keep))
    m = np.max(xd, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(xd - m), axis=axes, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=axes)


_REDUCE: dict[str, tuple[ReduceFn, int]] = {
    "ReduceSum": (lambda x, a, k: np.sum(x, axis=a, keepdims=k), 13),
    "ReduceMean": (lambda x, a, k: np.mean(x, axis=a, keepdims=k), 18),
    "ReduceProd": (lambda x, a, k: np.prod(x, axis=a, keepdims=k), 18),
    "ReduceMax": (lambda x, a, k: _extreme(x, a, k, np.max, True), 18),
    "ReduceMin": (lambda x, a, k: _extreme(x, a, k, np.min, False), 18),
    "ReduceL1": (lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k), 18),
    "ReduceL2": (lambda x, a, k: np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=a,
                                                 keepdims=k)), 18),
    "ReduceSumSquare": (lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k), 18),
    "ReduceLogSum": (lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)), 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
}


ACCUMULATING = frozenset({"ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                          "ReduceLogSum"})


def _register_reduce(op: str, fn: ReduceFn, since: int) -> None:
    def run(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        axes = _reduce_axes(inputs, attrs, ctx, since)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [x.copy()]
            axes = list(range(x.ndim))
        wide = x.astype(np.float64) if op in ACCUMULATING and x.dtype.kind in "fV" else x
        out = fn(wide, tuple(a % max(x.ndim, 1) for a in axes), keep)
        if x.dtype == np.bool_:
            return [np.asarray(out).astype(np.bool_)]
        return [np.asarray(out).astype(x.dtype)]
    run.__name__ = f"reduce_{op}"
    kernel(op)(run)


for _op, (_fn, _since) in _REDUCE.items():
    _register_reduce(_op, _fn, _since)


def _arg_extreme(x: np.ndarray, attrs: dict[str, Any], largest: bool) -> np.ndarray:
    axis = attrs.get("axis", 0) % x.ndim
    fn = np.argmax if largest else np.argmin
    if attrs.get("select_last_index", 0):
        flipped = np.flip(x, axis)
        idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        idx = fn(x, axis=axis)
    if attrs.get("keepdims", 1):
        idx = np.expand_dims(idx, axis)
    return idx.astype(np.int64)


@kernel("ArgMax")
def argmax(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_arg_extreme(np.asarray(inputs[0]), attrs, True)]


@kernel("ArgMin")
def argmin(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_arg_extreme(np.asarray(inputs[0]), attrs, False)]


def _cumulative(inputs: Inputs, attrs: dict[str, Any], fn: Any, unit: int) -> np.ndarray:
    x = np.asarray(inputs[0])
    axis = int(np.asarray(inputs[1]).reshape(-1)[0]) % x.ndim
    if attrs.get("reverse", 0):
        x = np.flip(x, axis)
    out = fn(x, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", 0):
        shifted = np.full_like(out, unit)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        src[axis], dst[axis] = slice(0, -1), slice(1, None)
        shifted[tuple(dst)] = out[tuple(src)]
        out = shifted
    if attrs.get("reverse", 0):
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


@kernel("CumSum")
def cumsum(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_cumulative(inputs, attrs, np.cumsum, 0)]


@kernel("CumProd")
def cumprod(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_cumulative(inputs, attrs, np.cumprod, 1)]


@kernel("TopK")
def topk(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    k = attrs["k"] if ctx.opset < 10 else int(np.asarray(inputs[1]).reshape(-1)[0])
    axis = attrs.get("axis", -1) % x.ndim
    largest = attrs.get("largest", 1)
    key = x.astype(np.float64) if x.dtype.kind in "ui" else x
    order = np.argsort(-key if largest else key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]
