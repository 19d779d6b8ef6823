"""``python -m <package> --check`` passes in a fresh venv that has only NumPy and numba: the exported
package needs nothing from dcstudio (acceptance of the code-generation issue). Packages: the fused
MLP training step (ORT artifact, expand + map_fusion) and the hostile-names model."""
from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numpy_ref.feeds import feeds_for  # noqa: E402
from ir.onnx_import import import_model  # noqa: E402
from tests.peer.fixture_feeds import ORT_MODELS, ort_feeds  # noqa: E402
from tests.peer.test_export_fixtures import fuse_everything  # noqa: E402
from tests.unit.codegen.test_export_hostile import hostile_model  # noqa: E402

PINS = ("numpy==2.4.6", "numba==0.68.1")


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """A new venv with only the two pinned packages (pip takes them from the local cache)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    py = root / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
                          capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"pip install {' '.join(PINS)} failed:\n{proc.stderr[-2000:]}")
        pytest.skip(f"cannot install {' '.join(PINS)} into a fresh venv (offline?): {proc.stderr[-300:]}")
    return py


def _run(py: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return subprocess.run([str(py), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_fresh_venv_has_no_dcstudio(fresh_python, tmp_path):
    proc = _run(fresh_python, tmp_path, "-c", "import codegen")
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr
    listed = _run(fresh_python, tmp_path, "-m", "pip", "list", "--format=freeze").stdout
    names = {line.split("==")[0].lower() for line in listed.split()}
    assert names <= {"numpy", "numba", "llvmlite", "pip", "setuptools", "wheel"}, names


@pytest.mark.slow
def test_check_passes_in_a_fresh_venv(fresh_python, tmp_path, fixtures_dir):
    folder = fixtures_dir / "ort_artifacts" / ORT_MODELS["mlp"]
    g = import_model(folder / "training_model.onnx")
    feeds = ort_feeds(g, np.load(folder / "reference.npz"))
    assert fuse_everything(g) > 0
    res = export_package(g, tmp_path / "mlp_fused", inputs=feeds)
    hostile = hostile_model(str(tmp_path / "PWNED"))
    export_package(hostile, tmp_path / "hostile_pkg", inputs=feeds_for(hostile))
    for pkg in ("mlp_fused", "hostile_pkg"):
        proc = _run(fresh_python, tmp_path, "-m", pkg, "--check", "--time", "3")
        assert proc.returncode == 0, f"{pkg}:\n{proc.stdout}\n{proc.stderr}"
        assert "outputs match" in proc.stdout and "step: median" in proc.stdout
    assert res.kernels > 0 and not (tmp_path / "PWNED").exists()
