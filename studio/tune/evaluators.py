"""Where evaluations run: in this process (``LocalEvaluator``) or as Dask tasks (``DaskEvaluator``), and the
finalists' paired timings (``measure_pair`` on the CPU; ``studio.tune.gpu`` on a GPU)."""
from __future__ import annotations

from typing import Callable, Sequence

from studio.tune.evaluate import applied, evaluate
from studio.tune.types import Candidate, Measured, ModelRef, Score


class LocalEvaluator:
    """Evaluations in this process, in order (``workers=1``; also what tests use)."""

    name = "in this process"

    def __call__(self, model: ModelRef, candidates: Sequence[Candidate], objective: str, transfer: bool,
                 peaks, on_result: Callable[[int, Score], None]) -> None:
        for i, c in enumerate(candidates):
            on_result(i, evaluate(model, c, objective, transfer, peaks))

    def measure(self, fn, *args):
        return fn(*args)

    def close(self) -> None:
        pass


class DaskEvaluator:
    """Evaluations as Dask tasks: an embedded ``LocalCluster`` of ``workers`` processes (one thread
    each, every worker with a ``measure=1`` resource for timing tasks), or the scheduler at
    ``address``. Results come back as they finish; ``on_result`` gets each with its index."""

    def __init__(self, workers: int = 2, address: str | None = None) -> None:
        from distributed import Client, LocalCluster
        if address:
            self.client, self.cluster = Client(address, timeout="30s"), None
            self.name = f"Dask scheduler {address}"
        else:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=":0", resources={"measure": 1}, silence_logs=40)
            self.client = Client(self.cluster)
            self.name = f"embedded Dask LocalCluster, {workers} workers"

    def __call__(self, model: ModelRef, candidates: Sequence[Candidate], objective: str, transfer: bool,
                 peaks, on_result: Callable[[int, Score], None]) -> None:
        from distributed import as_completed
        futures = [self.client.submit(evaluate, model, c, objective, transfer, peaks, pure=False)
                   for c in candidates]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                try:
                    score = fut.result()
                except Exception as e:  # noqa: BLE001 - a task that failed on every worker Dask tried
                    score = Score(float("inf"), 0, 0, "", 0.0, f"the task failed on the cluster: {e}"[:500])
                on_result(index[fut.key], score)
        finally:
            for f in futures:
                f.cancel()

    def measure(self, fn, *args):
        """A timing task: on a worker holding the ``measure`` resource (one per machine), alone."""
        return self.client.submit(fn, *args, resources={"measure": 1}, pure=False).result()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


# --------------------------------------------------------------------------- measuring finalists

def measure_pair(model: ModelRef, baseline: Candidate, candidate: Candidate, transfer: bool, reps: int,
                 threads: int | None) -> Measured:
    """Both sequences' whole steps on the CPU backend, alternately, on recorded (deterministic) inputs."""
    from codegen.numpy_ref.feeds import feeds_for
    from codegen.timing.profiler import ab_ratio
    a = applied(model, baseline, transfer).graph
    b = applied(model, candidate, transfer).graph
    r = ab_ratio(a, b, feeds_for(a), reps=reps, warmup=2, threads=threads)
    used = int(r.threads.get("numba_threads") or r.threads.get("blas_threads") or threads or 0)
    return Measured(candidate.key, r.a.median_s * 1e3, r.b.median_s * 1e3, r.ratio, r.pair_spread, used)


def measurer(backend: str):
    if backend == "cuda":
        from studio.tune.gpu import measure_pair_cuda
        return measure_pair_cuda
    return measure_pair
