"""A float64 model built fresh for this test (Linear, LayerNorm, exact GELU, softmax), through the pipeline a
user runs: train-graph, recipe, ``replay --check``, export, the package's ``--check`` with float64 tolerances,
and the same history exported for CUDA with every kernel compiled by NVRTC in double.

onnxruntime has no float64 ``Erf``, so the reference executor is the baseline: its tasklet erf was a
float32-grade form (1.2e-7 off) and the CUDA printer wrote float32 math (``expf``, ``erff``) into double
kernels; the package's tolerances here are a few float64 ulps, which either would exceed by 10⁸.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed: the test exports a CPU package")

from tests.conftest import run_cli  # noqa: E402


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.ln(self.fc1(x))).softmax(-1) * 3)


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("float64")
    torch.manual_seed(0)
    torch.onnx.export(Head().double(), (torch.randn(8, 32, dtype=torch.float64),), tmp / "head64.onnx",
                      input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    assert run_cli("train-graph", tmp / "head64.onnx", "--loss", "cross_entropy", "--optimizer", "adamw",
                "-o", tmp / "step.onnx")[0] == 0
    assert run_cli("recipe", tmp / "step.onnx", "-o", tmp / "h.json", "--quiet")[0] == 0
    return tmp


def test_float64_step_checks_and_its_package_matches_to_float64_ulps(step):
    code, out = run_cli("replay", step / "step.onnx", step / "h.json", "--check", "--quiet")
    check = next(line for line in out.splitlines() if line.startswith("check: "))
    assert code == 0 and "all within tolerance" in check, out[-2000:]
    assert "Could not find an implementation for Erf(13)" in check          # why onnxruntime is left out
    assert "(reference executor vs float64 truth)" in check                 # no fp32 anywhere in its basis
    assert run_cli("export", step / "step.onnx", step / "h.json", "-o", step / "pkg64")[0] == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-m", "pkg64", "--check"], cwd=step, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("outputs match"), run.stdout[-2000:] + run.stderr
    tolerances = [float(t) for t in re.findall(r"tolerance ([0-9.e+-]+)\)", run.stdout)]
    assert tolerances and max(tolerances) < 1e-12, max(tolerances)      # float64 tolerances, not float32's


def test_float64_step_exports_for_cuda_in_double(step):
    from codegen.cupy_cuda.nvrtc import available, compile_check
    assert run_cli("export", step / "step.onnx", step / "h.json", "-o", step / "pkg64_cuda", "--backend", "cuda")[0] == 0
    sources = {}
    for path in sorted((step / "pkg64_cuda" / "kernels").glob("k_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        sources[path.stem] = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                                  and getattr(n.targets[0], "id", "") == "SOURCE")
    text = "\n".join(sources.values())
    assert "erf(" in text and "exp(" in text and not re.search(r"\b(erff|expf|sqrtf|rsqrtf)\(", text)
    if available() is None:
        failed = {name: str(r)[:300] for name, src in sources.items() if not (r := compile_check(src, name)).ok}
        assert not failed, failed
