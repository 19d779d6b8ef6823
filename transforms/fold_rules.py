"""Folding rules: NumPy evaluation of the shape-computing ops ``constant_folding`` supports.

``transforms`` may not import ``codegen`` (the reference kernels), so the ops that
compute shapes and small constants are evaluated here, with the same semantics as
the reference executor (ONNX typing: results keep the first operand's dtype;
integer ``Div`` truncates toward zero). A rule is ``fn(values, shapes, attrs, opset)``:
``values[k]`` is input ``k``'s constant value (``None`` if absent or not constant —
only the metadata ops ``Shape``/``Size`` accept that), ``shapes[k]`` its static shape.

``FOLD_RULES`` keys are ``(domain, op_type)``. Supported: Shape, Size (metadata);
Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Gather, Slice,
Expand, Cast, ConstantOfShape, Range; Add, Sub, Mul, Div, Neg, Abs, Sqrt, Reciprocal,
Min, Max, Equal, Less, Greater, Not, Where; com.microsoft Scale.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ir import dtypes

Values = Sequence["np.ndarray | None"]
Shapes = Sequence["tuple[int, ...] | None"]
FoldFn = Callable[[Values, Shapes, dict[str, Any], int], list[np.ndarray]]
METADATA = ("Shape", "Size")

FOLD_RULES: dict[tuple[str, str], FoldFn] = {}


def rule(*ops: str, domain: str = "") -> Callable[[FoldFn], FoldFn]:
    def deco(fn: FoldFn) -> FoldFn:
        for op in ops:
            FOLD_RULES[(domain, op)] = fn
        return fn
    return deco


def _ints(x: np.ndarray | None) -> list[int]:
    return [] if x is None else [int(v) for v in np.asarray(x).reshape(-1)]


def _arg(values: Values, k: int) -> np.ndarray | None:
    return values[k] if len(values) > k else None


@rule("Shape")
def _shape(values, shapes, attrs, opset):
    dims = shapes[0]
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(dims[start:end], dtype=np.int64)]


@rule("Size")
def _size(values, shapes, attrs, opset):
    return [np.array(int(np.prod(shapes[0], dtype=np.int64)), dtype=np.int64)]


@rule("Identity")
def _identity(values, shapes, attrs, opset):
    return [np.array(values[0], copy=True)]


@rule("Reshape")
def _reshape(values, shapes, attrs, opset):
    x = values[0]
    shape = attrs["shape"] if opset < 5 else _ints(values[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape).copy()]


@rule("Flatten")
def _flatten(values, shapes, attrs, opset):
    x = values[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(outer, int(np.prod(x.shape[axis:], dtype=np.int64)))]


@rule("Squeeze", "Unsqueeze")
def _squeeze(values, shapes, attrs, opset):
    x = values[0]
    axes = attrs.get("axes") if opset < 13 else (_ints(_arg(values, 1)) if _arg(values, 1) is not None else None)
    if attrs["__op"] == "Unsqueeze":
        rank = x.ndim + len(axes or [])
        return [np.expand_dims(x, tuple(sorted(a % rank for a in axes or [])))]
    return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


@rule("Transpose")
def _transpose(values, shapes, attrs, opset):
    x = values[0]
    return [np.ascontiguousarray(np.transpose(x, attrs.get("perm") or list(range(x.ndim))[::-1]))]


@rule("Concat")
def _concat(values, shapes, attrs, opset):
    return [np.concatenate([np.asarray(v) for v in values if v is not None], axis=attrs.get("axis", 0))]


@rule("Gather")
def _gather(values, shapes, attrs, opset):
    x, idx = values[0], np.asarray(values[1]).astype(np.int64)
    axis = attrs.get("axis", 0) % max(x.ndim, 1)
    return [np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)]


@rule("Slice")
def _slice(values, shapes, attrs, opset):
    x = values[0]
    starts, ends = _ints(values[1]), _ints(values[2])
    axes = _ints(_arg(values, 3)) or list(range(len(starts)))
    steps = _ints(_arg(values, 4)) or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(s, e, st)
    return [x[tuple(index)].copy()]


@rule("Expand")
def _expand(values, shapes, attrs, opset):
    x = values[0]
    return [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(values[1])))).copy()]


@rule("Cast")
def _cast(values, shapes, attrs, opset):
    return [np.asarray(values[0]).astype(dtypes.to_numpy(dtypes.from_onnx(int(attrs["to"]))))]


@rule("ConstantOfShape")
def _constant_of_shape(values, shapes, attrs, opset):
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full(_ints(values[0]), value[0], dtype=value.dtype)]


@rule("Range")
def _range(values, shapes, attrs, opset):
    start, limit, delta = (np.asarray(v) for v in values[:3])
    return [np.arange(start, limit, delta).astype(start.dtype)]


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division (truncation toward zero), as the reference kernel."""
    if not np.issubdtype(a.dtype, np.integer):
        return np.divide(a, b)
    q, r = np.floor_divide(a, b), np.remainder(a, b)
    return q + ((r != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)


_TYPED = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _int_div, "Min": np.minimum,
          "Max": np.maximum}
_LOGIC = {"Equal": np.equal, "Less": np.less, "Greater": np.greater}
_UNARY = {"Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Reciprocal": np.reciprocal,
          "Not": np.logical_not}


@rule(*_TYPED)
def _arith(values, shapes, attrs, opset):
    fn = _TYPED[attrs["__op"]]
    out = np.asarray(values[0])
    for v in values[1:]:
        out = np.asarray(fn(out, np.asarray(v)))
    return [out.astype(np.asarray(values[0]).dtype)]


@rule(*_LOGIC)
def _logic(values, shapes, attrs, opset):
    return [np.asarray(_LOGIC[attrs["__op"]](values[0], values[1]))]


@rule(*_UNARY)
def _unary(values, shapes, attrs, opset):
    x = np.asarray(values[0])
    return [np.asarray(_UNARY[attrs["__op"]](x)).astype(x.dtype)]


@rule("Where")
def _where(values, shapes, attrs, opset):
    return [np.where(values[0], values[1], values[2])]


@rule("Scale", domain="com.microsoft")
def _scale(values, shapes, attrs, opset):
    x = np.asarray(values[0])
    s = np.asarray(values[1]).astype(x.dtype).reshape(())
    return [np.asarray(x / s if attrs.get("scale_down", 0) else x * s).astype(x.dtype)]


def evaluate(domain: str, op_type: str, values: Values, shapes: Shapes, attrs: dict[str, Any],
             opset: int) -> list[np.ndarray]:
    """The outputs of op ``(domain, op_type)`` (KeyError if there is no rule)."""
    fn = FOLD_RULES[(domain, op_type)]
    return fn(values, shapes, {**attrs, "__op": op_type}, opset)


__all__ = ["FOLD_RULES", "METADATA", "evaluate"]
