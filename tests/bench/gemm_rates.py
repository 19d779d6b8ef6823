"""The GEMMs inside one step of an exported CPU package: every ``matmul``/``gemm``/``fused_matmul``/``einsum``
call timed where the step makes it, then the same call replayed alone (its operands hot, BLAS on the
thread count it had), and one 1024×768×768 GEMM alone as the machine's reference rate.

Imports NumPy only: the whole-step benches run it in the package's own process (``steps.PackageStep``),
because a process that has imported torch has GNU OpenMP loaded before numba, and there the products
after numba kernels ran at half speed (BERT-base layer, 2 threads: 152 GFLOP/s in-step in the bench's
process against 193 in a process of its own, 203 for the same calls alone)."""
from __future__ import annotations

import time

import numpy as np

NAMES = ("matmul", "gemm", "fused_matmul", "einsum")


def _flops(name: str, args: tuple, kw: dict, out: np.ndarray) -> float:
    """2 × multiply-adds of one product call."""
    if name == "einsum":
        lhs = args[0].replace(" ", "").split("->")[0]
        ia, ib = lhs.split(",")
        sizes = dict(zip(ia, args[1].shape)) | dict(zip(ib, args[2].shape))
        return 2.0 * float(np.prod([sizes[c] for c in set(ia + ib)], dtype=float))
    trans = {"gemm": (5, "trans_a"), "fused_matmul": (3, "trans_a")}.get(name)
    trans_a = kw.get(trans[1], args[trans[0]] if len(args) > trans[0] else 0) if trans else 0
    a = args[0]
    return 2.0 * float(out.size) * (a.shape[-2] if trans_a else a.shape[-1])


def _replay(lib, fn, args: tuple, kw: dict, blas: int | None, reps: int = 3) -> float:
    """Best seconds of ``reps`` calls with BLAS on ``blas`` threads (restored after)."""
    ctrl = lib._blas_controller()
    saved = [(c, c.num_threads) for c in ctrl.lib_controllers] if ctrl is not None and blas else []
    for c, _ in saved:
        c.set_num_threads(blas)
    try:
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(*args, **kw)
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        for c, n in saved:
            c.set_num_threads(n)


def in_step_rates(model, lib, feeds) -> dict:
    """One ``model.step(**feeds)`` with its product calls recorded: GFLOP, seconds in them (summed and as
    wall time, concurrent calls counted once), the same calls alone, and the reference GEMM's rate."""
    calls = []
    saved = {name: getattr(lib, name) for name in NAMES}

    def timed(name, fn):
        def call(*args, **kw):
            t0 = time.perf_counter()
            out = fn(*args, **kw)
            calls.append((name, args, kw, t0, time.perf_counter(), lib.blas_threads(), out))
            return out
        return call
    try:
        for name, fn in saved.items():
            setattr(lib, name, timed(name, fn))
        model.step(**feeds)
    finally:
        for name, fn in saved.items():
            setattr(lib, name, fn)
    flops = sum(_flops(n, a, k, o) for n, a, k, _, _, _, o in calls)
    spent = sum(t1 - t0 for _, _, _, t0, t1, _, _ in calls)
    wall, end = 0.0, float("-inf")
    for t0, t1 in sorted((t0, t1) for _, _, _, t0, t1, _, _ in calls):
        wall += max(0.0, t1 - max(t0, end))
        end = max(end, t1)
    alone = sum(_replay(lib, saved[n], a, k, b) for n, a, k, _, _, b, _ in calls)
    a, b = np.ones((1024, 768), np.float32), np.ones((768, 768), np.float32)
    ref = _replay(lib, np.matmul, (a, b), {"out": np.empty((1024, 768), np.float32)}, None, reps=10)
    return {"calls": len(calls), "gflop": flops / 1e9, "spent_s": spent, "wall_s": wall, "alone_s": alone,
            "reference_gflops": 2 * 1024 * 768 * 768 / ref / 1e9}
