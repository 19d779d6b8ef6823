"""The BERT-small training step (ORT artifact, AdamW) after expand + map_fusion + memory_reuse (no
anchors: every transient planned): the exported package honours the recorded buffers and still
matches the reference executor and the fixture, in less memory than the greedy planner alone.

How the module's ``ARENA_BYTES`` compares with ``ir.memory.arena_bytes`` (which the GUI shows):
``arena_bytes`` = interface (inputs, weights, outputs: held by the caller and ``Model``, never in
the arena) + the planned transients. The module's arena holds the transients only, and is at most
that part: views, Shape constants and reference-kernel outputs need no slot, and slots are reused
across buffers whose lifetimes are disjoint. A buffer the program honours in full is exactly as
large as ``ir.memory`` sized it.
"""
from __future__ import annotations

import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package, mismatches  # noqa: E402
from codegen.numba_cpu import kernel_cache  # noqa: E402
from codegen.program.module import ir_arena  # noqa: E402
from codegen.program.module_plan import plan_module  # noqa: E402
from codegen.program.schedule import fork_join  # noqa: E402
from codegen.numba_cpu.backend import program as build_program  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from ir import memory  # noqa: E402
from tests.peer.test_export_fixtures import _check_fixture_references, fixture_graph, load_package  # noqa: E402
from transforms import engine  # noqa: E402
from transforms.registry import create  # noqa: E402

CASE = "ort/bert_layer_small/train_step_adamw"


def _step_plan(graph):
    """The program and its step's buffer plan, as ``export_package`` plans the module (its default two
    workers' fork-join schedule, the loss first)."""
    prog = build_program(graph)
    return prog, plan_module(prog, fork_join(prog, 2)).step.slots


def test_bert_small_step_honours_the_whole_graph_plan(fixtures_dir, tmp_path):
    kernel_cache.install_locator()
    fused, feeds, ref, _, _ = fixture_graph(fixtures_dir, CASE, True)
    graph = fused.clone()
    greedy = _step_plan(graph)[1]
    t = create("memory_reuse")
    app = engine.apply(graph, t, t.match())
    assert app.extra["buffers"] >= 15

    pkg = load_package(export_package(graph, tmp_path / "bert_small_planned", inputs=feeds).path)
    out = pkg.Model().step(**feeds)
    assert mismatches(graph, reference(graph, feeds), out, 1e-4) == []
    _check_fixture_references(graph, out, ref, 1e-4)

    mod = pkg.model
    prog, plan = _step_plan(graph)
    assert mod.ARENA_BYTES == plan.nbytes < greedy.nbytes
    total, interface = ir_arena(prog.graph)
    assert total == memory.arena_bytes(graph) == app.extra["arena_after"]
    assert mod.ARENA_BYTES <= total - interface
    recorded = memory.buffers(prog.graph)
    assert len(mod.SHARED_BUFFERS) >= 15
    inplace = 0
    for buf in plan.shared:
        slot, nbytes, members = mod.SHARED_BUFFERS[buf.name]
        assert {mod.SLOT_OF[c] for c in members} == {slot}                 # one slot per buffer
        if not set(recorded[buf.name]) - set(members) - set(plan.covered):
            assert nbytes == memory.buffer_size(prog.graph, recorded[buf.name])
        inplace += len(buf.inplace)
    assert inplace >= 5
    text = open(mod.__file__, encoding="utf-8").read()
    assert f"# ir.memory.arena_bytes of this graph: {total} = {interface} inputs" in text
    for c, why in plan.refused.items():                                    # every fallback is explained
        assert why and c in text
