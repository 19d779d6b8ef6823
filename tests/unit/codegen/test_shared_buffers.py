"""The CPU program honours ``memory_reuse``'s recorded buffers (``codegen/numba_cpu/shared_buffers.py``
with ``buffers.plan``): one slot per buffer, in place inside map kernels only, and every stale,
invalid or unsafe member falls back to the greedy planner with a reason, without changing results."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numba_cpu.render import kernel_source  # noqa: E402
from codegen.program.module import ir_arena  # noqa: E402
from codegen.program.module_plan import function_plan  # noqa: E402
from codegen.numba_cpu.backend import program as cpu_program  # noqa: E402
from codegen.program.program import build_program  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import compare, feeds_for  # noqa: E402
from ir import lowering, memory  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402
from tests.unit.ir.onnx_models import model, vi  # noqa: E402
from transforms import engine  # noqa: E402
from transforms.registry import create  # noqa: E402

T = 16 * 16 * 4          # one [16, 16] float32 tensor


def _graph(nodes, n=16, inits=(), outputs=None):
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = nodes + [helper.make_node("ReduceSum", ["c", "axes"], ["out"], name="sum", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [n, n])], outputs or [vi("out", [n])], [axes, *inits]))
    lowering.expand_all(g)
    return g


def _softmax_chain(n=16):
    """x -Relu-> a -Softmax-> b -Neg-> c -ReduceSum-> out: Softmax and Neg may run in place."""
    return _graph([helper.make_node("Relu", ["x"], ["a"], name="r"),
                   helper.make_node("Softmax", ["a"], ["b"], name="sm", axis=-1),
                   helper.make_node("Neg", ["b"], ["c"], name="n")], n)


def _plan(g, render=None, **options):
    prog = cpu_program(g, **options) if render is None else build_program(g, render)   # a renderer without aliasing
    return prog, function_plan(prog, prog.statements, list(prog.graph.outputs))


def _export_and_run(tmp_path, g, name):
    feeds = feeds_for(g)
    mod = load_package(export_package(g, tmp_path / name, inputs=feeds).path)
    m = mod.Model()
    want = reference(g, feeds)
    assert compare(want, m.step(**feeds), 1e-5) == []
    assert compare(want, m.step(**feeds), 1e-5) == []          # the slots are reused: still equal
    assert compare(want, m.forward(**feeds), 1e-5) == []
    return mod.model


def test_inplace_maps_share_one_slot_and_match_the_reference(tmp_path):
    g = _softmax_chain()
    greedy = _plan(g)[1].nbytes
    t = create("memory_reuse")
    engine.apply(g, t, t.match())
    assert memory.read_buffers(g) == {"buf0": ["a", "b", "c"]}
    mod = _export_and_run(tmp_path, g, "pkg_inplace")
    slot = mod.SLOT_OF["a"]
    assert mod.SLOT_OF["b"] == mod.SLOT_OF["c"] == slot               # one slot, overwritten in place
    assert mod.SHARED_BUFFERS == {"buf0": (slot, T, ("a", "b", "c"))}
    total, interface = ir_arena(g)
    assert mod.ARENA_BYTES == total - interface == T                  # what ir.memory planned
    assert greedy == 2 * T                                            # a and b overlap at the Softmax
    text = open(mod.__file__, encoding="utf-8").read()
    assert f"b = L.view(B[{slot}], (16, 16), np.float32)  # buf0, in place of a" in text
    assert "#   buf0: slot 0, 1024 bytes: a, b (in place of a in sm/expanded), c (in place of b in n/expanded)" in text


def test_stale_and_invalid_plans_fall_back_and_stay_correct(tmp_path):
    g = _graph([helper.make_node("Relu", ["x"], ["a"], name="r"),
                helper.make_node("Transpose", ["a"], ["b"], name="tr", perm=[1, 0]),
                helper.make_node("Neg", ["b"], ["c"], name="n")])
    greedy = _plan(g)[1]
    # a transpose in place would read elements it already overwrote; 'gone' was removed
    g.meta["buffers"] = json.dumps({"buf0": ["a", "b"], "buf1": ["gone", "c"]})
    prog, plan = _plan(g)
    assert plan.shared == [] and plan.slot_of == greedy.slot_of and plan.nbytes == greedy.nbytes
    assert "reads 'a' at another element than the one it writes" in plan.refused["b"]
    assert plan.refused["gone"] == "'gone' no longer exists"
    assert plan.refused["c"] == "'c' shares 'buf1' with no other valid member"
    mod = _export_and_run(tmp_path, g, "pkg_stale")
    text = open(mod.__file__, encoding="utf-8").read()
    assert "#   greedy fallback gone: 'gone' no longer exists" in text
    assert mod.SHARED_BUFFERS == {}


def test_a_view_that_outlives_its_source_keeps_the_slot(tmp_path):
    """IR lifetimes end a at its Reshape; the program's view v keeps a's memory alive to the Add."""
    shape = numpy_helper.from_array(np.array([256], np.int64), "shape")
    back = numpy_helper.from_array(np.array([16, 16], np.int64), "back")
    g = _graph([helper.make_node("Relu", ["x"], ["a"], name="r"),
                helper.make_node("Reshape", ["a", "shape"], ["v"], name="rv"),
                helper.make_node("Neg", ["x"], ["b"], name="n"),
                helper.make_node("Reshape", ["b", "shape"], ["w"], name="rw"),
                helper.make_node("Add", ["v", "w"], ["s"], name="add"),
                helper.make_node("Reshape", ["s", "back"], ["c"], name="rc")], inits=[shape, back])
    g.meta["buffers"] = json.dumps({"buf0": ["a", "b"]})
    assert memory.buffers(g) == {"buf0": ["a", "b"]}                  # valid for ir.memory
    _, plan = _plan(g)
    assert plan.shared == [] and plan.slot_of["a"] != plan.slot_of["b"]
    assert "in the program, 'a' (statements 0..4) and 'b' (statements 2..4) overlap" in plan.refused["b"]
    _export_and_run(tmp_path, g, "pkg_view")


def _matmul_chain():
    """x -Relu-> a -MatMul(w)-> b -Neg-> c -ReduceSum-> out."""
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32)[::-1].copy(), "w")
    return _graph([helper.make_node("Relu", ["x"], ["a"], name="r"),
                   helper.make_node("MatMul", ["a", "w"], ["b"], name="mm"),
                   helper.make_node("Neg", ["b"], ["c"], name="n")], inits=[w])


def test_blas_outputs_never_overwrite_their_inputs(monkeypatch):
    g = _matmul_chain()
    g.meta["buffers"] = json.dumps({"buf0": ["a", "b"]})
    monkeypatch.setattr(memory, "inplace_reason", lambda *args: None)   # an IR that says yes
    assert memory.buffers(g) == {"buf0": ["a", "b"]}
    _, plan = _plan(g)
    assert plan.slot_of["a"] != plan.slot_of["b"]
    assert "'b' would overwrite 'a' in 'mm', a MatMul call: only a map kernel runs in place" in plan.refused["b"]


def test_inplace_needs_kernels_that_tolerate_aliased_arguments():
    g = _softmax_chain(256)                   # 65536 points each: Softmax and Neg run prange when parallel
    t = create("memory_reuse")
    engine.apply(g, t, t.match())
    assert _plan(g)[1].shared[0].members == ["a", "b", "c"]
    _, parallel = _plan(g, parallel=True)
    assert "'b' would overwrite 'a' in 'sm/expanded': its kernel runs prange" in parallel.refused["b"]
    assert parallel.shared[0].members == ["a", "c"]                       # disjoint lifetimes: still shared
    _, other = _plan(g, render=lambda m, graph: kernel_source(m, graph))   # as the CUDA backend does
    assert "declare their arguments non-aliasing" in other.refused["b"]
    assert [(b.members, b.inplace) for b in other.shared] == [(["a", "c"], {})]   # disjoint: still shared
    assert len(set(other.slot_of.values())) == 2 and other.slot_of["a"] == other.slot_of["c"]
