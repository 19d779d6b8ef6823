"""Reading a kernel's timing against the calibrated roofline: which roof bounds it, and when a figure above
the roof means the peaks were measured low rather than a fast kernel (a view moves no data; a kernel whose
data fits the last-level cache may beat the DRAM roof). The profile's CLI table and the Timings dock share
these rules."""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from codegen.timing.stats import KernelTiming
from ir.statements import StatementKind

OVER_PEAK = 1.05       # a roofline efficiency above this: the calibrated peaks are lower than the machine's


def bound_kind(k) -> str:
    """"memory" or "compute": which roof limits kernel ``k`` (its FLOP/B against the ridge point)."""
    if not k.peak_bw or not k.peak_flops:
        return ""
    ridge = k.peak_flops / k.peak_bw
    return "compute" if k.bytes and k.flops / k.bytes >= ridge else "memory"


@lru_cache(maxsize=1)
def _cache() -> int:
    from codegen.timing.calibrate import cache_bytes
    return cache_bytes()


def in_cache(k, cache: int | None = None) -> bool:
    """Memory-bound kernel ``k`` moves no more than the last-level cache holds: its repetitions find
    their data in the cache, so it may run faster than the DRAM triad (the roof) allows."""
    cache = _cache() if cache is None else cache
    return bool(cache) and bound_kind(k) == "memory" and k.bytes <= cache


def above_cache_roof(k, cache_bw: float) -> bool:
    """Kernel ``k`` moved its bytes faster than the cache roof (the L2-resident triad) allows; never
    when no cache roof was measured."""
    return bool(cache_bw) and k.samples.median_s > 0 and k.bytes / k.samples.median_s > OVER_PEAK * cache_bw


def over_roof(kernels: Iterable[KernelTiming], peaks, cache: int | None = None) -> list[KernelTiming]:
    """The kernels measured faster than the calibrated roofline allows (efficiency > ``OVER_PEAK``),
    which only peaks measured low explain. Not views (an alias: no data moves at run time, whatever
    bytes the model counts) and not memory-bound kernels whose data fits the cache (``in_cache``)
    unless they beat the cache roof too (``above_cache_roof``)."""
    cache_bw = getattr(peaks, "cache_bandwidth", 0.0) if peaks is not None else 0.0
    return [k for k in kernels if k.ok and k.kind != StatementKind.VIEW and k.efficiency > OVER_PEAK
            and (not in_cache(k, cache) or above_cache_roof(k, cache_bw))]
