"""Elementwise maps over short rows run as one flat loop (``codegen.program.flatten``): which maps
qualify (every access the map point on an array of the map's extents, or a scalar; the last
extent short), the flat map's shape, the program's ``.reshape(-1)`` arguments, and the compiled
step against the reference executor, for float32 and an in-place update."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run as reference
from codegen.numpy_ref.feeds import compare, feeds_for
from codegen.program import flatten
from codegen.program.prepare import lower_for_codegen
from ir.nodes import MapNode
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi


def _graph(shape, *, broadcast=False):
    """y = relu(a * b + s) with s a scalar initializer (or b a per-channel [C, 1, 1] broadcast)."""
    b_shape = (shape[1], 1, 1) if broadcast else shape
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"], name="mul"),
             helper.make_node("Add", ["p", "s"], ["q"], name="add"),
             helper.make_node("Relu", ["q"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "s")]
    g = import_proto(model(nodes, [vi("a", list(shape)), vi("b", list(b_shape))], [vi("y", list(shape))], inits))
    return lower_for_codegen(g)


def _maps(g):
    return [n for n in g.nodes.values() if isinstance(n, MapNode)]


def test_a_pointwise_map_on_short_rows_becomes_one_loop():
    g = _graph((4, 6, 3, 3))
    m = _maps(g)[0]
    flat = flatten.plan(m, g)
    assert flat is not None and [p for p, _ in flat.map.params] == [m.param_names[0]]
    assert flat.map.params[0][1].stop.value == 4 * 6 * 3 * 3
    assert {c.name: c.shape for c in flat.containers} == {"a": (216,), "b": (216,), "p": (216,)}
    for t in flat.map.body:
        for mem in list(t.inputs.values()) + [t.output]:
            assert mem.subset in ((), (flat.map.params[0][0],)) or len(mem.subset) == 1


@pytest.mark.parametrize("why", ["broadcast", "long rows", "one axis"])
def test_what_is_left_as_it_is(why):
    g = {"broadcast": lambda: _graph((4, 6, 3, 3), broadcast=True), "long rows": lambda: _graph((4, 6, 64)),
         "one axis": lambda: _graph((40,))}[why]()
    maps = [m for m in _maps(g) if why != "broadcast" or m.id.startswith("mul")]
    assert maps and all(flatten.plan(m, g) is None for m in maps)


@pytest.mark.parametrize("shape", [(4, 6, 3, 3), (5, 7, 1, 1)])
def test_the_compiled_step_reads_and_writes_flat_views(shape):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g = import_proto(model([helper.make_node("Mul", ["a", "b"], ["p"], name="mul"),
                            helper.make_node("Relu", ["p"], ["y"], name="relu")],
                           [vi("a", list(shape)), vi("b", list(shape))], [vi("y", list(shape))]))
    cg = CompiledGraph(g)
    calls = [line for st in cg.program.statements for line in st.lines if line.startswith("K.")]
    assert calls and all(".reshape(-1)" in line for line in calls)
    feeds = feeds_for(g)
    feeds["b"] = np.asfortranarray(feeds["b"])             # a strided input: its flat view is a copy
    assert not compare(reference(g, feeds), cg.run(feeds), 1e-6)
