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


_CHILD = r"""
import json, sys, warnings
import numpy as np
sys.path.insert(0, sys.argv[1])
sys.path.append(sys.argv[5])
pkg = __import__(sys.argv[2])
with np.load(sys.argv[3]) as f:
    feeds = {k: f[k] for k in f.files}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = pkg.Model(recycle_outputs=True, threads=int(sys.argv[4]))
info = model.threads or {}
print(f"ready numba {info.get('numba')} blas {info.get('blas')}" + "".join(f"; {w.message}" for w in caught), flush=True)
for line in sys.stdin:
    if line.strip() == "gemms":
        from tests.bench.gemm_rates import in_step_rates
        print("done " + json.dumps(in_step_rates(model, pkg.model.L, feeds)), flush=True)
        continue
    model.step(**feeds)
    print("done", flush=True)
"""


class PackageStep:
    """An exported package's step in a process of its own, as a training loop that imports only the package
    runs it: ``step()`` asks the process for one step and waits for it (a pipe round trip, ~0.1 ms, counted).
    In the benchmark's process torch has loaded its own GNU OpenMP before numba starts, and numba's
    ``prange`` loops would run on it with its default spin (``library.SPINNING``: one thread then)."""

    def __init__(self, package_dir: str | Path, feeds: Mapping[str, np.ndarray], n_threads: int, scratch: Path):
        import subprocess
        import sys
        package_dir = Path(package_dir)
        scratch.mkdir(parents=True, exist_ok=True)
        inputs = scratch / f"{package_dir.name}_feeds.npz"
        np.savez(inputs, **feeds)
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(package_dir.parent), package_dir.name,
                                      str(inputs), str(n_threads), str(Path(__file__).resolve().parents[2])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.info = self._reply("ready")
        self()                                   # the first step faults its buffers in

    def _reply(self, want: str) -> str:
        line = self.proc.stdout.readline()
        if not line.startswith(want):
            self.close()
            raise RuntimeError(f"package step process: expected {want!r}, got {line!r} (exit {self.proc.poll()})")
        return line[len(want):].strip()

    def __call__(self) -> None:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        self._reply("done")

    def gemm_rates(self) -> dict:
        """``gemm_rates.in_step_rates`` of one step, measured in this process of the package's own."""
        import json
        self.proc.stdin.write("gemms\n")
        self.proc.stdin.flush()
        return json.loads(self._reply("done"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
