"""Benchmark: import + inspect of the BERT-base layer training graph, and import of a ~1,000-node graph.

Run on demand: ``bash .ci/test tests/bench -s``. Bars (issue "Core"): BERT-base import + inspect well
under 2 s; a ~1,000-node graph imports in under 5 s. Reports medians of 5 runs.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from ir import movement
from ir.onnx_import import import_model, import_proto
from studio.cli import main

pytestmark = pytest.mark.bench


def _median_s(fn, repeat=5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def chain_model(n_blocks: int) -> onnx.ModelProto:
    """x -> (MatMul W_k -> Add b_k -> Relu) × n_blocks: 3 nodes per block."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(n_blocks):
        inits += [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), f"W{k}"),
                  numpy_helper.from_array(np.zeros(16, np.float32), f"b{k}")]
        nodes += [helper.make_node("MatMul", [prev, f"W{k}"], [f"m{k}"], name=f"block{k}/MatMul"),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"], name=f"block{k}/Add"),
                  helper.make_node("Relu", [f"a{k}"], [f"r{k}"], name=f"block{k}/Relu")]
        prev = f"r{k}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, [4, 16])],
                          [helper.make_tensor_value_info(prev, 1, [4, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_bert_base_import_and_inspect(fixtures_dir, capsys):
    path = fixtures_dir / "ort_artifacts/bert_layer_base/legacy16/training_model.onnx"
    step = fixtures_dir / "ort_artifacts/bert_layer_base/legacy16/train_step_adamw.onnx"
    t_import = _median_s(lambda: import_model(path))
    t_inspect = _median_s(lambda: main(["inspect", str(step)]))
    capsys.readouterr()
    g = import_model(step)
    t_count = _median_s(lambda: movement.report(g))
    print(f"\nBERT-base training_model import: {t_import * 1e3:.0f} ms; train_step import+inspect (CLI): "
          f"{t_inspect * 1e3:.0f} ms; recount of {len(g.nodes)} kernels: {t_count * 1e3:.0f} ms")
    assert t_inspect < 2.0


def test_thousand_node_import():
    m = chain_model(334)
    t = _median_s(lambda: import_proto(m), repeat=3)
    g = import_proto(m)
    print(f"\n{len(g.nodes)}-node graph import: {t * 1e3:.0f} ms")
    assert len(g.nodes) >= 1000 and t < 5.0
