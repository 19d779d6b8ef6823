"""The profiling worker: ``python -m codegen.timing.worker JOB.json`` (run by ``profiler``).

It loads the graph (IR JSON + arrays in ``.npz``; for a selection, the parent's ``cutout``),
pins its threads, compiles the graph for the CPU backend with the instrumented step
(``instrument``), runs one untimed step (compiling kernels), then ``warmup`` + ``reps`` timed
steps, and prints one JSON result:
per statement the durations, the last start time, an error if it raised; and the total
per step. ``job["ab"]`` instead alternates full steps of two graphs (paired A/B).
Progress goes to the shared ``progress`` file (``P[0]`` = statement running, ``P[1]`` a
heartbeat, ``P[2]`` = statements per step, ``P[3]`` = step running), which the parent
watches to kill a worker stuck in one kernel and to report progress.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np

PROGRESS_SLOTS = 4


def _load(stem: Path):
    """The graph and feeds written by ``profiler.write_graph`` (arrays by position: names may be anything)."""
    from ir.serialize import loads
    graph = loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    names = json.loads(stem.with_suffix(".names.json").read_text(encoding="utf-8"))
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as f:
        graph.values.update({name: f[f"v{k}"] for k, name in enumerate(names["values"])})
        feeds = {name: f[f"f{k}"] for k, name in enumerate(names["feeds"])}
    return graph, feeds


def _profile(job: dict) -> dict:
    from codegen.numba_cpu.runner import CompiledGraph
    from codegen.timing.instrument import timed_step
    from ir.movement import kernel_estimate
    graph, feeds = _load(Path(job["graph"]))
    cg = CompiledGraph(graph, threads=job["threads"], extra=timed_step)
    progress = np.memmap(job["progress"], dtype=np.int64, mode="r+", shape=(PROGRESS_SLOTS,))
    model, mod = cg.model, cg.module
    args = model._args(feeds)
    pool = model._pool("step", mod._SLOTS)
    outs = model._pool("step-out", mod._OUT_SLOTS)     # outputs in reused buffers too: no page faults
    n = len(cg.program.statements)
    progress[2] = n
    skip = set(job.get("skip", ()))
    steps, times, starts, errors = [], [[] for _ in range(n)], [0] * n, {}
    for rep in range(1 + job["warmup"] + job["reps"]):     # one compiling step, warm-up, timed reps
        if rep == 1 + job["warmup"]:
            times = [[] for _ in range(n)]
        progress[3] = rep
        t0 = time.perf_counter_ns()
        mod._step_timed(model.weights, pool, outs, times, starts, progress, skip, errors, *args)
        if rep > job["warmup"]:
            steps.append(time.perf_counter_ns() - t0)
    full_ns, off_ns = _kernels_off(mod, model, pool, outs, progress, skip, args, n, job["reps"]) \
        if job.get("kernels_off") else ([], [])
    out = []
    for k, st in enumerate(cg.program.statements):
        node = cg.graph.nodes[st.node_id]
        est = kernel_estimate(cg.graph, node)
        kernel = cg.program.kernels.get(st.kernel) if st.kernel else None
        out.append({"node_id": st.node_id, "label": st.label, "kind": st.kind, "samples_ns": times[k],
                    "start_ns": starts[k], "error": errors.get(k), "bytes": est.bytes, "flops": est.flops,
                    "schedule": kernel.schedule if kernel is not None else ""})
    from codegen.numba_cpu.threads import current
    return {"statements": out, "step_ns": steps, "threads": current().to_json(), "full_ns": full_ns,
            "kernels_off_ns": off_ns}


def _kernels_off(mod, model, pool, outs, progress, skip, args, n: int, reps: int) -> tuple[list, list]:
    """``reps`` pairs of steps, alternately in either order: the whole step, and the step with every generated
    kernel (``K.k_*``) a no-op — what is left is BLAS, library calls and what runs between statements. The
    buffers keep the values the whole steps leave, so BLAS reads realistic numbers."""
    real = {name: fn for name, fn in vars(mod.K).items() if name.startswith("k_")}

    def noop(*a, **k):
        return None
    times: list = [[] for _ in range(n)]
    starts, errors, full, off = [0] * n, {}, [], []
    try:
        for rep in range(reps):
            for kernels_on in ((True, False) if rep % 2 == 0 else (False, True)):
                for name in real:
                    setattr(mod.K, name, real[name] if kernels_on else noop)
                t0 = time.perf_counter_ns()
                mod._step_timed(model.weights, pool, outs, times, starts, progress, skip, errors, *args)
                (full if kernels_on else off).append(time.perf_counter_ns() - t0)
    finally:
        for name, fn in real.items():
            setattr(mod.K, name, fn)
    return full, off


def _ab(job: dict) -> dict:
    from codegen.numba_cpu.runner import CompiledGraph
    runs = []
    for stem in job["ab"]:
        graph, feeds = _load(Path(stem))
        cg = CompiledGraph(graph, threads=job["threads"])
        cg.run(feeds)
        runs.append((cg, feeds))
    times = [[], []]
    for _ in range(job["warmup"] + job["reps"]):
        for side, (cg, feeds) in enumerate(runs):
            t0 = time.perf_counter_ns()
            cg.run(feeds)
            times[side].append(time.perf_counter_ns() - t0)
    w = job["warmup"]
    from codegen.numba_cpu.threads import current
    return {"a_ns": times[0][w:], "b_ns": times[1][w:], "threads": current().to_json()}


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    for name in job.get("plugins", ()):
        importlib.import_module(name)
    result = _ab(job) if job.get("ab") else _profile(job)
    sys.stdout.write("DCSTUDIO-RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
