"""Shape and data-movement reference kernels: Reshape, Transpose, Slice, Gather, Pad, …

Shape-like inputs (shape, axes, pads, starts, …) are int64 tensors; kernels honour
the opset in which an argument moved from an attribute to an input.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .registry import Inputs, OpContext, kernel


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _opt(inputs: Inputs, i: int) -> np.ndarray | None:
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def _axes_arg(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext, since: int,
              idx: int = 1) -> list[int] | None:
    """Axes from the attribute before opset ``since``, from input ``idx`` after."""
    if ctx.opset < since:
        return attrs.get("axes")
    x = _opt(inputs, idx)
    return None if x is None else _ints(x)


@kernel("Identity")
def identity(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [np.array(inputs[0], copy=True)]


@kernel("Constant")
def constant(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    if "value" in attrs:
        return [np.array(attrs["value"], copy=True)]
    table = {"value_float": np.float32, "value_floats": np.float32,
             "value_int": np.int64, "value_ints": np.int64}
    for name, dtype in table.items():
        if name in attrs:
            return [np.array(attrs[name], dtype=dtype)]
    if "value_string" in attrs:
        return [np.array(attrs["value_string"], dtype=object)]
    if "value_strings" in attrs:
        return [np.array(attrs["value_strings"], dtype=object)]
    raise NotImplementedError(f"{ctx.label}: Constant without a supported value attribute")


@kernel("Reshape")
def reshape(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    shape = attrs["shape"] if ctx.opset < 5 else _ints(inputs[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape).copy()]


@kernel("Flatten")
def flatten(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(outer, -1 if outer else int(np.prod(x.shape[axis:]))).copy()]


@kernel("Transpose")
def transpose(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    perm = attrs.get("perm") or list(range(x.ndim))[::-1]
    return [np.ascontiguousarray(np.transpose(x, perm))]


@kernel("Squeeze")
def squeeze(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes = _axes_arg(inputs, attrs, ctx, 13)
    if axes is None:
        return [np.squeeze(x).copy()]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes)).copy()]


@kernel("Unsqueeze")
def unsqueeze(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes = _axes_arg(inputs, attrs, ctx, 13) or []
    rank = x.ndim + len(axes)
    return [np.expand_dims(x, tuple(sorted(a % rank for a in axes))).copy()]


@kernel("Concat")
def concat(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    arrays = [np.asarray(x) for x in inputs if x is not None]
    return [np.concatenate(arrays, axis=attrs.get("axis", 0))]


def _split_sizes(dim: int, n: int, ctx: OpContext, attrs: dict[str, Any]) -> list[int]:
    if "num_outputs" in attrs:
        n = attrs["num_outputs"]
        chunk = -(-dim // n)
        return [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    return [dim // n] * n


@kernel("Split")
def split(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = attrs.get("axis", 0) % x.ndim
    sizes = attrs.get("split") if ctx.opset < 13 else None
    if ctx.opset >= 13 and _opt(inputs, 1) is not None:
        sizes = _ints(inputs[1])
    if ctx.opset < 2 and _opt(inputs, 1) is not None:
        sizes = _ints(inputs[1])
    if not sizes:
        sizes = _split_sizes(x.shape[axis], ctx.n_outputs, ctx, attrs)
    bounds = np.cumsum([0] + list(sizes))
    return [np.take(x, np.arange(bounds[i], bounds[i + 1]), axis=axis)
            for i in range(len(sizes))]


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice clamping rules turned into a Python slice."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return slice(start, end, step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


@kernel("Slice")
def slice_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    if ctx.opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes, steps = attrs.get("axes"), None
    else:
        starts, ends = _ints(inputs[1]), _ints(inputs[2])
        axes = _ints(inputs[3]) if _opt(inputs, 3) is not None else None
        steps = _ints(inputs[4]) if _opt(inputs, 4) is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index: list[slice] = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a % x.ndim
        index[a] = _slice_bounds(s, e, st, x.shape[a])
    return [x[tuple(index)].copy()]


@kernel("Gather")
def gather(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, idx = np.asarray(inputs[0]), np.asarray(inputs[1])
    axis = attrs.get("axis", 0) % x.ndim
    return [np.take(x, idx.astype(np.int64), axis=axis)]


@kernel("GatherElements")
def gather_elements(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
    axis = attrs.get("axis", 0) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take_along_axis(x, idx, axis=axis)]


@kernel("GatherND")
def gather_nd(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
    b = attrs.get("batch_dims", 0)
    batch = x.shape[:b]
    nb = int(np.prod(batch, dtype=np.int64))
    k = idx.shape[-1]
    xs = x.reshape((nb,) + x.shape[b:])
    ids = idx.reshape((nb, -1, k))
    out = []
    for i in range(nb):
        sub = xs[i]
        j = ids[i]
        j = np.where(j < 0, j + np.array(sub.shape[:k]), j)
        out.append(sub[tuple(j.T)])
    res = np.stack(out) if out else np.zeros((0,) + x.shape[b + k:], x.dtype)
    return [res.reshape(idx.shape[:-1] + x.shape[b + k:])]


_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@kernel("ScatterElements", "Scatter")
def scatter_elements(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, idx, upd = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64), inputs[2]
    axis = attrs.get("axis", 0) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    out = x.copy()
    grid = list(np.indices(idx.shape, sparse=False))
    grid[axis] = idx
    target = tuple(g.reshape(-1) for g in grid)
    red = attrs.get("reduction", "none")
    if red == "none":
        out[target] = np.asarray(upd).reshape(-1)
    else:
        _REDUCERS[red].at(out, target, np.asarray(upd).reshape(-1))
    return [out]


@kernel("ScatterND")
def scatter_nd(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, idx, upd = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64), inputs[2]
    out = x.copy()
    k = idx.shape[-1]
    flat_idx = idx.reshape(-1, k)
    flat_upd = np.asarray(upd).reshape((flat_idx.shape[0],) + x.shape[k:])
    red = attrs.get("reduction", "none")
    for i, ix in enumerate(flat_idx):
        key = tuple(int(v) for v in ix)
        out[key] = flat_upd[i] if red == "none" else _REDUCERS[red](out[key], flat_upd[i])
    return [out]


@kernel("Expand")
def expand(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    shape = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1])))
    return [np.broadcast_to(x, shape).copy()]


@kernel("Tile")
def tile(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [np.tile(np.asarray(inputs[0]), _ints(inputs[1]))]


@kernel("Shape")
def shape_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    dims = np.asarray(inputs[0]).shape
    rank = len(dims)
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(dims[start:end], dtype=np.int64)]


@kernel("Size")
def size(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [np.array(np.asarray(inputs[0]).size, dtype=np.int64)]


@kernel("ConstantOfShape")
def constant_of_shape(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full(_ints(inputs[0]), value[0], dtype=value.dtype)]


@kernel("Range")
def range_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    start, limit, delta = (np.asarray(v) for v in inputs[:3])
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [(start + np.arange(n, dtype=np.float64 if start.dtype.kind == "f" else np.int64)
             * delta).astype(start.dtype)]


@kernel("OneHot")
def one_hot(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    idx, depth, values = np.asarray(inputs[0]), int(np.asarray(inputs[1]).reshape(-1)[0]), inputs[2]
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = attrs.get("axis", -1)
    axis = axis + idx.ndim + 1 if axis < 0 else axis
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        [depth if i == axis else 1 for i in range(idx.ndim + 1)])
    values = np.asarray(values).reshape(-1)
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


@kernel("NonZero")
def nonzero(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


@kernel("Trilu")
def trilu(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    k = int(np.asarray(inputs[1]).reshape(-1)[0]) if _opt(inputs, 1) is not None else 0
    return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]


@kernel("Compress")
def compress(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, cond = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(bool)
    axis = attrs.get("axis")
    return [np.compress(cond, x, axis=axis)]


@kernel("EyeLike")
def eye_like(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    from .elementwise import onnx_dtype
    x = np.asarray(inputs[0])
    dtype = onnx_dtype(attrs["dtype"]) if "dtype" in attrs else x.dtype
    return [np.eye(x.shape[0], x.shape[1], k=attrs.get("k", 0), dtype=dtype)]


@kernel("DepthToSpace")
def depth_to_space(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs.get("mode", "DCR") == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [t.reshape(n, c // (b * b), h * b, w * b).copy()]


@kernel("SpaceToDepth")
def space_to_depth(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    if attrs.get("mode", "DCR") == "CRD":
        t = t.transpose(0, 1, 3, 5, 2, 4)
    else:
        t = t.transpose(0, 3, 5, 1, 2, 4)
    return [t.reshape(n, c * b * b, h // b, w // b).copy()]


@kernel("ReverseSequence")
def reverse_sequence(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, lens = np.asarray(inputs[0]), _ints(inputs[1])
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    out = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(0, n)
        dst = list(src)
        dst[time_axis] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        out[tuple(src)] = x[tuple(dst)]
    return [out]


def _pad_args(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
              ) -> tuple[list[int], Any, list[int] | None]:
    if ctx.opset < 11:
        return attrs.get("pads", attrs.get("paddings")), attrs.get("value", 0.0), None
    value = _opt(inputs, 2)
    value = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0]
    axes = _ints(inputs[3]) if _opt(inputs, 3) is not None else None
    return _ints(inputs[1]), value, axes


@kernel("Pad")
def pad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    pads, value, axes = _pad_args(inputs, attrs, ctx)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    k = len(axes)
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + k]]
    crop = tuple(slice(max(-lo, 0), x.shape[d] - max(-hi, 0)) for d, (lo, hi) in enumerate(width))
    x = x[crop]
    width = [(max(lo, 0), max(hi, 0)) for lo, hi in width]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))]
    np_mode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]
    return [np.pad(x, width, mode=np_mode)]


@kernel("Unique")
def unique(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = attrs.get("axis")
    data = x.reshape(-1) if axis is None else x
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


@kernel("CenterCropPad")
def center_crop_pad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, target = np.asarray(inputs[0]), _ints(inputs[1])
    axes = [a % x.ndim for a in attrs.get("axes", range(x.ndim))]
    out = x
    for a, t in zip(axes, target):
        dim = out.shape[a]
        if t < dim:
            start = (dim - t) // 2
            out = np.take(out, np.arange(start, start + t), axis=a)
        elif t > dim:
            width = [(0, 0)] * x.ndim
            width[a] = ((t - dim) // 2, t - dim - (t - dim) // 2)
            out = np.pad(out, width)
    return [np.ascontiguousarray(out)]
