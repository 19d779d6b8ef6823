"""Bytes as exported are the bytes of the calls the module makes: the static count
(``codegen.program.traffic``) against the arrays the running step passes to every BLAS call,
kernel and reference kernel, and the outputs it fills, counted while it runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"


def _counting(target, name, counter, result=False):
    fn = getattr(target, name)

    def call(*args, **kw):
        out = fn(*args, **kw)
        arrays = [a for a in args if isinstance(a, np.ndarray)] + [a for a in kw.values() if isinstance(a, np.ndarray)]
        arrays += [a for a in args if isinstance(a, tuple) for a in a if isinstance(a, np.ndarray)]   # reference inputs
        if result:
            arrays += [a for a in out if isinstance(a, np.ndarray)]
        counter[0] += sum(a.nbytes for a in arrays)
        return out
    return fn, call


def _filling(target, name, counter):
    fn = getattr(target, name)

    def call(*args, **kw):
        out = fn(*args, **kw)
        kind = args[3] if name == "view" and len(args) > 3 else args[2] if name == "alloc" and len(args) > 2 else "empty"
        if kind != "empty":
            counter[0] += out.nbytes
        return out
    return fn, call


def test_the_static_count_is_what_the_step_calls():
    from codegen.numba_cpu import library as L
    from codegen.numba_cpu.runner import CompiledGraph
    from codegen.numpy_ref.feeds import feeds_for
    from codegen.program.traffic import traffic
    from studio.export_cmd import load_with_history
    graph, _ = load_with_history(str(EXAMPLES / "bert_layer_base_train.onnx"),
                                 str(EXAMPLES / "bert_layer_base_train.history.json"), [])
    cg = CompiledGraph(graph)
    feeds = feeds_for(graph)
    cg.run(feeds)
    counted = [0]
    saved = {}
    for name in ("matmul", "gemm", "fused_matmul", "einsum"):
        saved[name], wrapped = _counting(L, name, counted)
        setattr(L, name, wrapped)
    saved["reference"], wrapped = _counting(L, "reference", counted, result=True)
    setattr(L, "reference", wrapped)
    for name in ("view", "alloc"):
        saved[name], wrapped = _filling(L, name, counted)
        setattr(L, name, wrapped)
    kernels = {k: getattr(cg.module.K, k) for k in dir(cg.module.K) if k.startswith("k_")}
    try:
        for k in kernels:
            setattr(cg.module.K, k, _counting(cg.module.K, k, counted)[1])
        cg.run(feeds)
    finally:
        for name, fn in saved.items():
            setattr(L, name, fn)
        for k, fn in kernels.items():
            setattr(cg.module.K, k, fn)
    moved = traffic(cg.program)
    assert counted[0] == moved.exported, (counted[0], moved.summary())
    assert moved.fused == pytest.approx(588.6e6, rel=1e-3)          # the figure the studio shows for the recipe
