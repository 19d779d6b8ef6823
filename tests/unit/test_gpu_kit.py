"""The GPU sweep's kit (``tests/bench/gpu/kit.py``): weightless skeletons that rebuild to the same bytes.

The device machine gets no weights (64 MiB limit): it rebuilds each model from its skeleton, and the
recipe history recorded here must replay there, which needs the rebuilt file's sha256 to be the one
recorded. So: rebuilding twice gives identical bytes, every initializer comes back with its shape and
dtype, constants and small tensors exactly, and large float tensors at their recorded scale."""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

from tests.bench.gpu.kit import KEEP, rebuild, skeleton


def test_skeleton_rebuilds_to_the_same_bytes(fixtures_dir, tmp_path):
    src = fixtures_dir / "joint_standard" / "tiny_resnet_joint_adamw.onnx"
    original = onnx.load(str(src))
    want = {i.name: numpy_helper.to_array(i) for i in original.graph.initializer}
    skel, fill = skeleton(onnx.load(str(src)))
    assert fill and all(want[n].size > KEEP and want[n].dtype.kind == "f" for n in fill)
    onnx.save(skel, tmp_path / "m.skel.onnx")
    (tmp_path / "m.fill.json").write_text(json.dumps(fill))
    row = {"case": "m", "model": "m.skel.onnx", "fill": "m.fill.json"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = rebuild(tmp_path, row, tmp_path / "a"), rebuild(tmp_path, row, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    got = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(a)).graph.initializer}
    assert [i.name for i in onnx.load(str(a)).graph.initializer] == [i.name for i in original.graph.initializer]
    for name, arr in want.items():
        assert got[name].shape == arr.shape and got[name].dtype == arr.dtype
        if name not in fill or fill[name]["const"]:
            np.testing.assert_array_equal(got[name], arr)
        else:
            assert abs(float(got[name].std()) - float(arr.std())) <= 0.1 * float(arr.std()) + 1e-6
