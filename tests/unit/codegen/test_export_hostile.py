"""Generated code is safe: tensor and node names with quotes, newlines, Python keywords,
``__import__('os')`` and non-ASCII export to code that parses, runs correctly and executes
nothing from the names (STYLE.md "Generated code: readable and safe")."""
from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import compare, feeds_for  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.unit.ir.onnx_models import model, vi  # noqa: E402


def hostile_model(canary: str):
    """MatMul → Add → Tanh → ReduceSum, every name an attempt at code injection."""
    touch = f"__import__('os').system('touch {canary}')"
    x = f"x\"'; {touch} #"
    h = f"h\nimport os; os.system('touch {canary}')\n"
    y = "λ-输出 \"y\"\\"
    nodes = [helper.make_node("MatMul", [x, "class"], [h], name="def\n'node'\"\\"),
             helper.make_node("Add", [h, touch], ["lambda"], name=touch),
             helper.make_node("Tanh", ["lambda"], [y], name="ünïcode ✓ \"\"\""),
             helper.make_node("ReduceSum", [y], ["None"], name="return", keepdims=0)]
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "class"),
             numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), touch)]
    return import_proto(model(nodes, [vi(x, [2, 4])], [vi(y, [2, 3]), vi("None", [])], inits))


def _no_injected_calls(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            assert name not in ("__import__", "system", "exec", "eval"), ast.unparse(node)
        if isinstance(node, ast.Name):
            assert node.id.isidentifier() and node.id != "__import__"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    canary = root / "PWNED"
    g = hostile_model(str(canary))
    feeds = feeds_for(g)
    res = export_package(g, root / "hostile_pkg", inputs=feeds)
    return g, feeds, res, canary


def test_every_generated_file_parses_and_calls_nothing_from_the_names(exported):
    _, _, res, _ = exported
    for path in res.path.rglob("*.py"):
        _no_injected_calls(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    text = (res.path / "model.py").read_text(encoding="utf-8")
    assert text.isascii()                       # names appear only as escaped string literals


def test_names_survive_as_data(exported):
    g, feeds, res, _ = exported
    mod = load_package(res.path)
    assert list(mod.INPUTS) == list(g.inputs) and list(mod.OUTPUTS) == list(g.outputs)
    out = mod.Model().step(**feeds)
    assert compare(reference(g, feeds), out, 1e-5) == []


def test_running_the_package_executes_nothing_from_the_names(exported):
    _, _, res, canary = exported
    proc = subprocess.run([sys.executable, "-m", res.package, "--check"], cwd=res.path.parent,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2/2 outputs match" in proc.stdout
    assert not canary.exists()
