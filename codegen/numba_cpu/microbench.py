"""Calibration kernels for the CPU peaks: a one-pass triad (bandwidth) in numba.

``triad_seconds(n, reps)`` times ``a[i] = b[i] + s·c[i]`` over ``n`` float32 elements
(one pass: 3·4·n bytes, STREAM's count) and returns the per-repetition seconds; it runs
on the threads numba is pinned to (``threads.pin``). ``triad_runner(n)`` is the warm kernel as
a callable, for benchmarks that interleave it with the kernel they compare. The kernel is
compiled with the same flags as generated kernels, so "% of the triad" compares like with like.
"""
from __future__ import annotations

import time


def _kernel():
    from numba import njit, prange

    from codegen.numba_cpu.loopnest import FASTMATH

    @njit(parallel=True, nogil=True, error_model="numpy", fastmath=set(FASTMATH), cache=False)
    def triad(a, b, c, s):
        for i in prange(a.shape[0]):
            a[i] = b[i] + s * c[i]
    return triad


def triad_runner(n: int = 1 << 24):
    """A no-argument callable running the triad once over ``n`` float32 elements (compiled, warm)."""
    import numpy as np
    a = np.zeros(n, np.float32)
    b = np.full(n, 1.0, np.float32)
    c = np.full(n, 2.0, np.float32)
    s = np.float32(3.0)
    triad = _kernel()
    triad(a, b, c, s)
    return lambda: triad(a, b, c, s)


def triad_seconds(n: int = 1 << 24, reps: int = 7) -> list[float]:
    run = triad_runner(n)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        run()
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out
