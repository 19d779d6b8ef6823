"""Timing records: repeated samples → median, min, max, CV; roofline figures per kernel.

``Samples.of(ns)`` summarizes repetitions measured with ``perf_counter_ns`` (CPU) or CUDA
events (GPU). ``KernelTiming`` adds what the kernel moves and computes (``ir.movement``)
and what that means against this machine's calibrated peaks (``calibrate.Peaks``):
GB/s and % of the triad bandwidth, GFLOP/s, the roofline bound
``max(flops / peak_flops, bytes / peak_bw)`` and the efficiency ``bound / median``.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Mapping

EXPANDED = "/expanded"


def owner(profiled_id: str, node_ids: Mapping[str, object] | set[str]) -> str | None:
    """The graph node id a profiled statement ``profiled_id`` belongs to (None when it belongs to
    none): itself, the op it was expanded from, or the longest graph id that is a '/'-prefix."""
    if profiled_id in node_ids:
        return profiled_id
    head, sep, _tail = profiled_id.partition(EXPANDED)
    if sep and head in node_ids:
        return head
    cut = profiled_id
    while "/" in cut:                              # the longest graph id that is a '/'-prefix
        cut = cut.rpartition("/")[0]
        if cut in node_ids:
            return cut
    return None


@dataclass(frozen=True, slots=True)
class Samples:
    median_s: float
    min_s: float
    max_s: float
    cv: float          # standard deviation / mean
    n: int

    @staticmethod
    def of(ns: list[int] | list[float]) -> "Samples":
        xs = [float(x) * 1e-9 for x in ns]
        if not xs:
            return Samples(float("nan"), float("nan"), float("nan"), float("nan"), 0)
        mean = statistics.fmean(xs)
        cv = statistics.pstdev(xs) / mean if mean > 0 and len(xs) > 1 else 0.0
        return Samples(statistics.median(xs), min(xs), max(xs), cv, len(xs))


def pair_spread(a_ns: list[int] | list[float], b_ns: list[int] | list[float]) -> float:
    """How much the paired A/B ratios scatter: (max - min) / median of ``a[i] / b[i]`` (0 without pairs)."""
    pairs = [x / y for x, y in zip(a_ns, b_ns) if y]
    return (max(pairs) - min(pairs)) / statistics.median(pairs) if pairs else 0.0


@dataclass(frozen=True)
class KernelTiming:
    node_id: str
    label: str
    kind: str                     # kernel | blas | view | reference | constant | extern
    samples: Samples | None
    bytes: int = 0
    flops: int = 0
    peak_bw: float = 0.0          # bytes/s of the calibrated triad
    peak_flops: float = 0.0       # FLOP/s of the calibrated GEMM
    error: str | None = None      # raised / timeout / crashed: the worker's report
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples is not None and self.samples.n > 0

    @property
    def gbps(self) -> float:
        return self.bytes / self.samples.median_s / 1e9 if self.ok and self.samples.median_s > 0 else 0.0

    @property
    def pct_peak_bw(self) -> float:
        return 100.0 * self.gbps * 1e9 / self.peak_bw if self.peak_bw else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / self.samples.median_s / 1e9 if self.ok and self.samples.median_s > 0 else 0.0

    @property
    def roofline_s(self) -> float:
        """The time this kernel needs at the machine's peaks (bandwidth or compute bound)."""
        t_bw = self.bytes / self.peak_bw if self.peak_bw else 0.0
        t_fl = self.flops / self.peak_flops if self.peak_flops else 0.0
        return max(t_bw, t_fl)

    @property
    def efficiency(self) -> float:
        """roofline bound / measured median (1.0 = at the roof)."""
        return self.roofline_s / self.samples.median_s if self.ok and self.samples.median_s > 0 else 0.0

    def to_json(self) -> dict:
        d = {"node_id": self.node_id, "label": self.label, "kind": self.kind, "bytes": self.bytes,
             "flops": self.flops, "error": self.error}
        if self.extra.get("schedule"):
            d["schedule"] = self.extra["schedule"]
        if self.samples is not None:
            d.update(asdict(self.samples))
        if self.ok:
            d.update(gbps=round(self.gbps, 3), pct_peak_bw=round(self.pct_peak_bw, 2), gflops=round(self.gflops, 3),
                     roofline_s=self.roofline_s, efficiency=round(self.efficiency, 4))
        return d
