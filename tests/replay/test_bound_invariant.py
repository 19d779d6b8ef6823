"""The compulsory bound is a property of the model: no transformation changes it."""
from __future__ import annotations

from pathlib import Path

from ir.movement import _count_bound, lower_bound
from ir.serialize import dumps, loads
from studio.session import load_graph
from transforms.history import load
from transforms.replay import replay

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


def test_bound_is_the_same_after_every_step_of_the_bundled_recipe():
    graph = load_graph(EXAMPLES / "bert_layer_base_train.onnx")
    imported = _count_bound(graph)
    reports = replay(graph, load(EXAMPLES / "bert_layer_base_train.history.json"))
    assert len(reports) > 500
    assert {r.bound for r in reports} == {imported}
    # counted afresh the figure would have drifted (folded constants, scalars absorbed into tasklets)
    assert _count_bound(graph) != imported
    assert lower_bound(loads(dumps(graph))) == imported      # it travels with the graph
