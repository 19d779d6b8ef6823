"""Profiling out of process: per-kernel timings, robust to kernels that raise, hang or crash.

``profile_graph(graph, feeds)`` writes the graph (IR JSON, arrays in ``.npz``) to a temp
dir and runs ``codegen.timing.worker`` in a fresh process pinned to ``threads`` threads
(``threads.environment``). The parent watches the worker's progress file: if one kernel
runs longer than ``timeout`` seconds, or the worker dies, that kernel is recorded as
failed (``timeout`` / ``crashed``), and a new worker measures everything again with it
skipped (its outputs zero-filled) — profiling carries on. A kernel that raises is caught
inside the worker and reported with its exception. The result is a ``Profile``: one
``KernelTiming`` per kernel (median, min, max, CV; GB/s, % of the calibrated triad,
GFLOP/s, roofline bound and efficiency), the step's own timing and the thread counts.

``kernels`` (graph kernel ids) profiles a *cutout* (``cutout``): this process runs the part of
the NumPy reference step the selection depends on, recording what those kernels read, and
the worker compiles and times only them; the step's samples are then the selection's.
``feeds`` None makes deterministic ones (``feeds_for``; for a cutout, only those it reads);
``on_record(done, total)`` reports the recording run's kernels. Long runs report ``on_progress(done, total)`` (statement-steps measured so far) and stop
when ``cancel()`` returns true: the worker is killed and ``ProfileCancelled`` raised.

``ab_ratio(a, b, feeds)`` times two graphs' whole steps alternately in one worker (paired
A/B, so drift hits both) and returns median(a) / median(b) and its per-pair spread.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from codegen.numba_cpu import threads as thread_control
from codegen.timing.calibrate import Peaks
from codegen.timing.cancel import ProfileCancelled  # noqa: F401 (raised here; callers catch it from here)
from codegen.timing.stats import KernelTiming, Samples, pair_spread
from ir.graph import Graph
from ir.serialize import dumps

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 900.0   # import, lowering and compiling a big graph's kernels
Progress = Callable[[int, int], None]
Cancel = Callable[[], bool]


@dataclass
class Profile:
    kernels: list[KernelTiming]
    step: Samples
    threads: dict
    peaks: Peaks | None = None
    failures: list[str] = field(default_factory=list)
    workers: int = 1
    step_ns: list = field(default_factory=list)     # each timed step, aligned with each kernel's extra["samples_ns"]
    full_ns: list = field(default_factory=list)     # with kernels_off: whole steps, paired with ...
    kernels_off_ns: list = field(default_factory=list)   # ... steps with every generated kernel a no-op

    def by_id(self) -> dict[str, KernelTiming]:
        return {k.node_id: k for k in self.kernels}

    def to_json(self) -> dict:
        return {"step": asdict(self.step), "threads": self.threads, "failures": self.failures,
                "peaks": self.peaks.to_json() if self.peaks else None, "workers": self.workers,
                "kernels": [k.to_json() for k in self.kernels]}


def write_graph(graph: Graph, feeds: Mapping[str, np.ndarray], stem: Path) -> None:
    """IR JSON without arrays, plus one ``.npz`` holding values and feeds by position."""
    stem.with_suffix(".json").write_text(dumps(graph, with_values=False), encoding="utf-8")
    values, fed = list(graph.values), [n for n in graph.inputs if n in feeds]
    stem.with_suffix(".names.json").write_text(json.dumps({"values": values, "feeds": fed}), encoding="utf-8")
    arrays = {f"v{k}": np.asarray(graph.values[n]) for k, n in enumerate(values)}
    arrays.update({f"f{k}": np.asarray(feeds[n]) for k, n in enumerate(fed)})
    np.savez(stem.with_suffix(".npz"), **arrays)


def _run_worker(job: dict, work: Path, threads: int, timeout: float, on_progress: Progress | None = None,
                cancel: Cancel | None = None) -> tuple[dict | None, str | None, int]:
    """Run one worker; (result, failure kind, statement index running at the failure)."""
    from codegen.timing.worker import PROGRESS_SLOTS
    path = work / "job.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    progress = np.memmap(job["progress"], dtype=np.int64, mode="w+", shape=(PROGRESS_SLOTS,))
    progress[:] = (-1, 0, 0, 0)
    steps = 1 + int(job.get("warmup", 0)) + int(job.get("reps", 0))
    env = dict(os.environ, **thread_control.environment(threads))
    # The worker's output goes to files, not pipes: nobody reads a pipe while the worker runs, and a
    # result line longer than the pipe buffer (64 KiB: a few hundred kernels x 10 reps) blocked the
    # worker in ``write`` until the parent killed it as hung.
    with open(work / "stdout.txt", "w+", encoding="utf-8") as out_f, \
            open(work / "stderr.txt", "w+", encoding="utf-8") as err_f:
        proc = subprocess.Popen([sys.executable, "-m", "codegen.timing.worker", str(path)], cwd=ROOT, env=env,
                                stdout=out_f, stderr=err_f, text=True)
        failure = _watch(proc, progress, steps, timeout, on_progress, cancel)
        if failure is not None:
            return None, failure, int(progress[0])
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    line = next((ln for ln in out.splitlines() if ln.startswith("DCSTUDIO-RESULT ")), None)
    if proc.returncode == 0 and line:
        return json.loads(line[len("DCSTUDIO-RESULT "):]), None, -1
    tail = err.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
    return None, f"crashed (exit code {proc.returncode}): {tail[0][:300]}", int(progress[0])


def _watch(proc: subprocess.Popen, progress, steps: int, timeout: float, on_progress: Progress | None,
           cancel: Cancel | None) -> str | None:
    """Poll the worker until it exits: report progress, kill it on cancel or when one kernel hangs."""
    last, since = (int(progress[0]), int(progress[1])), time.monotonic()
    while proc.poll() is None:
        time.sleep(0.05)
        if cancel is not None and cancel():
            proc.kill()
            proc.wait()
            raise ProfileCancelled("profiling cancelled")
        now = (int(progress[0]), int(progress[1]))
        if now != last:
            last, since = now, time.monotonic()
            n = int(progress[2])
            if on_progress is not None and n > 0 and now[0] >= 0:
                on_progress(int(progress[3]) * n + now[0], steps * n)
        limit = STARTUP_TIMEOUT if now[0] < 0 else timeout
        if time.monotonic() - since > limit:
            proc.kill()
            proc.wait()
            return f"timeout after {timeout:g} s"
    return None


def profile_graph(graph: Graph, feeds: Mapping[str, np.ndarray] | None, *, kernels: Iterable[str] | None = None,
                  reps: int = 10, warmup: int = 2, timeout: float = 60.0, threads: int | None = None,
                  peaks: Peaks | None = None, plugins: Iterable[str] = (), on_progress: Progress | None = None,
                  cancel: Cancel | None = None, on_record: Progress | None = None,
                  kernels_off: bool = False, recording=None) -> Profile:
    """Time every kernel of ``graph`` out of process (see the module docstring). ``kernels_off``: also time
    ``reps`` pairs of steps, whole and with every generated kernel a no-op (``Profile.kernels_off_ns``);
    ``recording`` (``codegen.timing.cutout.Recording``): a cutout's recorded values, kept for the next one."""
    threads = threads or thread_control.default_threads()
    if kernels is not None:
        from codegen.timing.cutout import cutout
        graph, feeds = cutout(graph, kernels, feeds, on_progress=on_record, cancel=cancel, recording=recording)
    elif feeds is None:
        from codegen.numpy_ref.feeds import feeds_for
        feeds = feeds_for(graph)
    with tempfile.TemporaryDirectory(prefix="dcstudio-profile-") as tmp:
        work = Path(tmp)
        write_graph(graph, feeds, work / "graph")
        job = {"graph": str(work / "graph"), "progress": str(work / "progress"), "reps": reps, "warmup": warmup,
               "threads": threads, "plugins": list(plugins), "skip": [], "kernels_off": kernels_off}
        failed: dict[int, str] = {}
        for attempt in range(1, len(graph.nodes) + 2):
            result, failure, at = _run_worker(job, work, threads, timeout, on_progress, cancel)
            if result is not None:
                return _assemble(result, failed, peaks, attempt)
            if at < 0 or at in failed:
                raise RuntimeError(f"the profiling worker failed outside any kernel: {failure}")
            failed[at] = failure
            job["skip"] = sorted(failed)
    raise RuntimeError("the profiling worker kept failing")


def _assemble(result: dict, failed: dict[int, str], peaks: Peaks | None, workers: int) -> Profile:
    out, failures = [], []
    for k, st in enumerate(result["statements"]):
        error = failed.get(k) or st["error"]
        if error:
            failures.append(f"{st['node_id']}: {error}")
        samples = Samples.of(st["samples_ns"]) if not error else None
        out.append(KernelTiming(st["node_id"], st["label"], st["kind"], samples, st["bytes"], st["flops"],
                                peaks.bandwidth if peaks else 0.0, peaks.flops if peaks else 0.0, error,
                                {"start_ns": st["start_ns"], "samples_ns": st["samples_ns"],
                                 "schedule": st.get("schedule", "")}))
    return Profile(out, Samples.of(result["step_ns"]), result["threads"], peaks, failures, workers,
                   list(result["step_ns"]), list(result.get("full_ns", ())), list(result.get("kernels_off_ns", ())))


@dataclass(frozen=True)
class ABResult:
    a: Samples
    b: Samples
    ratio: float             # median(a) / median(b): > 1 means b is faster
    pair_spread: float       # (max - min) / median of the per-pair ratios
    threads: dict


def ab_ratio(a: Graph, b: Graph, feeds: Mapping[str, np.ndarray], *, reps: int = 10, warmup: int = 2,
             threads: int | None = None, timeout: float = 600.0, cancel: Cancel | None = None) -> ABResult:
    """Paired A/B: whole steps of ``a`` and ``b`` alternately in one worker."""
    threads = threads or thread_control.default_threads()
    with tempfile.TemporaryDirectory(prefix="dcstudio-ab-") as tmp:
        work = Path(tmp)
        write_graph(a, feeds, work / "a")
        write_graph(b, {k: v for k, v in feeds.items() if k in b.inputs}, work / "b")
        job = {"ab": [str(work / "a"), str(work / "b")], "progress": str(work / "progress"), "reps": reps,
               "warmup": warmup, "threads": threads}
        result, failure, _ = _run_worker(job, work, threads, timeout, cancel=cancel)
    if result is None:
        raise RuntimeError(f"A/B worker failed: {failure}")
    sa, sb = Samples.of(result["a_ns"]), Samples.of(result["b_ns"])
    return ABResult(sa, sb, sa.median_s / sb.median_s, pair_spread(result["a_ns"], result["b_ns"]), result["threads"])
