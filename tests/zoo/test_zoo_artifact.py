"""The zoo's onnxruntime-training artifact: a CNN's generated training step through the pipeline a user runs,
then trained like PyTorch (its row, ``mbconv_artifact``, joins the zoo's terminal summary).

``ort_artifacts/mbconv_net/legacy`` (fixtures README): an EfficientNet-style CNN built here (depthwise
convolutions, SiLU, squeeze-excitation, BatchNorm, a residual) whose training step onnxruntime-training generated
(ConvGrad, BatchNormInternal, BatchNormalizationGrad, QuickGelu and its gradient, SigmoidGrad) and
``make_functional`` closed with onnxruntime's AdamW in standard ops (``AdamWOptimizer`` adam_mode 1:
``p -= lr·√(1−β₂ᵗ)/(1−β₁ᵗ) · m / (√v + ε)``, ε = 1e-6, no weight decay).

1. ``recipe`` → ``replay --check`` → ``export`` → the package's own ``--check``, as the zoo runs its models;
2. the same network's standard-op step (``train-graph`` of the artifact's own ``forward.onnx``) through the same
   recipe: the artifact must end below its twin in bytes moved. Both reductions go to the zoo's summary: the
   artifact starts from onnxruntime's fused gradient ops, so the share the recipe cuts is smaller than on the twin;
3. the package trains for ``STEPS`` steps from PyTorch's initial weights, each step checked from the state it
   started in against the same step in PyTorch (autograd gradients, the AdamW above; float64 truth, float32
   baseline, ``K_RUN`` × the baseline's error, as the zoo's parity); the first step also against the step
   onnxruntime-training recorded.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed: the test exports a CPU package")

from tests.conftest import FIXTURES, run_cli  # noqa: E402
from tests.golden.kernels import check_kernels, package_kernels  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.peer.training_runs import K_RUN, make_batches, step_checks  # noqa: E402
from tests.zoo.test_zoo import ROWS  # noqa: E402

ARTIFACT = FIXTURES / "ort_artifacts/mbconv_net/legacy"
STEPS = 20
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-6


def _torch_module() -> torch.nn.Module:
    """``MBConvNet`` as the generator built it (seed 0), imported by path from the fixture scripts."""
    spec = importlib.util.spec_from_file_location("mbconv_net_fixture", FIXTURES / "scripts/mbconv_net.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    torch.manual_seed(0)
    return source.MBConvNet(10)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The artifact's and its twin's replay summaries, and the artifact's exported package; the artifact's zoo row
    (``ROWS["mbconv_artifact"]``) gets its figures and seconds per stage."""
    tmp = tmp_path_factory.mktemp("artifact_cnn")
    step = ARTIFACT / "train_step_adamw.onnx"
    twin = tmp / "twin.onnx"
    code, _ = run_cli("train-graph", ARTIFACT / "forward.onnx", "--loss", "cross_entropy", "--optimizer", "adamw",
                   "-o", twin)
    assert code == 0
    row: dict = {"model": "mbconv_artifact"}
    times = row["seconds"] = {}
    reports = {}
    for label, model in (("artifact", step), ("twin", twin)):
        hist, report = tmp / f"{label}.history.json", tmp / f"{label}.replay.json"
        t = time.perf_counter()
        assert run_cli("recipe", model, "-o", hist, "--quiet")[0] == 0, label
        times[f"{label} recipe"] = time.perf_counter() - t
        t = time.perf_counter()
        code, out = run_cli("replay", model, hist, "--check", "--quiet", "--json", report)
        times[f"{label} replay --check"] = time.perf_counter() - t
        check = next(line for line in out.splitlines() if line.startswith("check: "))
        assert code == 0 and "all within tolerance" in check, (label, out[-2000:])
        reports[label] = json.loads(report.read_text())["summary"]
        if label == "artifact":
            row.update(bytes_before=reports[label]["bytes_before"], bytes_after=reports[label]["bytes_after"],
                       bound=reports[label]["bound"], replay_check=check.removeprefix("check: "),
                       steps=len(json.loads(hist.read_text())["steps"]))
    twin_summary = reports["twin"]
    row["note"] = (f"its standard-op twin (train-graph of the same forward.onnx): "
                   f"{twin_summary['bytes_before'] / 1e6:.2f} MB -> {twin_summary['bytes_after'] / 1e6:.2f} MB "
                   f"({-twin_summary['reduction']:+.1%})")
    pkg = tmp / "mbconv_artifact_pkg"
    t = time.perf_counter()
    assert run_cli("export", step, tmp / "artifact.history.json", "-o", pkg)[0] == 0
    times["export"] = time.perf_counter() - t
    ROWS["mbconv_artifact"] = row
    return reports, pkg, row


@pytest.mark.slow
def test_artifact_kernel_bodies_match_their_snapshot(pipeline, update_golden):
    pkg = pipeline[1]
    check_kernels("zoo_mbconv_artifact_cpu", package_kernels(pkg),
                  update_golden)


@pytest.mark.slow
def test_artifact_cnn_exports_checks_and_moves_less_than_its_standard_twin(pipeline):
    reports, pkg, row = pipeline
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", pkg.name, "--check"], cwd=pkg.parent, env=env,
                          capture_output=True, text=True, timeout=900)
    row["seconds"]["module --check"] = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row["module_check"] = proc.stdout.strip().splitlines()[-1]
    assert row["module_check"].endswith("outputs match"), proc.stdout[-500:]
    art, twin = reports["artifact"], reports["twin"]
    assert art["reduction"] > 0.25, art
    assert art["bytes_after"] < twin["bytes_after"], (art, twin)


class OnnxruntimeAdamW:
    """One step of ``module`` (a copy in ``dtype``) from a given state: autograd gradients of the cross-entropy,
    then onnxruntime's AdamW (adam_mode 1) in ``dtype``; names as the artifact's (``p``, ``p.m``, ``p.v``)."""

    def __init__(self, module, dtype):
        self.m = copy.deepcopy(module).to(dtype).train()
        self.dtype = dtype
        self.params = dict(self.m.named_parameters())

    def step(self, state: dict, k: int, inputs, labels) -> dict[str, np.ndarray]:
        t = lambda a: torch.tensor(np.asarray(a), dtype=self.dtype)  # noqa: E731
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(t(state[name]))
        loss = F.cross_entropy(self.m(*[t(a) for a in inputs]), torch.from_numpy(labels))
        grads = torch.autograd.grad(loss, list(self.params.values()))
        step = k + 1
        step_size = LR * (1 - B2 ** step) ** 0.5 / (1 - B1 ** step)
        new = {"loss": loss.item()}
        for (name, p), g in zip(self.params.items(), grads):
            m = B1 * t(state[f"{name}.m"]) + (1 - B1) * g
            v = B2 * t(state[f"{name}.v"]) + (1 - B2) * g * g
            new.update({name: p.detach() - step_size * m / (v.sqrt() + EPS), f"{name}.m": m, f"{name}.v": v})
        return {n: np.asarray(v, np.float64) for n, v in new.items()}


@pytest.mark.slow
def test_artifact_cnn_package_trains_like_pytorch(pipeline):
    _, pkg, row = pipeline
    t = time.perf_counter()
    module = _torch_module()
    ref = np.load(ARTIFACT / "reference.npz")
    params = {n: p.detach().numpy() for n, p in module.named_parameters()}
    for name, value in params.items():                        # the module is the artifact's model, bit for bit
        np.testing.assert_array_equal(value, ref[f"param0/{name}"], err_msg=name)
    model = load_package(pkg).Model()
    assert set(model.state_names()) == {f"{n}{s}" for n in params for s in ("", ".m", ".v")}
    model.load_state_dict({**params, **{f"{n}.{s}": np.zeros_like(v) for n, v in params.items() for s in "mv"}})
    model.lr = LR
    loss_name = onnx.load(ARTIFACT / "train_step_adamw.onnx").graph.output[0].name

    truth, base = OnnxruntimeAdamW(module, torch.float64), OnnxruntimeAdamW(module, torch.float32)
    first = {"input": ref["input0"]}, ref["labels"]
    batches = make_batches(module, lambda g: (torch.randn(4, 3, 32, 32, generator=g),), ("input",), STEPS - 1,
                           "cross_entropy")
    schedule = [first] + [({"input": batches.inputs[k][0]}, batches.labels[k]) for k in range(STEPS - 1)]
    worst: dict = {}
    for k, (inputs, labels) in enumerate(schedule):
        state = model.state_dict()
        out = model.train_step(**inputs, labels=labels)
        runs = {"package": {**model.state_dict(), "loss": np.asarray(out[loss_name])}}
        if k == 0:
            grads = {n: ref[f"grad/{n}"] for n in params}           # its moments from the recorded gradients
            runs["onnxruntime-training"] = {"loss": ref["loss"], **{n: ref[f"param1/{n}"] for n in params},
                                            **{f"{n}.m": np.float32(1 - B1) * g for n, g in grads.items()},
                                            **{f"{n}.v": np.float32(1 - B2) * g * g for n, g in grads.items()}}
        args = (state, k, (inputs["input"],), labels)
        problems, step_worst = step_checks(truth.step(*args), [base.step(*args)], runs, k, K_RUN)
        assert not problems, "\n".join(problems[:20])
        for key, value in step_worst.items():
            worst[key] = max(worst.get(key, 0.0), value)
    assert model.step_count == STEPS + 1
    row["seconds"][f"train {STEPS} steps"] = time.perf_counter() - t
    row.setdefault("training", {})["adamw (onnxruntime's)"] = ", ".join(
        f"{kind} {ratio:.2f}" for (label, kind), ratio in sorted(worst.items()) if label == "package")
    row["training"]["onnxruntime-training's recorded first step"] = ", ".join(
        f"{kind} {ratio:.2f}" for (label, kind), ratio in sorted(worst.items()) if label != "package")
