"""Library calls of the CUDA backend (CuPy: cuBLAS contractions, device buffers, host fallback).

The same interface as ``codegen/numba_cpu/library.py``, so the program text
(``codegen.program.module``) runs unchanged on either backend. An exported CUDA
package carries a verbatim copy (``_lib.py``): it imports only CuPy, NumPy and the standard library.

- ``run``: a step with ``recycle_outputs`` runs eagerly once (kernels compile, cuBLAS warms up),
  is captured as one CUDA graph on its second call (intermediate allocations in a private memory
  pool, inputs copied into the graph's own buffers) and replayed from then on: no Python, no
  launch per kernel. A step that cannot be captured (a host fallback) runs kernel by kernel, and
  ``GRAPH_NOTES`` says why;
- ``matmul``, ``gemm``, ``fused_matmul``, ``einsum``: cuBLAS strided-batched GEMMs on the
  operands as they lie (``_plan``: transposed and batched views, no copies), called through
  ctypes on a handle and workspace of our own (CuPy's matmul and its cuBLAS bindings refuse any
  call while a stream captures); ``cupy.matmul`` and ``cupy.einsum`` where the layout or dtype does not fit;
- ``widen_bf16``: bfloat16 tensors (uint16 bits on the device) as float32 operands;
- ``alloc``/``view``: device buffers (planned buffers reused across steps);
- ``conv``, ``conv_transpose``, ``conv_weight_grad``: float32 1-D/2-D convolutions on the device
  (``convolution.py``: im2col/col2im kernels and cuBLAS, direct kernels for depthwise ones);
- ``reference``: an op without a generated kernel runs its device version where ``device_ops.py``
  has one (gathers, scatters, pooling, the loss, onnxruntime's BatchNorm ops, …; ``host_value``
  keeps host copies of small constant weights for Slice/Pad) or ConvGrad (``_conv_grad``), else on
  the host in its NumPy reference kernel (a step that does is not captured). A step must not write
  its weights in place: the host copies would go stale;
- ``asarray``: inputs and weights onto the device; ``broadcast_to`` materializes (the
  generated kernels index C-contiguous arrays).
"""
from __future__ import annotations

import ctypes
import importlib
import math
import os

import cupy as cp
import numpy as np

GRAPHS = os.environ.get("DCSTUDIO_CUDA_GRAPHS", "1") != "0"
GRAPH_NOTES: list = []      # why a step runs kernel by kernel instead of as a captured graph
_GRAPHS: dict = {}          # (step, id(buffers), id(outputs)) -> [buffers, outputs, "warm" | reason | captured]


def set_threads(threads=None):
    """Host threads do not matter here: every kernel and contraction runs on the device."""
    return {"threads": None, "numba": None, "blas": None}


def parallel(*tasks):
    """One device stream: the steps' members run one after the other (kernels are asynchronous)."""
    for task in tasks:
        task()


def _contiguous(x):
    """``x`` C-contiguous, of its own shape (``cp.ascontiguousarray`` turns a 0-d array into 1-d)."""
    return x if x.flags.c_contiguous else cp.ascontiguousarray(x)


def run(fn, weights, buffers, outputs, args):
    """One step (``_step``/``_forward`` of model.py); see the module docstring for the graph. The
    cache holds the Model's buffer lists themselves, so their ids stay theirs while it lives."""
    _remember_constants(weights)
    if not GRAPHS or outputs is None:
        return fn(weights, buffers, outputs, *args)
    key = (fn, id(buffers), id(outputs))
    entry = _GRAPHS.get(key)
    if entry is None:
        _GRAPHS[key] = [buffers, outputs, "warm"]
        return fn(weights, buffers, outputs, *args)
    if entry[2] == "warm":
        entry[2] = _capture(fn, weights, buffers, outputs, args)
    if isinstance(entry[2], str):
        return fn(weights, buffers, outputs, *args)
    graph, inputs, out, _pool = entry[2]
    for mine, given in zip(inputs, args):
        if mine.shape != given.shape:
            raise ValueError(f"an input of shape {given.shape} where the step takes {mine.shape}")
        if mine.data.ptr != given.data.ptr:
            cp.copyto(mine, given)
    graph.launch(cp.cuda.get_current_stream())
    return out


def _capture(fn, weights, buffers, outputs, args):
    """(graph, its input buffers, its outputs, its memory pool and stream), or why the step was not
    captured."""
    inputs = [cp.empty_like(a) for a in args]
    for mine, given in zip(inputs, args):
        cp.copyto(mine, given)
    fn(weights, buffers, outputs, *inputs)      # on the graph's own inputs: GEMM address arrays get built
    cp.cuda.get_current_stream().synchronize()
    pool, stream = cp.cuda.MemoryPool(), cp.cuda.Stream(non_blocking=True)
    try:
        with cp.cuda.using_allocator(pool.malloc), stream:
            stream.begin_capture()
            try:
                out = fn(weights, buffers, outputs, *inputs)
            finally:
                graph = stream.end_capture()
        stream.synchronize()
    except Exception as exc:  # noqa: BLE001 - e.g. a host fallback: the step stays kernel by kernel
        GRAPH_NOTES.append(f"{getattr(fn, '__name__', 'step')}: not captured as a CUDA graph, runs kernel by "
                           f"kernel ({type(exc).__name__}: {str(exc)[:200]})")
        cp.cuda.runtime.deviceSynchronize()
        return GRAPH_NOTES[-1]
    finally:
        _BLAS["stream"] = None          # the next GEMM sets its stream again
    return graph, inputs, out, (pool, stream, dict(_POINTERS))   # the address arrays the graph reads stay alive


def asarray(x, dtype=None):
    return _contiguous(cp.asarray(x, dtype=dtype))


def broadcast_to(x, shape):
    return _contiguous(cp.broadcast_to(x, shape))


def to_host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else x


def widen_bf16(bits):
    """A bfloat16 tensor (CuPy has no bfloat16: stored as uint16 bits) as float32 for cuBLAS."""
    return (bits.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)


# ---- contractions: cuBLAS strided-batched GEMMs on views (no copies, and capturable in a CUDA graph)

_BLAS: dict = {}    # "lib" (libcublas through ctypes), "handle", "workspace", "stream"
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


def _blas():
    """(libcublas, handle) or None where cuBLAS does not load (then CuPy's matmul runs)."""
    if "lib" not in _BLAS:
        try:
            lib, handle = _load_cublas(), ctypes.c_void_p()
            _status(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
            _BLAS.update(lib=lib, handle=handle.value, workspace=cp.empty(WORKSPACE, cp.uint8), stream=None)
        except Exception:  # noqa: BLE001 - no cuBLAS: the CuPy path below
            _BLAS["lib"] = None
    return (_BLAS["lib"], _BLAS["handle"]) if _BLAS["lib"] is not None else None


def _status(code, what):
    if code:
        raise RuntimeError(f"{what} failed: cuBLAS status {code}")


def _set_stream(lib, handle, stream):
    """The handle on ``stream`` with a workspace of our own (cublasSetStream resets it; an own
    workspace keeps cuBLAS from allocating inside a captured graph)."""
    if _BLAS.get("stream") != stream:
        _status(lib.cublasSetStream_v2(handle, stream), "cublasSetStream")
        ws = _BLAS["workspace"]
        _status(lib.cublasSetWorkspace_v2(handle, ws.data.ptr, ws.nbytes), "cublasSetWorkspace")
        _BLAS["stream"] = stream


def _merge(dims):
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


def _plan(batch, m, n, k):
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
    while split > 0 and all(_merge([(size, st[i]) for size, st in batch[split - 1:]]) is not None
                            for i in range(3)):
        split -= 1
    inner = [_merge([(size, st[i]) for size, st in batch[split:]]) for i in range(3)]
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


_POINTERS: dict = {}     # (plan, operand addresses) -> device arrays of the members' addresses
_OFFSETS: dict = {}      # plan -> device array (members, 3) of the members' element offsets


def _run_plan(plan, a, b, out, alpha, beta=0.0):
    """The plan's GEMMs: one strided batch when the batch dims merge, else one pointer-array batch
    (``cublas<t>gemmBatched``: every member in one launch). The members' offsets depend on the plan
    alone: they are uploaded once per plan. The address arrays are offsets plus the operands' base
    addresses, computed on the device (host scalars as kernel arguments) once per set of addresses
    and cached: a step captured as a CUDA graph, whose temporaries get new addresses from the graph's
    own pool, computes them inside the graph instead of uploading (which capture refuses)."""
    lib, handle = _blas()
    outer, (count, (sa, sb, so)), (ta, tb, mm, nn, kk, lda, ldb, ldc, swapped) = plan
    single = out.dtype == np.float32
    _set_stream(lib, handle, _stream())     # inside a capture: the capturing stream
    item = out.dtype.itemsize
    pa, pb, po = _ptr(a), _ptr(b), _ptr(out)
    al, be = _scalar(alpha, out.dtype), _scalar(beta, out.dtype)
    if outer:
        key = (plan, pa, pb, po)
        if key not in _POINTERS:
            if len(_POINTERS) > 4096:
                _POINTERS.clear()
            offsets = _member_offsets(plan)
            _POINTERS[key] = [offsets[i] * item + base for i, base in enumerate((pa, pb, po))]
        arr_a, arr_b, arr_o = (_ptr(x) for x in _POINTERS[key])
        first, second = (arr_b, arr_a) if swapped else (arr_a, arr_b)
        fn = lib.cublasSgemmBatched if single else lib.cublasDgemmBatched
        _status(fn(handle, ta, tb, mm, nn, kk, al, first, lda, second, ldb, be, arr_o, ldc,
                   len(_POINTERS[key][0])), "cublas<t>gemmBatched")
        return out
    first, second = (pb, pa) if swapped else (pa, pb)
    s1, s2 = (sb, sa) if swapped else (sa, sb)
    fn = lib.cublasSgemmStridedBatched if single else lib.cublasDgemmStridedBatched
    _status(fn(handle, ta, tb, mm, nn, kk, al, first, lda, s1, second, ldb, s2, be, po, ldc, so, count),
            "cublas<t>gemmStridedBatched")
    return out


def _member_offsets(plan):
    """The element offsets of a pointer-array batch's members in a, b and out: three device arrays,
    uploaded the first time the plan runs (outside a capture: a package warms up first)."""
    if plan not in _OFFSETS:
        outer, (count, strides), _ = plan
        offsets = np.zeros((1, 3), np.int64)
        for size, st in outer:
            offsets = (offsets[:, None, :] + np.arange(size)[None, :, None] * np.asarray(st)).reshape(-1, 3)
        offsets = (offsets[:, None, :] + np.arange(count)[None, :, None] * np.asarray(strides)).reshape(-1, 3)
        _OFFSETS[plan] = [asarray(np.ascontiguousarray(offsets[:, i])) for i in range(3)]
    return _OFFSETS[plan]


def _stream():
    return cp.cuda.get_current_stream().ptr


def _ptr(x):
    return x.data.ptr


def _elems(x):
    return [s // x.itemsize for s in x.strides]


def _strided_product(a, b, out, alpha=1.0):
    """out[..., m, n] = alpha * a[..., m, k] @ b[..., k, n] (batch dims broadcast) by cuBLAS on the
    views as they lie, or False where that cannot be done (dtype, layout, no bindings)."""
    if out is None or out.dtype not in (np.float32, np.float64) or a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if a.ndim < 2 or b.ndim < 2 or out.ndim < 2 or _blas() is None:
        return False
    nb = out.ndim - 2
    if a.shape[-1] != b.shape[-2] or out.shape[-2:] != (a.shape[-2], b.shape[-1]):
        return False                                        # let cupy.matmul say what is wrong
    sa, sb, so = _elems(a), _elems(b), _elems(out)
    batch = []
    for d in range(nb):
        da, db = d - (nb - (a.ndim - 2)), d - (nb - (b.ndim - 2))
        if (da >= 0 and a.shape[da] not in (1, out.shape[d])) or (db >= 0 and b.shape[db] not in (1, out.shape[d])):
            return False
        st_a = sa[da] if da >= 0 and a.shape[da] > 1 else 0
        st_b = sb[db] if db >= 0 and b.shape[db] > 1 else 0
        batch.append((out.shape[d], (st_a, st_b, so[d])))
    plan = _plan(batch, ((a.shape[-2], sa[-2]), so[-2]), ((b.shape[-1], sb[-1]), so[-1]),
                 (a.shape[-1], sa[-1], sb[-2]))
    if plan is None:
        return False
    _run_plan(plan, a, b, out, alpha)
    return True


def _product(a, b, out, alpha=1.0):
    if a.ndim >= 2 and b.ndim >= 2:
        if _strided_product(a, b, out, alpha):
            return out
        # operands cuBLAS cannot read as they lie (no unit stride): contiguous copies, which are copy
        # kernels a captured graph takes (cupy.matmul's batched path uploads an address table)
        ac, bc = _contiguous(a), _contiguous(b)
        if out is not None and (ac is not a or bc is not b) and _strided_product(ac, bc, out, alpha):
            return out
    wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
    if wide:
        y = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
        if out is None:
            y = y.astype(a.dtype)
        else:
            out[...] = y
            y = out
    else:
        y = cp.matmul(a, b, out=out)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    return y


def matmul(a, b, out=None):
    return _product(a, b, out)


def gemm(a, b, c, alpha=1.0, beta=1.0, trans_a=0, trans_b=0, out=None):
    y = _product(a.T if trans_a else a, b.T if trans_b else b, out, alpha)
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
    return _product(_fused_operand(a, bool(trans_a), bool(trans_batch_a)),
                    _fused_operand(b, bool(trans_b), bool(trans_batch_b)), out, alpha)


def _einsum_views(equation, a, b, out):
    """``a``, ``b`` and ``out`` transposed to [batch…, m…, k…] · [batch…, k…, n…] -> [batch…, m…, n…]
    with each group of letters merged into one dim (views only), or None if the equation is no GEMM."""
    lhs, res = equation.replace(" ", "").split("->")
    la, lb = lhs.split(",")
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(set(res)) != len(res):
        return None
    if set(la) | set(lb) != set(res) | (set(la) & set(lb)):
        return None                                         # a letter summed in one operand only
    sizes: dict = {}
    for letters, x in ((la, a), (lb, b), (res, out)):
        if len(letters) != x.ndim or any(sizes.setdefault(c, n) != n for c, n in zip(letters, x.shape)):
            return None                                     # broadcast or mismatched: cupy.einsum decides
    bat = [c for c in res if c in la and c in lb]
    ms = [c for c in res if c in la and c not in lb]
    ns = [c for c in res if c in lb and c not in la]
    ks = [c for c in la if c in lb and c not in res]

    sa, sb, so = _elems(a), _elems(b), _elems(out)

    def dims(strides, letters, x_letters):
        return [(sizes[c], strides[x_letters.index(c)]) for c in letters]
    m_a, m_o = _merge(dims(sa, ms, la)), _merge(dims(so, ms, res))
    n_b, n_o = _merge(dims(sb, ns, lb)), _merge(dims(so, ns, res))
    k_a, k_b = _merge(dims(sa, ks, la)), _merge(dims(sb, ks, lb))
    if None in (m_a, m_o, n_b, n_o, k_a, k_b):
        return None
    batch = [(sizes[c], (sa[la.index(c)], sb[lb.index(c)], so[res.index(c)])) for c in bat]
    return _plan(batch, (m_a, m_o[1]), (n_b, n_o[1]), (k_a[0], k_a[1], k_b[1]))   # the sizes agree (checked)


def einsum(equation, a, b, out=None):
    if (out is not None and out.dtype in (np.float32, np.float64) and a.dtype == out.dtype == b.dtype
            and _blas() is not None):
        plan = _einsum_views(equation, a, b, out)
        if plan is not None:
            return _run_plan(plan, a, b, out, 1.0)
        ac, bc = _contiguous(a), _contiguous(b)          # as in ``_product``: copies cuBLAS can read
        plan = _einsum_views(equation, ac, bc, out) if ac is not a or bc is not b else None
        if plan is not None:
            return _run_plan(plan, ac, bc, out, 1.0)
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
    n = math.prod(shape) * np.dtype(dtype).itemsize
    arr = buffer[:n].view(dtype).reshape(shape)
    if kind == "zeros":
        arr.fill(0)
    elif kind == "full":
        arr.fill(fill)
    return arr


_DEVICE = None
_CONSTANTS: dict = {}      # id(device array) -> (that array, its host copy): small constant weights
_WEIGHT_SETS: dict = {}    # id(weights dict) -> the dict (kept, so the ids above stay theirs)
SMALL_CONSTANT = 64        # elements: weights up to this size keep a host copy (Slice starts, Pad pads)


def _remember_constants(weights):
    """Host copies of the small weights, read once before the first step runs (never while a graph
    is captured). Weights are graph constants: the step never writes them."""
    if id(weights) in _WEIGHT_SETS:
        return
    _WEIGHT_SETS[id(weights)] = weights
    for value in weights.values():
        if isinstance(value, cp.ndarray) and value.size <= SMALL_CONSTANT:
            _CONSTANTS[id(value)] = (value, cp.asnumpy(value))


def host_value(x):
    """The host copy of ``x`` when it is a small constant weight (or already on the host), else None."""
    if x is None or isinstance(x, np.ndarray):
        return x
    entry = _CONSTANTS.get(id(x))
    return entry[1] if entry is not None and entry[0] is x else None


def _device_op(fn):
    """The device version (``device_ops.OPS``) of reference kernel ``fn``, or None."""
    global _DEVICE
    if _DEVICE is None:
        try:                                  # in an exported package: its own copies
            from . import device_ops
            from ._ref import kernels  # noqa: F401 - registers the reference kernels
            from ._ref.registry import lookup
        except ImportError:                   # in the repository
            from codegen.cupy_cuda import device_ops
            from codegen.numpy_ref import kernels  # noqa: F401
            from codegen.numpy_ref.registry import lookup
        _DEVICE = {}
        for (domain, op), impl in (device_ops.OPS | {("com.microsoft", "ConvGrad"): _conv_grad}).items():
            ref = lookup(domain, op)
            if ref is not None:
                _DEVICE[ref] = impl
    return _DEVICE.get(fn)


def _conv_grad(xp, inputs, attrs, ctx, host=None):
    """com.microsoft ConvGrad (dY, X, W) -> (dX, dW, dB) where ``_convolve`` runs on the device: dX = ConvTranspose(dY,
    W) (X's shape fixes the output padding), dW = ConvWeightGrad(X, dY), dB sums dY in float64; else None (host)."""
    dy, x, w = inputs[:3]
    if x.ndim not in (3, 4) or any(a.dtype != np.float32 for a in (dy, x, w)) \
            or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
        return None
    geometry = {k: attrs[k] for k in ("strides", "pads", "dilations", "group") if k in attrs}
    dx = _convolve(None, [dy, w], geometry, ctx, xp.empty(x.shape, x.dtype), "transpose")
    dw = _convolve(None, [x, dy], geometry | {"kernel_shape": list(w.shape[2:])}, ctx, xp.empty_like(w), "weights")
    return [dx, dw, dy.astype(np.float64).sum(axis=(0,) + tuple(range(2, dy.ndim))).astype(dy.dtype)]


def reference(fn, inputs, attrs, ctx):
    """An op without a generated kernel: its device version where ``device_ops`` has one for this
    case, else on the host — inputs, and attributes that hold tensors (device weights), come down;
    outputs go up."""
    impl = _device_op(fn)
    if impl is not None and all(x is None or isinstance(x, cp.ndarray) for x in inputs):
        got = impl(cp, list(inputs), attrs, ctx, host_value)
        if got is not None:
            return got
    host = [to_host(x) for x in inputs]
    return [asarray(v) for v in fn(host, {k: to_host(v) for k, v in attrs.items()}, ctx)]


def _convolve(fn, inputs, attrs, ctx, out, kind):
    """A float32 1-D/2-D convolution on the device (``convolution.py``), the host reference otherwise."""
    x, w = inputs[0], inputs[1]
    nd = x.ndim - 2
    if nd not in (1, 2) or any(a.dtype != cp.float32 for a in (x, w, out)) or "output_shape" in attrs \
            or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
        out[...] = reference(fn, inputs, attrs, ctx)[0]
        return out
    from . import convolution
    strides = tuple(attrs.get("strides") or [1] * nd)
    dil = tuple(attrs.get("dilations") or [1] * nd)
    pads = tuple(attrs.get("pads") or [0] * (2 * nd))[:nd]
    x, w = _contiguous(x), _contiguous(w)
    y = out if out.flags.c_contiguous else cp.empty(out.shape, out.dtype)
    y4 = y
    if nd == 1:
        x, w, y4 = x[:, :, None, :], w[:, :, None, :], y[:, :, None, :]
        strides, pads, dil = (1,) + strides, (0,) + pads, (1,) + dil
    run = {"conv": convolution.conv2d, "transpose": convolution.conv_transpose2d,
           "weights": convolution.conv_weight_grad2d}[kind]
    run(x, w, y4, strides, pads, dil, int(attrs.get("group", 1)), matmul)
    if y is not out:
        out[...] = y
    if len(inputs) > 2 and inputs[2] is not None:
        out += inputs[2].reshape((1, -1) + (1,) * nd)
    return out


def conv(fn, inputs, attrs, ctx, out, exact=True):
    """ONNX Conv into ``out``: im2col + cuBLAS or a direct kernel on float32 1-D/2-D convs (``convolution.py``),
    the reference kernel ``fn`` on the host otherwise; ``exact`` (the CPU's float64 sums) is not used here."""
    return _convolve(fn, inputs, attrs, ctx, out, "conv")


def conv_transpose(fn, inputs, attrs, ctx, out):
    """ONNX ConvTranspose into ``out`` (its size fixes the output padding), like ``conv``."""
    return _convolve(fn, inputs, attrs, ctx, out, "transpose")


def conv_weight_grad(fn, inputs, attrs, ctx, out):
    """ai.dcstudio ConvWeightGrad (X, dY) into ``out``, in W's layout, like ``conv``."""
    return _convolve(fn, inputs, attrs, ctx, out, "weights")


def max_pool(fn, inputs, attrs, ctx, out, indices=None):
    """ONNX MaxPool into ``out`` (and ``indices``): on the device for 2-D pooling (``device_ops``),
    else on the host in the reference kernel ``fn``."""
    got = reference(fn, inputs, attrs, ctx)
    out[...] = got[0]
    if indices is not None:
        indices[...] = got[1]
    return out
