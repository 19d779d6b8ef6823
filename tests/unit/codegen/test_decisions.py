"""``codegen.program.decisions``: which forward convs a choice depends on (they keep the float64 sum), on
expressions, on maps (through their local containers) and on whole training graphs, before and after
``expand`` turns the ops into maps; and the CPU program of a smooth net (SiLU, no ReLU) against the
reference executor with its convs summing in float32."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from codegen.program import decisions
from ir import expr as E
from ir.containers import Container
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet
from ir.onnx_import import import_proto
from transforms.autodiff import build_training_graph
from transforms.passes import run_pass
from transforms.registry import create


def _net(activation: str):
    """x (2, 3, 8, 8) → Conv 3×3 → activation → Conv 1×1 → y; MSE and AdamW: autodiff's training step."""
    rng = np.random.default_rng(0)
    act = ([helper.make_node("Relu", ["h"], ["a"], name="act")] if activation == "relu" else
           [helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
            helper.make_node("Mul", ["h", "s"], ["a"], name="act")])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]), *act,
             helper.make_node("Conv", ["a", "w2"], ["y"], name="c2", kernel_shape=[1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", [8, 3, 3, 3]), ("w2", [4, 8, 1, 1]))]
    model = helper.make_model(helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    return import_proto(build_training_graph(model, loss="mse", optimizer="adamw"))


def _exact(g) -> dict[str, bool]:
    marked = decisions.reaching(g)
    return {n.id: n.output_names()[0] in marked for n in g.nodes.values()
            if getattr(n, "op_type", None) == "Conv" and n.id in ("c1", "c2")}


@pytest.mark.parametrize("expanded", [False, True], ids=["ops", "maps"])
def test_a_relu_makes_the_conv_before_it_exact_and_silu_does_not(expanded):
    relu, silu = _net("relu"), _net("silu")
    if expanded:
        for g in (relu, silu):
            run_pass(g, create("expand"), step=1)
            assert any(isinstance(n, MapNode) for n in g.nodes.values())
    assert _exact(relu) == {"c1": True, "c2": False}     # c2's output only meets the smooth MSE
    assert _exact(silu) == {"c1": False, "c2": False}


def test_decision_vars_of_expressions():
    x, y, z = E.v("x"), E.v("y"), E.v("z")
    assert decisions.decision_vars(E.Select(E.Bin("gt", x, E.c(0.0)), y, E.Bin("mul", z, E.c(2.0)))) == {"x"}
    assert decisions.decision_vars(E.Bin("add", E.Bin("max", x, y), z)) == {"x", "y"}
    assert decisions.decision_vars(E.Bin("mul", E.Un("exp", x), E.Bin("div", y, z))) == set()
    assert decisions.decision_vars(E.Cast(E.Bin("add", x, y), "int64")) == {"x", "y"}
    assert decisions.decision_vars(E.Cast(x, "float64")) == set()
    assert decisions.decision_vars(E.Un("floor", x)) == {"x"}


def test_a_map_decides_on_the_inputs_a_local_value_is_computed_from():
    """t = a·b (map-local), out = t > 0 ? c : 0: a and b are decided on, c passes through."""
    i, at = [("i", Range.of(0, 4))], (E.v("i"),)
    body = [Tasklet("t1", E.Bin("mul", E.v("p"), E.v("q")), {"p": Memlet("a", at), "q": Memlet("b", at)},
                    Memlet("t", at)),
            Tasklet("t2", E.Select(E.Bin("gt", E.v("u"), E.c(0.0)), E.v("w"), E.c(0.0)),
                    {"u": Memlet("t", at), "w": Memlet("c", at)}, Memlet("out", at))]
    m = MapNode("m", i, body, locals={"t": Container("t", (4,), "float32")},
                inputs=[Memlet("a"), Memlet("b"), Memlet("c")], outputs=[Memlet("out")])
    assert decisions.decided_inputs(m) == {"a", "b"}
    body[1] = Tasklet("t2", E.Bin("mul", E.v("u"), E.v("w")), {"u": Memlet("t", at), "w": Memlet("c", at)},
                      Memlet("out", at, wcr="max"))
    m = MapNode("m", i, body, locals={"t": Container("t", (4,), "float32")},
                inputs=[Memlet("a"), Memlet("b"), Memlet("c")], outputs=[Memlet("out")])
    assert decisions.decided_inputs(m) == {"a", "b", "c"}         # a max reduction decides on all it reads


def test_the_cpu_program_sums_smooth_convs_in_float32_and_equals_the_reference():
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    for activation, want in (("silu", 4), ("relu", 3)):     # the two weight-gradient Convs too
        g = _net(activation)
        cg = CompiledGraph(g)
        lines = [line for st in cg.program.statements for line in st.lines]
        assert sum("exact=False" in line for line in lines) == want, activation
        feeds = feeds_for(g)
        assert not compare(run(g, feeds), cg.run(feeds), 1e-4)
