"""The CUDA sweep on a lent GPU: ``python3 -m tests.bench.gpu.lease KIT OUT [--phases …] [--cases …]``.

Run on the device machine (``README.md`` beside this file says how) over a kit built here by
``kit.py``. Phases, in order; each writes what it found under OUT as it goes:

- ``tests``: the GPU tests that skip on CPU-only machines (and the rest of the CUDA test files)
  in a pytest process started first, running beside the sweep (``pytest.txt``);
- ``sweep``: every case of the kit exported with ``dcstudio export --backend cuda`` (weights
  rebuilt from the skeleton) and checked by the package's own ``python -m PKG --check`` on the
  GPU against the rebuilt original model, in parallel processes (``sweep.jsonl``); then the zoo's
  and the BERT-base step timed one process at a time, the GPU to itself (``steps_alone.json``);
- ``bert``: the BERT-base layer training step after the recipe: each of its kernels timed with
  CUDA events over a captured graph of repeated launches against a same-run device-to-device copy
  of the same bytes, then the whole step (plain and as a captured CUDA graph) against PyTorch
  eager and ``torch.compile`` on the same GPU, interleaved (``bert.json``);
- ``variants``: that step's row kernels printed with one launch-shape knob changed at a time and
  timed the same way (``variants.py``, ``variants.json``);
- ``stacking``: the BERT-base layer's Q/K/V GEMMs as the recipe runs them (three calls per family) against
  one stacked GEMM each (``stacking.py``): what a stacking transformation could save, before building it;
- ``tune``: ``dcstudio tune --objective time --backend cuda`` on the bundled example (BERT-base layer),
  its finalists timed on the GPU against the hand recipe's step (``tune.log``, ``tuned.json``).

The last lines printed are a short table (the tool returns the end of the output).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from tests.bench.gpu.kit import rebuild

REPO = Path(__file__).resolve().parents[3]
CUDA_TESTS = ["tests/unit/codegen/test_cuda_compile.py", "tests/unit/codegen/test_cuda_library.py",
              "tests/unit/codegen/test_cuda_reductions.py", "tests/unit/codegen/test_cuda_convolution.py",
              "tests/unit/codegen/test_cuda_device_ops.py",
              "tests/unit/codegen/test_wcr_kinds.py", "tests/unit/studio/test_tune_gpu.py"]
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def sweep_one(kit: str, row: dict, work: str) -> dict:
    """Export one case for CUDA and run its package's --check (a fresh process, on the GPU)."""
    from studio.cli import main as cli
    kit_p, work_p = Path(kit), Path(work)
    res = {"case": row["case"], "ok": False}
    t = time.perf_counter()
    try:
        model = rebuild(kit_p, row, work_p)
        got = hashlib.sha256(model.read_bytes()).hexdigest()
        if got != row["sha256"]:
            res["stage"] = f"rebuilt model sha256 {got[:12]} != {row['sha256'][:12]} (the kit's)"
        pkg = work_p / f"pkg_{row['case']}"
        args = ["export", str(model)] + ([str(kit_p / row["history"])] if row["history"] else [])
        args += ["-o", str(pkg), "--backend", "cuda"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            code = cli(args)
        res["export_s"] = round(time.perf_counter() - t, 2)
        res["export"] = buf.getvalue()[-1500:]
        if code != 0:
            res["stage"] = f"export exit {code}"
            return res
        t = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run([sys.executable, "-m", pkg.name, "--check", "--time", "5"], cwd=work_p, env=env,
                              capture_output=True, text=True, timeout=400)
        res["check_s"] = round(time.perf_counter() - t, 2)
        res["check"] = (proc.stdout[-2500:] + proc.stderr[-2500:])
        res["ok"] = proc.returncode == 0
        res["stage"] = "check" if res["ok"] else f"check exit {proc.returncode}"
        lines = [ln for ln in proc.stdout.splitlines() if "outputs match" in ln or ln.startswith("step:")]
        res["summary"] = " | ".join(lines)
        res["fails"] = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL")][:5]
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", GRAPH_CHECK.format(pkg=pkg.name)], cwd=work_p, env=env,
                              capture_output=True, text=True, timeout=300)
        res["graph_s"] = round(time.perf_counter() - t, 2)
        res["graph"] = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAIL", "graph", "step"))][:6]
        res["graph"] += [proc.stderr[-600:]] if proc.returncode else []
        res["graph_ok"] = proc.returncode == 0
        res["ok"] = res["ok"] and res["graph_ok"]
    except Exception as exc:  # noqa: BLE001 - one case's failure is a row of the report
        res["stage"] = f"{type(exc).__name__}: {exc}"[:300]
        res["trace"] = traceback.format_exc()[-2500:]
    return res


GRAPH_CHECK = """
import numpy as np, os, time, cupy as cp
from {pkg}._cli import check, _check_inputs
from {pkg} import Model
from {pkg}.model import INPUTS, OUTPUTS, L
_inputs = lambda data: _check_inputs(data, INPUTS)
with np.load(os.path.join("{pkg}", "check.npz")) as f:
    data = {{k: f[k] for k in f.files}}
m = Model(recycle_outputs=True)
feeds = {{k: cp.asarray(v) for k, v in _inputs(data).items()}}
for _ in range(4):                        # warm both output sets, then capture each
    m.step(**feeds)
ok = check(m, data, INPUTS, OUTPUTS)     # a replayed graph, against the original's truth
print("graph notes:", L.GRAPH_NOTES or "captured")
ts = []
for _ in range(20):
    cp.cuda.runtime.deviceSynchronize(); t = time.perf_counter(); m.step(**feeds)
    cp.cuda.runtime.deviceSynchronize(); ts.append(time.perf_counter() - t)
print(f"step (graph, device inputs): median {{sorted(ts)[10] * 1e3:.3f}} ms")
raise SystemExit(0 if ok else 1)
"""


STEP_TIME = """
import cupy as cp, numpy as np, os, time
from {pkg}._cli import _check_inputs
from {pkg} import Model
from {pkg}.model import INPUTS, L
_inputs = lambda data: _check_inputs(data, INPUTS)
with np.load(os.path.join("{pkg}", "check.npz")) as f:
    data = {{k: f[k] for k in f.files}}
m = Model(recycle_outputs=True)
feeds = {{k: cp.asarray(v) for k, v in _inputs(data).items()}}
for _ in range(6):
    m.step(**feeds)
cp.cuda.runtime.deviceSynchronize()
ts = []
for _ in range(30):
    t = time.perf_counter(); m.step(**feeds); cp.cuda.runtime.deviceSynchronize(); ts.append(time.perf_counter() - t)
print(f"{{'graph' if not L.GRAPH_NOTES else 'kernels'}} {{sorted(ts)[15] * 1e3:.3f}} ms")
"""


def step_times(work: Path, results: list[dict], end: float) -> dict[str, str]:
    """The zoo's and the BERT-base step, one process after another with the GPU to itself (the
    sweep's own timings run 12 packages at once on one GPU)."""
    times = {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    for r in sorted(results, key=lambda r: r["case"]):
        if not r["ok"] or not (r["case"].startswith("zoo_") or r["case"] == "bert_base_layer_recipe"):
            continue
        if time.perf_counter() > end - 120:
            break
        proc = subprocess.run([sys.executable, "-c", STEP_TIME.format(pkg=f"pkg_{r['case']}")], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)
        times[r["case"]] = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() \
            else f"failed: {proc.stderr[-200:]}"
        log(f"step alone: {r['case']}: {times[r['case']]}")
    return times


def sweep(kit: Path, out: Path, work: Path, rows: list[dict], workers: int) -> list[dict]:
    import multiprocessing as mp
    results = []
    order = sorted(rows, key=lambda r: ("bert_base" not in r["case"], "zoo_" not in r["case"], r["case"]))
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool, \
            open(out / "sweep.jsonl", "a", encoding="utf-8") as f:
        futs = {pool.submit(sweep_one, str(kit), r, str(work)): r["case"] for r in order}
        for fut in as_completed(futs):
            try:
                res = fut.result()
            except Exception as exc:  # noqa: BLE001
                res = {"case": futs[fut], "ok": False, "stage": f"worker died: {exc}"}
            results.append(res)
            f.write(json.dumps(res) + "\n")
            f.flush()
            log(f"{'ok  ' if res['ok'] else 'FAIL'} {res['case']}: {res.get('stage')} "
                f"export {res.get('export_s', '-')} s check {res.get('check_s', '-')} s {res.get('summary', '')}")
    return results


# ---------------------------------------------------------------- BERT: kernels and the whole step

def _graph_time(cp, fn, launches: int = 20, reps: int = 5) -> float:
    """Seconds per call of ``fn`` (device work only): ``launches`` calls captured as one CUDA graph,
    replayed ``reps`` times between events, median."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        fn()
        s.synchronize()
        s.begin_capture()
        for _ in range(launches):
            fn()
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        times = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s)
            g.launch(s)
            b.record(s)
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) / 1e3 / launches)
    return statistics.median(times)


def _labels(model_py: Path) -> dict[str, str]:
    """kernel name -> the ``# node (Op)`` comment of the statement that calls it."""
    names: dict[str, str] = {}
    last = ""
    for line in model_py.read_text().splitlines():
        s = line.strip()
        if s.startswith("# ") and s.endswith(")"):
            last = s[2:]
        elif "K.k_" in s:
            k = s.split("K.", 1)[1].split("(", 1)[0]
            names.setdefault(k, last)
    return names


def kernels_vs_copy(cp, pkg_mod, model, dev: dict) -> list[dict]:
    """Each kernel of one step, timed alone on the arguments it had in the step, against a copy
    moving the same bytes (half read, half written) in the same run."""
    kmod = pkg_mod.model.K
    calls: list[tuple[str, tuple]] = []
    saved = {n: getattr(kmod, n) for n in dir(kmod) if n.startswith("k_")}

    def rec(name, fn):
        def call(*args):
            calls.append((name, args))
            return fn(*args)
        return call
    try:
        for n, fn in saved.items():
            setattr(kmod, n, rec(n, fn))
        model.step(**dev)
        cp.cuda.runtime.deviceSynchronize()
    finally:
        for n, fn in saved.items():
            setattr(kmod, n, fn)
    labels = _labels(Path(pkg_mod.__file__).with_name("model.py"))
    def moved(args):
        return sum(int(a.nbytes) for a in args if hasattr(a, "nbytes") and hasattr(a, "data"))
    largest: dict = {}          # per kernel, its call that moves the most (AdamW: the largest weight)
    for name, args in calls:
        if name not in largest or moved(args) > moved(largest[name]):
            largest[name] = args
    rows = []
    for name, args in largest.items():
        nbytes = moved(args)
        try:
            t = _graph_time(cp, lambda: saved[name](*args))
            src = cp.empty(max(nbytes // 2, 4), cp.uint8)
            dst = cp.empty_like(src)
            tc = _graph_time(cp, lambda: cp.copyto(dst, src))
            rows.append({"kernel": name, "label": labels.get(name, ""), "bytes": nbytes, "us": t * 1e6,
                         "gbs": nbytes / t / 1e9, "copy_gbs": 2 * src.nbytes / tc / 1e9,
                         "of_copy": (nbytes / t) / (2 * src.nbytes / tc)})
        except Exception as exc:  # noqa: BLE001
            rows.append({"kernel": name, "label": labels.get(name, ""), "error": f"{type(exc).__name__}: {exc}"})
    return rows


def bert(out: Path, work: Path, budget_end: float) -> dict:
    import cupy as cp
    import torch
    sys.path.insert(0, str(work))
    import importlib
    case = "bert_base_layer_recipe"
    pkg_mod = importlib.import_module(f"pkg_{case}")
    from importlib import import_module
    cli = import_module(f"pkg_{case}._cli")
    with np.load(Path(pkg_mod.__file__).with_name("check.npz")) as f:
        feeds = cli._check_inputs({k: f[k] for k in f.files}, pkg_mod.model.INPUTS)
    dev = {k: cp.asarray(v) for k, v in feeds.items()}
    doc: dict = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    lib = pkg_mod.model.L
    model, eager_model = pkg_mod.Model(recycle_outputs=True), pkg_mod.Model(recycle_outputs=True)

    def eager_step():
        lib.GRAPHS = False
        try:
            return eager_model.step(**dev)
        finally:
            lib.GRAPHS = True
    for _ in range(4):
        model.step(**dev)
        eager_step()
    cp.cuda.runtime.deviceSynchronize()
    log("bert: package warm")

    big = cp.empty(1 << 30, cp.uint8)
    big2 = cp.empty_like(big)
    tb = _graph_time(cp, lambda: cp.copyto(big2, big), launches=5, reps=5)
    doc["copy_1GiB_gbs"] = 2 * big.nbytes / tb / 1e9
    big = big2 = None
    lib.GRAPHS = False
    doc["kernels"] = kernels_vs_copy(cp, pkg_mod, eager_model, dev)
    lib.GRAPHS = True
    log(f"bert: {len(doc['kernels'])} kernels timed")

    runners: dict = {}
    runners["dcstudio_kernels"] = eager_step
    runners["dcstudio_graph"] = lambda: model.step(**dev)
    doc["graph"] = lib.GRAPH_NOTES or "captured"
    want = {k: cp.asnumpy(v) for k, v in eager_step().items()}
    got = {k: cp.asnumpy(v) for k, v in model.step(**dev).items()}
    doc["graph_vs_kernels_max_abs"] = max(float(np.abs(got[k].astype(np.float64) - want[k]).max(initial=0))
                                          for k in want)
    log(f"bert: graph {doc['graph']}, max |graph - kernel by kernel| {doc['graph_vs_kernels_max_abs']:.3g}")

    from tests.bench.test_bench_autodiff import bert_layer
    torch.backends.cuda.matmul.allow_tf32 = False      # CuPy's cuBLAS calls run plain fp32 too
    doc["versions"] = {"torch": torch.__version__, "cupy": cp.__version__, "numpy": np.__version__}
    torch.manual_seed(0)
    x = torch.from_numpy(feeds["input"]).cuda()
    y = torch.from_numpy(feeds["labels"]).cuda()
    layer = bert_layer().cuda().train()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)

    def eager():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(layer(x), y).backward()
        opt.step()
    runners["torch_eager"] = eager
    for mode in ("default", "reduce-overhead"):
        if time.perf_counter() > budget_end - 100:
            break
        clayer = bert_layer().cuda().train()
        copt = torch.optim.AdamW(clayer.parameters(), lr=1e-3)
        compiled = torch.compile(clayer, mode=mode)

        def comp(compiled=compiled, copt=copt):
            copt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(compiled(x), y).backward()
            copt.step()
        t = time.perf_counter()
        try:
            for _ in range(4):
                comp()
            torch.cuda.synchronize()
            runners[f"torch_compile_{mode}"] = comp
            doc[f"compile_s_{mode}"] = time.perf_counter() - t
        except Exception as exc:  # noqa: BLE001
            doc[f"torch_compile_{mode}"] = f"{type(exc).__name__}: {exc}"[:400]
        log(f"bert: torch.compile {mode} warm after {time.perf_counter() - t:.1f} s")
    for fn in runners.values():
        fn()
    cp.cuda.runtime.deviceSynchronize()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(15):
        for k, fn in runners.items():
            cp.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            for _ in range(10):
                fn()
            cp.cuda.runtime.deviceSynchronize()
            times[k].append((time.perf_counter() - t) / 10)
    doc["step_ms"] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    doc["step_ms_spread"] = {k: (min(v) * 1e3, max(v) * 1e3) for k, v in times.items()}
    out_ours = model.step(**dev)
    doc["loss"] = float(cp.asnumpy(out_ours[pkg_mod.OUTPUTS[0]]))
    return doc


def tune_phase(out: Path, end: float) -> list[str]:
    """``dcstudio tune`` timing its finalists on this GPU; its summary lines."""
    cmd = [sys.executable, "-m", "studio.cli", "tune", str(REPO / "resources/examples/bert_layer_base_train.onnx"),
           "-o", str(out / "tuned.json"), "--objective", "time", "--backend", "cuda", "--budget", "24",
           "--measure", "3", "--workers", "1", "--no-db"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=max(60, end - time.perf_counter()))
        text = proc.stdout + proc.stderr + f"\nexit {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        told = [x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr)]
        text = "".join(told) + f"\nstopped after {e.timeout:.0f} s"
    (out / "tune.log").write_text(text, encoding="utf-8")
    log("tune done")
    return [ln for ln in text.splitlines() if ln.startswith(("tune:", "measured:", "check:", "error", "exit", "stopped"))]


def variants_phase(kit: Path, work: Path, out: Path) -> str:
    """The launch-shape variants of the BERT-base step's row kernels (``variants.py``)."""
    import cupy as cp
    from codegen.program.prepare import lower_for_codegen
    from studio.session.exporting import load_with_history
    from tests.bench.gpu import variants
    row = next(r for r in json.loads((kit / "cases.json").read_text()) if r["case"] == "bert_base_layer_recipe")
    model = rebuild(kit, row, work)
    graph, _ = load_with_history(str(model), str(kit / row["history"]), [])
    return variants.table(variants.run(cp, _graph_time, lower_for_codegen(graph), out))


def stacking_phase() -> str:
    """The Q/K/V GEMMs separate against stacked (``stacking.py``), timed in captured CUDA graphs."""
    import cupy as cp
    from codegen.cupy_cuda import library
    from tests.bench.gpu import stacking
    return stacking.table(stacking.run(cp, lambda fn: _graph_time(cp, fn), library.matmul))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kit")
    ap.add_argument("out")
    ap.add_argument("--phases", default="tests,sweep,bert,variants,stacking,tune")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--budget", type=float, default=480, help="seconds; later phases shrink to fit")
    args = ap.parse_args(argv)
    kit, out = Path(args.kit), Path(args.out)
    work = Path("/tmp/dcstudio-gpu")
    work.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    end = T0 + args.budget
    rows = json.loads((kit / "cases.json").read_text())
    if args.cases:
        want = args.cases.split(",")
        rows = [r for r in rows if any(w in r["case"] for w in want)]
    tests = None
    if "tests" in phases:
        tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                                  "-o", "minversion=7", *CUDA_TESTS],
                                 cwd=REPO, stdout=open(out / "pytest.txt", "w"), stderr=subprocess.STDOUT)
    results = sweep(kit, out, work, rows, args.workers) if "sweep" in phases else []
    alone = step_times(work, results, end) if "sweep" in phases else {}
    if alone:
        (out / "steps_alone.json").write_text(json.dumps(alone, indent=1))
    doc = None
    if "bert" in phases and any(r["case"] == "bert_base_layer_recipe" and r["ok"] for r in results):
        if tests is not None:
            try:
                tests.wait(timeout=max(1, end - time.perf_counter() - 200))
            except subprocess.TimeoutExpired:     # the timing then runs beside the tests' tail
                log("bert: the GPU tests are still running")
        try:
            doc = bert(out, work, end)
        except Exception:  # noqa: BLE001
            doc = {"error": traceback.format_exc()[-3000:]}
        (out / "bert.json").write_text(json.dumps(doc, indent=1))
    variants_table = ""
    if "variants" in phases and time.perf_counter() < end - 30:
        try:
            variants_table = variants_phase(kit, work, out)
        except Exception:  # noqa: BLE001
            variants_table = "variants failed:\n" + traceback.format_exc()[-2000:]
        log("variants timed")
    stacked = ""
    if "stacking" in phases and time.perf_counter() < end - 30:
        try:
            stacked = stacking_phase()
        except Exception:  # noqa: BLE001
            stacked = "stacking failed:\n" + traceback.format_exc()[-2000:]
        (out / "stacking.txt").write_text(stacked, encoding="utf-8")
        log("stacking timed")
    tuned = tune_phase(out, end) if "tune" in phases and time.perf_counter() < end - 60 else []
    if tests is not None:
        try:
            tests.wait(timeout=max(1, end - time.perf_counter()))
        except subprocess.TimeoutExpired:
            tests.kill()
        print("---- pytest (tail)")
        print("\n".join((out / "pytest.txt").read_text().splitlines()[-25:]))
    print("---- sweep")
    for r in sorted(results, key=lambda r: r["case"]):
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['case']:<44} {r.get('stage', '')[:60]} {r.get('summary', '')[:50]} "
              f"| graph: {' '.join(r.get('graph', []))[:160]}")
        for line in r.get("fails", []):
            print(f"       {line[:150]}")
    if alone:
        print("---- steps alone (median of 30 after 6 warm-up steps; graph = one captured CUDA graph)")
        for case, line in alone.items():
            print(f"  {case:<36} {line}")
    if variants_table:
        print("---- variants (µs, % of a same-run copy of the same bytes)")
        print(variants_table)
    if stacked:
        print("---- stacking (BERT-base layer's Q/K/V GEMMs, µs per call in a captured CUDA graph)")
        print(stacked)
    if tuned:
        print("---- tune (BERT-base layer, --objective time --backend cuda)")
        print("\n".join(tuned))
    if doc:
        print("---- bert", json.dumps({k: v for k, v in doc.items() if k != "kernels"})[:2500])
        for k in sorted(doc.get("kernels", []), key=lambda k: -k.get("us", 0))[:25]:
            print(f"  {k.get('us', 0):8.1f} us {k.get('bytes', 0) / 1e6:8.2f} MB {k.get('gbs', 0):7.0f} GB/s "
                  f"{k.get('of_copy', 0):5.0%} of copy  {k['label'][:60]} {k.get('error', '')[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
