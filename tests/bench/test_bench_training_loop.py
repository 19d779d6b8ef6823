"""Benchmark (on demand: ``bash .ci/test tests/bench -k training_loop -s``): training-loop throughput.

Steps per second of a training loop, each engine in a process of its own, the same model, batch and
thread count:

- dcstudio: the exported package (the recipe ``auto`` picks) as a user's loop runs it:
  ``Model(recycle_outputs=True).train_step(**batch)`` with host arrays in, its own defaults (parameters,
  optimizer state and statistics fed back, step counted);
- PyTorch eager: ``forward``, loss, ``backward``, ``torch.optim.AdamW.step``, ``zero_grad``;
- ``torch.compile`` (inductor) of the module, the same loop (compilation in the warm-up, not timed).
Each process warms up ``WARMUP`` steps, then times ``$DCSTUDIO_BENCH_STEPS`` steps (default 200; the
12-layer step 20) and reports steps/s and its peak RSS. Models: the BERT-base layer (B=8, L=128, MSE),
EfficientNet-B0 (torchvision, batch 8, 64×64, cross-entropy) and the 12-layer BERT-base-width encoder
of ``scale_models`` (MSE); ``$DCSTUDIO_BENCH_MODELS`` picks some. Threads: ``$DCSTUDIO_BENCH_THREADS``
(default 1 and 2). The children run with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` unset (FACTS:
this workplace forces Haswell kernels on AVX-512 machines; a user's machine does not), and the package's
child prints the BLAS kernel that ran. Ratios are reported, not asserted (the machine is noisy).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numpy_ref.feeds import feeds_for  # noqa: E402
from studio.session.recipe import RECIPES, pick, run_recipe  # noqa: E402
from studio.session import Session  # noqa: E402
from tests.peer.hf_style_models import export  # noqa: E402
from transforms.autodiff import build_training_graph  # noqa: E402

pytestmark = pytest.mark.bench
REPO = Path(__file__).resolve().parents[2]
WARMUP = 3
THREADS = [int(n) for n in os.environ.get("DCSTUDIO_BENCH_THREADS", "1,2").split(",")]
STEPS = int(os.environ.get("DCSTUDIO_BENCH_STEPS", "200"))


def bert_layer():
    from tests.bench.test_bench_autodiff import bert_layer as layer
    return layer()


def efficientnet_b0():
    from tests.zoo.torchvision_cpu import models
    return models().efficientnet_b0(num_classes=10, dropout=0.0, stochastic_depth_prob=0.0)


def bert12():
    from tests.peer.hf_style_models import BertClassifier, randomize
    return randomize(BertClassifier(vocab=1000, ctx=128, width=768, heads=12, layers=12))


MODELS = {   # name: (builder, input shapes, loss, steps)
    "bert_layer": (bert_layer, {"input": (8, 128, 768)}, "mse", STEPS),
    "efficientnet_b0": (efficientnet_b0, {"input": (8, 3, 64, 64)}, "cross_entropy", STEPS),
    "bert12": (bert12, {"input_ids": (8, 128)}, "mse", max(STEPS // 10, 10)),
}
PICKED = [m for m in os.environ.get("DCSTUDIO_BENCH_MODELS", ",".join(MODELS)).split(",") if m]

PEAK = """
def peak_mb():
    # VmHWM: this process's peak resident set (ru_maxrss keeps the parent's across fork and exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
"""

TORCH_CHILD = PEAK + """
import json, sys, time
import numpy as np
sys.path.insert(0, {repo!r})
import torch
import torch.nn.functional as F
from tests.bench.test_bench_training_loop import MODELS
torch.set_num_threads({threads})
torch.manual_seed(0)
module = MODELS[{name!r}][0]().train()
if {compiled}:
    module = torch.compile(module)
data = dict(np.load({batch!r}))
args = [torch.from_numpy(data[n]) for n in {names!r}]
labels = torch.from_numpy(data["labels"])
opt = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
def step():
    out = module(*args)
    loss = F.mse_loss(out, labels) if {loss!r} == "mse" else F.cross_entropy(out, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for _ in range({warmup}):
    step()
t0 = time.perf_counter()
for _ in range({steps}):
    step()
dt = time.perf_counter() - t0
print(json.dumps({{"steps_per_s": {steps} / dt, "rss_mb": peak_mb()}}))
"""

PACKAGE_CHILD = PEAK + """
import json, sys, time
import numpy as np
sys.path.insert(0, {parent!r})
from {package} import Model
data = dict(np.load({batch!r}))
model = Model(recycle_outputs=True, threads={threads})
for _ in range({warmup}):
    model.train_step(**data)
t0 = time.perf_counter()
for _ in range({steps}):
    model.train_step(**data)
dt = time.perf_counter() - t0
from threadpoolctl import threadpool_info
kernel = ", ".join(sorted({{i.get("architecture") or "?" for i in threadpool_info() if i.get("user_api") == "blas"}}))
print(json.dumps({{"steps_per_s": {steps} / dt, "rss_mb": peak_mb(),
                  "blas": kernel, "threads": model.threads}}))
"""


def _child(script: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=7200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=PICKED)
def case(request, tmp_path_factory):
    import torch
    name = request.param
    builder, shapes, loss, steps = MODELS[name]
    tmp = tmp_path_factory.mktemp(name)
    torch.manual_seed(0)
    module = builder()
    rng = np.random.default_rng(1)
    args = tuple(torch.from_numpy(rng.standard_normal(s).astype(np.float32)) if n != "input_ids"
                 else torch.from_numpy(rng.integers(0, 1000, s)) for n, s in shapes.items())
    forward = export(module, args, dynamo=False, names=tuple(shapes), training=True)
    train = build_training_graph(forward, loss=loss, optimizer="adamw")
    path = tmp / f"{name}_train.onnx"
    onnx.save(train, path)
    session = Session.open(path, autosave=False)
    run_recipe(session, RECIPES[pick(session.graph)])
    res = export_package(session.graph, tmp / f"{name}_step", inputs=feeds_for(session.graph))
    with torch.no_grad():
        out_shape = module.eval()(*args).shape
    labels = rng.standard_normal(out_shape).astype(np.float32) if loss == "mse" else rng.integers(0, 10, out_shape[0])
    batch = tmp / "batch.npz"
    np.savez(batch, labels=labels, **{n: a.numpy() for n, a in zip(shapes, args)})
    return name, tuple(shapes), loss, steps, res.path, batch


@pytest.mark.parametrize("threads", THREADS)
def test_training_loop_throughput(case, threads, capsys):
    name, names, loss, steps, pkg, batch = case
    common = dict(threads=threads, warmup=WARMUP, steps=steps, batch=str(batch))
    ours = _child(PACKAGE_CHILD.format(parent=str(pkg.parent), package=pkg.name, **common))
    eager = _child(TORCH_CHILD.format(repo=str(REPO), name=name, names=list(names), loss=loss, compiled=False,
                                      **common))
    compiled = _child(TORCH_CHILD.format(repo=str(REPO), name=name, names=list(names), loss=loss, compiled=True,
                                         **common))
    with capsys.disabled():
        print(f"\n{name}, {threads} thread(s), {steps} steps, BLAS kernel {ours['blas']}: dcstudio "
              f"{ours['steps_per_s']:.2f} steps/s ({ours['rss_mb']:.0f} MB), eager {eager['steps_per_s']:.2f} "
              f"({eager['rss_mb']:.0f} MB), torch.compile {compiled['steps_per_s']:.2f} ({compiled['rss_mb']:.0f} MB)"
              f" -> {ours['steps_per_s'] / eager['steps_per_s']:.2f}x eager, "
              f"{ours['steps_per_s'] / compiled['steps_per_s']:.2f}x torch.compile")
    assert ours["steps_per_s"] > 0 and eager["steps_per_s"] > 0 and compiled["steps_per_s"] > 0
