"""This machine's peaks, measured once and cached with a machine fingerprint.

- bandwidth: the one-pass numba triad (``codegen.numba_cpu.microbench``), 3 arrays of
  16 Mi float32 (192 MB, far beyond the caches), best of 7: bytes/s;
- compute: a 2048³ float32 GEMM through NumPy's BLAS, best of 3: FLOP/s;
- cache bandwidth (the cache roof): the triad resident in each core's L2 (half of it per thread,
  ``microbench.cache_triad_seconds``), best of 7: bytes/s. Kernels whose data stays in the caches
  run above the DRAM roof, up to this one.
Both run on the thread count given (the same one the profiled kernels use). Each
calibration also records how trustworthy it is: ``load``, the share of the machine's CPU
time that other processes used while it ran (``/proc/stat`` minus this process), and
``spread``, how far the median sample lies above the best one (triad or GEMM, the worse).
A calibration taken under load understates the peaks, so kernels then show more than
100 % roofline efficiency; the studio then offers to measure again. The result
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
    load: float = 0.0     # other processes' share of all CPUs while calibrating (0..1); older caches: 0
    spread: float = 0.0   # median / best - 1 of the repeated samples, the worse of triad and GEMM
    cache_bandwidth: float = 0.0   # bytes/s of the triad resident in L2 (the cache roof); 0: not measured

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"calibrated under {100 * self.load:.0f} % load from other processes, spread {100 * self.spread:.0f} %"


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot (Linux ``/proc/stat``), else None."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
    return sum(fields) - idle, sum(fields)


def other_load(before: tuple[int, int] | None, after: tuple[int, int] | None, own_s: float) -> float:
    """Other processes' share of all CPU time between two ``_cpu_ticks`` readings, given the CPU
    seconds this process used meanwhile (0 when ``/proc/stat`` cannot be read)."""
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = (after[0] - before[0]) - own_s * hz
    return min(1.0, max(0.0, busy / (after[1] - before[1])))


def spread(samples: list[float]) -> float:
    """median / best - 1 of timing samples (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    ordered = sorted(samples)
    return ordered[len(ordered) // 2] / ordered[0] - 1.0


def _caches() -> list[tuple[int, int]]:
    """(level, bytes) of each cache of CPU 0, from Linux sysfs; [] when unknown."""
    out = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text(encoding="utf-8").strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            out.append((int((d / "level").read_text(encoding="utf-8")), int(text.rstrip("KMG")) * scale))
        except (OSError, ValueError):
            continue
    return out


def cache_bytes() -> int:
    """The size of this CPU's largest (last-level) cache; 0 when unknown."""
    return max((size for _level, size in _caches()), default=0)


def l2_bytes() -> int:
    """The size of one core's level-2 cache; 1 MiB when unknown."""
    return next((size for level, size in _caches() if level == 2), 1 << 20)


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
    text = (f"{cpu}|{os.cpu_count()}|{threads}|{platform.machine()}|numpy {numpy.__version__}|numba {numba_version}"
            "|cache roof")                     # peaks stored before the cache roof are measured again
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _path() -> Path:
    return kernel_cache.cache_dir() / "calibration.json"


def measure(threads: int) -> Peaks:
    import numpy as np
    from codegen.numba_cpu import microbench, threads as thread_control
    thread_control.pin(threads)
    ticks, cpu0 = _cpu_ticks(), time.process_time()
    n = 1 << 24
    triad = list(microbench.triad_seconds(n, 7))
    bw = 3 * 4 * n / min(triad)
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    gemm = []
    for _ in range(3):
        t0 = time.perf_counter()
        a @ a
        gemm.append(time.perf_counter() - t0)
    moved, resident = microbench.cache_triad_seconds(l2_bytes() // 2, threads)
    load = other_load(ticks, _cpu_ticks(), time.process_time() - cpu0)
    return Peaks(bw, 2 * 2048 ** 3 / min(gemm), threads, fingerprint(threads), time.time(), load,
                 max(spread(triad), spread(gemm)), moved / min(resident))


def peaks(threads: int, *, force: bool = False) -> Peaks:
    """The cached peaks for this machine and thread count (measured now if missing or forced)."""
    key = fingerprint(threads)
    store: dict = {}
    try:
        store = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        store = {}
    if not force and key in store:
        known = {f for f in Peaks.__dataclass_fields__}
        return Peaks(**{k: v for k, v in store[key].items() if k in known})
    result = measure(threads)
    store[key] = result.to_json()
    kernel_cache.write_atomic(_path(), json.dumps(store, indent=1))
    return result
