"""conv_weight_grad: autodiff's transposed-batch Conv (with and without its cropping Slice) becomes one
``ai.dcstudio::ConvWeightGrad`` in W's layout; matches, near misses naming the nodes, verify, equal
outputs, Δ = recount (the harness); after ``expand`` (transposes as maps) too; serialization; the CPU
program of the rewritten graph against the reference executor."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir import serialize
from ir.flops import library_flops
from ir.movement import kernel_estimate
from ir.onnx_import import import_proto
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms.passes import run_pass
from transforms.autodiff import build_training_graph
from transforms.registry import create

T = create("conv_weight_grad")
F32 = 4


def _training_graph(depthwise: bool = False):
    """The graph of ``training_model``."""
    return import_proto(training_model(depthwise))


def training_model(depthwise: bool = False):
    """x (2, 3, 8, 7) → Conv 3×3/2 pad 1 (its weight gradient needs a Slice: 8 + 2 - 3 is odd)
    → Relu → Conv 1×1 (or depthwise 3×3) → y; MSE, AdamW: autodiff's training step, as a ModelProto."""
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    second = (helper.make_node("Conv", ["a", "w2"], ["y"], name="c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4)
              if depthwise else helper.make_node("Conv", ["a", "w2"], ["y"], name="c2", kernel_shape=[1, 1]))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", strides=[2, 2], pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("Relu", ["h"], ["a"], name="r"), second]
    inits = [w("w1", [4, 3, 3, 3]), w("w2", [4, 1, 3, 3] if depthwise else [6, 4, 1, 1])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4 if depthwise else 6, 4, 4])]
    model = helper.make_model(helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 7])], outs, inits),
        opset_imports=[helper.make_opsetid("", 17)])
    return build_training_graph(model, loss="mse", optimizer="adamw")


def test_both_weight_gradients_become_one_op_in_the_weights_layout():
    g = _training_graph()
    assert sorted(m.anchors for m in T.matches(g)) == [("grad/c1/Conv",), ("grad/c2/Conv",)]
    app, g1 = assert_applies(g, T, T.match("grad/c1/Conv"))
    node = g1.nodes["conv_weight_grad:grad/c1/Conv"]
    assert (node.domain, node.op_type) == ("ai.dcstudio", "ConvWeightGrad") and app.created == (node.id,)
    assert node.attrs == {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [1, 1], "pads": [1, 1, 1, 1],
                          "group": 1}
    assert node.input_names()[0] == "x" and g1.container(node.output_names()[0]).shape == (4, 3, 3, 3)
    assert "grad/c1/Slice" in app.removed and len(app.removed) == 5      # Conv, Slice, three transposes
    est = kernel_estimate(g1, node)                                         # reads x, dY once; writes dW
    assert (est.bytes_read, est.bytes_written) == ((2 * 3 * 8 * 7 + 2 * 4 * 4 * 4) * F32, 4 * 3 * 9 * F32)
    assert library_flops(g1, node) == 2 * (3 * 9) * (2 * 4 * 4 * 4)
    assert app.delta.bytes < -2 * (2 * 3 * 8 * 7) * F32                     # at least x's copy, written and read
    app2, g2 = assert_applies(g1, T, T.match("grad/c2/Conv"))
    assert "grad/c2/Slice" not in app2.removed and not list(T.matches(g2))
    assert serialize.dumps(serialize.loads(serialize.dumps(g2))) == serialize.dumps(g2)


def test_after_expand_the_transposes_are_maps_and_still_match():
    g = _training_graph()
    run_pass(g, create("expand"), step=1)
    assert sorted(m.anchors for m in T.matches(g)) == [("grad/c1/Conv",), ("grad/c2/Conv",)]
    assert_applies(g, T, T.match("grad/c1/Conv"))


def test_a_transpose_whose_result_is_also_a_graph_output_stays():
    g = _training_graph()
    xt = g.nodes["grad/c1/Conv"].inputs[0].container
    g.outputs.append(xt)
    app, g1 = assert_applies(g, T, T.match("grad/c1/Conv"))
    assert g1.producer(xt) is not None and g1.producer(xt).id not in app.created and len(app.removed) == 4


def test_a_depthwise_weight_gradient_becomes_one_grouped_op():
    """autodiff regroups X through Reshape, Transpose, Reshape for a grouped conv: the three go with the Conv,
    dY's transpose and the transpose back, and the op carries group=4."""
    g = _training_graph(depthwise=True)
    assert sorted(m.anchors for m in T.matches(g)) == [("grad/c1/Conv",), ("grad/c2/Conv",)]
    conv = g.nodes["grad/c2/Conv"]
    app, g1 = assert_applies(g, T, T.match("grad/c2/Conv"))
    node = g1.nodes["conv_weight_grad:grad/c2/Conv"]
    assert node.attrs == {"kernel_shape": [3, 3], "strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1],
                          "group": 4}
    assert node.input_names()[0] == "a" and g1.container(node.output_names()[0]).shape == (4, 1, 3, 3)
    regroup = [g.producer(conv.input_names()[0])]
    for _ in range(2):
        regroup.append(g.producer(regroup[-1].input_names()[0]))
    assert [n.op_type for n in regroup] == ["Reshape", "Transpose", "Reshape"]
    assert {n.id for n in regroup} <= set(app.removed) and len(app.removed) == 6   # + Conv, 2 transposes
    assert library_flops(g1, node) == 2 * 9 * (2 * 4 * 4 * 4)
    run_pass(g, create("expand"), step=1)                                # the transposes as maps
    assert ("grad/c2/Conv",) in [m.anchors for m in T.matches(g)]
    assert_applies(g, T, T.match("grad/c2/Conv"))


def test_near_misses_name_the_nodes():
    g = _training_graph(depthwise=True)
    assert_fails(g, T, T.match("c1"), "'x'", "is not a transpose", "'c1'")
    assert_fails(g, T, T.match("r"), "'r' is not a Conv")
    assert_fails(g, T, T.match("nowhere"), "no node 'nowhere'")


def test_a_slice_that_cuts_channels_is_no_weight_gradient():
    """Transposes and a Conv shaped like a weight gradient, but the Slice after it also drops an output channel."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="tx", perm=[1, 0, 2, 3]),
             helper.make_node("Transpose", ["dy"], ["dyt"], name="tdy", perm=[1, 0, 2, 3]),
             helper.make_node("Conv", ["xt", "dyt"], ["raw"], name="cv"),
             helper.make_node("Slice", ["raw", "starts", "ends", "axes"], ["cut"], name="sl"),
             helper.make_node("Transpose", ["cut"], ["dw"], name="tw", perm=[1, 0, 2, 3])]
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("starts", [0, 0, 0]), ("ends", [3, 3, 2]), ("axes", [2, 3, 1]))]
    model = helper.make_model(helper.make_graph(
        nodes, "cut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6]),
                       helper.make_tensor_value_info("dy", TensorProto.FLOAT, [2, 4, 4, 4])],
        [helper.make_tensor_value_info("dw", TensorProto.FLOAT, [2, 3, 3, 3])], consts),
        opset_imports=[helper.make_opsetid("", 17)])
    g = import_proto(model)
    assert not list(T.matches(g))
    assert_fails(g, T, T.match("cv"), "'dw' (2, 3, 3, 3)", "4 outputs", "'sl' also cuts the channels")


def test_a_grouped_conv_over_an_input_not_regrouped_is_no_weight_gradient():
    nodes = [helper.make_node("Transpose", ["dy"], ["dyt"], name="tdy", perm=[1, 0, 2, 3]),
             helper.make_node("Conv", ["x", "dyt"], ["raw"], name="cv", group=2),
             helper.make_node("Transpose", ["raw"], ["dw"], name="tw", perm=[1, 0, 2, 3])]
    model = helper.make_model(helper.make_graph(
        nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6]),
                         helper.make_tensor_value_info("dy", TensorProto.FLOAT, [2, 2, 4, 4])],
        [helper.make_tensor_value_info("dw", TensorProto.FLOAT, [2, 1, 3, 3])]),
        opset_imports=[helper.make_opsetid("", 17)])
    g = import_proto(model)
    assert not list(T.matches(g))
    assert_fails(g, T, T.match("cv"), "grouped Conv 'cv' (group=2)", "'x' has no producer")


@pytest.mark.parametrize("depthwise", [False, True], ids=["dense", "depthwise"])
def test_the_cpu_program_runs_the_op_and_equals_the_reference(depthwise):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g = _training_graph(depthwise)
    run_pass(g, T, step=1)
    cg = CompiledGraph(g)
    assert sum("L.conv_weight_grad(" in line for st in cg.program.statements for line in st.lines) == 2
    feeds = feeds_for(g)
    assert not compare(run(g, feeds), cg.run(feeds), 1e-4)
