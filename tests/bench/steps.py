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


BLOCK = 3
"""Steps each engine runs in a row per round; the first of each block is not counted. Every engine's
threads keep spinning after a call (OpenBLAS 2^28 cycles, about 0.1 s; Intel OpenMP's KMP_BLOCKTIME
0.2 s; onnxruntime's intra-op pool), and in one process they take the cores from the next engine's
call: measured here, one step each in turn, onnxruntime's step took 310 ms after dcstudio's and 245 ms
when OpenBLAS stopped spinning. A block measures each engine as a training loop runs it, back to back."""


def interleaved_medians(runs: Mapping[str, Callable[[], object]], reps: int, block: int = BLOCK
                        ) -> dict[str, float]:
    """Seconds per call of each run: ``reps`` rounds that run every engine ``block`` times in a row, in
    order, timing all but the first call of each block; the median."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            fn()
            for _ in range(block - 1):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}
