"""Timings on the GPU for ``dcstudio tune --backend cuda`` (``studio.tune.gpu``), run as a child process:

- ``python -m codegen.cupy_cuda.ab peaks``: the roofline's two ceilings of this device, a 512 MiB
  device-to-device copy (bytes read and written) and a 4096³ float32 cuBLAS GEMM, each the median of
  repeated runs on random data;
- ``python -m codegen.cupy_cuda.ab ab DIR REPS BLOCK A B``: the exported CUDA packages ``DIR/A`` (the
  baseline) and ``DIR/B``. Each becomes a ``Model(recycle_outputs=True)`` (captured as one CUDA graph on
  its second use of an output set), is warmed up, and is checked on the device against the original
  model's outputs stored in its ``check.npz`` (the package's own ``--check`` comparison) on a replayed
  graph. A package that fails is not timed; a baseline that fails ends the run with the check's report.
  Then, after at least ``WARM_S`` of steps of both (clocks up), blocks of ``BLOCK`` steps are timed
  alternately, the order flipping every round, by the host clock around device-synchronized blocks: what a
  training loop sees, the input copies and the graph launch included.

Each prints one line, ``DCSTUDIO-RESULT`` and a JSON object. CuPy and the packages are imported only here,
in the child, so the process that drives a search never holds the device.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import statistics
import sys
import time
from pathlib import Path

RESULT = "DCSTUDIO-RESULT "
WARMUP = 4              # steps per package before its check: both output sets used, then captured
WARM_S = 1.0            # then both packages alternately for at least this long: clocks up before timing


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
    cli = importlib.import_module(f"{name}._cli")
    with np.load(work / name / "check.npz") as f:
        data = {k: f[k] for k in f.files}
    model = pkg.Model(recycle_outputs=True)
    feeds = {k: cp.asarray(v) for k, v in cli._check_inputs(data, pkg.INPUTS).items()}
    for _ in range(WARMUP):
        model.step(**feeds)
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        ok = bool(cli.check(model, data, pkg.INPUTS, pkg.OUTPUTS))   # a replayed graph, against the original
    lines = [ln for ln in report.getvalue().splitlines() if ln.startswith("FAIL") or "outputs match" in ln]
    notes = importlib.import_module(f"{name}.model").L.GRAPH_NOTES
    return {"model": model, "feeds": feeds, "ok": ok, "report": " | ".join(lines[:4])[:600],
            "graph": "; ".join(map(str, notes))[:300] or "captured"}


def _ab_child(work: Path, reps: int, block: int, names: list[str]) -> dict:
    import cupy as cp
    sys.path.insert(0, str(work))
    sides = [_load_side(cp, work, name) for name in names]
    if not sides[0]["ok"]:
        raise SystemExit(f"the baseline's CUDA package ({names[0]}) fails its check on this GPU: {sides[0]['report']}")
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
    elif argv[:1] == ["ab"] and len(argv) == 6:
        result = _ab_child(Path(argv[1]), int(argv[2]), int(argv[3]), argv[4:])
    else:
        sys.stderr.write("usage: python -m codegen.cupy_cuda.ab peaks | ab DIR REPS BLOCK PACKAGE_A PACKAGE_B\n")
        return 2
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
