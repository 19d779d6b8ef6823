"""The model-zoo matrix: the whole pipeline, as a user runs it, on models nobody here wrote.

For every model of ``tests.zoo.models.ZOO`` (torchvision CNNs, Hugging Face-style transformers
by both torch exporters, a Swin stage, a ShuffleNet-style channel split):

1. the forward model is exported by torch (random weights, fixed seeds);
2. ``dcstudio train-graph`` generates its training step (cross-entropy, AdamW; the default
   trainable set, the model's parameters);
3. ``dcstudio recipe`` runs the Substation recipe and saves the history;
4. ``dcstudio replay --check`` replays it headless against the **original** training graph
   (onnxruntime fp32 vs the float64 truth, derived tolerances) and must pass;
5. ``dcstudio export`` writes the CPU package, and its own ``python -m PKG --check`` (against
   the original model's stored truth) must pass in a fresh process;
6. the package trains: ``Model().train_step`` with its own defaults for ``PARITY_STEPS`` steps on a
   fixed sequence of batches; every step's loss and the state it leaves (parameters, optimizer
   state, BatchNorm statistics) are compared with PyTorch's optimizer taking that step from the
   same state (``tests.peer.training_runs.forced_run``: within ``K_RUN`` = 52 × PyTorch fp32's own
   distance from float64, or the oracle's simulated-fp32 floor at a kink), and so is the generated step run by onnxruntime. ``test_zoo_sgd_training`` does
   the same with SGD and momentum (a package exported without ``prange``: it compiles faster).

Every row must pass; there is no xfail. Each row's bytes before/after, the bound, the check
lines, the training margins and the seconds per stage go to the terminal summary (``conftest.py``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
import torch

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed: the zoo exports CPU packages")

from studio.cli import main  # noqa: E402
from tests.golden.kernels import check_kernels, package_kernels  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.peer.training_runs import forced_run, make_batches, param_map  # noqa: E402
from tests.zoo.models import ZOO  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ROWS: dict[str, dict] = {}        # read by conftest.py's terminal summary
PARITY_STEPS = 20
LR = {"adamw": 1e-3, "sgd": 1e-2}


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_pipeline(name, tmp_path, capsys, update_golden):
    row: dict = {"model": name}
    times = row["seconds"] = {}
    t = time.perf_counter()
    forward, train, hist = tmp_path / f"{name}.onnx", tmp_path / f"{name}_train.onnx", tmp_path / "history.json"
    module, proto = ZOO[name].exported()
    onnx.save(proto, forward)
    times["export forward"] = time.perf_counter() - t

    t = time.perf_counter()
    code, out, err = _cli(capsys, "train-graph", forward, "--loss", ZOO[name].loss, "--optimizer", "adamw",
                          "-o", train)
    assert code == 0, err
    assert out.startswith("trains "), out
    times["train-graph"] = time.perf_counter() - t

    t = time.perf_counter()
    code, out, err = _cli(capsys, "recipe", train, "-o", hist, "--quiet")
    assert code == 0, err
    times["recipe"] = time.perf_counter() - t
    row["steps"] = len(json.loads(hist.read_text())["steps"])

    t = time.perf_counter()
    report = tmp_path / "replay.json"
    code, out, err = _cli(capsys, "replay", train, hist, "--check", "--quiet", "--json", report)
    times["replay --check"] = time.perf_counter() - t
    assert code == 0, out + err
    check = next(line for line in out.splitlines() if line.startswith("check: "))
    assert "compared with the original model" in check and "all within tolerance" in check, check
    summary = json.loads(report.read_text())["summary"]
    row.update(bytes_before=summary["bytes_before"], bytes_after=summary["bytes_after"], bound=summary["bound"],
               replay_check=check.removeprefix("check: "))
    assert summary["bytes_after"] < summary["bytes_before"], summary

    t = time.perf_counter()
    pkg = tmp_path / f"zoo_{name}"
    code, out, err = _cli(capsys, "export", train, hist, "-o", pkg)
    assert code == 0, err
    times["export"] = time.perf_counter() - t
    check_kernels(f"zoo_{name}_cpu", package_kernels(pkg), update_golden)
    if name == "efficientnet_b0":
        cuda_kernel_bodies(name, train, hist, update_golden)

    t = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", pkg.name, "--check"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    times["module --check"] = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row["module_check"] = proc.stdout.strip().splitlines()[-1]
    ROWS[name] = row

    t = time.perf_counter()
    row["training"] = {"adamw": training_parity(name, module, proto, train, pkg, "adamw")}
    times["train 20 steps"] = time.perf_counter() - t


def cuda_kernel_bodies(name: str, train: Path, hist: Path, update: bool) -> None:
    """The CUDA kernels of the model after its recipe, held to their snapshot (no GPU needed to render them)."""
    from codegen.cupy_cuda.backend import CUDA
    from codegen.program.program import build_program
    from studio.session.exporting import load_with_history
    graph, _ = load_with_history(str(train), str(hist), [])
    prog = build_program(graph, CUDA.renderer())
    check_kernels(f"zoo_{name}_cuda", {n: CUDA.kernel_module(ks) for n, ks in prog.kernels.items()}, update)


def training_parity(name: str, module, proto: onnx.ModelProto, train: Path, pkg: Path, optimizer: str) -> str:
    """The package (``Model()`` with its defaults) trained PARITY_STEPS steps, every step checked from the state
    it started in against PyTorch's optimizer and onnxruntime (``training_runs.forced_run``: the zoo's CNNs train
    chaotically in fp32 at batch 2, so whole trajectories of two correct runs part ways); returns the worst
    error / tolerance of each kind for the summary."""
    zm = ZOO[name]
    batches = make_batches(module, zm.inputs, zm.names, PARITY_STEPS, zm.loss)
    model = load_package(pkg).Model()
    problems, worst, notes = forced_run(model, module, param_map(proto, module), onnx.load(train), batches,
                                        optimizer, LR[optimizer], zm.loss)
    assert not problems, "\n".join(problems[:20])
    text = ", ".join(f"{kind} {ratio:.2f}" for (label, kind), ratio in worst.items() if label == "package")
    return text + "".join(f"; {note}" for note in notes)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_sgd_training(name, tmp_path, capsys, update_golden):
    """SGD with momentum: train-graph, recipe, export, then the training parity of ``training_parity``."""
    t = time.perf_counter()
    forward, train, hist, pkg = (tmp_path / f"{name}.onnx", tmp_path / f"{name}_sgd.onnx", tmp_path / "sgd.json",
                                 tmp_path / f"zoo_sgd_{name}")
    module, proto = ZOO[name].exported()
    onnx.save(proto, forward)
    for args in (("train-graph", forward, "--loss", ZOO[name].loss, "--optimizer", "sgd", "--lr", LR["sgd"],
                  "-o", train), ("recipe", train, "-o", hist, "--quiet"), ("export", train, hist, "-o", pkg,
                                                                            "--no-parallel")):
        code, out, err = _cli(capsys, *args)
        assert code == 0, err
    check_kernels(f"zoo_{name}_sgd_serial_cpu", package_kernels(pkg), update_golden)
    worst = training_parity(name, module, proto, train, pkg, "sgd")
    ROWS.setdefault(name, {"model": name}).setdefault("training", {})["sgd"] = worst
    ROWS[name].setdefault("seconds", {})["sgd pipeline + train"] = time.perf_counter() - t
