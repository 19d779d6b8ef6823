"""Library calls of the CPU backend: contractions on BLAS, allocation, the reference fallback.

This module imports only NumPy: an exported package carries a verbatim copy of it
(``_lib.py``), so it must not import anything from dcstudio.

- ``matmul``, ``gemm``, ``fused_matmul``: ONNX MatMul / Gemm / com.microsoft
  FusedMatMul as one ``np.matmul`` (OpenBLAS sgemm) each, with alpha and the bias
  applied in place, in the operands' dtype (fp16 accumulates in float32, like the
  reference). The ``blocked`` implementation choice is a reference-executor variant;
  here every contraction is one BLAS call.
- ``alloc``: a kernel's output buffer (``empty``, ``zeros``, or ``full`` of a wcr's identity);
  ``view``: the same carved from a planned, reused buffer (``buffers``): no page faults
  after the first step, which on this VM cost more than the kernels that fill the pages.
- ``reference``: call a reference kernel ``fn(inputs, attrs, ctx)`` for an op that has no
  kernel of its own (pooling, convolution, losses, gathers, …).
"""
from __future__ import annotations

import numpy as np


asarray = np.asarray
broadcast_to = np.broadcast_to


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype.itemsize < 4 else x


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """a @ b into ``out`` (a preallocated buffer) or a new array of a's dtype."""
    y = np.matmul(_wide(a), _wide(b), out=out)
    return y if y.dtype == a.dtype else y.astype(a.dtype)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX MatMul (NumPy broadcasting over batch dimensions)."""
    return _product(a, b, out)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float = 1.0, beta: float = 1.0,
         trans_a: int = 0, trans_b: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX Gemm: alpha·op(A)·op(B) + beta·C (alpha and C applied in place)."""
    y = _product(a.T if trans_a else a, b.T if trans_b else b, out)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        if beta == 1.0:
            y += c
        else:
            y += y.dtype.type(beta) * c
    return y


def _fused_operand(x: np.ndarray, trans: bool, trans_batch: bool) -> np.ndarray:
    if trans_batch:
        r = x.ndim
        x = np.transpose(x, list(range(1, r - 1)) + [0, r - 1])
    if trans and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    return x


def fused_matmul(a: np.ndarray, b: np.ndarray, alpha: float = 1.0, trans_a: int = 0, trans_b: int = 0,
                 trans_batch_a: int = 0, trans_batch_b: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """com.microsoft FusedMatMul: alpha·op(A)·op(B) (transBatch moves dim 0 to rank−2)."""
    y = _product(_fused_operand(a, bool(trans_a), bool(trans_batch_a)),
                 _fused_operand(b, bool(trans_b), bool(trans_batch_b)), out)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    return y


def einsum(equation: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A two-operand Einsum as BLAS (NumPy's optimized path: tensordot → sgemm)."""
    wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
    y = np.einsum(equation, _wide(a), _wide(b), optimize=True, out=None if wide else out)
    if wide:
        if out is None:
            return y.astype(a.dtype)
        out[...] = y
        return out
    return y


def identity(wcr: str, dtype: np.dtype):
    """The value a wcr output starts from."""
    dtype = np.dtype(dtype)
    if wcr == "sum":
        return 0
    if wcr == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if wcr == "max" else np.inf
    if dtype.kind == "b":
        return wcr == "min"
    info = np.iinfo(dtype)
    return info.min if wcr == "max" else info.max


def alloc(shape: tuple, dtype, kind: str = "empty", wcr: str | None = None) -> np.ndarray:
    """A new output buffer: ``empty``, ``zeros`` or ``full`` (of ``wcr``'s identity)."""
    if kind == "empty":
        return np.empty(shape, dtype)
    if kind == "zeros":
        return np.zeros(shape, dtype)
    return np.full(shape, identity(wcr, np.dtype(dtype)), dtype)


def view(buffer: np.ndarray, shape: tuple, dtype, kind: str = "empty", wcr: str | None = None) -> np.ndarray:
    """A planned buffer (flat bytes, reused across steps and tensors) as an array of ``shape``,
    initialized like ``alloc`` does."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    arr = buffer[:n].view(dtype).reshape(shape)
    if kind == "zeros":
        arr.fill(0)
    elif kind == "full":
        arr.fill(identity(wcr, np.dtype(dtype)))
    return arr


def reference(fn, inputs: tuple, attrs: dict, ctx) -> list[np.ndarray]:
    """Outputs of reference kernel ``fn`` (never mutates its inputs)."""
    return [np.asarray(v) for v in fn(list(inputs), attrs, ctx)]
