"""The exported module trains like PyTorch, for a whole run, on models built fresh for the purpose
(``fresh_models``: a Llama-style decoder, a ConvNeXt, a RegNet-style CNN with BatchNorm, a dropout MLP).

Each model goes through the user's pipeline (torch export → ``train-graph`` → ``recipe`` →
``export``), then:

- ``Model().train_step`` with its own defaults (zero optimizer state, its step count, the recorded
  learning rate) for 30 steps follows onnxruntime running the untransformed generated step (loss
  relative difference ≤ 1e-5 at every step) and PyTorch's own optimizer within the derived drift
  tolerance (``training_runs.drift``: 32 × PyTorch fp32's own distance from a float64 run), for the
  losses, the final parameters, the BatchNorm running statistics and the eval-mode predictions of
  ``forward()``;
- ``export_onnx`` writes a model onnxruntime predicts with as ``forward()`` does;
- a checkpoint saved at step 10 and loaded into a new ``Model`` continues bit-identically;
- dropout: the same seed gives the same run, another seed another; masks fed explicitly give
  PyTorch's steps.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed: the runs use exported CPU packages")

from studio.cli import main  # noqa: E402
from tests.peer.fresh_models import (ConvNeXtStyle, DropoutMLP, LlamaStyle, RegNetStyle,  # noqa: E402
                                     export_training)
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.peer.training_runs import drift, make_batches, ort_run, package_run, param_map, torch_run  # noqa: E402

STEPS = 30
LOSS_RTOL = 1e-5      # the bar: the package against onnxruntime on the same generated step


def _image(g):
    return (torch.randn(2, 3, 32, 32, generator=g),)


def _tokens(g):
    return (torch.randint(0, 64, (2, 16), generator=g),)


MODELS = {   # name: (build, inputs, input names, dynamo, names to untie)
    "llama": (lambda: LlamaStyle(ramp=True), _tokens, ("input_ids",), True, ("layers.0.input_layernorm.weight",)),
    "convnext": (ConvNeXtStyle, _image, ("input",), False, ()),
    "regnet": (RegNetStyle, _image, ("input",), False, ()),
}


def _cli(*args) -> None:
    assert main([str(a) for a in args]) == 0, args


def pipeline(tmp: Path, name: str, module, forward: onnx.ModelProto, optimizer: str, lr: float, untie=(),
             parallel: bool = True) -> Path:
    """train-graph → recipe → export, as a user runs them; returns the package folder."""
    fwd, train, hist, pkg = (tmp / f"{name}.onnx", tmp / f"{name}_train.onnx", tmp / f"{name}.history.json",
                             tmp / f"pkg_{name}_{optimizer}")
    onnx.save(forward, fwd)
    _cli("train-graph", fwd, "--optimizer", optimizer, "--lr", lr, "-o", train,
         *[a for n in untie for a in ("--untie", n)])
    _cli("recipe", train, "-o", hist, "--quiet")
    _cli("export", train, hist, "-o", pkg, *([] if parallel else ["--no-parallel"]))
    return pkg


@pytest.fixture(scope="module", params=sorted(MODELS))
def trained(request, tmp_path_factory):
    name = request.param
    build, inputs, names, dynamo, untie = MODELS[name]
    torch.manual_seed(0)
    module = build()
    forward = export_training(module, inputs(torch.Generator().manual_seed(1)), names, dynamo=dynamo)
    tmp = tmp_path_factory.mktemp(name)
    pkg = pipeline(tmp, name, module, forward, "adamw", 1e-3, untie)
    batches = make_batches(module, inputs, names, STEPS, "cross_entropy")
    ev = tuple(a.numpy() for a in inputs(torch.Generator().manual_seed(999)))
    return name, module, forward, untie, pkg, batches, ev


def test_default_model_trains_like_onnxruntime_and_pytorch(trained):
    name, module, forward, untie, pkg, batches, ev = trained
    names = param_map(forward, module, untie=untie)
    truth = torch_run(module, batches, "adamw", 1e-3, names, dtype=torch.float64, eval_inputs=ev)
    base = torch_run(module, batches, "adamw", 1e-3, names, eval_inputs=ev)
    ours = package_run(pkg, batches, eval_inputs=ev)
    ref = ort_run(onnx.load(pkg.parent / f"{name}_train.onnx"), batches)
    rel = np.abs(ours.losses - ref.losses) / np.abs(ref.losses)
    assert rel.max() <= LOSS_RTOL, f"{name}: loss vs onnxruntime {rel.max():.3g} at step {rel.argmax() + 1}"
    assert set(ours.params) >= set(names) and set(ours.stats) == set(truth.stats)
    problems = drift(truth, base, ours, f"{name} package") + drift(truth, base, ref, f"{name} onnxruntime")
    assert not problems, "\n".join(problems)
    if name == "regnet":       # the statistics moved (PyTorch's momentum and unbiased variance)
        first = {n: b.numpy() for n, b in module.named_buffers() if n in truth.stats}
        assert all(np.abs(truth.stats[n] - first[n]).max() > 1e-3 for n in first)


EXPORT_ONNX = """
import numpy as np
from {package} import Model
data = dict(np.load({batches!r}))
model = Model()
for k in range(3):
    model.train_step(**{{n: data[n][k] for n in data}})
np.save({pred!r}, next(iter(model.forward(**{{n: data[n][3] for n in data if n != "labels"}}).values())))
model.export_onnx({onnx!r})
"""


def test_export_onnx_predicts_as_forward(trained, tmp_path):
    """After three steps, ``forward()`` equals the exported ONNX model (eval mode, trained weights) as the
    oracle compares: float64 truth of that model, onnxruntime fp32 as the baseline, derived tolerance."""
    from codegen.oracle import Oracle
    from ir.onnx_import import import_proto
    name, module, forward, untie, pkg, batches, ev = trained
    data = tmp_path / "batches.npz"
    np.savez(data, labels=np.stack(batches.labels[:4]), **{n: np.stack([b[j] for b in batches.inputs[:4]])
                                                         for j, n in enumerate(batches.names)})
    script = EXPORT_ONNX.format(package=pkg.name, batches=str(data), pred=str(tmp_path / "pred.npy"),
                                onnx=str(tmp_path / "trained.onnx"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=pkg.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = onnx.load(tmp_path / "trained.onnx")
    assert not any(n.op_type in ("Dropout",) or any(a.name == "training_mode" and a.i for a in n.attribute)
                   for n in exported.graph.node), "the written model must be in eval mode"
    feeds = dict(zip(batches.names, batches.inputs[3]))
    graph = import_proto(exported)
    result = Oracle.of(graph, exported, feeds).check({graph.outputs[0]: np.load(tmp_path / "pred.npy")})
    assert result.ok, result.summary
    sess = ort.InferenceSession(str(tmp_path / "trained.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == list(batches.names)


@pytest.fixture(scope="module")
def dropout_package(tmp_path_factory):
    torch.manual_seed(0)
    module = DropoutMLP()
    inputs = lambda g: (torch.randn(8, 16, generator=g),)   # noqa: E731
    forward = export_training(module, inputs(torch.Generator().manual_seed(1)), ("input",))
    tmp = tmp_path_factory.mktemp("dropout")
    pkg = pipeline(tmp, "mlp", module, forward, "adamw", 1e-3)
    return module, forward, pkg, make_batches(module, inputs, ("input",), 10, "cross_entropy"), load_package(pkg)


def _losses(pkg_module, batches, seed):
    model = pkg_module.Model(seed=seed)
    return [float(model.train_step(**batches.feeds(k))["loss"]) for k in range(len(batches.inputs))], model


def test_dropout_masks_are_fresh_every_step_and_reproducible(dropout_package):
    module, forward, pkg, batches, mod = dropout_package
    masks = mod.model.TRAINING["masks"]
    assert len(masks) == 2 and all(abs(r - 0.25) < 1e-6 for r in masks.values())
    a, model = _losses(mod, batches, seed=1)
    b, _ = _losses(mod, batches, seed=1)
    c, _ = _losses(mod, batches, seed=2)
    assert a == b, "the same seed must give the same trajectory"
    assert a != c, "another seed must give another trajectory"
    name = next(iter(masks))
    shape = mod.model._INPUT_SHAPES[mod.model.INPUTS.index(name)]
    draws = [model._mask(name, shape, masks[name]) for model.step_count in (1, 2)]
    assert not np.array_equal(draws[0], draws[1]) and 0.6 < draws[0].mean() < 0.9


def test_fed_masks_give_pytorchs_steps(dropout_package):
    module, forward, pkg, batches, mod = dropout_package
    names = param_map(forward, module)
    record = json.loads({p.key: p.value for p in onnx.load(pkg.parent / "mlp_train.onnx").metadata_props}[
        "dcstudio.forward"])["dropout"]
    rng = np.random.default_rng(5)
    steps = len(batches.inputs)
    fed = {m: rng.random((steps, *mod.model._INPUT_SHAPES[mod.model.INPUTS.index(m)])) >= 0.25 for m in record}
    by_module = {record[m]["node"].strip("/").split("/")[0]: m for m in record}     # /drop1/Dropout -> drop1

    class Fed(torch.nn.Module):
        def __init__(self, mask_name):
            super().__init__()
            self.mask_name, self.step = mask_name, 0

        def forward(self, x):
            return x * (torch.from_numpy(fed[self.mask_name][self.step]).to(x.dtype) / 0.75)

    def set_masks(m, k):
        for attr, mask_name in by_module.items():
            if not isinstance(getattr(m, attr), Fed):
                setattr(m, attr, Fed(mask_name))
            getattr(m, attr).step = k

    truth = torch_run(module, batches, "adamw", 1e-3, names, dtype=torch.float64, masks=set_masks)
    base = torch_run(module, batches, "adamw", 1e-3, names, masks=set_masks)
    ours = package_run(pkg, batches, masks=fed)
    problems = drift(truth, base, ours, "dropout package")
    assert not problems, "\n".join(problems)


CHECKPOINT = """
import numpy as np, sys
from {package} import Model
data = dict(np.load({batches!r}))
feeds = lambda k: {{"input": data["input"][k], "labels": data["labels"][k]}}
whole = Model(seed=7)
a = [whole.train_step(**feeds(k)) for k in range(20)]
first = Model(seed=7)
for k in range(10):
    first.train_step(**feeds(k))
first.save({ckpt!r})
second = Model(seed=123).load({ckpt!r})
b = [second.train_step(**feeds(k)) for k in range(10, 20)]
same = all(np.array_equal(np.asarray(x[n]), np.asarray(y[n])) for x, y in zip(a[10:], b) for n in x)
state = all(np.array_equal(whole.state_dict()[n], v) for n, v in second.state_dict().items())
print("bit-identical", same, state, second.step_count)
"""


def test_checkpoint_resumes_bit_identically(dropout_package, tmp_path):
    module, forward, pkg, batches, mod = dropout_package
    data = tmp_path / "batches.npz"
    rng = np.random.default_rng(3)
    np.savez(data, input=rng.standard_normal((20, 8, 16)).astype(np.float32), labels=rng.integers(0, 10, (20, 8)))
    script = CHECKPOINT.format(package=pkg.name, batches=str(data), ckpt=str(tmp_path / "step10.npz"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=pkg.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bit-identical True True 21" in proc.stdout, proc.stdout


def test_checkpoint_of_another_model_is_refused(dropout_package, tmp_path):
    _, _, _, _, mod = dropout_package
    meta = {"format": "dcstudio-checkpoint", "version": 1, "names": [], "inputs_sha": "0123456789abcdef"}
    np.savez(tmp_path / "other.npz", __meta__=np.asarray(json.dumps(meta)))
    model = mod.Model()
    before = model.state_dict()
    with pytest.raises(ValueError, match="another model"):
        model.load(tmp_path / "other.npz")
    np.savez(tmp_path / "plain.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a dcstudio checkpoint"):
        model.load(tmp_path / "plain.npz")
    assert all(np.array_equal(before[n], v) for n, v in model.state_dict().items()), "a refusal changes nothing"


def test_train_command_checkpoints_on_ctrl_c_and_resumes(dropout_package, tmp_path):
    module, forward, pkg, batches, mod = dropout_package
    data = tmp_path / "batches.npz"
    rng = np.random.default_rng(4)
    np.savez(data, input=rng.standard_normal((5, 8, 16)).astype(np.float32), labels=rng.integers(0, 10, (5, 8)))
    ckpt = tmp_path / "ckpt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base = [sys.executable, "-m", pkg.name, "train", "--data", str(data), "--checkpoint", str(ckpt)]
    proc = subprocess.Popen(base + ["--steps", "100000000", "--every", "1"], cwd=pkg.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not (ckpt / "last.npz").is_file():
            time.sleep(0.1)           # a checkpoint every step: training runs
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "checkpoint saved to" in out and (ckpt / "last.npz").is_file(), out + err
    stopped = json.loads(str(np.load(ckpt / "last.npz")["__meta__"]))["step_count"]
    assert stopped > 1
    done = subprocess.run(base + ["--steps", str(stopped + 2), "--resume"], cwd=pkg.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resumed from {ckpt / 'last.npz'} at step {stopped}" in done.stdout
    assert json.loads(str(np.load(ckpt / "last.npz")["__meta__"]))["step_count"] == stopped + 3


def test_package_commands_refuse_bad_files_with_a_line_naming_them(dropout_package, tmp_path):
    """The package's ``train`` and ``export-onnx`` refuse a missing or wrong ``--data``, ``--state`` or
    checkpoint with one line naming the file (exit 1), never a traceback, and never suggest unpickling.
    A package imported as a whole training graph has no forward model: ``export-onnx`` says where the
    trained weights are instead."""
    _, _, pkg, _, _ = dropout_package
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")
    np.savez(tmp_path / "plain.npz", x=np.zeros(2))
    cases = [(["train", "--data", "missing.npz", "--steps", "2"], "missing.npz: No such file or directory"),
             (["train", "--data", "notes.json", "--steps", "2"], "notes.json: not an .npz of plain arrays"),
             (["export-onnx", "out.onnx", "--state", "missing.npz"], "missing.npz: No such file or directory"),
             (["export-onnx", "out.onnx", "--state", "plain.npz"], "plain.npz is not a dcstudio checkpoint")]
    for argv, said in cases:
        run = subprocess.run([sys.executable, "-m", pkg.name, *argv], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env={**env, "PYTHONPATH": str(pkg.parent)})
        assert run.returncode == 1 and "Traceback" not in run.stderr and said in run.stderr, (argv, run.stderr)
        assert "pickle" not in run.stderr and not (tmp_path / "out.onnx").exists()
    joint = tmp_path / "joint_pkg"
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "joint_standard" / "mlp_joint_adamw.onnx"
    assert main(["export", str(fixture), "-o", str(joint)]) == 0
    run = subprocess.run([sys.executable, "-m", "joint_pkg", "export-onnx", "out.onnx"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "no forward model to write" in run.stderr and "last.npz" in run.stderr
