"""Quantization reference kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scales and zero points are per tensor (scalar), per axis (1-D along ``axis``) or
blocked (same rank as x, ``block_size`` elements of ``axis`` per entry). Integer
quantization rounds half to even and saturates; float8 targets use Cast rules.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .elementwise import cast_to, onnx_dtype
from .registry import Inputs, OpContext, kernel

_FLOAT8 = {"float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20}


def _broadcast_param(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale/zero-point broadcastable against an input of ``shape``."""
    p = np.asarray(p)
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    axis = axis % len(shape)
    if block and p.ndim == len(shape):
        rep = np.repeat(p, block, axis=axis)
        return np.take(rep, np.arange(shape[axis]), axis=axis)
    return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])


@kernel("DequantizeLinear")
def dequantize_linear(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, scale = np.asarray(inputs[0]), np.asarray(inputs[1])
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    xf = x.astype(np.float32)
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if zp is not None and x.dtype.name not in _FLOAT8:
        xf = xf - _broadcast_param(np.asarray(zp).astype(np.float32), x.shape, axis, block)
    y = xf * _broadcast_param(scale.astype(np.float32), x.shape, axis, block)
    out = onnx_dtype(attrs["output_dtype"]) if attrs.get("output_dtype") else scale.dtype
    return [y.astype(out)]


def _target_dtype(zp: np.ndarray | None, attrs: dict[str, Any]) -> np.dtype:
    if zp is not None:
        return np.asarray(zp).dtype
    if attrs.get("output_dtype"):
        return onnx_dtype(attrs["output_dtype"])
    return np.dtype(np.uint8)


@kernel("QuantizeLinear")
def quantize_linear(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, scale = np.asarray(inputs[0]), np.asarray(inputs[1])
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    dtype = _target_dtype(zp, attrs)
    y = x.astype(np.float32) / _broadcast_param(scale.astype(np.float32), x.shape, axis, block)
    if dtype.name in _FLOAT8:
        return [cast_to(y, _FLOAT8[dtype.name], attrs.get("saturate", 1))]
    if dtype.name == "float4_e2m1fn":
        return [cast_to(y, 23, attrs.get("saturate", 1))]
    y = np.round(y)
    if zp is not None:
        y = y + _broadcast_param(np.asarray(zp).astype(np.float32), x.shape, axis, block)
    import ml_dtypes as mld
    info = mld.iinfo(dtype) if dtype.kind not in "iu" else np.iinfo(dtype)
    return [np.clip(y, info.min, info.max).astype(dtype)]


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                            ) -> list[np.ndarray]:
    x = np.asarray(inputs[0]).astype(np.float32)
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0)
    zp = np.clip(np.round(np.float32(0 - lo) / scale), 0, 255) if scale else np.float32(0)
    y = np.clip(np.round(x / scale) + zp, 0, 255) if scale else np.zeros_like(x)
    return [y.astype(np.uint8), np.array(scale, np.float32), np.array(zp).astype(np.uint8)]
