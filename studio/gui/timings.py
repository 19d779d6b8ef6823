"""Measured kernel times mapped back onto the session's graph: no Qt here.

The profiler times the graph *as lowered for code generation*, so a profiled
statement's id is a graph node id (a library call: ``/fc1/Gemm``), that id plus
``/expanded`` (an op lowered to a map: ``/relu/Relu/expanded``), or, in general, any
id below a graph node id (``<node>/...``). ``owner`` maps a profiled id back to the
graph node it belongs to; ``TimingReport.of(profile, graph)`` sums the statements of
each graph kernel (per repetition, so median, min, max and CV stay exact) into one
``KernelTiming`` with the profile's peaks, so GB/s, % of peak, GFLOP/s and roofline
efficiency come from ``codegen.timing.stats``. A kernel with any failed statement is
failed, with the statements' errors. ``measured`` counts the graph kernels that got a
measurement, against ``total`` kernels in the graph.

A report belongs to the graph object it was made for: ``is_stale(graph)`` is true once
the session shows another graph (apply, undo to another step, revert), and
``stale_note`` says so ("stale: profiled at step k"). Undoing back to the profiled step
returns the same graph object, so the report is current again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from codegen.timing.roofline import over_roof
from codegen.timing.stats import EXPANDED, KernelTiming, Samples, owner  # noqa: F401 (owner: re-exported)


def _summed_samples(parts: list[KernelTiming]) -> Samples:
    """Per-repetition sums of the statements' samples (exact when all have the same reps)."""
    runs = [p.extra.get("samples_ns") or [] for p in parts]
    if len(parts) == 1 or not runs[0] or any(len(r) != len(runs[0]) for r in runs):
        if len(parts) == 1:
            return parts[0].samples
        s = [p.samples for p in parts]
        return Samples(sum(x.median_s for x in s), sum(x.min_s for x in s), sum(x.max_s for x in s),
                       max(x.cv for x in s), min(x.n for x in s))
    return Samples.of([sum(col) for col in zip(*runs)])


def combine(node_id: str, label: str, parts: list[KernelTiming]) -> KernelTiming:
    """One graph kernel's timing from its profiled statements (see the module docstring)."""
    first = parts[0]
    errors = [f"{p.node_id}: {p.error}" if len(parts) > 1 else p.error for p in parts if not p.ok]
    samples = None if errors else _summed_samples(parts)
    kinds = sorted({p.kind for p in parts})
    schedules = dict.fromkeys(p.extra["schedule"] for p in parts if p.extra.get("schedule"))
    return KernelTiming(node_id, label, "+".join(kinds), samples, sum(p.bytes for p in parts),
                        sum(p.flops for p in parts), first.peak_bw, first.peak_flops,
                        "; ".join(e or "failed" for e in errors) or None,
                        {"statements": [p.node_id for p in parts],
                         "schedule": "; ".join(schedules)})


@dataclass
class TimingReport:
    """A profile, per graph kernel (see the module docstring)."""

    kernels: list[KernelTiming]            # one per graph kernel that was profiled, in profile order
    total: int                             # kernels in the graph
    step: int                              # the session step that was profiled
    graph: object = None                   # the graph object profiled (identity decides staleness)
    threads: dict = field(default_factory=dict)
    peaks: object = None                   # codegen.timing.calibrate.Peaks, or None
    statements: int = 0                    # profiled statements (lowered kernels)
    unmatched: list[str] = field(default_factory=list)
    step_s: float = 0.0                    # the whole step's median

    @classmethod
    def of(cls, profile, graph, step: int, only: Iterable[str] | None = None) -> "TimingReport":
        """Map ``profile`` onto ``graph``; ``only`` keeps just those graph kernels (a selection)."""
        keep = set(only) if only is not None else None
        groups: dict[str, list[KernelTiming]] = {}
        unmatched = []
        for k in profile.kernels:
            gid = owner(k.node_id, graph.nodes)
            if gid is None:
                unmatched.append(k.node_id)
            elif keep is None or gid in keep:
                groups.setdefault(gid, []).append(k)
        kernels = [combine(gid, getattr(graph.nodes[gid], "op_type", None) or parts[0].label, parts)
                   for gid, parts in groups.items()]
        step_s = profile.step.median_s if profile.step and profile.step.n else 0.0
        return cls(kernels, len(graph.nodes), step, graph, dict(profile.threads or {}), profile.peaks,
                   sum(len(p) for p in groups.values()), unmatched, step_s)

    def with_peaks(self, peaks) -> "TimingReport":
        """The same measurements judged against other calibrated peaks (after Recalibrate)."""
        from dataclasses import replace
        kernels = [replace(k, peak_bw=peaks.bandwidth, peak_flops=peaks.flops) for k in self.kernels]
        return replace(self, kernels=kernels, peaks=peaks)

    @property
    def measured(self) -> int:
        return sum(1 for k in self.kernels if k.ok)

    @property
    def failed(self) -> int:
        return sum(1 for k in self.kernels if not k.ok)

    @property
    def total_s(self) -> float:
        return sum(k.samples.median_s for k in self.kernels if k.ok)

    def share(self, k: KernelTiming) -> float:
        return k.samples.median_s / self.total_s if k.ok and self.total_s > 0 else 0.0

    def times_us(self) -> dict[str, float]:
        """Median time per measured graph kernel, in microseconds (the time heatmap's values)."""
        return {k.node_id: k.samples.median_s * 1e6 for k in self.kernels if k.ok}

    def is_stale(self, graph) -> bool:
        return graph is not self.graph

    def stale_note(self, graph) -> str:
        return f"stale: profiled at step {self.step}" if self.is_stale(graph) else ""

    def coverage(self) -> str:
        """"N of M kernels measured" (plus failures and how many lowered statements that took)."""
        text = f"{self.measured} of {self.total} kernels measured"
        extra = [f"{self.failed} failed"] if self.failed else []
        if self.statements != len(self.kernels):
            extra.append(f"{self.statements} profiled statements")
        return text + (f" ({', '.join(extra)})" if extra else "")


def human_seconds(s: float) -> str:
    """``1.23 ms``, ``45.6 µs``, ``2.10 s``; '–' for missing values."""
    if s is None or s != s:
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns" if s else "0 s"


def human_rate(v: float, unit: str) -> str:
    """``12.3 G<unit>``-style figures for FLOP/s and B/s."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def over_peak(report: TimingReport, cache: int | None = None) -> list:
    """The report's kernels above the calibrated roofline (``codegen.timing.roofline.over_roof``)."""
    return over_roof(report.kernels, report.peaks, cache)


def trust_note(report: TimingReport | None) -> str:
    """Why the roofline should not be trusted as it stands ('' when nothing is wrong): kernels above
    100 % of the roof (the peaks were measured low, typically under load), or a calibration that
    recorded heavy load or a wide spread."""
    if report is None or report.peaks is None:
        return ""
    p = report.peaks
    how = p.describe() if hasattr(p, "describe") else "calibration"
    over = over_peak(report)
    if over:
        worst = max(k.efficiency for k in over)
        return (f"{len(over)} kernel{'s' * (len(over) != 1)} above the calibrated roof (up to {100 * worst:.0f} %): "
                f"the peaks were measured low ({how}); recalibrate")
    if getattr(p, "load", 0.0) > 0.25 or getattr(p, "spread", 0.0) > 0.15:
        return f"the peaks may be low: {how}; recalibrate while the machine is quiet"
    return ""


def describe_machine(report: TimingReport) -> str:
    """Threads and calibrated peaks, one line."""
    t = report.threads
    parts = [f"numba threads {t.get('numba_threads', '?')}", f"BLAS threads {t.get('blas_threads') or '?'}",
             f"CPUs {t.get('cpus', '?')}"]
    p = report.peaks
    if p is not None:
        parts.append(f"peaks: triad {human_rate(p.bandwidth, 'B/s')}, GEMM {human_rate(p.flops, 'FLOP/s')}, "
                     f"ridge {p.flops / p.bandwidth:.3g} FLOP/B"
                     + (f" ({100 * p.load:.0f} % load, spread {100 * p.spread:.0f} %)" if hasattr(p, "load") else ""))
    return " · ".join(parts)


def describe_ab(before: int, after: int, result) -> str:
    """One line for a paired A/B (``codegen.timing.profiler.ABResult``): ratio > 1 means ``after`` is faster."""
    r = result.ratio
    verdict = "faster" if r > 1 else "slower" if r < 1 else "the same"
    factor = r if r >= 1 else (1 / r if r > 0 else float("nan"))
    return (f"A/B step {before} → step {after}: {r:.3f} (after is {factor:.2f}× {verdict}) · "
            f"median {human_seconds(result.a.median_s)} → {human_seconds(result.b.median_s)} · "
            f"pair spread {100 * result.pair_spread:.1f} % over {result.a.n} pairs")
