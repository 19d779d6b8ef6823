"""build_training_graph / write_training_graph: the standard-ONNX contract, the import roles,
options, errors that name the node, and atomic writes."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ir.containers import Role
from ir.errors import ShapeError, StudioError, UnsupportedOpError
from ir.onnx_import import import_proto
from tests.unit.transforms.autodiff.forward_models import mlp, mlp_batch, with_node
from tests.unit.transforms.autodiff.gradcheck import ort_run
from transforms.autodiff import (NoGradientError, OptionError, TrainingOptions, build_training_graph,
                                 write_training_graph)
from transforms.autodiff.training_graph import METADATA_KEY

PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
STATE = {"adamw": ["m", "v"], "sgd": ["momentum"], "lion": ["m"]}


@pytest.mark.parametrize("opt", ["adamw", "sgd", "lion"])
def test_standard_onnx_with_the_documented_interface(opt):
    model = build_training_graph(mlp(), optimizer=opt)
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert all(n.domain == "" for n in model.graph.node)
    states = [f"{p}.{s}" for p in PARAMS for s in STATE[opt]]
    assert [i.name for i in model.graph.input] == (
        ["input", "labels"] + PARAMS + states + ["learning_rate"] + (["step"] if opt == "adamw" else []))
    new = [n for p in PARAMS for n in [f"{p}.new"] + [f"{p}.{s}.new" for s in STATE[opt]]]
    assert [o.name for o in model.graph.output] == ["loss"] + new + [f"{p}_grad" for p in PARAMS]
    scalars = {i.name: i.type.tensor_type for i in model.graph.input if i.name in ("learning_rate", "step")}
    assert all(t.elem_type == TensorProto.FLOAT and len(t.shape.dim) == 0 for t in scalars.values())


@pytest.mark.parametrize("opt", ["adamw", "sgd", "lion", None])
def test_import_detects_the_roles(opt):
    graph = import_proto(build_training_graph(mlp(), optimizer=opt))
    role = {n: graph.containers[n].role for n in list(graph.inputs) + list(graph.outputs)}
    assert role["input"] is role["labels"] is Role.INPUT and role["loss"] is Role.OUTPUT
    for p in PARAMS:
        assert role[p] is Role.PARAMETER and role[f"{p}_grad"] is Role.GRADIENT
        if opt:
            assert role[f"{p}.new"] is Role.PARAMETER
        for s in STATE.get(opt, []):
            assert role[f"{p}.{s}"] is role[f"{p}.{s}.new"] is Role.OPTIMIZER_STATE
    if opt:
        assert role["learning_rate"] is Role.INPUT


def test_initial_values_are_default_inputs_and_can_be_left_out():
    with_values = build_training_graph(mlp(), optimizer=None)
    without = build_training_graph(mlp(), optimizer=None, initial_values=False)
    assert set(PARAMS) <= {t.name for t in with_values.graph.initializer}
    assert not set(PARAMS) & {t.name for t in without.graph.initializer}
    feeds = mlp_batch()
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in with_values.graph.initializer}
    a = ort_run(with_values, feeds)
    b = ort_run(without, {**feeds, **{p: inits[p] for p in PARAMS}})
    np.testing.assert_array_equal(a["loss"], b["loss"])


def test_gradients_only_or_update_only():
    grads_only = build_training_graph(mlp(), optimizer=None)
    assert [o.name for o in grads_only.graph.output] == ["loss"] + [f"{p}_grad" for p in PARAMS]
    assert "learning_rate" not in {i.name for i in grads_only.graph.input}
    update_only = build_training_graph(mlp(), optimizer="sgd", emit_gradients=False)
    assert not any(o.name.endswith("_grad") for o in update_only.graph.output)
    with pytest.raises(OptionError, match="nothing to output"):
        build_training_graph(mlp(), optimizer=None, emit_gradients=False)


def test_trainable_subset_keeps_the_rest_frozen():
    model = build_training_graph(mlp(), optimizer="sgd", trainable=["fc2.weight", "fc2.bias"])
    inputs = {i.name for i in model.graph.input}
    assert {"fc2.weight", "fc2.bias"} <= inputs and not {"fc1.weight", "fc1.bias"} & inputs
    assert {"fc1.weight", "fc1.bias"} <= {t.name for t in model.graph.initializer}
    with pytest.raises(OptionError, match="'nope'.*candidates: fc1.weight"):
        build_training_graph(mlp(), trainable=["nope"])


def test_options_are_recorded_in_the_model():
    model = build_training_graph(mlp(), optimizer="lion", lr=3e-4, weight_decay=0.1)
    props = {p.key: p.value for p in model.metadata_props}
    opts = TrainingOptions.from_json(props[METADATA_KEY])
    assert opts == TrainingOptions(optimizer="lion", lr=3e-4, weight_decay=0.1)
    assert json.loads(props[METADATA_KEY])["betas"] == [0.9, 0.99]


def test_older_opsets_are_upgraded_to_17():
    model = build_training_graph(mlp(opset=13), optimizer="sgd")
    assert model.opset_import[0].version == 17
    onnx.checker.check_model(model, full_check=True)


def test_an_op_without_a_rule_names_the_op_and_node_and_lists_the_supported_ops(tmp_path):
    forward = with_node(mlp(), helper.make_node("Selu", ["output"], ["act"], name="the_selu"), "act", shape=[8, 3])
    with pytest.raises(NoGradientError) as info:
        build_training_graph(forward, loss="mse")
    msg = str(info.value)
    assert isinstance(info.value, UnsupportedOpError)
    assert "no gradient rule for op Selu" in msg and "'the_selu'" in msg and "MatMul" in msg and "Softmax" in msg
    src, out = tmp_path / "fwd.onnx", tmp_path / "train.onnx"
    onnx.save(forward, src)
    with pytest.raises(NoGradientError):
        write_training_graph(src, out, loss="mse")
    assert sorted(os.listdir(tmp_path)) == ["fwd.onnx"]


def test_ops_off_the_parameter_path_need_no_rule():
    forward = mlp()
    forward.graph.node.insert(0, helper.make_node("Selu", ["input"], ["input_selu"], name="pre"))
    forward.graph.node[1].input[0] = "input_selu"
    model = build_training_graph(forward, optimizer=None)
    assert ort_run(model, mlp_batch())["fc1.weight_grad"].shape == (5, 6)


def test_other_domains_and_symbolic_shapes_are_refused():
    custom = with_node(mlp(), helper.make_node("Gelu", ["output"], ["g"], domain="com.microsoft"), "g")
    custom.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpError, match="com.microsoft::Gelu"):
        build_training_graph(custom)
    symbolic = mlp()
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(ShapeError, match="static shape"):
        build_training_graph(symbolic)


def test_forward_names_that_clash_with_generated_outputs_are_refused():
    forward = mlp()
    for node in forward.graph.node:
        node.output[:] = ["loss" if o == "h" else o for o in node.output]
        node.input[:] = ["loss" if i == "h" else i for i in node.input]
    with pytest.raises(StudioError, match="'loss' is already used"):
        build_training_graph(forward)


def test_write_is_atomic(tmp_path, monkeypatch):
    src, out = tmp_path / "fwd.onnx", tmp_path / "train.onnx"
    onnx.save(mlp(), src)
    assert write_training_graph(src, out, optimizer="adamw") == out
    first = out.read_bytes()
    onnx.checker.check_model(onnx.load(out), full_check=True)

    def broken_replace(a, b):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_training_graph(src, out, optimizer="sgd")
    assert out.read_bytes() == first
    assert sorted(os.listdir(tmp_path)) == ["fwd.onnx", "train.onnx"]
