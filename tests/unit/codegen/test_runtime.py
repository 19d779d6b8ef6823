"""``codegen.program.runtime``: the exported ``Model`` as a training object (defaults, step count,
learning rate, state in and out), its checkpoint files and its ONNX writer (protobuf without onnx),
on a package exported from a generated AdamW step of a small MLP."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from codegen.program.runtime import _field, _tensor, write_atomic

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import feeds_for  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.unit.transforms.autodiff.forward_models import mlp, mlp_batch  # noqa: E402
from transforms.autodiff import build_training_graph  # noqa: E402
from transforms.autodiff.deploy import eval_forward  # noqa: E402


@pytest.mark.parametrize("value", [np.arange(6, dtype=np.float32).reshape(2, 3), np.asarray(2.5, np.float64),
                                   np.array([True, False]), np.arange(4, dtype=np.int64) - 2,
                                   np.linspace(-1, 1, 5).astype(np.float16)])
def test_appended_initializers_merge_into_the_model(value):
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(value.dtype), None)])
    base = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    model = onnx.load_from_string(base + _field(7, _field(5, _tensor("w", value))))
    (t,) = model.graph.initializer
    assert t.name == "w" and numpy_helper.to_array(t).dtype == value.dtype
    np.testing.assert_array_equal(numpy_helper.to_array(t), value)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {})[0], value)


def test_write_atomic_replaces_or_leaves_nothing(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        write_atomic(str(path), lambda f: (f.write(b"half"), (_ for _ in ()).throw(RuntimeError("disk full"))))
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.bin"]
    write_atomic(str(path), lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    proto = build_training_graph(mlp(), optimizer="adamw", lr=0.01)
    graph = import_proto(proto)
    res = export_package(graph, tmp_path_factory.mktemp("rt") / "pkg_runtime", inputs=feeds_for(graph),
                         forward=eval_forward(proto))
    return graph, load_package(res.path), res


def test_defaults_are_the_parameters_zero_state_the_recorded_rate_and_the_step_count(package):
    """Three ``train_step`` calls with nothing but the batch equal the generated step fed the initial parameters,
    zero moments, lr 0.01 and steps 1, 2, 3 (each step checked as ``--check`` is: ``codegen.oracle``)."""
    from codegen.oracle import Oracle
    graph, mod, res = package
    proto = build_training_graph(mlp(), optimizer="adamw", lr=0.01)
    m = mod.Model()
    assert m.lr == pytest.approx(0.01) and m.step_count == 1
    assert "fc1.weight.m" not in m.state                     # made on first use, not stored in weights.npz
    with np.load(res.path / "weights.npz") as w:
        assert not any(k.endswith(("_m", "_v")) for k in w.files)
    batch = mlp_batch()
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    state = {n: inits[n] for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}
    state.update({f"{n}.{s}": np.zeros_like(v) for n, v in list(state.items()) for s in ("m", "v")})
    for k in range(1, 4):
        feeds = {**batch, **state, "learning_rate": np.float32(0.01), "step": np.float32(k)}
        got = m.train_step(**batch)
        result = Oracle.of(graph, proto, feeds).check(got)
        assert result.ok, f"step {k}: {result.summary}"
        state = {n: reference(graph, feeds)[f"{n}.new"] for n in state}
    assert m.step_count == 4


def test_a_learning_rate_per_step_and_an_explicit_step(package):
    graph, mod, _ = package
    a, b = mod.Model(), mod.Model()
    batch = mlp_batch()
    slow = a.train_step(learning_rate=np.float32(0.0), **batch)
    np.testing.assert_array_equal(slow["fc1.weight.new"], a.weights[a.P._DEFAULTS["fc1.weight"]])  # lr 0: no move
    b.train_step(step=np.float32(7), **batch)
    assert a.step_count == 2 and b.step_count == 8


def test_state_dict_round_trip_and_refusals(package, tmp_path):
    _, mod, _ = package
    m = mod.Model(seed=3)
    m.train_step(**mlp_batch())
    sd = m.state_dict()
    assert set(sd) == set(m.state_names()) and "fc2.bias.v" in sd
    other = mod.Model()
    other.load_state_dict(sd)
    assert all(np.array_equal(other.state_dict()[n], v) for n, v in sd.items())
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict({n: v for n, v in sd.items() if n != "fc1.bias"})
    with pytest.raises(ValueError, match="shape"):
        other.load_state_dict({**sd, "fc1.bias": np.zeros(99, np.float32)})
    path = m.save(str(tmp_path / "ck.npz"))
    with np.load(path) as data:
        meta = json.loads(str(data["__meta__"]))
    assert meta["step_count"] == 2 and meta["seed"] == 3 and meta["format"] == "dcstudio-checkpoint"
    again = mod.Model().load(path)
    assert again.step_count == 2 and again.seed == 3


def test_the_loss_is_the_steps_first_statements_printed_once(package):
    """``_step`` computes the loss first (``module_plan.loss_first``): ``_forward`` calls the same
    ``_step_forward`` on the step's buffers, so the loss is the step's to the bit and no second pool is made."""
    _, mod, res = package
    P, m, batch = mod.model, mod.Model(), mlp_batch()
    assert P._FORWARD_SLOTS is P._SLOTS and P._FORWARD_OUT_SLOTS == ()
    text = (res.path / "model.py").read_text()
    assert text.count("saved = _step_forward(") == 2 and text.count("def _step_forward(") == 1
    loss = m.loss(**batch)
    assert np.array_equal(loss["loss"], m.step(**batch)["loss"])
    assert np.array_equal(loss["loss"], m.loss(**batch)["loss"])
    assert "forward" not in m._pools and "step" in m._pools


def test_forward_is_the_eval_prediction_and_export_onnx_writes_it(package, tmp_path):
    from codegen.oracle import Oracle
    graph, mod, _ = package
    m = mod.Model()
    m.train_step(**mlp_batch())
    x = mlp_batch(seed=5)["input"]
    pred = m.forward(input=x)
    assert list(pred) == ["output"]
    exported = onnx.load(m.export_onnx(str(tmp_path / "trained.onnx")))
    trained = m.state_dict()
    written = {t.name: numpy_helper.to_array(t) for t in exported.graph.initializer}
    assert set(written) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert all(np.array_equal(v, trained[n]) for n, v in written.items())      # the trained values, to the bit
    result = Oracle.of(import_proto(exported), exported, {"input": x}).check(pred)
    assert result.ok, result.summary
    loss = m.loss(**mlp_batch())
    assert set(loss) == set(mod.model.FORWARD_OUTPUTS) == {"loss"}
