"""``dcstudio replay --check`` against the original model (``codegen.oracle``), and bisection.

The model is the standard-op MLP AdamW joint graph (onnxruntime loads it, so the baseline is
onnxruntime fp32). A deliberately wrong rewrite — a Gemm whose ``alpha`` drifts by 1e-3, as a
buggy "fold the scale into the GEMM" would leave it — is registered for these tests only and
inserted in the middle of a recorded history; the final check must fail and name that step.
"""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

import pytest

from ir.graph import Graph
from studio.cli import main
from studio.session import Session
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.registry import TRANSFORMATIONS, create

WRONG_AT = 41          # 1-based position of the wrong step in the history


@dataclass(frozen=True)
class GemmAlphaDrift(Transformation):
    """A wrong rewrite for these tests: ``Gemm(alpha=a)`` -> ``Gemm(alpha=a*1.001)``."""

    name: ClassVar[str] = "gemm_alpha_drift"
    level: ClassVar[int] = 1

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if getattr(node, "op_type", None) == "Gemm":
                yield self.match(node.id)

    def check(self, graph: Graph, match: Match) -> MatchResult:
        node = graph.nodes.get(match.anchors[0])
        return OK if getattr(node, "op_type", None) == "Gemm" else fail("not a Gemm", match.anchors[0])

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        node = graph.nodes[match.anchors[0]]
        node.attrs["alpha"] = float(node.attrs.get("alpha", 1.0)) * 1.001
        return Touched(changed=(node.id,))


@dataclass(frozen=True)
class GemmAlphaDriftOnce(GemmAlphaDrift):
    """The same wrong rewrite, applying once per Gemm (alpha still 1), so that a pass stops."""

    name: ClassVar[str] = "gemm_alpha_drift_once"

    def check(self, graph: Graph, match: Match) -> MatchResult:
        node = graph.nodes.get(match.anchors[0])
        ok = getattr(node, "op_type", None) == "Gemm" and float(node.attrs.get("alpha", 1.0)) == 1.0
        return OK if ok else fail("not a Gemm with alpha 1", match.anchors[0])


@pytest.fixture(autouse=True)
def _drift_registered(monkeypatch):
    monkeypatch.setitem(TRANSFORMATIONS, GemmAlphaDrift.name, GemmAlphaDrift)
    monkeypatch.setitem(TRANSFORMATIONS, GemmAlphaDriftOnce.name, GemmAlphaDriftOnce)


@pytest.fixture(scope="module")
def histories(tmp_path_factory, fixtures_dir):
    """(model, good history, wrong history, number of steps): expand all, then map_fusion ×6."""
    d = tmp_path_factory.mktemp("oracle")
    model = d / "mlp_joint_adamw.onnx"
    shutil.copy(fixtures_dir / "joint_standard/mlp_joint_adamw.onnx", model)
    s = Session.open(model, autosave=False)
    for m in list(create("expand").matches(s.graph)):
        s.apply("expand", m.anchors)
    mf = create("map_fusion")
    for _ in range(6):
        s.apply("map_fusion", next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok).anchors)
    s.save_history(d / "good.json")
    doc = json.loads((d / "good.json").read_text())
    for step in doc["steps"]:
        step.pop("expect", None)            # the wrong step changes no bytes, but keep it simple
    wrong = {"transformation": "gemm_alpha_drift", "params": {}, "anchors": ["node_addmm"]}
    doc["steps"].insert(WRONG_AT - 1, wrong)
    (d / "wrong.json").write_text(json.dumps(doc))
    return model, d / "good.json", d / "wrong.json", len(doc["steps"])


def _replay(capsys, *args) -> tuple[int, str, str]:
    code = main(["replay", *map(str, args), "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def test_good_history_passes_and_prints_the_oracle_summary(histories, capsys):
    model, good, _, _ = histories
    code, out, err = _replay(capsys, model, good, "--check")
    assert code == 0, err
    line = next(s for s in out.splitlines() if s.startswith("check: "))
    assert "outputs compared with the original model (onnxruntime fp32 vs float64 truth): all within tolerance" \
        in line, line


def test_wrong_rewrite_is_bisected_to_its_step(histories, capsys, tmp_path):
    model, _, wrong, n = histories
    code, out, err = _replay(capsys, model, wrong, "--check", "--junit", tmp_path / "j.xml",
                             "--json", tmp_path / "r.json")
    assert code == 1, err
    assert f"first mismatch after step {WRONG_AT} (gemm_alpha_drift, node_addmm): " in err, err
    assert f"dcstudio: step {n}: numeric mismatch: " in err
    assert "check: " not in out
    doc = json.loads((tmp_path / "r.json").read_text())
    failed = [s["step"] for s in doc["steps"] if s["failure"]]
    assert failed == [WRONG_AT, n]
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("failures") == "2"


def test_check_each_names_every_step_from_the_wrong_one(histories, capsys):
    model, _, wrong, n = histories
    code, _, err = _replay(capsys, model, wrong, "--check-each")
    assert code == 1
    assert f"numeric mismatch after step {WRONG_AT} (gemm_alpha_drift, node_addmm): " in err, err
    assert f"dcstudio: step {WRONG_AT - 1}:" not in err


def test_rtol_override_loosens_every_tolerance(histories, capsys):
    model, _, wrong, _ = histories
    code, out, err = _replay(capsys, model, wrong, "--check", "--rtol", "0.05")
    assert code == 0, err
    assert "tolerance overridden: 0.05 for every output" in out


@pytest.fixture(scope="module")
def pass_histories(tmp_path_factory, fixtures_dir):
    """The 'fuse' recipe as pass steps (expand, map_fusion), and the same followed by a pass of
    the wrong rewrite."""
    from studio.session.recipe import RECIPES, run_recipe
    d = tmp_path_factory.mktemp("passes")
    model = d / "mlp_joint_adamw.onnx"
    shutil.copy(fixtures_dir / "joint_standard/mlp_joint_adamw.onnx", model)
    s = Session.open(model, autosave=False)
    run_recipe(s, RECIPES["fuse"])
    s.save_history(d / "good.json")
    doc = json.loads((d / "good.json").read_text())
    doc["steps"].append({"transformation": "gemm_alpha_drift_once", "params": {},
                         "pass": {"applications": 2, "graph_hash": None}})
    (d / "wrong.json").write_text(json.dumps(doc))
    return model, d / "good.json", d / "wrong.json"


def test_pass_steps_replay_with_their_recorded_graph(pass_histories, capsys):
    model, good, _ = pass_histories
    doc = json.loads(good.read_text())
    assert [st["transformation"] for st in doc["steps"]] == ["expand", "map_fusion"]
    assert all(st["pass"]["applications"] > 5 and len(st["pass"]["graph_hash"]) == 64 for st in doc["steps"])
    code, out, err = _replay(capsys, model, good, "--check")
    assert code == 0, err
    assert "replayed 2 steps" in out and "all within tolerance" in out


def test_a_pass_that_applies_a_different_number_of_times_is_named(pass_histories, capsys, tmp_path):
    model, good, _ = pass_histories
    doc = json.loads(good.read_text())
    doc["steps"][1]["pass"]["applications"] -= 1
    (tmp_path / "h.json").write_text(json.dumps(doc))
    code, _, err = _replay(capsys, model, tmp_path / "h.json")
    assert code == 2
    applied = doc["steps"][1]["pass"]["applications"]
    assert f"step 2 (map_fusion): the pass applied {applied + 1} times, {applied} when the history was recorded" \
        in err, err


def test_a_wrong_application_inside_a_pass_is_bisected_to_it(pass_histories, capsys):
    model, _, wrong = pass_histories
    code, _, err = _replay(capsys, model, wrong, "--check")
    assert code == 1, err
    assert "first mismatch after step 3 (gemm_alpha_drift_once pass, application 1 of 2, at node_addmm" in err, err
