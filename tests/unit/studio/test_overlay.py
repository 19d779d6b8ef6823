"""Node data in and out (Model Explorer's JSON format): kernel ids or output names as keys,
graph or model node data, clear errors for bad files, and a round trip of the studio's figures."""
from __future__ import annotations

import json

import pytest

from ir.errors import StudioError
from ir.movement import Ledger
from studio.session.overlay import load_overlay, save_overlay
from studio.session import Session
from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "resources" / "examples" / "bert_layer_base_train.onnx"


@pytest.fixture(scope="module")
def graph():
    return Session.open(EXAMPLE, autosave=False).graph


def test_keys_are_kernel_ids_or_output_names(graph, tmp_path):
    ids = list(graph.nodes)[:3]
    out = next(m.container for m in graph.nodes[ids[2]].outputs if m is not None)
    doc = {"results": {ids[0]: {"value": 1.5}, ids[1]: {"value": 2, "bgColor": "red"}, out: {"value": 4.0},
                       "no such kernel": {"value": 9}}, "gradient": [{"stop": 0, "bgColor": "#fff"}]}
    path = tmp_path / "data.json"
    path.write_text(json.dumps(doc))
    data = load_overlay(path, graph)
    assert data.values == {ids[0]: 1.5, ids[1]: 2.0, ids[2]: 4.0} and data.unmatched == ["no such kernel"]
    assert data.name == "data" and "3 kernels, 1 keys matched no kernel" in data.describe()
    model = tmp_path / "model.json"                     # model node data: graph id -> graph node data
    model.write_text(json.dumps({"some graph": doc}))
    assert load_overlay(model, graph).values == data.values


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "the top level is not a JSON object"),
    ('{"other": 1}', "no 'results' object"),
    ('{"results": {"k": {"value": "big"}}}', "the result for 'k' has no finite numeric 'value'"),
    ('{"results": {"k": {"value": NaN}}}', "the result for 'k' has no finite numeric 'value'"),
    ('{"results": {"k": 3}}', "the result for 'k' has no finite numeric 'value'"),
])
def test_bad_files_are_named_with_what_is_wrong(graph, tmp_path, text, says):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(StudioError) as e:
        load_overlay(path, graph)
    assert str(e.value).startswith(f"{path}: {says}") and "Model Explorer" in str(e.value)


def test_the_studios_figures_round_trip(graph, tmp_path):
    bytes_moved = {k: e.bytes for k, e in Ledger(graph).kernels.items()}
    path = save_overlay(tmp_path / "bytes.json", graph, bytes_moved, "bytes moved")
    doc = json.loads(path.read_text())
    assert doc["name"] == "bytes moved" and doc["gradient"] and len(doc["results"]) == len(graph.nodes)
    assert load_overlay(path, graph).values == {k: float(v) for k, v in bytes_moved.items()}
    assert [p.name for p in tmp_path.iterdir()] == ["bytes.json"], "no temporary file left behind"
