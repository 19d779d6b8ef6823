"""What the whole-step benchmarks share: onnxruntime running a training graph on a given number of
threads (all graph optimizations on, one inter-op thread), and medians of steps run interleaved."""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, Mapping

import numpy as np


def ort_step(path: str | Path, feeds: Mapping[str, np.ndarray], n_threads: int) -> Callable[[], object]:
    """One onnxruntime step of the model at ``path`` on ``feeds`` (run once here, to warm up)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = n_threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
    sess.run(None, ort_feeds)
    return lambda: sess.run(None, ort_feeds)


def interleaved_medians(runs: Mapping[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Seconds per call of each run: ``reps`` rounds that call every run once, in order; the median."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}
