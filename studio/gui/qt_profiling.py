"""Profiling from the studio: ``Session.profile`` and ``Session.ab`` as background tasks.

``QtProfiling`` carries out the Timings dock's requests (and the Tools menu's). Each
run is a ``QtTask`` on the window's pool (so the status bar tracks it too): the
profiler's worker process does the timing, its progress drives the dock's bar, and
Cancel sets the task's token, which the profiler polls every 50 ms and then kills the
worker (``ProfileCancelled``). Only one timing task runs at a time.

The profile's statements are mapped back to the graph that was current when the run
started (``timings.TimingReport``), and that graph decides staleness: after apply, undo
or revert, ``refresh`` greys the table, the roofline and the time heatmap with
"stale: profiled at step k"; back at that step they are current again.

*Recalibrate* (shown with a warning when kernels run above the calibrated roof, or the
calibration recorded heavy load) measures the peaks again as a task and judges the last
profile's measurements against them (``TimingReport.with_peaks``).

*Inputs* (the dock's menu) reads an .npz of the user's weights and data as a task
(``session.exporting.read_inputs``: names, shapes and dtypes checked, the file named in any refusal);
from then on every profile, A/B and Compare timing runs on those arrays over the deterministic feeds,
until *Time on deterministic feeds* or another session.

"Profile selection" profiles a cutout (``codegen.timing.cutout``): the task runs the part of the
NumPy reference step the selection depends on, recording what the selected kernels read (progress
and Cancel as it goes; values recorded for an earlier selection of the same graph version are not made
again), and the worker compiles and times only them. Calibrating the peaks the first time on a machine happens in
this process before the worker starts and cannot be interrupted (seconds; it is cached).
"""
from __future__ import annotations

import functools
import time
import weakref
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QInputDialog

from ir.errors import StudioError
from studio.gui.jobs import Cancelled
from studio.gui.timings import TimingReport, describe_ab, human_seconds
from studio.text import human_bytes

WARMUP = 2


def _feeds(graph, given: dict | None) -> dict | None:
    """The deterministic feeds with the user's arrays over them (None without any: the session's default)."""
    from studio.session.exporting import over_feeds
    return None if given is None else over_feeds(graph, given)


def _inputs_work(graph, path: str, token, progress):
    from studio.session.exporting import read_inputs
    progress(0, 0, f"reading {Path(path).name}…")
    return read_inputs(graph, path, label="inputs file")


def _profile_work(session, graph, reps: int, threads: int | None, only, given, token, progress):
    from codegen.timing.profiler import ProfileCancelled
    progress(0, 0, "profiling: calibrating peaks, compiling kernels…")
    try:
        return session.profile(only, reps=reps, warmup=min(WARMUP, reps), threads=threads, graph=graph,
                               feeds=_feeds(graph, given),
                               on_progress=lambda d, t: progress(d, t, f"profiling: {d}/{t} kernel runs"),
                               cancel=lambda: token.cancelled,
                               on_record=lambda d, t: progress(d, t, f"profiling: recording the selection's inputs, "
                                                                     f"{d}/{t} kernels"))
    except ProfileCancelled:
        raise Cancelled("profiling was cancelled") from None
    except (RuntimeError, OSError) as e:
        raise StudioError(f"profiling failed: {e}") from e


def _ab_work(session, graphs: tuple, steps: tuple[int, int], reps: int, threads: int | None, given, token,
             progress):
    from codegen.timing.profiler import ProfileCancelled
    progress(0, 0, f"A/B: step {steps[0]} against step {steps[1]}…")
    try:
        return session.ab(graphs[0], graphs[1], reps=reps, warmup=min(WARMUP, reps), threads=threads,
                          cancel=lambda: token.cancelled, feeds=_feeds(graphs[0], given))
    except ProfileCancelled:
        raise Cancelled("the A/B comparison was cancelled") from None
    except (RuntimeError, OSError) as e:
        raise StudioError(f"the A/B comparison failed: {e}") from e


def _measure_work(session, graphs: list, reps: int, threads: int | None, given, token, progress):
    """Profile every kernel of each ``(step, graph)`` in turn; [(graph, TimingReport)]."""
    from codegen.timing.profiler import ProfileCancelled
    out = []
    for k, (step, graph) in enumerate(graphs, start=1):
        head = f"timing step {step} ({k}/{len(graphs)})"
        progress(0, 0, f"{head}: compiling kernels…")
        try:
            prof = session.profile(None, reps=reps, warmup=min(WARMUP, reps), threads=threads, graph=graph,
                                   feeds=_feeds(graph, given), cancel=lambda: token.cancelled,
                                   on_progress=lambda d, t: progress(d, t, f"{head}: {d}/{t} kernel runs"))
        except ProfileCancelled:
            raise Cancelled("timing the compared steps was cancelled") from None
        except (RuntimeError, OSError) as e:
            raise StudioError(f"timing step {step} failed: {e}") from e
        out.append((graph, TimingReport.of(prof, graph, step)))
    return out


def _calibrate_work(threads: int | None, token, progress):
    from codegen.timing.calibrate import peaks
    from codegen.numba_cpu.threads import default_threads
    progress(0, 0, "recalibrating: bandwidth (triad) and GEMM peaks, a few seconds…")
    return peaks(threads or default_threads(), force=True)


class QtProfiling(QObject):
    """See the module docstring. ``window`` is the ``QtMainWindow``; its ``timings`` dock shows the results.
    ``measured`` keeps the whole-step report of every graph profiled in full (weakly: a graph no step
    holds any more drops out); ``measuredChanged`` tells the Compare window a new one came."""

    measuredChanged = Signal()

    def __init__(self, window) -> None:
        super().__init__(window)
        self.w = window
        self.dock = window.timings
        self.profile = None                       # the last codegen.timing.profiler.Profile
        self.report: TimingReport | None = None
        self.measured: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.ab = None                            # the last ABResult
        self.given: dict | None = None            # the user's arrays the timings run on (None: deterministic)
        self.task = None
        d = self.dock
        d.profileAllRequested.connect(self.profile_all)
        d.profileSelectionRequested.connect(self.profile_selection)
        d.compareRequested.connect(self.choose_compare)
        d.traceRequested.connect(self.choose_trace)
        d.cancelRequested.connect(self.cancel)
        d.recalibrateRequested.connect(self.recalibrate)
        d.inputsRequested.connect(self.choose_inputs)
        d.inputsCleared.connect(self.clear_inputs)
        d.set_report(None)

    # --- state ------------------------------------------------------------------------------
    def reset(self) -> None:
        """A new session: forget the last results (a task for the old session is ignored when it ends)."""
        self.profile = self.report = self.ab = None
        self.measured = weakref.WeakKeyDictionary()
        self.clear_inputs()
        self.dock.set_report(None)
        self.dock.set_ab("")
        self.w.view.set_heat_times({}, "no profile yet")

    def refresh(self) -> None:
        """The session changed: mark the last profile stale (or current again)."""
        s, r = self.w.session, self.report
        if s is None or r is None:
            return
        note = r.stale_note(s.graph)
        self.dock.set_stale(note)
        self.w.view.set_heat_times(r.times_us(), r.coverage() + (f" · {note}" if note else ""), bool(note))

    @property
    def busy(self) -> bool:
        return self.task is not None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.dock.status.set_text("cancelling…")

    # --- profiling --------------------------------------------------------------------------
    def profile_all(self):
        return self._profile(None)

    def profile_selection(self):
        ids = self.w.view.selected_ids()
        if not ids:
            self.dock.status.set_text("select kernels in the graph or a table first")
            return None
        return self._profile(ids)

    # --- inputs -----------------------------------------------------------------------------
    def choose_inputs(self) -> None:
        s = self.w.session
        if s is None:
            return self._no_session()
        start = str(Path(s.model_path).parent) if s.model_path else ""
        path, _ = QFileDialog.getOpenFileName(self.w, "Time on your inputs", start,
                                              "NumPy arrays by input name (*.npz);;All files (*)")
        if path:
            self.set_inputs(path)

    def set_inputs(self, path: str):
        """Read ``path`` as a task; its arrays are what the timings run on once it is read (a file the graph
        cannot take is refused, naming the file, the input and why; the inputs stay as they were)."""
        s = self.w.session
        if s is None:
            return self._no_session()
        task = self._start(f"Reading {Path(path).name}", functools.partial(_inputs_work, s.graph, path),
                           {"path": path, "inputs": len(s.graph.inputs)})
        if task is not None:
            task.succeeded.connect(self._inputs_read)
        return task

    def _inputs_read(self, given: dict) -> None:
        ctx = self.sender().context
        if ctx["session"] is not self.w.session:
            return
        self.given = given
        size = human_bytes(sum(v.nbytes for v in given.values()))
        self.dock.set_inputs(f"inputs: {Path(ctx['path']).name}: {len(given)} of {ctx['inputs']} inputs "
                             f"({size}), the others deterministic")
        self.dock.status.set_text(f"the timings run on {ctx['path']} from now on")

    def clear_inputs(self) -> None:
        self.given = None
        self.dock.set_inputs("")

    def _settings(self) -> tuple[int, int | None]:
        return self.dock.reps.value(), self.dock.threads.value() or None

    def _no_session(self) -> None:
        self.dock.status.set_text("open a model first")

    def _start(self, title: str, work, context: dict):
        s = self.w.session
        if self.busy:
            self.dock.status.set_text("a timing task is running: wait for it or cancel it")
            return None
        context.update(session=s, started=time.monotonic())
        self.task = task = self.w.run_task(title, work, context=context)
        task.progressed.connect(self._progressed)
        task.cancelled.connect(self._cancelled)
        task.failed.connect(self._failed)
        task.finished.connect(self._finished)
        self.dock.set_running(True, title + "…")
        return task

    def _profile(self, only: list[str] | None):
        s = self.w.session
        if s is None:
            return self._no_session()
        reps, threads = self._settings()
        what = "all kernels" if only is None else f"{len(only)} selected kernels"
        task = self._start(f"Profiling {what} at step {s.cursor}",
                           functools.partial(_profile_work, s, s.graph, reps, threads, only, self.given),
                           {"graph": s.graph, "step": s.cursor, "only": only})
        if task is not None:
            task.succeeded.connect(self._profiled)
        return task

    def _profiled(self, profile) -> None:
        ctx = self.sender().context
        if ctx["session"] is not self.w.session:
            return
        self.profile = profile
        self.report = r = TimingReport.of(profile, ctx["graph"], ctx["step"], ctx["only"])
        self.dock.set_report(r, r.stale_note(self.w.session.graph))
        self.dock.status.set_text(f"profiled step {r.step} in {time.monotonic() - ctx['started']:.1f} s: "
                                  f"{r.coverage()}")
        if ctx["only"] is None:
            self.measured[ctx["graph"]] = r
            self.measuredChanged.emit()
        self.refresh()

    def measure(self, graphs: list):
        """Profile in full each ``(step, graph)`` not measured yet (the Compare window's time columns)."""
        s = self.w.session
        if s is None:
            return self._no_session()
        todo = [(step, g) for step, g in graphs if g not in self.measured]
        if not todo:
            return None
        reps, threads = self._settings()
        task = self._start(f"Timing step{'s' if len(todo) > 1 else ''} {', '.join(str(k) for k, _ in todo)} "
                           "for Compare", functools.partial(_measure_work, s, todo, reps, threads, self.given), {})
        if task is not None:
            task.succeeded.connect(self._measured)
        return task

    def _measured(self, reports) -> None:
        if self.sender().context["session"] is not self.w.session:
            return
        for graph, report in reports:
            self.measured[graph] = report
        self.dock.status.set_text(f"timed {len(reports)} step{'s' if len(reports) > 1 else ''} in "
                                  f"{time.monotonic() - self.sender().context['started']:.1f} s for Compare")
        self.measuredChanged.emit()

    # --- calibration ------------------------------------------------------------------------
    def recalibrate(self):
        """Measure the peaks again (the thread count of the last profile) and judge the last profile
        against them: the roofline, the efficiencies and the warning follow."""
        r = self.report
        threads = (r.peaks.threads if r is not None and r.peaks is not None else None) or \
            self.dock.threads.value() or None
        task = self._start("Recalibrating the peaks", functools.partial(_calibrate_work, threads), {})
        if task is not None:
            task.succeeded.connect(self._recalibrated)
        return task

    def _recalibrated(self, peaks) -> None:
        self.dock.status.set_text(f"recalibrated: triad {peaks.bandwidth / 1e9:.1f} GB/s, GEMM "
                                  f"{peaks.flops / 1e9:.1f} GFLOP/s ({peaks.describe()})")
        if self.report is not None:
            self.report = self.report.with_peaks(peaks)
            self.dock.set_report(self.report, self.report.stale_note(self.w.session.graph) if self.w.session else "")

    # --- A/B --------------------------------------------------------------------------------
    def choose_compare(self) -> None:
        s = self.w.session
        if s is None:
            return
        k, ok = QInputDialog.getInt(self.w, "Compare with step", "Time the whole training step after this step "
                                    f"against the current one (step {s.cursor}); 0 is the original graph:",
                                    0, 0, len(s.steps), 1)
        if ok:
            self.compare(k)

    def compare(self, before: int = 0):
        """Paired A/B of the graph after ``before`` steps against the current graph."""
        s = self.w.session
        if s is None:
            return self._no_session()
        reps, threads = self._settings()
        try:                                       # the graphs as they are now, not when the job starts
            graphs = (s.graph_at(before), s.graph)
        except StudioError as e:
            self.dock.status.set_text(e.summary)
            return None
        task = self._start(f"A/B: step {before} against step {s.cursor}",
                           functools.partial(_ab_work, s, graphs, (before, s.cursor), reps, threads, self.given),
                           {"before": before, "after": s.cursor})
        if task is not None:
            task.succeeded.connect(self._compared)
        return task

    def _compared(self, result) -> None:
        ctx = self.sender().context
        if ctx["session"] is not self.w.session:
            return
        self.ab = result
        self.dock.set_ab(describe_ab(ctx["before"], ctx["after"], result))
        self.dock.status.set_text(f"A/B done in {time.monotonic() - ctx['started']:.1f} s")

    # --- task ends --------------------------------------------------------------------------
    def _progressed(self, done: int, total: int, what: str) -> None:
        if self.sender() is self.task:
            self.dock.set_progress(done, total, what)

    def _cancelled(self, message: str) -> None:
        ctx = self.sender().context
        self.dock.status.set_text(f"cancelled after {time.monotonic() - ctx['started']:.1f} s: {message}")

    def _failed(self, message: str) -> None:
        self.dock.status.set_text(f"failed: {message}")
        self.w.say(f"{self.sender().title} failed", error=True, detail=message)

    def _finished(self) -> None:
        if self.sender() is self.task:
            self.task = None
            self.dock.set_running(False)

    # --- Chrome trace -----------------------------------------------------------------------
    def choose_trace(self) -> None:
        if self.profile is None:
            self.w.say("Profile the kernels first: the trace shows the last profile", error=True)
            return
        path, _ = QFileDialog.getSaveFileName(self.w, "Export Chrome trace", f"trace-step{self.report.step}.json",
                                              "Chrome trace (*.json);;All files (*)")
        if path:
            self.export_trace(path)

    def export_trace(self, path: str) -> bool:
        """Write the last profile as a Chrome trace (Perfetto); an error dialog names the file."""
        from codegen.timing.trace import write_trace
        if self.profile is None:
            self.w.say("Profile the kernels first: the trace shows the last profile", error=True)
            return False
        try:
            write_trace(self.profile, path)
        except (OSError, ValueError, TypeError) as e:
            self.w.say(f"Could not write the Chrome trace to {path}", error=True, detail=f"{type(e).__name__}: {e}")
            return False
        self.w.statusBar().showMessage(f"wrote the Chrome trace of step {self.report.step} "
                                       f"({human_seconds(self.report.step_s)} per step) to {Path(path).name}", 8000)
        return True
