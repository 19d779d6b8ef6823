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
  operands as they lie (``cublas.py``: transposed and batched views, no copies, called through
  ctypes on a handle and workspace of our own: CuPy's matmul and its cuBLAS bindings refuse any
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

import math
import os

import numpy as np

try:
    import cupy as cp
except ImportError as e:          # an exported CUDA package on a machine without CuPy
    raise ImportError("this package runs on an NVIDIA GPU through CuPy, which is not installed here: pip install "
                      "cupy-cuda13x (the wheel for your CUDA), or export the model again with --backend cpu") from e

from . import cublas

GRAPHS = os.environ.get("DCSTUDIO_CUDA_GRAPHS", "1") != "0"
GRAPH_NOTES: list = []      # why a step runs kernel by kernel instead of as a captured graph
_GRAPHS: dict = {}          # (step, id(buffers), id(outputs)) -> [buffers, outputs, "warm" | reason | captured]


def device_problem():
    """Why this package cannot run here (no usable CUDA device), or None."""
    try:
        if cp.cuda.runtime.getDeviceCount() > 0:
            return None
        why = "no CUDA device is present"
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError: no driver, or one older than this CuPy needs
        why = f"CUDA cannot start ({type(e).__name__}: {e})"
    return (f"this package runs on an NVIDIA GPU through CuPy, and {why}: run it on a machine with an NVIDIA "
            "GPU and its driver, or export the model again with --backend cpu")


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
        cublas.BLAS["stream"] = None   # the next GEMM sets its stream again
    return graph, inputs, out, (pool, stream, dict(cublas.POINTERS))   # the address arrays the graph reads stay alive


def asarray(x, dtype=None):
    return _contiguous(cp.asarray(x, dtype=dtype))


def broadcast_to(x, shape):
    return _contiguous(cp.broadcast_to(x, shape))


def to_host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else x


def widen_bf16(bits):
    """A bfloat16 tensor (CuPy has no bfloat16: stored as uint16 bits) as float32 for cuBLAS."""
    return (bits.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)


def _strided_product(a, b, out, alpha=1.0):
    """out[..., m, n] = alpha * a[..., m, k] @ b[..., k, n] (batch dims broadcast) by cuBLAS on the
    views as they lie, or False where that cannot be done (dtype, layout, no bindings)."""
    if out is None or out.dtype not in (np.float32, np.float64) or a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if a.ndim < 2 or b.ndim < 2 or out.ndim < 2 or not cublas.available():
        return False
    nb = out.ndim - 2
    if a.shape[-1] != b.shape[-2] or out.shape[-2:] != (a.shape[-2], b.shape[-1]):
        return False                                        # let cupy.matmul say what is wrong
    sa, sb, so = cublas.elems(a), cublas.elems(b), cublas.elems(out)
    batch = []
    for d in range(nb):
        da, db = d - (nb - (a.ndim - 2)), d - (nb - (b.ndim - 2))
        if (da >= 0 and a.shape[da] not in (1, out.shape[d])) or (db >= 0 and b.shape[db] not in (1, out.shape[d])):
            return False
        st_a = sa[da] if da >= 0 and a.shape[da] > 1 else 0
        st_b = sb[db] if db >= 0 and b.shape[db] > 1 else 0
        batch.append((out.shape[d], (st_a, st_b, so[d])))
    plan = cublas.plan(batch, ((a.shape[-2], sa[-2]), so[-2]), ((b.shape[-1], sb[-1]), so[-1]),
                 (a.shape[-1], sa[-1], sb[-2]))
    if plan is None:
        return False
    cublas.run_plan(plan, a, b, out, alpha)
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

    sa, sb, so = cublas.elems(a), cublas.elems(b), cublas.elems(out)

    def dims(strides, letters, x_letters):
        return [(sizes[c], strides[x_letters.index(c)]) for c in letters]
    m_a, m_o = cublas.merge(dims(sa, ms, la)), cublas.merge(dims(so, ms, res))
    n_b, n_o = cublas.merge(dims(sb, ns, lb)), cublas.merge(dims(so, ns, res))
    k_a, k_b = cublas.merge(dims(sa, ks, la)), cublas.merge(dims(sb, ks, lb))
    if None in (m_a, m_o, n_b, n_o, k_a, k_b):
        return None
    batch = [(sizes[c], (sa[la.index(c)], sb[lb.index(c)], so[res.index(c)])) for c in bat]
    return cublas.plan(batch, (m_a, m_o[1]), (n_b, n_o[1]), (k_a[0], k_a[1], k_b[1]))   # the sizes agree (checked)


def einsum(equation, a, b, out=None):
    if (out is not None and out.dtype in (np.float32, np.float64) and a.dtype == out.dtype == b.dtype
            and cublas.available()):
        plan = _einsum_views(equation, a, b, out)
        if plan is not None:
            return cublas.run_plan(plan, a, b, out, 1.0)
        ac, bc = _contiguous(a), _contiguous(b)          # as in ``_product``: copies cuBLAS can read
        plan = _einsum_views(equation, ac, bc, out) if ac is not a or bc is not b else None
        if plan is not None:
            return cublas.run_plan(plan, ac, bc, out, 1.0)
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
