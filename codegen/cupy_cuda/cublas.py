"""cuBLAS GEMMs on strided views, called through ctypes: the contractions of ``_lib.py`` (``library.py``).

CuPy's cuBLAS bindings refuse any call while a stream captures a CUDA graph, which cuBLAS itself allows,
so the C functions are called directly, on a handle and workspace of our own. ``plan`` reads a batched
product over operands as they lie (transposed and batched views, no copies) as cuBLAS calls: one strided
batch when the batch dims merge, else one pointer-array batch; ``run_plan`` launches them. An exported CUDA
package carries a verbatim copy beside ``_lib.py``: it imports only CuPy, NumPy and the standard library.
"""
from __future__ import annotations

import ctypes
import importlib

import cupy as cp
import numpy as np

BLAS: dict = {}    # "lib" (libcublas through ctypes), "handle", "workspace", "stream"
WORKSPACE = 32 << 20
_GEMM_ARGS = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int,
              ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_int)


_BATCHED_ARGS = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                 ctypes.c_void_p, ctypes.c_int, ctypes.c_int)


def _load_cublas():
    """libcublas as CuPy loaded it (its Python bindings refuse any call while a stream captures a
    graph, which cuBLAS itself allows: so the C functions are called directly)."""
    importlib.import_module("cupy_backends.cuda.libs.cublas")     # loads libcublas into the process
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        lib = ctypes.CDLL(load_nvidia_dynamic_lib("cublas").abs_path)
    for fn in (lib.cublasSgemmStridedBatched, lib.cublasDgemmStridedBatched):
        fn.argtypes, fn.restype = _GEMM_ARGS, ctypes.c_int
    for fn in (lib.cublasSgemmBatched, lib.cublasDgemmBatched):
        fn.argtypes, fn.restype = _BATCHED_ARGS, ctypes.c_int
    lib.cublasSetStream_v2.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.cublasSetWorkspace_v2.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return lib


def blas():
    """(libcublas, handle) or None where cuBLAS does not load (then CuPy's matmul runs)."""
    if "lib" not in BLAS:
        try:
            lib, handle = _load_cublas(), ctypes.c_void_p()
            _status(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
            BLAS.update(lib=lib, handle=handle.value, workspace=cp.empty(WORKSPACE, cp.uint8), stream=None)
        except Exception:  # noqa: BLE001 - no cuBLAS: the CuPy path below
            BLAS["lib"] = None
    return (BLAS["lib"], BLAS["handle"]) if BLAS["lib"] is not None else None


def _status(code, what):
    if code:
        raise RuntimeError(f"{what} failed: cuBLAS status {code}")


def _set_stream(lib, handle, stream):
    """The handle on ``stream`` with a workspace of our own (cublasSetStream resets it; an own
    workspace keeps cuBLAS from allocating inside a captured graph)."""
    if BLAS.get("stream") != stream:
        _status(lib.cublasSetStream_v2(handle, stream), "cublasSetStream")
        ws = BLAS["workspace"]
        _status(lib.cublasSetWorkspace_v2(handle, ws.data.ptr, ws.nbytes), "cublasSetWorkspace")
        BLAS["stream"] = stream


def merge(dims):
    """Consecutive (size, stride) dims as one (size, stride), or None when their strides do not chain."""
    size, stride = 1, 0
    for n, s in reversed(dims):
        if n == 1:
            continue
        if size == 1:
            size, stride = n, s
        elif s == stride * size:
            size *= n
        else:
            return None
    return size, stride


def _matrix(rows, cols, transposed):
    """(op, ld) that make cuBLAS (column-major) read the matrix (rows, cols) — or its transpose — in
    place; rows and cols are (size, stride) in elements. None when neither axis has stride 1."""
    (r, sr), (c, sc) = (cols, rows) if transposed else (rows, cols)
    if r == 1 or sr == 1:                                   # column-major already
        ld = sc if c > 1 else r
        if ld >= max(r, 1):
            return 0, ld
    if c == 1 or sc == 1:                                   # row-major: cuBLAS reads its transpose
        ld = sr if r > 1 else c
        if ld >= max(c, 1):
            return 1, ld
    return None


def plan(batch, m, n, k):
    """The cuBLAS calls of out[b, m, n] = sum_k a[b, m, k] * b[b, k, n] over strided operands.

    ``batch``: list of (size, (stride_a, stride_b, stride_out)); ``m``: ((size, stride_a), stride_out);
    ``n``: ((size, stride_b), stride_out); ``k``: (size, stride_a, stride_b); strides in elements.
    Returns (outer, inner, gemm) or None: ``outer`` batch dims looped over (size, strides), the
    ``inner`` batch merged into one strided batch (count, strides), and the gemm arguments
    (transa, transb, M, N, K, lda, ldb, ldc, operands swapped)."""
    (m_size, m_a), m_out = m
    (n_size, n_b), n_out = n
    k_size, k_a, k_b = k
    if m_size * n_size == 0:
        return None
    split = len(batch)
    while split > 0 and all(merge([(size, st[i]) for size, st in batch[split - 1:]]) is not None
                            for i in range(3)):
        split -= 1
    inner = [merge([(size, st[i]) for size, st in batch[split:]]) for i in range(3)]
    count = inner[0][0] if inner[0] else 1
    for im in inner:
        if im[0] not in (1, count):
            return None
    strides = tuple(im[1] if im[0] == count and count > 1 else 0 for im in inner)
    a_rows, a_cols, b_rows, b_cols = (m_size, m_a), (k_size, k_a), (k_size, k_b), (n_size, n_b)
    out = _matrix((m_size, m_out), (n_size, n_out), False)
    if out is None:
        return None
    if out[0] == 0:                                         # C column-major: C = A B
        ta, tb = _matrix(a_rows, a_cols, False), _matrix(b_rows, b_cols, False)
        if ta is None or tb is None:
            return None
        gemm = (ta[0], tb[0], m_size, n_size, k_size, ta[1], tb[1], out[1], False)
    else:                                                   # C row-major: C^T = B^T A^T
        tb, ta = _matrix(b_rows, b_cols, True), _matrix(a_rows, a_cols, True)
        if ta is None or tb is None:
            return None
        gemm = (tb[0], ta[0], n_size, m_size, k_size, tb[1], ta[1], out[1], True)
    return tuple(batch[:split]), (count, strides), gemm


_SCALARS: dict = {}


def _scalar(value, dtype):
    """A host pointer to ``value`` (kept alive: cuBLAS reads it at launch, and a captured graph keeps it)."""
    key = (float(value), np.dtype(dtype).str)
    if key not in _SCALARS:
        _SCALARS[key] = np.array([value], dtype)
    return _SCALARS[key].ctypes.data


POINTERS: dict = {}     # (plan, operand addresses) -> device arrays of the members' addresses
_OFFSETS: dict = {}      # plan -> device array (members, 3) of the members' element offsets


def run_plan(plan, a, b, out, alpha, beta=0.0):
    """The plan's GEMMs: one strided batch when the batch dims merge, else one pointer-array batch
    (``cublas<t>gemmBatched``: every member in one launch). The members' offsets depend on the plan
    alone: they are uploaded once per plan. The address arrays are offsets plus the operands' base
    addresses, computed on the device (host scalars as kernel arguments) once per set of addresses
    and cached: a step captured as a CUDA graph, whose temporaries get new addresses from the graph's
    own pool, computes them inside the graph instead of uploading (which capture refuses)."""
    lib, handle = blas()
    outer, (count, (sa, sb, so)), (ta, tb, mm, nn, kk, lda, ldb, ldc, swapped) = plan
    single = out.dtype == np.float32
    _set_stream(lib, handle, _stream())     # inside a capture: the capturing stream
    item = out.dtype.itemsize
    pa, pb, po = _ptr(a), _ptr(b), _ptr(out)
    al, be = _scalar(alpha, out.dtype), _scalar(beta, out.dtype)
    if outer:
        key = (plan, pa, pb, po)
        if key not in POINTERS:
            if len(POINTERS) > 4096:
                POINTERS.clear()
            offsets = _member_offsets(plan)
            POINTERS[key] = [offsets[i] * item + base for i, base in enumerate((pa, pb, po))]
        arr_a, arr_b, arr_o = (_ptr(x) for x in POINTERS[key])
        first, second = (arr_b, arr_a) if swapped else (arr_a, arr_b)
        fn = lib.cublasSgemmBatched if single else lib.cublasDgemmBatched
        _status(fn(handle, ta, tb, mm, nn, kk, al, first, lda, second, ldb, be, arr_o, ldc,
                   len(POINTERS[key][0])), "cublas<t>gemmBatched")
        return out
    first, second = (pb, pa) if swapped else (pa, pb)
    s1, s2 = (sb, sa) if swapped else (sa, sb)
    fn = lib.cublasSgemmStridedBatched if single else lib.cublasDgemmStridedBatched
    _status(fn(handle, ta, tb, mm, nn, kk, al, first, lda, s1, second, ldb, s2, be, po, ldc, so, count),
            "cublas<t>gemmStridedBatched")
    return out


def _upload(host):
    """A host array on the device (never inside a capture, which refuses host-to-device copies)."""
    return cp.asarray(host)


def _member_offsets(plan):
    """The element offsets of a pointer-array batch's members in a, b and out: three device arrays,
    uploaded the first time the plan runs (outside a capture: a package warms up first)."""
    if plan not in _OFFSETS:
        outer, (count, strides), _ = plan
        offsets = np.zeros((1, 3), np.int64)
        for size, st in outer:
            offsets = (offsets[:, None, :] + np.arange(size)[None, :, None] * np.asarray(st)).reshape(-1, 3)
        offsets = (offsets[:, None, :] + np.arange(count)[None, :, None] * np.asarray(strides)).reshape(-1, 3)
        _OFFSETS[plan] = [_upload(np.ascontiguousarray(offsets[:, i])) for i in range(3)]
    return _OFFSETS[plan]


def _stream():
    return cp.cuda.get_current_stream().ptr


def _ptr(x):
    return x.data.ptr


def elems(x):
    return [s // x.itemsize for s in x.strides]


def available():
    """Whether cuBLAS loaded (else CuPy's matmul and einsum run)."""
    return blas() is not None
