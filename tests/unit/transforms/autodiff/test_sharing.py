"""``sharing``: which module reads an initializer (dynamo name scopes, legacy node names, through views and
ties), the report, and ``untie``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from transforms.autodiff.options import OptionError
from transforms.autodiff.sharing import module_of, report_lines, shared_parameters, untie, untie_statistics


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


def _batchnorms():
    """Two BatchNorms as the dynamo exporter leaves fresh ones: n1's variance is its weight (ones), its mean its
    bias (zeros); n2 reads its own weight and bias but n1's statistics' initializers."""
    ones, zeros = np.ones(3, np.float32), np.zeros(3, np.float32)
    inits = [numpy_helper.from_array(v, n) for v, n in ((ones, "n1.weight"), (zeros, "n1.bias"),
                                                       (ones * 2, "n2.weight"), (zeros + 1, "n2.bias"))]
    nodes = [_dynamo("y1", "BatchNormalization", ["x", "n1.weight", "n1.bias", "n1.bias", "n1.weight"],
                     ["", "n1", "bn"]),
             _dynamo("y", "BatchNormalization", ["y1", "n2.weight", "n2.bias", "n1.bias", "n1.weight"], ["", "n2", "bn"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_untie_statistics_gives_each_batchnorm_statistic_its_own_copy():
    model = _batchnorms()
    out, notes = untie_statistics(model)
    n1, n2 = out.graph.node
    assert list(n1.input) == ["x", "n1.weight", "n1.bias", "n1.running_mean", "n1.running_var"]
    assert list(n2.input) == ["y1", "n2.weight", "n2.bias", "n2.running_mean", "n2.running_var"]
    values = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    assert values["n1.running_var"].tolist() == [1, 1, 1] and values["n2.running_mean"].tolist() == [0, 0, 0]
    kinds = {vi.name: {p.key: p.value for p in vi.metadata_props} for vi in out.graph.value_info}
    assert set(kinds["n2.running_var"].values()) == {"BUFFER"}
    assert len(notes) == 4 and notes[0].startswith("n1.running_var: BatchNorm 'y1' read its running variance "
                                                   "from n1.weight, which 2 other input(s) read too")
    assert list(model.graph.node[0].input)[3:] == ["n1.bias", "n1.weight"]          # the input is left alone
    assert untie_statistics(out) == (out, [])


def test_a_statistic_only_batchnorms_read_is_kept_by_the_first():
    model = _batchnorms()
    for node in model.graph.node:
        node.input[1], node.input[2] = "n2.weight", "n2.bias"
    out, notes = untie_statistics(model)
    assert [list(n.input)[3:] for n in out.graph.node] == [["n1.bias", "n1.weight"], ["n2.running_mean", "n2.running_var"]]
    assert len(notes) == 2
