"""The time headroom of a history on this CPU: how much faster ANY transformation sequence could make its
exported step, measured.

The step is profiled statement by statement (out of process, on recorded inputs and the calibrated peaks:
``codegen.timing.profiler``). A statement that runs a GEMM (a contraction, or a grouped one, with its fused
epilogue or optimizer update) runs in BLAS: the FLOPs of a training step are fixed, and the exported program
already runs each GEMM as one BLAS call on operands read in place, so no graph transformation changes that
time. Every other statement can at best reach its roofline (its bytes at the calibrated bandwidth, its FLOPs
at the calibrated peak). What the step spends between its statements (``glue_s``: per timed step, its time
less its statements' times, the median over the steps — Python dispatch and views) counts as removable too.
A sequence can therefore save at most ``saving_s = other_s - floor_s + glue_s``, and

    bound = step / (step - saving)

is the most any history can gain over this one here while its GEMM statements stay as they are (``at_peak``:
if, beyond that, every GEMM also ran at the calibrated GEMM peak, which only BLAS could do). Those statements
also run generated kernels (the fused epilogues, the optimizer update per panel) that another history could
shape differently; ``loose`` bounds that too: the step against the same step with every generated kernel a
no-op (pairs of steps alternately, the buffers holding what the whole steps leave), i.e. if every kernel of
any history cost nothing. ``dcstudio tune`` (and the studio's Tune dialog) give both for the hand recipe
whenever they time steps on the CPU, so a search that finds nothing faster says why;
``tests/bench/test_bench_tune_headroom.py`` reports it for the bundled example (BERT-base layer, 2 threads
here: 1.03x with the GEMM statements as they are, 1.09x with every generated kernel free).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ir.graph import Graph
from transforms.horizontal_fusion import kind


@dataclass(frozen=True)
class Headroom:
    threads: int
    step_s: float          # the profiled step (median)
    gemm_s: float          # its GEMM statements (medians, summed)
    gemm_flops: float
    other_s: float         # every other statement
    floor_s: float         # those at their rooflines (or as measured, where that is faster)
    peak_flops: float      # the calibrated peaks the rooflines use
    peak_bandwidth: float
    glue_s: float = 0.0    # between the statements (the median over the timed steps)
    full_s: float = 0.0    # paired with ...
    kernels_off_s: float = 0.0   # ... the step with every generated kernel a no-op (0: not measured)

    @property
    def loose(self) -> float:
        """The bound if every generated kernel of any history cost nothing (0.0 where not measured)."""
        return self.full_s / self.kernels_off_s if self.kernels_off_s > 0 else 0.0

    @property
    def saving_s(self) -> float:
        return max(0.0, self.other_s - self.floor_s) + self.glue_s

    @property
    def bound(self) -> float:
        return self.step_s / max(self.step_s - self.saving_s, 1e-12)

    @property
    def at_peak(self) -> float:
        gemm_floor = self.gemm_flops / self.peak_flops if self.peak_flops > 0 else self.gemm_s
        return self.step_s / max(self.step_s - self.saving_s - max(0.0, self.gemm_s - gemm_floor), 1e-12)

    @property
    def gemm_rate(self) -> float:
        """The GEMM statements' FLOP/s (their epilogues and updates included in the time)."""
        return self.gemm_flops / self.gemm_s if self.gemm_s > 0 else 0.0

    def text(self) -> str:
        peak = f", {self.gemm_rate / self.peak_flops:.0%} of the calibrated peak" if self.peak_flops > 0 else ""
        loose = (f"; with every generated kernel skipped (epilogues and optimizer updates too) the step takes "
                 f"{self.kernels_off_s * 1e3:.1f} against {self.full_s * 1e3:.1f} ms: no history at all gains more "
                 f"than {self.loose:.3f}x") if self.kernels_off_s > 0 else ""
        return (f"with its GEMM statements as they are, no history can make this step more than {self.bound:.3f}x "
                f"faster on {self.threads} thread(s) here: they take {self.gemm_s * 1e3:.1f} of its "
                f"{self.step_s * 1e3:.1f} ms in BLAS and their fused kernels "
                f"({self.gemm_rate / 1e9:.0f} GFLOP/s{peak}); its other kernels, {self.other_s * 1e3:.1f} ms, "
                f"would take {self.floor_s * 1e3:.1f} ms at their rooflines, and {self.glue_s * 1e3:.1f} ms between "
                "statements could go" + loose)


def of_profile(graph: Graph, prof) -> Headroom:
    """The headroom of ``graph`` from its ``codegen.timing.profiler.Profile`` (profiled with peaks)."""
    if prof.peaks is None:
        raise ValueError("the profile has no calibrated peaks: profile with peaks=codegen.timing.calibrate.peaks()")
    gemm = flops = other = floor = 0.0
    for k in prof.kernels:
        if not k.ok:
            raise ValueError(f"kernel '{k.node_id}' did not run in the profile: {k.error}")
        t = k.samples.median_s
        if kind(graph.nodes.get(k.node_id)) == "gemm":   # BLAS's time: a contraction or a group
            gemm += t
            flops += k.flops
        else:
            other += t
            floor += min(t, k.roofline_s)
    threads = int(prof.threads.get("numba_threads") or prof.threads.get("blas_threads") or 1)
    full = statistics.median(prof.full_ns) * 1e-9 if prof.full_ns else 0.0
    off = statistics.median(prof.kernels_off_ns) * 1e-9 if prof.kernels_off_ns else 0.0
    return Headroom(threads, prof.step.median_s, gemm, flops, other, floor, prof.peaks.flops, prof.peaks.bandwidth,
                    _glue(prof), full, off)


def _glue(prof) -> float:
    """Median over the timed steps of each step's time less its statements' (0 where they do not line up)."""
    per = [k.extra.get("samples_ns") or [] for k in prof.kernels]
    n = len(prof.step_ns)
    if not n or any(len(p) != n for p in per):
        return max(0.0, prof.step.median_s - sum(k.samples.median_s for k in prof.kernels))
    return max(0.0, statistics.median(prof.step_ns[r] - sum(p[r] for p in per) for r in range(n)) * 1e-9)


def measure(graph: Graph, threads: int | None = None, reps: int = 10) -> Headroom:
    """Profile ``graph``'s CPU step (out of process, ``reps`` timed steps) and return its headroom."""
    from codegen.numba_cpu.threads import default_threads
    from codegen.numpy_ref.feeds import feeds_for
    from codegen.timing.calibrate import peaks
    from codegen.timing.profiler import profile_graph
    n = threads or default_threads()
    prof = profile_graph(graph, feeds_for(graph), reps=reps, warmup=2, threads=n, peaks=peaks(n), kernels_off=True)
    if prof.failures:
        raise RuntimeError(f"the step's profile failed: {'; '.join(prof.failures)}")
    return of_profile(graph, prof)


def of_recipe(model, res, threads: int | None = None, reps: int = 10) -> Headroom:
    """The headroom of the hand recipe of a ``studio.tune.search.search`` result ``res`` on ``model`` (its step rebuilt
    as the search ran it: in the scope, or with transfer tuning)."""
    from studio.tune.evaluate import applied
    return measure(applied(model, res.baseline_candidate, res.transfer).graph, threads, reps)
