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


def test_the_stacking_probe_computes_what_the_separate_gemms_compute():
    """``stacking.py`` (run on a lent GPU with CuPy) here with NumPy: each stacked form's product equals
    the separate calls' (``check`` raises otherwise), and every stacked form is priced against its family."""
    import time

    from tests.bench.gpu import stacking

    def once(fn):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    rows = stacking.run(np, once)
    assert len(rows) == 7 and all(r["us"] > 0 for r in rows)
    saved = [r for r in rows if "saving_us" in r]
    assert len(saved) == 4 and all(r["form"].split(" ")[0] in ("qkv_forward", "qkv_weight_grad") for r in saved)
    a = stacking._operands(np)
    forms = stacking.forms(np, a)
    assert stacking.check(np, a, forms) < 1e-5
    a["w_stacked"][0, 0] += 1.0                 # stale stacked weights: the check sees the difference
    forms["qkv_forward stacked, weights copied in the step"] = forms["qkv_forward stacked, weights kept stacked"]
    assert stacking.check(np, a, forms) > 1e-3
    assert "saves" in stacking.table(rows)
