"""Benchmark (on demand: ``bash .ci/test tests/bench -k codegen_cnn -s``): the exported CPU training step of
torchvision's ResNet-18 and EfficientNet-B0 (batch 8, 64×64, 10 classes, training-mode BatchNorm,
cross-entropy, AdamW) against onnxruntime CPU on the same training graph and PyTorch eager on the same
model (issue 11's benchmark).

The graph: the torchvision model exported by the TorchScript exporter in training mode, turned into a
standard-ONNX training step by dcstudio's autodiff. dcstudio applies the recipe ``auto`` picks (``cnn``:
``conv_weight_grad`` then Substation), exports the package and imports it. onnxruntime runs the graph as
generated, all graph optimizations on; torch runs forward, backward and ``torch.optim.AdamW``. Same thread
count everywhere; steps interleaved in blocks (``steps.interleaved_medians``), median of ``REPS``, once per
thread count of ``$DCSTUDIO_BENCH_THREADS`` (default 1 and 2). The bench then times each library call and
kernel of one step on its own and prints the five that take longest: what holds the step back. The target
(>= 1.0x onnxruntime) is reported, not asserted beyond a loose floor.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path
import re
import time

import onnx
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package, mismatches  # noqa: E402
from codegen.numba_cpu import kernel_cache, threads  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import feeds_for  # noqa: E402
from studio.session.recipe import RECIPES, pick, run_recipe  # noqa: E402
from studio.session import Session  # noqa: E402
from tests.peer.hf_style_models import export  # noqa: E402
from tests.bench.steps import PackageStep, interleaved_medians, ort_step  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.zoo.torchvision_cpu import models as torchvision_models  # noqa: E402
from transforms.autodiff import build_training_graph  # noqa: E402

pytestmark = pytest.mark.bench
REPS = 7
BATCH, SIZE = 8, 64
THREADS = [int(n) for n in os.environ.get("DCSTUDIO_BENCH_THREADS", "1,2").split(",")]
MODELS = {"resnet18": {}, "efficientnet_b0": {"dropout": 0.0, "stochastic_depth_prob": 0.0}}
LIBRARY = ("matmul", "gemm", "einsum", "fused_matmul", "conv", "conv_transpose", "conv_weight_grad", "reference")


def _model(name: str):
    import torch
    torch.manual_seed(0)
    return getattr(torchvision_models(), name)(num_classes=10, **MODELS[name])


@pytest.fixture(scope="module", params=list(MODELS))
def case(request, tmp_path_factory):
    import torch
    name = request.param
    x = torch.randn(BATCH, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp(name) / f"{name}_train.onnx"
    forward = export(_model(name), (x,), dynamo=False, names=("input",), training=True)
    onnx.save(build_training_graph(forward, loss="cross_entropy", optimizer="adamw"), path)
    session = Session.open(path, autosave=False)
    original, feeds = session.graph, feeds_for(session.graph)
    recipe = pick(session.graph)
    run_recipe(session, RECIPES[recipe])
    res = export_package(session.graph, tmp_path_factory.mktemp("pkg") / f"{name}_step", inputs=feeds)
    kernel_cache.install_locator()
    return name, path, original, feeds, session, recipe, load_package(res.path)


def _labels(pkg) -> dict[str, str]:
    """Kernel name -> the label of the first statement (``# <node id> (<label>)``) that calls it."""
    labels, current = {}, "?"
    for line in open(pkg.model.__file__, encoding="utf-8"):
        found = re.match(r"\s*# \S+ \((.*)\)$", line)
        if found:
            current = found.group(1)
        for k in re.findall(r"K\.(k_\w+)\(", line):
            labels.setdefault(k, current)
    return labels


def _slowest(pkg, model, feeds, n: int = 5) -> list[tuple[str, float, int]]:
    """(what, seconds in one step, calls) of the ``n`` library functions and kernels that take longest."""
    lib, kernels, labels = pkg.model.L, pkg.model.K, _labels(pkg)
    spent, calls = collections.Counter(), collections.Counter()

    def timed(fn, what):
        def call(*args, **kw):
            t0 = time.perf_counter()
            out = fn(*args, **kw)
            spent[what] += time.perf_counter() - t0
            calls[what] += 1
            return out
        return call
    saved = {(lib, k): getattr(lib, k) for k in LIBRARY if hasattr(lib, k)}
    saved.update({(kernels, k): getattr(kernels, k) for k in dir(kernels) if k.startswith("k_")})
    try:
        for (owner, k), fn in saved.items():
            setattr(owner, k, timed(fn, f"L.{k}" if owner is lib else f"kernel ({labels.get(k, k)})"))
        model.step(**feeds)
    finally:
        for (owner, k), fn in saved.items():
            setattr(owner, k, fn)
    return [(k, spent[k], calls[k]) for k, _ in spent.most_common(n)]


@pytest.mark.parametrize("n_threads", THREADS)
def test_exported_cnn_step_vs_onnxruntime_and_torch(case, n_threads, tmp_path):
    import torch
    name, path, original, feeds, session, recipe, pkg = case
    info = threads.pin(n_threads)
    model = pkg.Model(recycle_outputs=True, threads=n_threads)
    out = model.step(**feeds)
    assert mismatches(original, reference(original, feeds), out, 1e-3) == []
    ort_run = ort_step(path, feeds, n_threads)

    torch.set_num_threads(n_threads)
    net = _model(name).train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.from_numpy(feeds["input"])
    labels = torch.randint(0, 10, (BATCH,), generator=torch.Generator().manual_seed(2))

    def torch_step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), labels).backward()
        opt.step()
    torch_step()

    child = PackageStep(Path(pkg.__file__).parent, feeds, n_threads, tmp_path)
    try:
        med = interleaved_medians({"dcstudio": child, "onnxruntime": ort_run, "torch": torch_step}, REPS)
    finally:
        child.close()
    m = session.metrics()
    print(f"\n{name} training step (batch {BATCH}, {SIZE}x{SIZE}), {n_threads} thread(s) ({info}); recipe '{recipe}' "
          f"({session.cursor} steps), {m.bytes / 1e6:.0f} MB moved, {m.ratio:.2f}x the bound; median of {REPS}:")
    for k, t in med.items():
        print(f"  {k:<12} {t * 1e3:8.1f} ms")
    print(f"  (dcstudio's step ran in a process of its own that imports only the package: {child.info})")
    print(f"  speed-up vs onnxruntime {med['onnxruntime'] / med['dcstudio']:.3f}x (target 1.0x), "
          f"vs torch eager {med['torch'] / med['dcstudio']:.3f}x")
    print("  slowest calls in one step (each call timed; with 2+ threads, calls in parallel steps overlap, "
          "so their times overstate):")
    for what, seconds, count in _slowest(pkg, model, feeds):
        print(f"    {seconds * 1e3:7.1f} ms  {count:3d} calls  {what}")
    assert med["onnxruntime"] / med["dcstudio"] > 0.5
