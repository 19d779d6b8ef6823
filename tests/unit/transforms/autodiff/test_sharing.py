"""``sharing``: which module reads an initializer (dynamo name scopes, legacy node names, through views and
ties), the report, and ``untie``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from transforms.autodiff.options import OptionError
from transforms.autodiff.sharing import module_of, report_lines, shared_parameters, untie


def _dynamo(name, op, inputs, scopes):
    node = helper.make_node(op, inputs, [name], name=name)
    helper.set_metadata_props(node, {"pkg.torch.onnx.name_scopes": repr(scopes)})
    return node


def test_module_of_reads_dynamo_scopes_and_legacy_names():
    assert module_of(_dynamo("mul", "Mul", ["a", "b"], ["", "layers.0", "layers.0.norm", "mul"])) == "layers.0.norm"
    assert module_of(helper.make_node("Mul", ["a"], ["b"], name="/layers.0/input_layernorm/Mul_1")) == \
        "layers.0.input_layernorm"
    assert module_of(helper.make_node("Conv", ["a"], ["b"], name="/features/features.0/features.0.0/Conv")) == \
        "features.0.0"
    assert module_of(helper.make_node("Mul", ["a"], ["b"], name="Mul_3")) is None


def _graph():
    w = numpy_helper.from_array(np.linspace(0.5, 1.5, 4).astype(np.float32), "a.norm.weight")
    nodes = [helper.make_node("Mul", ["x", "a.norm.weight"], ["y1"], name="/a/norm/Mul"),
             helper.make_node("Transpose", ["a.norm.weight"], ["wt"], name="dcstudio_tie/t"),
             helper.make_node("Mul", ["y1", "wt"], ["y2"], name="/b/norm/Mul"),
             helper.make_node("Mul", ["y2", "a.norm.weight"], ["y"], name="/c/Mul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shared_parameters_follow_views_and_ties():
    shared = shared_parameters(_graph().graph, ["a.norm.weight"])
    assert shared == {"a.norm.weight": ["a.norm", "b.norm", "c"]}
    (line,) = report_lines(shared)
    assert "a.norm.weight: shared by 3 modules: a.norm, b.norm, c; if your model does not tie them, pass " \
           "--untie a.norm.weight" in line


def test_untie_gives_each_module_its_copy_and_names_it_after_the_module():
    model, notes = untie(_graph(), ["a.norm.weight"])
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert set(inits) == {"a.norm.weight", "b.norm.weight", "c.weight"}
    assert all(np.array_equal(v, inits["a.norm.weight"]) for v in inits.values())
    reads = {n.name: list(n.input) for n in model.graph.node}
    assert reads["/a/norm/Mul"][1] == "a.norm.weight" and reads["dcstudio_tie/t"] == ["b.norm.weight"]
    assert reads["/c/Mul"][1] == "c.weight"
    assert notes == ["b.norm.weight: untied from a.norm.weight (module b.norm)",
                     "c.weight: untied from a.norm.weight (module c)"]
    assert shared_parameters(model.graph, list(inits)) == {}


def test_untie_refuses_what_it_cannot_do():
    with pytest.raises(OptionError, match="not an initializer"):
        untie(_graph(), ["nope"])
    model, _ = untie(_graph(), ["a.norm.weight"])
    with pytest.raises(OptionError, match="read by 1 module"):
        untie(model, ["c.weight"])
