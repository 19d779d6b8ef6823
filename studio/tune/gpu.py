"""``dcstudio tune --backend cuda``: the finalists timed as exported CUDA steps on this machine's GPU.

``measure_pair_cuda`` exports the hand recipe's graph and a candidate's as CUDA packages (``export_pair``:
one oracle of the ORIGINAL model for both, so each package's check compares with the original; the recipe's
package and the oracle are made once per process, ``recipe_package``, and every finalist reuses them), then
times them in a fresh process, ``python -m codegen.cupy_cuda.ab``: each package is checked there on the
device against the original model first (a candidate that fails is never timed or chosen: ratio 0 and a
note; a recipe that fails stops the measurement with the check's report), then both run as captured CUDA
graphs, warmed up, in blocks of ``BLOCK`` steps alternately (``codegen/cupy_cuda/ab.py`` says how).

``gpu_peaks`` measures the roofline's two ceilings on the device, in a fresh process too (a device copy and
a float32 cuBLAS GEMM), so that ``--objective time`` ranks candidates by the GPU's balance of bandwidth and
arithmetic, not the CPU's. ``ready`` is the check before a search (``device_problem`` says why none of
this can run here). The measurements run in child processes: this process only asks CuPy whether a
device exists, so the search's own workers and the final CPU check keep the machine as they found it.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ir.errors import StudioError

RECIPE, CANDIDATE = "dcs_tune_recipe", "dcs_tune_candidate"
BLOCK = 10              # steps per timed block (a CUDA-graph step of BERT-base is ~2 ms)


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
    """Run ``python -m codegen.cupy_cuda.ab ARGS`` and return its result (StudioError with its output's
    tail when it fails)."""
    from codegen.cupy_cuda.ab import RESULT
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        proc = subprocess.run([sys.executable, "-m", "codegen.cupy_cuda.ab", *args], capture_output=True, text=True,
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


_RECIPE: dict = {}           # this process's ("entry": (key, TemporaryDirectory, oracle)), see recipe_package
_RECIPE_LOCK = threading.Lock()


def recipe_package(model, baseline, transfer: bool) -> tuple[Path, object]:
    """The hand recipe's CUDA package and the original model's oracle, made once per process and reused
    by every finalist timed against the same recipe of the same model file (its path, size and
    modification time): the oracle alone (a float64 run of the original model) took 8.1 s of the 9.4 s
    that exporting a pair took on the bundled BERT-base example, so without the cache every finalist
    paid it again. One entry: a search has one baseline, and a new one replaces (and deletes) the old.
    A failed export leaves no folder behind."""
    from studio.tune.evaluate import applied
    st = os.stat(model.path)
    key = (model, st.st_size, st.st_mtime_ns, baseline.key, transfer)
    with _RECIPE_LOCK:
        entry = _RECIPE.get("entry")
        if entry is None or entry[0] != key:
            if entry is not None:
                del _RECIPE["entry"]
                entry[1].cleanup()
            tmp = tempfile.TemporaryDirectory(prefix="dcstudio-tune-recipe-")
            try:
                recipe = applied(model, baseline, transfer)
                oracle = recipe.oracle()
                recipe.export(Path(tmp.name) / RECIPE, "cuda", oracle=oracle)
            except BaseException:
                tmp.cleanup()
                raise
            entry = _RECIPE["entry"] = (key, tmp, oracle)
        return Path(entry[1].name) / RECIPE, entry[2]


def export_pair(model, baseline, candidate, transfer: bool, work: Path) -> tuple[Path, Path]:
    """The recipe's and ``candidate``'s graphs as CUDA packages ``work/RECIPE`` and ``work/CANDIDATE``,
    both checked against one oracle of the original model. The recipe's package is this process's
    (``recipe_package``), linked into ``work`` (copied where links cannot be made); only the candidate is
    exported each time."""
    from studio.tune.evaluate import applied
    made, oracle = recipe_package(model, baseline, transfer)
    try:
        (work / RECIPE).symlink_to(made, target_is_directory=True)
    except OSError:
        shutil.copytree(made, work / RECIPE)
    applied(model, candidate, transfer).export(work / CANDIDATE, "cuda", oracle=oracle)
    return work / RECIPE, work / CANDIDATE


def measure_pair_cuda(model, baseline, candidate, transfer: bool, reps: int, threads: int | None = None):
    """``studio.tune.types.Measured`` of ``candidate``'s exported CUDA step against the recipe's (``threads`` is
    the CPU measurement's argument and is not used)."""
    from codegen.timing.stats import pair_spread
    from studio.tune.types import Measured
    with tempfile.TemporaryDirectory(prefix="dcstudio-tune-gpu-") as tmp:
        export_pair(model, baseline, candidate, transfer, Path(tmp))
        r = _child(["ab", tmp, str(reps), str(BLOCK), RECIPE, CANDIDATE], timeout=600.0)
    a, b = r["a_ns"], r["b_ns"]
    recipe_ms = statistics.median(a) * 1e-6
    if not r["checks"][1]["ok"]:
        return Measured(candidate.key, recipe_ms, float("inf"), 0.0, 0.0, 0, r["device"],
                        f"its check against the original model failed on the GPU: {r['checks'][1]['report']}")
    cand_ms = statistics.median(b) * 1e-6
    return Measured(candidate.key, recipe_ms, cand_ms, recipe_ms / cand_ms, pair_spread(a, b), 0, r["device"])
