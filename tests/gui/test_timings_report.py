"""Profiles mapped back onto the graph (``studio/gui/timings.py``, no Qt): ownership of lowered ids,
per-repetition sums, failures, coverage ("N of M kernels measured"), staleness, formatting."""
from __future__ import annotations

import pytest

from codegen.timing.calibrate import Peaks
from codegen.timing.profiler import ABResult, Profile
from codegen.timing.stats import KernelTiming, Samples
from studio.gui.timings import TimingReport, describe_ab, describe_machine, human_seconds, owner

PEAKS = Peaks(20e9, 100e9, 1, "test", 0.0)


def _k(node_id, ns, bytes_=1000, flops=100, error=None):
    return KernelTiming(node_id, "Op", "kernel", None if error else Samples.of(ns), bytes_, flops,
                        PEAKS.bandwidth, PEAKS.flops, error, {"samples_ns": list(ns)})


class _Node:
    def __init__(self, op_type):
        self.op_type = op_type


class _Graph:
    def __init__(self, *ids):
        self.nodes = {i: _Node(i.split("/")[-1] or "Op") for i in ids}


def test_owner_maps_lowered_ids_to_graph_nodes():
    nodes = {"/fc1/Gemm", "/fc1/Gemm_Grad", "Mul:adamw.t0", "ln"}
    assert owner("/fc1/Gemm", nodes) == "/fc1/Gemm"
    assert owner("Mul:adamw.t0/expanded", nodes) == "Mul:adamw.t0"
    assert owner("/fc1/Gemm_Grad/Gemm_0", nodes) == "/fc1/Gemm_Grad"        # not '/fc1/Gemm'
    assert owner("ln/expanded/part2", nodes) == "ln"
    assert owner("/fc2/Gemm", nodes) is None


def test_report_sums_statements_per_repetition_and_counts_coverage():
    g = _Graph("a", "b", "c", "unprofiled")
    prof = Profile([_k("a", [1000, 2000, 3000]), _k("b/expanded", [10, 20, 30]),
                    _k("c/expanded/one", [100, 100, 400]), _k("c/expanded/two", [300, 100, 0]),
                    _k("orphan", [5, 5, 5])], Samples.of([9000, 9000, 9000]), {"numba_threads": 1}, PEAKS)
    r = TimingReport.of(prof, g, step=3)
    by = {k.node_id: k for k in r.kernels}
    assert list(by) == ["a", "b", "c"] and r.unmatched == ["orphan"]
    assert by["c"].samples == Samples.of([400, 200, 400])                 # per-repetition sums
    assert by["c"].bytes == 2000 and by["c"].extra["statements"] == ["c/expanded/one", "c/expanded/two"]
    assert by["b"].samples.median_s == pytest.approx(20e-9)
    assert (r.measured, r.total, r.statements) == (3, 4, 4)
    assert r.coverage() == "3 of 4 kernels measured (4 profiled statements)"
    assert r.total_s == pytest.approx((2000 + 20 + 400) * 1e-9)
    assert sum(r.share(k) for k in r.kernels) == pytest.approx(1.0)
    assert r.times_us() == pytest.approx({"a": 2.0, "b": 0.02, "c": 0.4})
    assert by["a"].gbps == pytest.approx(1000 / 2e-6 / 1e9)               # figures from KernelTiming
    assert r.step_s == pytest.approx(9e-6)


def test_a_failed_statement_fails_its_kernel_and_selection_filters():
    g = _Graph("a", "b")
    prof = Profile([_k("a/expanded", [10]), _k("b/expanded/x", [10]), _k("b/expanded/y", [], error="timeout after 3 s")],
                   Samples.of([30]), {}, PEAKS)
    r = TimingReport.of(prof, g, step=0)
    b = {k.node_id: k for k in r.kernels}["b"]
    assert not b.ok and b.error == "b/expanded/y: timeout after 3 s"
    assert (r.measured, r.failed) == (1, 1) and "1 failed" in r.coverage()
    only = TimingReport.of(prof, g, step=0, only=["a"])
    assert [k.node_id for k in only.kernels] == ["a"] and only.coverage().startswith("1 of 2 kernels measured")


def test_staleness_follows_the_graph_object():
    g, other = _Graph("a"), _Graph("a")
    r = TimingReport.of(Profile([_k("a", [10])], Samples.of([10]), {}, PEAKS), g, step=2)
    assert not r.is_stale(g) and r.stale_note(g) == ""
    assert r.is_stale(other) and r.stale_note(other) == "stale: profiled at step 2"


def test_formatting():
    assert human_seconds(1.5e-3) == "1.5 ms" and human_seconds(2.0) == "2 s"
    assert human_seconds(4.2e-5) == "42 µs" and human_seconds(3e-8) == "30 ns"
    assert human_seconds(float("nan")) == "–"
    r = TimingReport([], 0, 0, threads={"numba_threads": 2, "blas_threads": 1, "cpus": 2}, peaks=PEAKS)
    assert describe_machine(r) == ("numba threads 2 · BLAS threads 1 · CPUs 2 · peaks: triad 20 GB/s, "
                                   "GEMM 100 GFLOP/s, ridge 5 FLOP/B (0 % load, spread 0 %)")
    ab = ABResult(Samples.of([2_000_000] * 4), Samples.of([1_000_000] * 4), 2.0, 0.05, {})
    assert describe_ab(0, 3, ab) == ("A/B step 0 → step 3: 2.000 (after is 2.00× faster) · median 2 ms → 1 ms · "
                                     "pair spread 5.0 % over 4 pairs")


def test_only_what_low_peaks_explain_counts_as_above_the_roof():
    """A view moves nothing at run time and a memory-bound kernel whose bytes fit the last-level cache
    is fed from it on every repetition: neither says the peaks were measured low (the bundled example
    showed "104 kernels above the calibrated roof, up to 76383 %", all views and cache-sized kernels)."""
    from dataclasses import replace

    from codegen.timing.roofline import in_cache
    from studio.gui.timings import over_peak
    mb = 1 << 20
    fast = [1000] * 5                                        # 1 µs: 1 MB/µs = 1 TB/s, 50× the 20 GB/s roof
    view = replace(_k("alias", fast, bytes_=mb, flops=0), kind="view")
    small = _k("small", fast, bytes_=mb, flops=0)            # memory-bound, fits a 32 MB cache
    big = _k("big", [50_000_000] * 5, bytes_=64 * mb, flops=0)     # 64 MB at 1.3 GB/s: under the roof
    huge = _k("huge", fast, bytes_=64 * mb, flops=0)         # 64 MB in 1 µs: only low peaks explain it
    gemm = _k("gemm", [1000] * 5, bytes_=mb, flops=10 ** 9)  # 1 TFLOP/s against 100 GFLOP/s: compute-bound
    r = TimingReport([view, small, big, huge, gemm], 0, 0, peaks=PEAKS)
    assert all(k.efficiency > 1.05 for k in (view, small, huge, gemm))
    assert in_cache(small, 32 * mb) and not in_cache(huge, 32 * mb) and not in_cache(gemm, 32 * mb)
    assert [k.node_id for k in over_peak(r, cache=32 * mb)] == ["huge", "gemm"]
    assert [k.node_id for k in over_peak(r, cache=0)] == ["small", "huge", "gemm"]     # cache unknown
    roofed = replace(r, peaks=replace(PEAKS, cache_bandwidth=2e12))   # a cache roof at 2 TB/s: 1 TB/s is under
    assert [k.node_id for k in over_peak(roofed, cache=32 * mb)] == ["huge", "gemm"]
    low = replace(r, peaks=replace(PEAKS, cache_bandwidth=200e9))     # 1 TB/s beats a 200 GB/s cache roof too
    assert [k.node_id for k in over_peak(low, cache=32 * mb)] == ["small", "huge", "gemm"]


def test_the_roofline_draws_the_cache_roof_above_the_dram_roof(qtbot):
    """With a measured cache roof the plot draws it, dashed in its own colour and labelled; without one it
    draws only the DRAM and compute roofs."""
    from studio.gui.qt_roofline import CACHE_ROOF, QtRooflinePlot

    def near(c) -> bool:                                        # the roof's colour, antialiased edges too
        return abs(c.red() - CACHE_ROOF.red()) + abs(c.green() - CACHE_ROOF.green()) + abs(c.blue() - CACHE_ROOF.blue()) < 60

    def roof_pixels(cache_bw: float) -> int:
        plot = QtRooflinePlot()
        qtbot.addWidget(plot)
        plot.resize(420, 300)
        kernels = [_k("a", [2000] * 5, bytes_=1 << 20, flops=1 << 18), _k("b", [900] * 5, bytes_=1 << 16, flops=1 << 22)]
        plot.set_data(kernels, PEAKS.bandwidth, PEAKS.flops, cache_bw=cache_bw)
        image = plot.grab().toImage()
        return sum(1 for x in range(image.width()) for y in range(image.height()) if near(image.pixelColor(x, y)))
    assert roof_pixels(0.0) == 0
    assert roof_pixels(10 * PEAKS.bandwidth) > 20
