"""Benchmark: matching, apply + incremental recount, and undo on the BERT-base layer training graph.

Bars (transformations issue): enumerating all matches ≤ 200 ms; apply + incremental recount
≤ 100 ms p95; undo ≤ 20 ms. Run: ``bash .ci/test tests/bench -s``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from studio.session import Session
from transforms.registry import create

pytestmark = pytest.mark.bench
EXAMPLE = Path(__file__).resolve().parents[2] / "resources/examples/bert_layer_base_train.onnx"


def _p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


@pytest.fixture(scope="module")
def session():
    s = Session.open(EXAMPLE, autosave=False)
    for m in list(create("expand").matches(s.graph)):
        s.apply("expand", m.anchors)
    return s


def test_enumerate_all_matches(session):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        found = list(session.candidates())
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"\nall matches ({len(found)}) of {len(session.graph.nodes)} kernels: median {med * 1e3:.1f} ms")
    assert med < 0.2


def test_apply_recount_and_undo(session):
    mf = create("map_fusion")
    apply_ms, undo_ms = [], []
    for _ in range(40):
        m = next(m for m in mf.matches(session.graph) if mf.check(session.graph, m).ok)
        t0 = time.perf_counter()
        session.apply("map_fusion", m.anchors)
        apply_ms.append((time.perf_counter() - t0) * 1e3)
    for _ in range(40):
        t0 = time.perf_counter()
        session.undo()
        undo_ms.append((time.perf_counter() - t0) * 1e3)
    print(f"\napply+recount p50 {statistics.median(apply_ms):.1f} ms, p95 {_p95(apply_ms):.1f} ms; "
          f"undo p50 {statistics.median(undo_ms):.2f} ms, max {max(undo_ms):.2f} ms")
    assert _p95(apply_ms) <= 100 and max(undo_ms) <= 20
