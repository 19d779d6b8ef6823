"""Calibration kernels for the CPU peaks: a one-pass triad (bandwidth) in numba, and a cache-resident one.

``triad_seconds(n, reps)`` times ``a[i] = b[i] + s·c[i]`` over ``n`` float32 elements
(one pass: 3·4·n bytes, STREAM's count) and returns the per-repetition seconds; it runs
on the threads numba is pinned to (``threads.pin``). ``triad_runner(n)`` is the warm kernel as
a callable, for benchmarks that interleave it with the kernel they compare. The kernel is
compiled with the same flags as generated kernels, so "% of the triad" compares like with like.

``cache_triad_seconds(per_thread, threads, reps)`` is the cache roof: each thread runs the triad over
its own ``per_thread`` bytes (three arrays) many times, so its data stays in that core's cache; it
returns the bytes one repetition moves and the per-repetition seconds. Its inner loop runs over a
slice from 0 (no negative-index wraparound to check), so LLVM vectorizes it as it does the triad's.
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


def _seconds(run, reps: int) -> list[float]:
    """The seconds of ``reps`` calls of ``run`` (warm), one each."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        run()
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out


def triad_seconds(n: int = 1 << 24, reps: int = 7) -> list[float]:
    return _seconds(triad_runner(n), reps)


def _resident_kernel():
    from numba import njit, prange

    from codegen.numba_cpu.loopnest import FASTMATH

    @njit(parallel=True, nogil=True, error_model="numpy", fastmath=set(FASTMATH), cache=False)
    def resident(a, b, c, coef, chunk):
        for t in prange(a.shape[0] // chunk):
            av, bv, cv = a[t * chunk:(t + 1) * chunk], b[t * chunk:(t + 1) * chunk], c[t * chunk:(t + 1) * chunk]
            for r in range(coef.shape[0]):       # a new coefficient each pass: no pass repeats the one before
                k = coef[r]
                for i in range(chunk):
                    av[i] = bv[i] + k * cv[i]
    return resident


def cache_triad_seconds(per_thread: int, threads: int, reps: int = 7,
                        moved_per_rep: float = 2e8) -> tuple[float, list[float]]:
    """(bytes one repetition moves, per-repetition seconds) of the cache-resident triad (see the module)."""
    import numpy as np
    chunk = max(16, per_thread // 12 // 16 * 16)
    n = chunk * threads
    a, b, c = np.zeros(n, np.float32), np.full(n, 1.0, np.float32), np.full(n, 2.0, np.float32)
    passes = max(10, int(moved_per_rep // (12 * n)))
    coef = np.linspace(1.0, 2.0, passes).astype(np.float32)
    resident = _resident_kernel()
    resident(a, b, c, coef, chunk)
    return 12.0 * n * passes, _seconds(lambda: resident(a, b, c, coef, chunk), reps)
