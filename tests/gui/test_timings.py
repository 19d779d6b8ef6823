"""The Timings dock through the real main window (offscreen) and the real out-of-process profiler.

Profile all kernels of the MLP training step (ORT artifacts): the table, the roofline and
the time heatmap fill in, and selection follows both ways. A long profile is cancelled:
the worker process dies within a couple of seconds while a 20 ms timer keeps firing.
After apply the timings are marked stale (and current again after undo); the Chrome trace
is valid JSON (and a bad path gives a dialog naming the file); A/B shows a ratio.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QTabBar

from studio.gui.heatmap import box_values, color
from studio.gui.qt_timing_table import COLUMNS

pytest.importorskip("numba", reason="profiling needs the cpu extra (numba)")

LOAD_MS, PROFILE_MS = 60000, 180000
MLP = Path("ort_artifacts/mlp/legacy/train_step_adamw.onnx")


@pytest.fixture
def window(qtbot, make_window, fixtures_dir, tmp_path):
    model = tmp_path / "mlp_train_step.onnx"
    shutil.copy(fixtures_dir / MLP, model)
    w = make_window(autosave=False)
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None and w.view.placement.exact,
                    timeout=LOAD_MS)
    w.timings.raise_()
    return w


def _profile(qtbot, w, reps: int = 5):
    w.timings.reps.setValue(reps)
    w.actions_.profile_all.trigger()
    assert w.profiling.busy and not w.timings.profile_all.isEnabled()
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
    assert w.profiling.report is not None, w.timings.status.text()
    return w.profiling.report


def _col(name: str) -> int:
    return COLUMNS.index(name)


def test_profile_all_fills_the_table_the_roofline_and_the_time_heatmap(qtbot, window):
    w, dock = window, window.timings
    r = _profile(qtbot, w)
    n = len(w.session.graph.nodes)
    assert r.total == n and r.measured == n and r.failed == 0          # every graph kernel got a number
    assert f"{n} of {n} kernels measured" in dock.coverage.text() and "step 0" in dock.coverage.text()
    assert "numba threads" in dock.machine.text() and "triad" in dock.machine.text()
    assert "profiled step 0" in dock.status.text() and dock.trace.isEnabled()

    # the table: sane figures, sortable on the raw numbers
    rows = dock.model.rows
    assert len(rows) == n and {row[0] for row in rows} == set(w.session.graph.nodes)
    for row in rows:
        med, lo, hi = row[_col("median")], row[_col("min")], row[_col("max")]
        assert 0 < lo <= med <= hi < 1.0 and row[_col("CV")] >= 0 and not row[_col("error")]
        if row[_col("kind")] == "view":              # an alias moves no data: no rate, no roof
            assert row[_col("GB/s")] is None and row[_col("roofline eff.")] is None and row[_col("bound")] == "view"
        else:
            assert 0 <= row[_col("GB/s")] < 10_000 and 0 <= row[_col("roofline eff.")]
    assert sum(row[_col("share")] for row in rows) == pytest.approx(1.0)
    assert {"blas", "kernel"} <= {row[_col("kind")] for row in rows}
    dock.model.sort(_col("GB/s"), Qt.SortOrder.DescendingOrder)
    gbps = [row[_col("GB/s")] for row in dock.model.rows]
    rated = [g for g in gbps if g is not None]
    assert gbps[: len(rated)] == sorted(rated, reverse=True) and rated[0] > 0    # views (no rate) last
    gemm = next(row for row in dock.model.rows if row[0] == "/fc1/Gemm")
    assert gemm[_col("GFLOP/s")] > 0 and dock.model.data(dock.model.index(0, _col("median"))).endswith("s")
    tips = [dock.model.data(dock.model.index(k, 0), Qt.ItemDataRole.ToolTipRole) for k in range(len(rows))]
    kinds = [row[_col("kind")] for row in dock.model.rows]
    assert all(("\nloops: " in tip) == ("kernel" in kind.split("+")) for tip, kind in zip(tips, kinds)), tips

    # the roofline: one dot per measured kernel, roofs from the calibrated peaks
    plot = dock.plot
    assert len(plot.points) == r.measured and {p.node_id for p in plot.points} == set(w.session.graph.nodes)
    assert plot.peak_bw == r.peaks.bandwidth and plot.peak_flops == r.peaks.flops
    dot = next(p for p in plot.points if p.node_id == "/fc1/Gemm")
    assert not dot.clamped and "/fc1/Gemm" in plot.tooltip_for(dot)
    x, y = plot.placed()[plot.points.index(dot)]
    assert plot.point_at(x, y).node_id in {p.node_id for p in plot.points}
    assert not plot.grab().isNull()

    # selection: table -> graph view, graph view -> table and roofline
    target = "/fc1/Gemm_Grad/Gemm_0"
    row = next(k for k, row in enumerate(dock.model.rows) if row[0] == target)
    dock.table.selectRow(row)
    assert w.view.selected_ids() == [target]
    w.view.select(["/fc2/Gemm"])
    assert dock.selected_ids() == ["/fc2/Gemm"] and plot.highlight == {"/fc2/Gemm"}

    # the time heatmap: measured time per box, "N of M kernels measured"
    w.set_heat_metric("time")
    v = w.view
    assert v.heat_scale == "log" and v.legend.isVisible()
    assert f"{n} of {n} kernels measured" in v.legend.caption and "measured time" in v.legend.caption
    values = box_values(v.boxes, v.tree.members, r.times_us())
    hottest = max(values, key=values.get)
    assert v.boxes[hottest].heat.getRgb()[:3] == color(1.0)
    v.verticalScrollBar().setValue(v.verticalScrollBar().maximum())    # the legend stays in its corner
    assert v.legend.y() == v.viewport().height() - v.legend.height() - 10
    w.set_heat_metric("bytes")
    assert "bytes moved" in v.legend.caption


def test_timings_and_data_movement_share_one_tab_bar(qtbot, make_window):
    """Qt 6.11 leaves a stray tab bar mid-window when a second tab group is made before the first show."""
    w = make_window()

    def bars():
        return [t for t in w.findChildren(QTabBar)
                if t.isVisible() and "Timings" in [t.tabText(i) for i in range(t.count())]]

    qtbot.waitUntil(lambda: bool(bars()), timeout=5000)
    assert len(bars()) == 1 and bars()[0].y() > w.view.geometry().bottom()
    assert w.tabifiedDockWidgets(w.movement) == [w.timings] and not w.movement.visibleRegion().isEmpty()


def _workers() -> list[int]:
    """Profiling worker processes that are children of this test process."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"codegen.timing.worker" in cmd and int(stat[1]) == me and stat[0] != "Z":
            found.append(int(pid))
    return found


def test_cancel_stops_a_long_profile_promptly_and_the_loop_keeps_turning(qtbot, window):
    w, dock = window, window.timings
    dock.reps.setValue(200_000)                 # ~200k instrumented steps of a few ms: many minutes
    ticks: list[float] = []
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start()
    qtbot.mouseClick(dock.profile_all, Qt.MouseButton.LeftButton)
    assert w.profiling.busy and dock.cancel_button.isVisible()
    qtbot.waitUntil(lambda: dock.progress.maximum() > 1 and dock.progress.value() > 0, timeout=PROFILE_MS)
    assert dock.progress.maximum() >= 200_000 * len(w.session.graph.nodes)
    t_measuring = time.monotonic()
    qtbot.wait(3000)                            # let it measure for a while (not a synchronization)
    workers = _workers()
    assert len(workers) == 1, "the profile should be running in one worker process"
    assert w.profiling.busy
    t_cancel = time.monotonic()
    qtbot.mouseClick(dock.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=5000)
    stopped = time.monotonic() - t_cancel
    timer.stop()
    assert stopped < 2.0, f"cancel took {stopped:.2f} s"
    assert not _workers() and not Path(f"/proc/{workers[0]}").exists()
    assert "cancelled" in dock.status.text() and w.profiling.report is None
    assert dock.profile_all.isEnabled() and not dock.cancel_button.isVisible()
    during = [t for t in ticks if t_measuring <= t <= t_cancel]
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert len(during) >= 3.0 / 0.02 * 0.5 and max(gaps) < 0.3      # the event loop kept turning


def _some_applicable(w):
    from studio.gui.ranking import candidates
    g = w.session.graph
    return next((t, m) for t, m in candidates(g, None) if t.check(g, m).ok)


def test_stale_after_apply_trace_export_and_ab(qtbot, window, tmp_path):
    w, dock = window, window.timings
    r = _profile(qtbot, w, reps=3)
    w.set_heat_metric("time")
    assert not dock.model.stale and "stale" not in w.view.legend.caption

    # Chrome trace: valid JSON with one complete event per measured statement
    path = tmp_path / "trace.json"
    assert w.profiling.export_trace(str(path))
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len([k for k in w.profiling.profile.kernels if k.ok]) == r.statements
    assert all(e["dur"] > 0 for e in events)
    bad = tmp_path / "no_such_dir" / "trace.json"
    assert not w.profiling.export_trace(str(bad))
    box = w.messages[-1]
    assert str(bad) in box.text() and "Traceback" not in box.informativeText()
    box.close()

    # apply: the timings are stale, greyed, and say at which step they were taken
    t, m = _some_applicable(w)
    assert w.apply_step(t.name, m.anchors, t.params())
    w.refresh()
    assert w.session.cursor == 1 and dock.model.stale
    assert "stale: profiled at step 0" in dock.coverage.text() and dock.plot.note == "stale: profiled at step 0"
    fg = dock.model.data(dock.model.index(0, 0), Qt.ItemDataRole.ForegroundRole)
    assert fg.name() == "#9a9a9a"
    assert "stale: profiled at step 0" in w.view.legend.caption
    heats = [b.heat.getRgb()[:3] for b in w.view.boxes.values()]
    assert all(c[0] == c[1] == c[2] for c in heats)                    # grey, not the hot ramp

    # A/B against the original: a ratio and its pair spread
    w.profiling.compare(0)
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
    ab = w.profiling.ab
    assert ab is not None and ab.ratio > 0 and ab.a.n == ab.b.n == 3
    text = dock.ab_line.text()
    assert text.startswith("A/B step 0 → step 1: ") and "pair spread" in text

    # undo to the profiled step: the same graph, current again
    w.actions_.undo.trigger()
    w.refresh()
    assert w.session.cursor == 0 and not dock.model.stale and dock.plot.note == ""
    assert "stale" not in dock.coverage.text() and "stale" not in w.view.legend.caption


def test_a_roofline_above_100_percent_is_flagged_and_recalibrate_fixes_it(qtbot, window, monkeypatch):
    """Peaks measured low (as under load) make kernels look faster than the roof: the dock warns,
    marks them red, labels every kernel memory- or compute-bound, and Recalibrate measures the
    peaks again (for real) and judges the same measurements against them. One thread: the MLP's
    GEMMs are so small that a second thread's wake-up dominates them, and then even peaks cut
    50-fold leave them under the roof. No cache size: which of the MLP's small kernels count as
    memory-bound and cache-resident (never flagged, ``test_timings_report``) depends on the measured
    ridge point, so it would decide whether any kernel is flagged at all."""
    from dataclasses import replace

    from codegen.timing import roofline
    monkeypatch.setenv("DCSTUDIO_THREADS", "1")
    monkeypatch.setattr(roofline, "_cache", lambda: 0)

    from studio.gui.timings import over_peak
    w, dock = window, window.timings
    r = _profile(qtbot, w)
    ridge = r.peaks.flops / r.peaks.bandwidth
    for k in r.kernels:                               # the FLOP/B of each kernel against the ridge point
        row = next(row for row in dock.model.rows if row[0] == k.node_id)
        assert row[_col("bound")] == ("view" if k.kind == "view" else
                                      "compute" if k.bytes and k.flops / k.bytes >= ridge else "memory")
    low = r.with_peaks(replace(r.peaks, bandwidth=r.peaks.bandwidth / 50, flops=r.peaks.flops / 50, load=0.6))
    w.profiling.report = low
    dock.set_report(low)
    over = over_peak(low)
    assert over and dock.trust_box.isVisibleTo(dock) and dock.recalibrate.isEnabled()
    text = dock.trust.text()
    assert f"{len(over)} kernel" in text and "above the calibrated roof" in text and "60 % load" in text
    qtbot.wait(50)
    assert dock.trust.fits(), "the warning is cut by the Recalibrate button beside it"
    assert dock.trust.geometry().right() < dock.recalibrate.geometry().left()
    row = next(k for k, row in enumerate(dock.model.rows) if row[0] == over[0].node_id)
    eff = dock.model.index(row, _col("roofline eff."))
    assert dock.model.data(eff, Qt.ItemDataRole.ForegroundRole).name() == "#c62828"
    assert "Recalibrate" in dock.model.data(eff, Qt.ItemDataRole.ToolTipRole)

    dock.recalibrate.click()
    assert w.profiling.busy
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
    fresh = w.profiling.report
    assert fresh.peaks.bandwidth > 10 * low.peaks.bandwidth and fresh.peaks.measured_at > r.peaks.measured_at
    assert 0.0 <= fresh.peaks.load <= 1.0 and fresh.peaks.spread >= 0.0
    assert len(over_peak(fresh)) < len(over) and "recalibrated" in dock.status.text()
    assert [k.samples for k in fresh.kernels] == [k.samples for k in low.kernels]   # the same measurements


def test_profile_selection_times_only_the_selection(qtbot, window):
    """Before: "Profile selection" ran and timed the whole step (one kernel took longer than all).
    Now the worker records the selection's inputs in one run and times only the selection."""
    w, dock = window, window.timings
    w.view.select(["/fc1/Gemm"])
    dock.reps.setValue(4)
    w.actions_.profile_selection.trigger()
    assert w.profiling.busy
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
    r = w.profiling.report
    assert r is not None and [k.node_id for k in r.kernels] == ["/fc1/Gemm"]
    k = r.kernels[0]
    assert k.ok and k.samples.n == 4
    from codegen.timing.stats import owner
    assert {owner(p.node_id, {"/fc1/Gemm"}) for p in w.profiling.profile.kernels} == {"/fc1/Gemm"}, \
        "the worker timed the selection's statements only"
    assert "1 of" in dock.coverage.text()


def test_profiling_deeper_selections_records_once_per_graph_version(qtbot, window):
    """Issue 38: a cutout's inputs come from values recorded once per graph version. A second selection whose
    inputs the first recording made runs nothing upstream (the recording does not grow); after an apply the
    graph is a new version and is recorded afresh."""
    w, dock = window, window.timings
    dock.reps.setValue(2)
    order = [n.id for n in w.session.graph.topo_order()]

    def profile(kernel: str):
        w.view.select([kernel])
        w.actions_.profile_selection.trigger()
        qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
        assert [k.node_id for k in w.profiling.report.kernels] == [kernel]
        return w.session._recording

    first = profile(order[3])
    kept = dict(first.values)
    assert first.graph is w.session.graph and kept, "the values upstream of the selection were recorded"
    assert profile(order[2]) is first and first.values.keys() == kept.keys(), "nothing upstream ran again"
    from studio.gui.ranking import candidates
    s = w.session
    t, m = next((t, m) for t, m in candidates(s.graph, None) if t.check(s.graph, m).ok)
    assert w.apply_step(t.name, m.anchors, t.params())
    fresh = profile(next(n.id for n in s.graph.topo_order()[3:]))
    assert fresh is not first and fresh.graph is s.graph


def test_compare_shows_measured_time_per_scope(qtbot, window):
    """Compare's table had bytes only. "Time both sides" profiles the two compared graphs (a side the
    Timings dock already profiled in full is reused) and fills time before/after and their ratio."""
    from studio.gui.compare import scope_rows
    from studio.gui.qt_compare import NOT_TIMED, TABLE_COLUMNS
    from studio.gui.ranking import candidates
    w = window
    report0 = _profile(qtbot, w, reps=3)                # step 0, profiled in full by the dock
    s = w.session
    t, m = next((t, m) for t, m in candidates(s.graph, None) if t.check(s.graph, m).ok)
    assert w.apply_step(t.name, m.anchors, t.params())
    win = w.show_compare()
    qtbot.waitUntil(win.ready, timeout=10000)
    col = {name: TABLE_COLUMNS.index(name) for name in ("time before", "time after", "time after / before")}
    cells = lambda c: [win.table.item(r, c).text() for r in range(win.table.rowCount())]  # noqa: E731
    assert all(x != NOT_TIMED for x in cells(col["time before"])), "step 0's profile is reused"
    assert set(cells(col["time after"])) == {NOT_TIMED} and win.time_button.isEnabled()
    before = w.profiling.measured[s.graph_at(0)]
    assert before is report0
    win.time_button.click()
    assert w.profiling.busy, "only the current graph is timed: step 0 was"
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=PROFILE_MS)
    assert all(x != NOT_TIMED for x in cells(col["time after"])) and not win.time_button.isEnabled()
    after = w.profiling.measured[s.graph]
    rows = scope_rows(s.graph_at(0), s.graph, s.ledger_at(0), s.ledger,
                      times_before={k.node_id: k.samples.median_s for k in before.kernels if k.ok},
                      times_after={k.node_id: k.samples.median_s for k in after.kernels if k.ok})
    assert abs(sum(r.time_after for r in rows) - after.total_s) <= 1e-9 * max(1.0, after.total_s)
    assert abs(sum(r.time_before for r in rows) - before.total_s) <= 1e-9 * max(1.0, before.total_s)
    assert all(x.endswith("×") for x in cells(col["time after / before"]) if x != NOT_TIMED)
    win.close()


def test_timings_run_on_the_users_inputs_until_cleared(qtbot, window, tmp_path):
    """The dock's Inputs menu: an .npz of the user's arrays is read as a task and every later profile runs on
    it (float64 data converted to the float32 input); a file the graph cannot take is refused, naming the file
    and the input, and the inputs stay; "Time on deterministic feeds" goes back."""
    w, dock = window, window.timings
    assert dock.inputs_line.text().startswith("inputs: deterministic") and not dock.clear_inputs.isEnabled()
    data = np.random.default_rng(3).standard_normal((8, 784))
    np.savez(tmp_path / "batch.npz", input=data, labels=np.arange(8) % 10)
    np.savez(tmp_path / "wrong.npz", labels=np.zeros(8))
    seen = []
    real = w.session.profile
    w.session.profile = lambda *a, **k: seen.append(k.get("feeds")) or real(*a, **k)

    w.profiling.set_inputs(str(tmp_path / "batch.npz"))
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=LOAD_MS)
    assert "batch.npz: 2 of 16 inputs" in dock.inputs_line.text() and dock.clear_inputs.isEnabled()
    _profile(qtbot, w, reps=2)
    assert seen[-1]["input"].dtype == np.float32 and np.array_equal(seen[-1]["input"], data.astype(np.float32))
    assert np.array_equal(seen[-1]["labels"], np.arange(8) % 10) and len(seen[-1]) == 16

    w.profiling.set_inputs(str(tmp_path / "wrong.npz"))
    qtbot.waitUntil(lambda: not w.profiling.busy, timeout=LOAD_MS)
    assert "wrong.npz: 'labels' is float64, the graph takes int64" in dock.status.text()
    assert "batch.npz" in dock.inputs_line.text()                      # still the last good file

    dock.clear_inputs.trigger()
    assert dock.inputs_line.text().startswith("inputs: deterministic")
    _profile(qtbot, w, reps=2)
    assert seen[-1] is None                                           # the session's deterministic feeds
