"""The engine's contracts: check first, verify after, roll back on failure; preview; registry."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
from onnx import helper

from ir import lowering
from ir.errors import MatchFailure, PostconditionError, StudioError
from ir.memlet import Memlet
from ir.onnx_import import import_model, import_proto
from ir.serialize import graph_hash
from tests.unit.ir.onnx_models import model, vi
from transforms import TRANSFORMATION_MODULES, engine
from transforms.base import OK, Touched, Transformation
from transforms.registry import TRANSFORMATIONS, UnknownTransformation, create, register


def _graph():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["a"], ["b"], name="b"),
             helper.make_node("Exp", ["b"], ["y"], name="c")]
    return import_proto(model(nodes, [vi("x", [3, 5])], [vi("y", [3, 5])]))


@dataclass(frozen=True)
class BreaksGraph(Transformation):
    name: ClassVar[str] = "breaks_graph"
    level: ClassVar[int] = 1

    def check(self, graph, match):
        return OK

    def rewrite(self, graph, match, step):
        graph.nodes["b"].inputs[0] = Memlet("nowhere")
        return Touched(changed=("b",))


@dataclass(frozen=True)
class TouchesTooMuch(BreaksGraph):
    name: ClassVar[str] = "touches_too_much"

    def rewrite(self, graph, match, step):
        graph.nodes["c"].name = "renamed"
        return Touched(changed=("c",))


def test_failed_check_raises_match_failure_naming_the_node():
    g = _graph()
    with pytest.raises(MatchFailure, match="'a' is a library node, not a map; expand it first"):
        engine.apply(g, create("map_fusion"), create("map_fusion").match("a", "b"))


@pytest.mark.parametrize("cls, message", [(BreaksGraph, "invalid graph"), (TouchesTooMuch, "outside its affected")])
def test_postcondition_failure_rolls_back(cls, message):
    g = _graph()
    h = graph_hash(g)
    with pytest.raises(PostconditionError, match=message):
        engine.apply(g, cls(), cls().match("b"))
    assert graph_hash(g) == h


def test_preview_reports_the_diff_and_leaves_the_graph():
    g = _graph()
    h = graph_hash(g)
    d = engine.preview(g, create("expand"), create("expand").match("b"))
    assert d.added == ("b/expanded",) and d.removed == ("b",) and d.changed == ()
    assert graph_hash(g) == h


def test_ranked_puts_failures_last_with_reasons():
    g = _graph()
    cands = [(create("expand"), create("expand").match("a")), (create("map_fusion"),
                                                               create("map_fusion").match("a", "b"))]
    out = engine.ranked(g, cands)
    assert out[0].ok and not out[1].ok and "'a' is a library node" in out[1].reason


def test_registry_rules():
    assert sorted(TRANSFORMATIONS) == sorted(TRANSFORMATION_MODULES)
    for name, cls in TRANSFORMATIONS.items():
        assert cls.__module__ == f"transforms.{name}"
        doc = (cls.__doc__ or "") + (sys.modules[cls.__module__].__doc__ or "")
        assert "→" in doc and "Before → after" in doc or "before → after" in doc, f"{name}: no before → after"
    with pytest.raises(UnknownTransformation, match="no parameter"):
        create("expand", {"speed": 11})
    with pytest.raises(UnknownTransformation, match="unknown transformation 'nope'"):
        create("nope")
    with pytest.raises(ValueError, match="file stem"):
        register(BreaksGraph)
    assert issubclass(UnknownTransformation, StudioError)


def test_ranking_trials_skip_the_transformations_figures():
    """A ranking reads the Δ only: its trial leaves out the peak-memory figures (a whole-graph analysis
    each), and its Δ is the full apply's."""
    g = import_model("resources/examples/bert_layer_base_train.onnx")
    lowering.expand_all(g)
    t = create("recompute")
    m = next(m for m in t.matches(g) if t.check(g, m).ok)
    full, _ = engine.trial(g, t, m)
    quick, _ = engine.trial(g, t, m, figures=False)
    assert set(full.extra) >= {"peak_before", "peak_after"} and quick.extra == {}
    assert engine.rank_one(g, t, m).delta == quick.delta == full.delta
