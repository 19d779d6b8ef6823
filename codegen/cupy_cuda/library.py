"""Library calls of the CUDA backend (CuPy: cuBLAS contractions, device buffers, host fallback).

The same interface as ``codegen/numba_cpu/library.py``, so the program text
(``codegen.program.module``) runs unchanged on either backend. An exported CUDA
package carries a verbatim copy (``_lib.py``): it imports only CuPy and NumPy.

- ``matmul``, ``gemm``, ``fused_matmul``: ``cupy.matmul`` (cuBLAS), alpha/bias in place;
- ``widen_bf16``: bfloat16 tensors (uint16 bits on the device) as float32 operands;
- ``alloc``/``view``: device buffers (planned buffers reused across steps);
- ``reference``: an op without a kernel runs on the host in its NumPy reference kernel
  (inputs copied down, outputs copied back up) — correct, not fast;
- ``asarray``: inputs and weights onto the device; ``broadcast_to`` materializes (the
  generated kernels index C-contiguous arrays).
"""
from __future__ import annotations

import cupy as cp
import numpy as np


def set_threads(threads=None):
    """Host threads do not matter here: every kernel and contraction runs on the device."""
    return {"threads": None, "numba": None, "blas": None}


def parallel(*tasks):
    """One device stream: the steps' members run one after the other (kernels are asynchronous)."""
    for task in tasks:
        task()


def asarray(x, dtype=None):
    return cp.ascontiguousarray(cp.asarray(x, dtype=dtype))


def broadcast_to(x, shape):
    return cp.ascontiguousarray(cp.broadcast_to(x, shape))


def to_host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else x


def widen_bf16(bits):
    """A bfloat16 tensor (CuPy has no bfloat16: stored as uint16 bits) as float32 for cuBLAS."""
    return (bits.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)


def _product(a, b, out):
    wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
    if wide:
        y = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
        if out is None:
            return y.astype(a.dtype)
        out[...] = y
        return out
    return cp.matmul(a, b, out=out)


def matmul(a, b, out=None):
    return _product(a, b, out)


def gemm(a, b, c, alpha=1.0, beta=1.0, trans_a=0, trans_b=0, out=None):
    y = _product(a.T if trans_a else a, b.T if trans_b else b, out)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        y += c if beta == 1.0 else y.dtype.type(beta) * c
    return y


def _fused_operand(x, trans, trans_batch):
    if trans_batch:
        r = x.ndim
        x = cp.transpose(x, list(range(1, r - 1)) + [0, r - 1])
    if trans and x.ndim > 1:
        x = cp.swapaxes(x, -1, -2)
    return x


def fused_matmul(a, b, alpha=1.0, trans_a=0, trans_b=0, trans_batch_a=0, trans_batch_b=0, out=None):
    y = _product(_fused_operand(a, bool(trans_a), bool(trans_batch_a)),
                 _fused_operand(b, bool(trans_b), bool(trans_batch_b)), out)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    return y


def einsum(equation, a, b, out=None):
    y = cp.einsum(equation, a, b)
    if out is None:
        return y
    out[...] = y
    return out


def alloc(shape, dtype, kind="empty", fill=0):
    if kind == "empty":
        return cp.empty(shape, dtype)
    if kind == "zeros":
        return cp.zeros(shape, dtype)
    return cp.full(shape, fill, dtype)


def view(buffer, shape, dtype, kind="empty", fill=0):
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    arr = buffer[:n].view(dtype).reshape(shape)
    if kind == "zeros":
        arr.fill(0)
    elif kind == "full":
        arr.fill(fill)
    return arr


def reference(fn, inputs, attrs, ctx):
    host = [to_host(x) for x in inputs]
    return [asarray(v) for v in fn(host, attrs, ctx)]
