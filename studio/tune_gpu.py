"""``dcstudio tune --backend cuda``: the finalists timed as exported CUDA steps on this machine's GPU.

``measure_pair_cuda`` exports the hand recipe's graph and a candidate's as CUDA packages (``export_pair``:
one oracle of the ORIGINAL model for both, so each package's check compares with the original), then
runs ``python -m studio.tune_gpu ab DIR REPS BLOCK`` in a fresh process. There each package:

- becomes a ``Model(recycle_outputs=True)``, whose step is captured as one CUDA graph on its second use of
  an output set, and is warmed up;
- is checked on the device against the original model's outputs (the package's own ``--check``
  comparison, with its derived tolerances) on a replayed graph: a candidate that fails is never timed or
  chosen (ratio 0), and a recipe that fails stops the measurement with the check's report;
- after at least ``WARM_S`` of steps of both (clocks up), is timed in blocks of ``BLOCK`` steps, the two
  packages alternately (the order flips every round), by the host clock around device-synchronized
  blocks: what a training loop sees, the input copies and the graph launch included.

``gpu_peaks`` measures the roofline's two ceilings on the device, in a fresh process too (a 512 MiB
device-to-device copy, counting bytes read and written, and a 4096³ float32 cuBLAS GEMM, each the median
of repeated runs on random data), so that ``--objective time`` ranks candidates by the GPU's balance of
bandwidth and arithmetic, not the CPU's. ``device_problem`` says why none of this can run here.

The measurements run in child processes: this process only asks CuPy whether a device exists, so the
search's own workers and the final CPU check keep the machine as they found it.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ir.errors import StudioError

RECIPE, CANDIDATE = "dcs_tune_recipe", "dcs_tune_candidate"
BLOCK = 10              # steps per timed block (a CUDA-graph step of BERT-base is ~2 ms)
WARMUP = 4              # steps per package before its check: both output sets used, then captured
WARM_S = 1.0            # then both packages alternately for at least this long: clocks up before timing
RESULT = "DCSTUDIO-RESULT "


def device_problem() -> str | None:
    """Why the CUDA backend cannot be timed here (no CuPy, no device), or None."""
    from codegen.cupy_cuda.profile import device_reason
    return device_reason()


def ready(objective: str):
    """Before a search whose finalists are timed on the GPU: the GPU's ``Peaks`` for the time objective
    (None for bytes), or StudioError saying why this machine cannot time them."""
    problem = device_problem()
    if problem:
        raise StudioError(f"{problem}. The finalists' CUDA steps can only be timed on a machine with a CUDA "
                          "device and CuPy")
    return gpu_peaks() if objective == "time" else None


def _child(args: list[str], timeout: float) -> dict:
    """Run ``python -m studio.tune_gpu ARGS`` and return its result (StudioError with its output's
    tail when it fails)."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        proc = subprocess.run([sys.executable, "-m", "studio.tune_gpu", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise StudioError(f"the GPU measurement ({args[0]}) ran over {timeout:.0f} s and was stopped") from e
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stdout[-1500:] + proc.stderr[-1500:]).strip()
        raise StudioError(f"the GPU measurement ({args[0]}) failed with exit code {proc.returncode}: {tail}")
    return json.loads(line[len(RESULT):])


def gpu_peaks(timeout: float = 300.0):
    """``codegen.timing.calibrate.Peaks`` of this machine's GPU (``threads`` 0: not a CPU figure)."""
    from codegen.timing.calibrate import Peaks
    r = _child(["peaks"], timeout)
    return Peaks(r["bandwidth"], r["flops"], 0, r["fingerprint"], time.time(), 0.0, r["spread"])


def export_pair(model, baseline, candidate, transfer: bool, work: Path) -> tuple[Path, Path]:
    """The recipe's and ``candidate``'s graphs as CUDA packages ``work/RECIPE`` and ``work/CANDIDATE``,
    both checked against one oracle of the original model (made once, on the recipe's session)."""
    from studio.tune import applied
    recipe = applied(model, baseline, transfer)
    other = applied(model, candidate, transfer)
    oracle = recipe.oracle()
    recipe.export(work / RECIPE, "cuda", oracle=oracle)
    other.export(work / CANDIDATE, "cuda", oracle=oracle)
    return work / RECIPE, work / CANDIDATE


def measure_pair_cuda(model, baseline, candidate, transfer: bool, reps: int, threads: int | None = None):
    """``studio.tune.Measured`` of ``candidate``'s exported CUDA step against the recipe's (``threads`` is
    the CPU measurement's argument and is not used)."""
    from codegen.timing.stats import pair_spread
    from studio.tune import Measured
    with tempfile.TemporaryDirectory(prefix="dcstudio-tune-gpu-") as tmp:
        export_pair(model, baseline, candidate, transfer, Path(tmp))
        r = _child(["ab", tmp, str(reps), str(BLOCK)], timeout=600.0)
    a, b = r["a_ns"], r["b_ns"]
    recipe_ms = statistics.median(a) * 1e-6
    if not r["checks"][1]["ok"]:
        return Measured(candidate.key, recipe_ms, float("inf"), 0.0, 0.0, 0, r["device"],
                        f"its check against the original model failed on the GPU: {r['checks'][1]['report']}")
    cand_ms = statistics.median(b) * 1e-6
    return Measured(candidate.key, recipe_ms, cand_ms, recipe_ms / cand_ms, pair_spread(a, b), 0, r["device"])


# --------------------------------------------------------------------------- the child process (on the GPU)

def _device_name(cp) -> str:
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _median_time(cp, fn, reps: int = 10) -> tuple[float, float]:
    """(median seconds, median / best - 1) of ``fn`` between CUDA events, after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    med = statistics.median(times)
    return med, med / min(times) - 1.0


def _peaks_child() -> dict:
    import cupy as cp
    rng = cp.random.default_rng(0)
    x = rng.standard_normal(1 << 27, dtype=cp.float32)          # 512 MiB, random: never time zeros
    y = cp.empty_like(x)
    copy_s, copy_spread = _median_time(cp, lambda: cp.copyto(y, x))
    n = 4096
    a, b = rng.standard_normal((n, n), dtype=cp.float32), rng.standard_normal((n, n), dtype=cp.float32)
    c = cp.empty((n, n), cp.float32)
    gemm_s, gemm_spread = _median_time(cp, lambda: cp.matmul(a, b, out=c))
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    fingerprint = (f"cuda:{_device_name(cp)}:sm{props['major']}{props['minor']}:{props['totalGlobalMem'] >> 20}MiB:"
                   f"driver{cp.cuda.runtime.driverGetVersion()}")
    return {"bandwidth": 2 * x.nbytes / copy_s, "flops": 2 * n ** 3 / gemm_s, "fingerprint": fingerprint,
            "spread": max(copy_spread, gemm_spread)}


def _load_side(cp, work: Path, name: str) -> dict:
    import numpy as np
    pkg = importlib.import_module(name)
    main = importlib.import_module(f"{name}.__main__")
    with np.load(work / name / "check.npz") as f:
        data = {k: f[k] for k in f.files}
    model = pkg.Model(recycle_outputs=True)
    feeds = {k: cp.asarray(v) for k, v in main._inputs(data).items()}
    for _ in range(WARMUP):
        model.step(**feeds)
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        ok = bool(main.check(model, data))          # a replayed graph, against the original's truth
    lines = [ln for ln in report.getvalue().splitlines() if ln.startswith("FAIL") or "outputs match" in ln]
    notes = importlib.import_module(f"{name}.model").L.GRAPH_NOTES
    return {"model": model, "feeds": feeds, "ok": ok, "report": " | ".join(lines[:4])[:600],
            "graph": "; ".join(map(str, notes))[:300] or "captured"}


def _ab_child(work: Path, reps: int, block: int) -> dict:
    import cupy as cp
    sys.path.insert(0, str(work))
    sides = [_load_side(cp, work, RECIPE), _load_side(cp, work, CANDIDATE)]
    if not sides[0]["ok"]:
        raise SystemExit(f"the hand recipe's CUDA package fails its check on this GPU: {sides[0]['report']}")
    times: list[list[float]] = [[], []]
    timed = [k for k, s in enumerate(sides) if s["ok"]]
    end = time.perf_counter() + WARM_S
    while time.perf_counter() < end:
        for k in timed:
            sides[k]["model"].step(**sides[k]["feeds"])
        cp.cuda.runtime.deviceSynchronize()
    for rnd in range(reps):
        for k in (timed if rnd % 2 == 0 else timed[::-1]):
            model, feeds = sides[k]["model"], sides[k]["feeds"]
            cp.cuda.runtime.deviceSynchronize()
            t = time.perf_counter_ns()
            for _ in range(block):
                model.step(**feeds)
            cp.cuda.runtime.deviceSynchronize()
            times[k].append((time.perf_counter_ns() - t) / block)
    return {"device": _device_name(cp), "a_ns": times[0], "b_ns": times[1],
            "checks": [{"ok": s["ok"], "report": s["report"], "graph": s["graph"]} for s in sides]}


def main(argv: list[str]) -> int:
    if argv[:1] == ["peaks"]:
        result = _peaks_child()
    elif argv[:1] == ["ab"] and len(argv) == 4:
        result = _ab_child(Path(argv[1]), int(argv[2]), int(argv[3]))
    else:
        sys.stderr.write("usage: python -m studio.tune_gpu peaks | ab DIR REPS BLOCK\n")
        return 2
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
