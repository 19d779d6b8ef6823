"""``dcstudio profile``: the per-kernel table with how each generated kernel's loops run, views shown
without a rate or a roof (an alias moves no data), and the "above the roof" warning only for kernels
that only low peaks explain."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.timing.calibrate import Peaks  # noqa: E402
from codegen.timing.roofline import over_roof  # noqa: E402
from codegen.timing.stats import KernelTiming, Samples  # noqa: E402
from ir.statements import StatementKind  # noqa: E402
from studio.cli import main  # noqa: E402
from studio.cli.profile import _table  # noqa: E402
from tests.unit.ir.onnx_models import mlp  # noqa: E402


def test_profile_prints_every_kernel_with_its_loops(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(batch=64), path)
    assert main(["profile", str(path), "--reps", "2", "--warmup", "0", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("kernel "))
    assert head.split()[-1] == "loops" and "FAILED" not in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in ("fc1", "act/expanded")}
    assert rows["act/expanded"].endswith("  map order") and rows["fc1"].split()[1] == "blas"
    assert not rows["fc1"].endswith("order")


def test_profile_times_on_given_inputs_and_refuses_wrong_ones(tmp_path, capsys):
    """``--inputs`` times on the user's arrays; a wrong shape or an unknown name is refused (exit 2) with
    the file, the input and what the graph takes."""
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(batch=64), path)
    np.savez(tmp_path / "x.npz", x=np.ones((64, 4), np.float32))
    np.savez(tmp_path / "bad.npz", x=np.ones((3, 4), np.float32))
    np.savez(tmp_path / "other.npz", y=np.ones((64, 3), np.float32))
    base = ["profile", str(path), "--reps", "2", "--warmup", "0", "--threads", "1", "--inputs"]
    assert main(base + [str(tmp_path / "x.npz")]) == 0 and "FAILED" not in capsys.readouterr().out
    assert main(base + [str(tmp_path / "bad.npz")]) == 2
    assert "bad.npz: 'x' has shape (3, 4), the graph takes (64, 4)" in capsys.readouterr().err
    assert main(base + [str(tmp_path / "other.npz")]) == 2
    assert "other.npz: ['y'] are not inputs of the graph" in capsys.readouterr().err


def test_given_inputs_take_the_graphs_dtypes_where_their_kind_allows(tmp_path):
    """float64 data for a float32 input is converted (NumPy saves Python floats as float64); floats for an
    int64 input (token ids) are refused, naming both dtypes. Before, either went into the kernels as given."""
    from ir.errors import StudioError
    from studio.session.exporting import inputs_for
    from studio.session.loading import load_graph
    onnx.save(mlp(batch=64), tmp_path / "mlp.onnx")
    g = load_graph(tmp_path / "mlp.onnx")
    np.savez(tmp_path / "x64.npz", x=np.full((64, 4), 0.1))
    feeds = inputs_for(g, str(tmp_path / "x64.npz"))
    assert feeds["x"].dtype == np.float32 and np.array_equal(feeds["x"], np.full((64, 4), 0.1, np.float32))
    tiny = load_graph(Path(__file__).resolve().parents[3] / "resources/examples/bert_stack4_tiny.onnx")
    np.savez(tmp_path / "ids.npz", input_ids=np.zeros((2, 8)))
    with pytest.raises(StudioError, match="inputs file .*ids.npz: 'input_ids' is float64, the graph takes int64"):
        inputs_for(tiny, str(tmp_path / "ids.npz"), label="inputs file")


def test_views_get_no_rate_and_no_roof():
    """A view's counted bytes "move" in microseconds (it aliases its input): 20x the roof, which says
    nothing about the peaks. It shows no GB/s, % of triad or efficiency, and does not raise the warning."""
    peaks = Peaks(20e9, 50e9, 1, "test", 0.0)
    view = KernelTiming("r", "Reshape", StatementKind.VIEW, Samples(1e-6, 1e-6, 1e-6, 0.0, 3), 400_000,
                        peak_bw=peaks.bandwidth, peak_flops=peaks.flops)
    kernel = KernelTiming("k", "Add", StatementKind.KERNEL, Samples(1e-3, 1e-3, 1e-3, 0.0, 3), 400_000_000,
                          peak_bw=peaks.bandwidth, peak_flops=peaks.flops, extra={"schedule": "map order"})
    assert view.efficiency > 1.05 and kernel.efficiency > 1.05
    assert over_roof([view, kernel], peaks, cache=0) == [kernel]
    table = _table(type("P", (), {"kernels": [view, kernel]})(), None).splitlines()
    assert table[2].startswith("k ") and table[2].endswith("  map order") and "%" in table[2]   # slowest first
    assert table[3].split()[-3:] == ["–", "0.00", "–"] and table[3].count("–") == 3
