"""Library calls of the CPU backend: contractions on BLAS, allocation, the reference fallback.

This module imports only NumPy (numba and threadpoolctl lazily, when there): an exported package carries
a verbatim copy of it (``_lib.py``), so it must not import anything from dcstudio.

- ``set_threads(n)``: numba's and BLAS's thread counts for the process; ``n=None`` is ``$DCSTUDIO_THREADS``
  or the physical cores of this process's affinity mask (``physical_cores``), so a package started under
  ``taskset`` or a container's CPU set uses the cores it was given, not the machine's;
- ``matmul``, ``gemm``, ``fused_matmul``, ``einsum``: one ``np.matmul`` (OpenBLAS sgemm) each, stacked
  activations times a weight matrix as one GEMM over the merged rows (``_product``), alpha and bias in
  place, in the operands' dtype (fp16 accumulates in float32, like the reference);
- ``panels(n, w)``: the starts of a fused contraction's panels (``codegen.program.panels``);
- ``conv``, ``conv_transpose``, ``conv_weight_grad``, ``max_pool``: ``convolution.py``/``pooling.py``;
- ``alloc``: a kernel's output buffer (``empty``, ``zeros`` or ``full`` of a wcr's identity); ``view``: the
  same carved from a planned, reused buffer: no page faults after the first step;
- ``widen_bf16``: bfloat16 (stored as uint16 bits) as float32, for contractions;
- ``reference``: a reference kernel ``fn(inputs, attrs, ctx)`` for an op without a kernel of its own.
"""
from __future__ import annotations

import math
import os
import threading
import time
from functools import partial

import numpy as np

from .cores import default_threads, device_problem, physical_cores  # noqa: F401  (public here too)

asarray = np.asarray
broadcast_to = np.broadcast_to


_THREADS = [os.cpu_count() or 1]   # what set_threads chose last (parallel() runs in order when 1)


_POOL = None
_BLAS = None
_STEP = threading.Lock()     # one parallel step at a time (BLAS thread counts are global)
TRACE = None   # a list to record (worker, start, end) perf_counter seconds of every parallel member


def _blas_controller():
    """threadpoolctl's controller of NumPy's BLAS (None without threadpoolctl), made once."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
            np.dot(np.ones(2), np.ones(2))
            _BLAS = ThreadpoolController().select(user_api="blas")
        except ImportError:
            _BLAS = False
    return _BLAS or None


def blas_threads() -> int | None:
    """The threads NumPy's BLAS uses now (None without threadpoolctl or a BLAS it knows)."""
    blas = _blas_controller()
    return max((lib.num_threads for lib in blas.lib_controllers), default=None) if blas is not None else None


def set_threads(threads: int | None = None) -> dict:
    """Use ``threads`` threads (None: ``default_threads()``) for numba kernels and for BLAS in this
    process; returns what is in effect: ``{"threads", "numba", "blas"}`` (None: not installed/found)."""
    n = max(1, int(threads)) if threads else default_threads()
    _THREADS[0] = n
    numba_n = None
    calm_threads(n)
    try:
        import numba
        numba.set_num_threads(_numba_count(n))
        numba_n = numba.get_num_threads()
    except ImportError:
        pass
    blas = _blas_controller()
    for lib in blas.lib_controllers if blas is not None else ():
        lib.set_num_threads(n)
    if SPINNING[0] and n > 1 and not _WARNED:
        _WARNED.append(True)
        import warnings
        warnings.warn(f"dcstudio: kernels run on one thread (BLAS on {n}): the OpenMP runtime {SPINNING[0]} was "
                      "loaded before numba started, and its idle workers spin for milliseconds on the cores BLAS "
                      f"needs. Set GOMP_SPINCOUNT={OMP_SPIN} before importing it (torch, for one) to run them on "
                      f"all {n}.", RuntimeWarning, stacklevel=2)
    return {"threads": n, "numba": numba_n, "blas": blas_threads()}


SPINNING = [None]
"""The OpenMP runtime numba may have bound to that was loaded, with spin settings of its own, before
numba's threading layer started (``_short_omp_spin``); then ``set_threads`` keeps numba at one thread."""
_WARNED: list = []


def _numba_count(n: int) -> int:
    """numba's threads for ``n`` in all: one while ``SPINNING``, at most ``NUMBA_NUM_THREADS``."""
    from numba import config
    return 1 if SPINNING[0] else min(n, config.NUMBA_NUM_THREADS)


def calm_threads(threads: int) -> None:
    """Idle workers stop spinning soon, so that numba's ``prange`` kernels and BLAS do not take each
    other's cores: start numba's threading layer with a short OpenMP spin (``_short_omp_spin``; no
    effect once it runs) and, for more than one thread, ``quiet_blas``."""
    start_numba()
    if threads > 1:
        quiet_blas()


def start_numba() -> int | None:
    """Start numba's threading layer (what its first ``get_num_threads`` or ``prange`` does) with a short
    OpenMP spin; returns its thread count for this thread (None without numba)."""
    try:
        import numba
    except ImportError:
        return None
    with _short_omp_spin():
        return numba.get_num_threads()          # GNU OpenMP reads its settings as it loads


OMP_SPIN = 2000
"""Spin-wait iterations of an idle OpenMP worker (numba's ``omp`` layer) before it sleeps. GNU OpenMP's default,
300000, kept workers spinning for milliseconds after each ``prange`` kernel, on the cores the next GEMM needed:
BERT-base layer step, 2 threads, 251 → 322 ms (1000: 241 ms); 0 cost EfficientNet-B0's step 105 → 148 ms."""


class _short_omp_spin:
    """While numba starts its threading layer (``start_numba``), ``$GOMP_SPINCOUNT`` is
    ``OMP_SPIN`` unless the user set it or ``$OMP_WAIT_POLICY``: GNU OpenMP reads it when it loads,
    so it must be set before; it is removed again, for the programs this process starts."""

    def __enter__(self):
        self.set = False
        try:
            from numba.np.ufunc import parallel
            started = bool(getattr(parallel, "_is_initialized", False))
        except ImportError:
            started = True
        if not started and "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
            SPINNING[0] = _loaded_openmp()
            os.environ["GOMP_SPINCOUNT"] = str(OMP_SPIN)
            self.set = True
        return self

    def __exit__(self, *exc):
        if self.set:
            os.environ.pop("GOMP_SPINCOUNT", None)
        return False


def _loaded_openmp() -> str | None:
    """The file of an OpenMP runtime already loaded in this process (torch loads its own GNU OpenMP
    globally, and numba's ``prange`` loops then run on it, with the spin it read when it loaded)."""
    try:
        from threadpoolctl import ThreadpoolController
        libs = ThreadpoolController().select(user_api="openmp").lib_controllers
    except ImportError:
        return None
    return os.path.basename(libs[0].filepath) if libs else None


BLAS_IDLE_TIMEOUT = 4
"""log2 of the CPU cycles an idle OpenBLAS worker spins before it sleeps (OpenBLAS's default 28 is about 0.1 s
here; 4 is its minimum). Measured here, a 2-thread ``prange`` kernel right after a 512² sgemm took 6.5 ms with
the default and 2.6 ms with this, against 5.1 ms on one thread."""
_QUIET = [None]


def quiet_blas() -> bool | None:
    """Make NumPy's OpenBLAS put idle workers to sleep at once, unless ``$OPENBLAS_THREAD_TIMEOUT`` says otherwise:
    set it, have OpenBLAS read its environment again and stop the workers (``blas_thread_shutdown_``, as it does
    around ``fork``); the next multi-threaded call starts them with the new timeout. Once per process, from
    ``set_threads``. True when done, False where not OpenBLAS or already set, None when it could not be done."""
    if _QUIET[0] is not None:
        return _QUIET[0]
    _QUIET[0] = False
    blas = _blas_controller()
    libs = [lib for lib in blas.lib_controllers if lib.internal_api == "openblas"] if blas is not None else []
    if not libs or "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return False
    try:
        import ctypes
        so = ctypes.CDLL(libs[0].filepath)
        current, read_env, shutdown = so.openblas_thread_timeout, so.openblas_read_env, so.blas_thread_shutdown_
    except (OSError, AttributeError):
        _QUIET[0] = None
        return None
    if 0 < current() <= BLAS_IDLE_TIMEOUT:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(BLAS_IDLE_TIMEOUT)
    try:
        read_env()
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    shutdown()
    _QUIET[0] = current() == BLAS_IDLE_TIMEOUT or None
    return _QUIET[0]


def parallel(*tasks) -> None:
    """Run ``tasks`` (closures that call kernels and BLAS into preallocated buffers) side by side:
    the first on this thread, the others on a small pool (numba kernels and BLAS release the GIL).
    Meanwhile each BLAS call gets ``threads // len(tasks)`` threads, so the total stays within the
    threads ``set_threads`` chose; they are restored once every task has ended. The first
    exception is raised after all tasks have ended (none is left writing into the step's
    buffers). One step at a time in this process: a second caller waits (``_STEP``). Under numba's
    ``workqueue`` threading layer (where GNU OpenMP and TBB are missing), which aborts the process
    when two threads launch ``prange`` loops at once, the tasks run in order."""
    if _THREADS[0] <= 1 or len(tasks) == 1 or not _concurrent_prange():   # in order, as the sequential step
        for task in tasks:
            task()
        return
    with _STEP:
        _parallel(tasks)


def _cap_blas(k: int) -> list:
    """Lower every BLAS library on more than ``k`` threads to ``k``; returns (library, count) for ``_restore_blas``."""
    blas = _blas_controller()
    counts = [(lib, lib.num_threads) for lib in blas.lib_controllers] if blas is not None else []
    lowered = [(lib, n) for lib, n in counts if n > k]
    for lib, _ in lowered:
        lib.set_num_threads(k)
    return lowered


def _restore_blas(lowered: list) -> None:
    for lib, n in lowered:
        lib.set_num_threads(n)


def _concurrent_prange() -> bool:
    """Whether two threads may run numba ``prange`` loops at once (not under ``workqueue``)."""
    try:
        import numba
        return numba.threading_layer() != "workqueue"
    except ImportError:
        return True
    except ValueError:               # not started yet: set_threads starts it, so this is rare
        return False


def _parallel(tasks) -> None:
    global _POOL
    from concurrent.futures import ThreadPoolExecutor, wait
    if _POOL is None or _POOL._max_workers < len(tasks) - 1:
        _POOL = ThreadPoolExecutor(max_workers=max(1, len(tasks) - 1), thread_name_prefix="dcstudio-step")
    share = max(1, (blas_threads() or 1) // len(tasks))
    trace = TRACE
    try:
        from numba import set_num_threads as numba_threads
        numba_all = _numba_count(_THREADS[0])
    except ImportError:
        numba_threads = numba_all = None

    def run(k, task):
        t0 = time.perf_counter()
        if numba_threads is not None:    # thread-local: a prange kernel in a task uses its share only
            numba_threads(max(1, numba_all // len(tasks)))
        task()
        if trace is not None:
            trace.append((k, t0, time.perf_counter()))

    lowered = _cap_blas(share)
    futures, error = [], None
    try:
        futures = [_POOL.submit(run, k, task) for k, task in enumerate(tasks[1:], start=1)]
        run(0, tasks[0])
    except BaseException as e:          # noqa: BLE001 - re-raised below, once the others have ended
        error = e
    finally:
        wait(futures)
        if numba_threads is not None:
            numba_threads(numba_all)
        _restore_blas(lowered)
    for f in futures:
        if error is None and f.exception() is not None:
            error = f.exception()
    if error is not None:
        raise error


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype.itemsize < 4 else x


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """A bfloat16 tensor (its uint16 bits) as float32: the bits are the float32's high half."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _rows(x: np.ndarray) -> np.ndarray | None:
    """``x`` (…, M, K) as one (R, K) matrix without a copy, or None when its leading axes do not merge
    (or NumPy is older than 2.1, whose reshape cannot refuse to copy)."""
    try:
        return np.reshape(x, (-1, x.shape[-1]), copy=False)
    except (ValueError, TypeError):
        return None


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """a @ b into ``out`` (a preallocated buffer) or a new array of a's dtype. A stacked ``a`` times a
    matrix ``b`` (a Linear layer's (8, 128, 768) activations times its weight) runs as one GEMM over
    the merged rows: NumPy would call BLAS once per stacked matrix, and each call packs ``b`` again
    (measured here: 30.4 against 25.2 ms for 8×128×768 · 768×3072 on 2 threads, 17–20 % at 1 and 2)."""
    wa, wb = _wide(a), _wide(b)
    if wa.ndim > 2 and wb.ndim == 2 and out is not None and out.shape == wa.shape[:-1] + wb.shape[-1:]:
        a2, o2 = _rows(wa), _rows(out)
        if a2 is not None and o2 is not None:
            np.matmul(a2, wb, out=o2)
            return out if out.dtype == a.dtype else out.astype(a.dtype)
    y = _batched(wa, wb, out)
    return y if y.dtype == a.dtype else y.astype(a.dtype)


def panels(n: int, w: int):
    """The start of each panel of ``w`` along an axis of ``n`` (a generator: one loop of the program)."""
    yield from range(0, n, w)


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
        y += c if beta == 1.0 else y.dtype.type(beta) * c
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


def _einsum_plan(equation: str):
    """A two-operand Einsum as one batched matmul: (a-permutation, b-permutation, batch axes,
    a-free axes, contracted axes, b-free axes, output permutation), or None when it is not one
    (repeated or summed-out-alone indices)."""
    lhs, res = equation.replace(" ", "").split("->")
    ia, ib = lhs.split(",")
    if len(set(ia)) != len(ia) or len(set(ib)) != len(ib) or len(set(res)) != len(res):
        return None
    if any(c not in ib and c not in res for c in ia) or any(c not in ia and c not in res for c in ib):
        return None
    batch = [c for c in res if c in ia and c in ib]
    contracted = [c for c in ia if c in ib and c not in res]
    afree = [c for c in res if c in ia and c not in ib]
    bfree = [c for c in res if c in ib and c not in ia]
    a_perm = [ia.index(c) for c in batch + afree + contracted]
    b_perm = [ib.index(c) for c in batch + contracted + bfree]
    got = batch + afree + bfree
    return a_perm, b_perm, len(batch), len(afree), len(contracted), len(bfree), [got.index(c) for c in res]


_PLANS: dict = {}


def _as_matrices(x: np.ndarray, perm: list, nb: int, n1: int, n2: int) -> np.ndarray:
    """``x`` permuted and its two non-batch groups merged (a view whenever the strides allow)."""
    y = x.transpose(perm)
    shape = y.shape
    rows = math.prod(shape[nb:nb + n1])
    cols = math.prod(shape[nb + n1:nb + n1 + n2])
    return y.reshape(shape[:nb] + (rows, cols))


def einsum(equation: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A two-operand Einsum as one (batched) ``np.matmul`` on permuted views: BLAS reads the
    transposed operands in place, so nothing is copied and the product lands in ``out``
    directly when ``out``'s axis order is batch, a-free, b-free, or through a transposed view of
    ``out`` (BLAS writes with its row stride) when each operand has one free axis in any order
    (attention's context written back as (B, L, H, D): 2.0 -> 1.5 ms on 2 threads here). np.einsum with
    ``out`` computes elsewhere and copies: 20 % slower on BERT's weight gradients, 2x on attention."""
    plan = _PLANS.get(equation)
    if plan is None:
        plan = _PLANS[equation] = _einsum_plan(equation) or ()
    if not plan or a.dtype != b.dtype:
        return _einsum_numpy(equation, a, b, out)
    if plan[-1] != sorted(plan[-1]):
        lhs, res = equation.replace(" ", "").split("->")
        ia, ib = lhs.split(",")
        swapped = f"{ib},{ia}->{res}"            # out = batch, b-free, a-free: b @ a lands in place
        other = _PLANS.get(swapped)
        if other is None:
            other = _PLANS[swapped] = _einsum_plan(swapped) or ()
        if other and other[-1] == sorted(other[-1]):
            a, b, plan = b, a, other
    a_perm, b_perm, nb, na, nc, nf, out_perm = plan
    am = _as_matrices(_wide(a), a_perm, nb, na, nc)
    bm = _as_matrices(_wide(b), b_perm, nb, nc, nf)
    batch = np.broadcast_shapes(am.shape[:nb], bm.shape[:nb])
    free_a = tuple(a.shape[ax] for ax in a_perm[nb:nb + na])
    free_b = tuple(b.shape[ax] for ax in b_perm[nb + nc:])
    product = batch + (am.shape[-2], bm.shape[-1])
    if (out is not None and out_perm == sorted(out_perm) and out.flags.c_contiguous and out.dtype == am.dtype
            and out.shape == batch + free_a + free_b):
        _batched(am, bm, out.reshape(product))      # a view of ``out``: the product lands in place
        return out
    if (out is not None and out.dtype == am.dtype and na == 1 and nf == 1
            and out.shape == tuple(product[k] for k in out_perm)):
        _batched(am, bm, out.transpose(np.argsort(out_perm)))   # a strided view: BLAS writes with its stride
        return out
    y = _batched(am, bm).reshape(batch + free_a + free_b).transpose(out_perm)
    if out is None:
        return y if y.flags.c_contiguous and y.dtype == a.dtype else np.array(y, dtype=a.dtype, order="C")
    out[...] = y
    return out


def _batched(am: np.ndarray, bm: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(am, bm, out=out)``; a batch of small matrices (each under ``SOLO_MACS`` multiply-adds)
    is split along its first axis into one part per thread, each on one BLAS thread (``parallel``):
    OpenBLAS spreads every small matrix over all its threads (attention's 96 products of 128×128×64
    here, on 2 threads: 9.0 ms as one call, 4.5 ms split; 7.2 ms on one thread)."""
    if (am.ndim < 3 or bm.ndim != am.ndim or am.shape[0] != bm.shape[0] or am.shape[0] < 2 or _THREADS[0] < 2
            or am.shape[-2] * am.shape[-1] * bm.shape[-1] >= SOLO_MACS or _STEP.locked()):
        return np.matmul(am, bm, out=out)       # the shape tests first: BLAS's count is a library call
    n = min(_THREADS[0], blas_threads() or 1)
    if n < 2:
        return np.matmul(am, bm, out=out)
    if out is None:
        out = np.empty(np.broadcast_shapes(am.shape[:-2], bm.shape[:-2]) + (am.shape[-2], bm.shape[-1]),
                       np.result_type(am, bm))
    cut = np.linspace(0, am.shape[0], min(n, am.shape[0]) + 1).astype(int)
    parallel(*(partial(np.matmul, am[lo:hi], bm[lo:hi], out=out[lo:hi]) for lo, hi in zip(cut, cut[1:])))
    return out


def _einsum_numpy(equation: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
    y = np.einsum(equation, _wide(a), _wide(b), optimize=True, out=None if wide else out)
    if wide:
        if out is None:
            return y.astype(a.dtype)
        out[...] = y
        return out
    return y


def alloc(shape: tuple, dtype, kind: str = "empty", fill=0) -> np.ndarray:
    """A new output buffer: ``empty``, ``zeros`` or ``full`` of ``fill`` (a reduction's identity,
    which the program writes as a literal: ``ir.memlet.Wcr.identity``)."""
    if kind in ("empty", "zeros"):
        return (np.empty if kind == "empty" else np.zeros)(shape, dtype)
    return np.full(shape, fill, dtype)


def view(buffer: np.ndarray, shape: tuple, dtype, kind: str = "empty", fill=0) -> np.ndarray:
    """A planned buffer (flat bytes, reused across steps and tensors) as an array of ``shape``,
    initialized like ``alloc`` does."""
    n = math.prod(shape) * np.dtype(dtype).itemsize
    arr = buffer[:n].view(dtype).reshape(shape)
    if kind == "zeros":
        arr.fill(0)
    elif kind == "full":
        arr.fill(fill)
    return arr


def run(fn, weights: dict, buffers, outputs, args: list) -> dict:
    """One step (``_step``/``_forward`` of model.py) on the planned ``buffers`` and ``outputs``."""
    return fn(weights, buffers, outputs, *args)


def reference(fn, inputs: tuple, attrs: dict, ctx) -> list[np.ndarray]:
    """Outputs of reference kernel ``fn`` (never mutates its inputs), or of its native version
    (``pooling.native``) where there is one for these inputs."""
    from . import pooling
    got = pooling.native(fn, inputs)
    return got if got is not None else [np.asarray(v) for v in fn(list(inputs), attrs, ctx)]


def _conv_geometry(inputs: tuple, attrs: dict, out: np.ndarray):
    """(x, w, y, strides, begin pads, dilations) as 4-d views for the float32 1-D/2-D convolutions
    ``convolution.py`` runs, or None (other ranks, dtypes, ``auto_pad`` or ``output_shape``).
    For a weight gradient, ``w`` is the output gradient and ``y`` the weights' gradient."""
    x, w = inputs[0], inputs[1]
    nd = x.ndim - 2
    if nd not in (1, 2) or not all(a.dtype == np.float32 for a in (x, w, out)):
        return None
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") or "output_shape" in attrs:
        return None
    strides, pads, dil = _window(attrs, nd)
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    if nd == 1:
        x, w, out = x[:, :, None, :], w[:, :, None, :], out[:, :, None, :]
    return x, w, out, strides, pads, dil


def _window(attrs: dict, nd: int) -> tuple[tuple, tuple, tuple]:
    """(strides, begin pads, dilations) of a conv or pooling window, as 2-D (a 1-D window gets a
    unit leading axis)."""
    strides = list(attrs.get("strides") or [1] * nd)
    dil = list(attrs.get("dilations") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))[:nd]
    if nd == 1:
        strides, pads, dil = [1] + strides, [0] + pads, [1] + dil
    return tuple(strides), tuple(pads), tuple(dil)


SOLO_MACS = 24_000_000
"""A convolution of fewer multiply-adds (float64 ones count twice) runs its GEMMs on one BLAS thread: on 2
cores here OpenBLAS's second thread made EfficientNet-B0's 1×1 convs (2 to 20 M, batch 8) 0.4 to 0.9× as fast."""


def _solo_blas(macs: int) -> list:
    """``_cap_blas(1)`` for ``macs`` below ``SOLO_MACS``; not inside ``parallel``, whose tasks share the threads."""
    return _cap_blas(1) if macs < SOLO_MACS and not _STEP.locked() else []


def _convolve(fn, inputs: tuple, attrs: dict, ctx, out: np.ndarray, kind: str, exact: bool = True) -> np.ndarray:
    geo = _conv_geometry(inputs, attrs, out)
    if geo is None:
        out[...] = reference(fn, inputs, attrs, ctx)[0]
        return out
    from . import convolution          # numba compiles its kernels on first use (cached)
    x, w, y, strides, pads, dil = geo
    target = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
    run = {"conv": convolution.conv2d, "transpose": convolution.conv_transpose2d,
           "weights": convolution.conv_weight_grad2d}[kind]
    wide = {"wide": exact} if kind == "conv" else {}
    restore = _solo_blas({"conv": y, "transpose": x, "weights": w}[kind].size * (2 if exact and wide else 1)
                         * math.prod((y if kind == "weights" else w).shape[1:]))
    try:
        run(x, w, target, strides, pads, dil, int(attrs.get("group", 1)), **wide)
    finally:
        _restore_blas(restore)
    if target is not y:
        y[...] = target
    b = inputs[2] if len(inputs) > 2 else None
    if b is not None:
        out += b.reshape((1, -1) + (1,) * (out.ndim - 2))
    return out


def conv(fn, inputs: tuple, attrs: dict, ctx, out: np.ndarray, exact: bool = True) -> np.ndarray:
    """ONNX Conv into ``out``: im2col + BLAS or a direct loop nest (``convolution.py``) on float32
    1-D/2-D convs, the reference kernel ``fn`` otherwise. ``exact``: the GEMM sums in float64 (the
    program passes False where no choice depends on the result: ``codegen.program.decisions``)."""
    return _convolve(fn, inputs, attrs, ctx, out, "conv", exact)


def conv_transpose(fn, inputs: tuple, attrs: dict, ctx, out: np.ndarray) -> np.ndarray:
    """ONNX ConvTranspose into ``out`` (its size fixes the output padding), like ``conv``."""
    return _convolve(fn, inputs, attrs, ctx, out, "transpose")


def conv_weight_grad(fn, inputs: tuple, attrs: dict, ctx, out: np.ndarray) -> np.ndarray:
    """ai.dcstudio ConvWeightGrad (X, dY; the forward conv's attributes) into ``out``, in W's layout,
    like ``conv``."""
    return _convolve(fn, inputs, attrs, ctx, out, "weights")


def max_pool(fn, inputs: tuple, attrs: dict, ctx, out: np.ndarray, indices: np.ndarray | None = None) -> np.ndarray:
    """ONNX MaxPool into ``out`` (and its flat argmax ``indices``): a loop nest (``pooling.py``) on float32
    1-D/2-D pooling with explicit pads and row-major indices, the reference kernel ``fn`` otherwise."""
    x = inputs[0]
    nd = x.ndim - 2
    if nd not in (1, 2) or x.dtype != np.float32 or out.dtype != np.float32 or attrs.get("storage_order", 0) \
            or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") or not out.flags.c_contiguous:
        got = reference(fn, inputs, attrs, ctx)
        out[...] = got[0]
        if indices is not None:
            indices[...] = got[1]
        return out
    from . import pooling
    kernel = ([1] if nd == 1 else []) + list(attrs.get("kernel_shape"))
    strides, pads, dil = _window(attrs, nd)
    x4, y4, i4 = np.ascontiguousarray(x), out, indices if indices is not None else np.empty((1,) * 4, np.int64)
    if nd == 1:
        x4, y4 = x4[:, :, None, :], y4[:, :, None, :]
        i4 = i4[:, :, None, :] if indices is not None else i4
    pooling.max_pool(x4, y4, i4, kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1], dil[0], dil[1],
                     indices is not None)
    return out
