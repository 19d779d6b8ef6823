"""This machine's peaks, measured once and cached with a machine fingerprint.

- bandwidth: the one-pass numba triad (``codegen.numba_cpu.microbench``), 3 arrays of
  16 Mi float32 (192 MB, far beyond the caches), best of 7: bytes/s;
- compute: a 2048³ float32 GEMM through NumPy's BLAS, best of 3: FLOP/s.
Both run on the thread count given (the same one the profiled kernels use). The result
is stored in ``<cache>/calibration.json`` under a fingerprint of the CPU model, CPU count,
thread count and NumPy/numba versions; a different fingerprint (or ``force``) measures
again. Machines here are noisy (FACTS.md): the profiler compares ratios within one run.
"""
from __future__ import annotations

import hashlib
from importlib import metadata
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from codegen.numba_cpu import kernel_cache


@dataclass(frozen=True)
class Peaks:
    bandwidth: float      # bytes/s
    flops: float          # FLOP/s
    threads: int
    fingerprint: str
    measured_at: float

    def to_json(self) -> dict:
        return asdict(self)


def fingerprint(threads: int) -> str:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    import numpy
    try:
        numba_version = metadata.version("numba")
    except metadata.PackageNotFoundError:
        numba_version = "-"
    text = f"{cpu}|{os.cpu_count()}|{threads}|{platform.machine()}|numpy {numpy.__version__}|numba {numba_version}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _path() -> Path:
    return kernel_cache.cache_dir() / "calibration.json"


def measure(threads: int) -> Peaks:
    import numpy as np
    from codegen.numba_cpu import microbench, threads as thread_control
    thread_control.pin(threads)
    n = 1 << 24
    bw = 3 * 4 * n / min(microbench.triad_seconds(n, 7))
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return Peaks(bw, 2 * 2048 ** 3 / best, threads, fingerprint(threads), time.time())


def peaks(threads: int, *, force: bool = False) -> Peaks:
    """The cached peaks for this machine and thread count (measured now if missing or forced)."""
    key = fingerprint(threads)
    store: dict = {}
    try:
        store = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        store = {}
    if not force and key in store:
        return Peaks(**store[key])
    result = measure(threads)
    store[key] = result.to_json()
    kernel_cache.write_atomic(_path(), json.dumps(store, indent=1))
    return result
