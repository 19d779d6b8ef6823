"""Bytes as exported are the bytes of the calls the module makes: the static count
(``codegen.program.traffic``) against the arrays the running step passes to every BLAS call,
kernel and reference kernel, and the outputs it fills, counted while it runs under the cache model
of ``codegen.program.panels``; after the recipe they are within 5 % of the bytes as fused."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"


class _Counter:
    """Bytes of the arrays the step passes, under the cache model ``codegen.program.panels`` states:
    a product a BLAS call writes (``out=``) and the next kernel call of the same statement (its
    epilogue) reads, at most a panel, moves nothing; inside a panel loop (``L.panels``) every distinct
    array counts once. The statement of a call is the node id above its line (``module.line_map``)."""

    def __init__(self, panel_bytes, lines):
        self.total, self.panel_bytes, self.lines = 0, panel_bytes, lines
        self.pending = None            # the last BLAS product and its statement, not counted yet
        self.seen = None               # arrays counted in the running panel loop

    def statement(self):
        """The node id of the generated line that made the current call (two frames up: this, the
        counting wrapper, the module)."""
        node = self.lines.get(sys._getframe(2).f_lineno)
        assert node is not None, "a counted call outside the generated step"
        return node

    def count(self, arrays, out=None, statement=None):
        pending, self.pending = self.pending, None
        if pending is not None:
            product, at = pending
            if product.nbytes <= self.panel_bytes and at == statement and any(a is product for a in arrays):
                arrays = [a for a in arrays if a is not product]
                if self.seen is not None:
                    self.seen.add(_key(product))
            else:
                self.add(product)
        for a in arrays:
            self.add(a)
        self.pending = None if out is None else (out, statement)

    def add(self, a):
        if self.seen is not None:
            if _key(a) in self.seen:
                return
            self.seen.add(_key(a))
        self.total += a.nbytes

    def flush(self):
        self.count([])


def _key(a):
    return (a.__array_interface__["data"][0], a.nbytes)


def _counting(target, name, counter, result=False, blas=False):
    fn = getattr(target, name)

    def call(*args, **kw):
        out = fn(*args, **kw)
        arrays = [a for a in args if isinstance(a, np.ndarray)] + [a for k, a in kw.items()
                                                                    if isinstance(a, np.ndarray) and k != "out"]
        arrays += [a for a in args if isinstance(a, tuple) for a in a if isinstance(a, np.ndarray)]   # reference inputs
        if result:
            arrays += [a for a in out if isinstance(a, np.ndarray)]
        product = kw.get("out") if isinstance(kw.get("out"), np.ndarray) else None
        if product is not None and not blas:
            arrays.append(product)
            product = None
        counter.count(arrays, product, counter.statement())
        return out
    return fn, call


def _filling(target, name, counter):
    fn = getattr(target, name)

    def call(*args, **kw):
        out = fn(*args, **kw)
        kind = args[3] if name == "view" and len(args) > 3 else args[2] if name == "alloc" and len(args) > 2 else "empty"
        if kind != "empty":
            counter.count([out], statement=counter.statement())
        return out
    return fn, call


def _panel_loop(target, counter):
    fn = target.panels

    def loop(n, w):
        counter.flush()
        counter.seen = set()
        yield from fn(n, w)
        counter.flush()
        counter.seen = None
    return fn, loop


def test_the_static_count_is_what_the_step_calls():
    from codegen.numba_cpu import library as L
    from codegen.numba_cpu.runner import CompiledGraph
    from codegen.numpy_ref.feeds import feeds_for
    from codegen.program.traffic import traffic
    from studio.session.exporting import load_with_history
    graph, _ = load_with_history(str(EXAMPLES / "bert_layer_base_train.onnx"),
                                 str(EXAMPLES / "bert_layer_base_train.history.json"), [])
    cg = CompiledGraph(graph)
    feeds = feeds_for(graph)
    cg.run(feeds)
    from codegen.program.panels import PANEL_BYTES
    from codegen.program.module import line_map
    counted = _Counter(PANEL_BYTES, line_map(Path(cg.module.__file__).read_text()))
    saved = {}
    for name in ("matmul", "gemm", "fused_matmul", "einsum"):
        saved[name], wrapped = _counting(L, name, counted, blas=True)
        setattr(L, name, wrapped)
    saved["reference"], wrapped = _counting(L, "reference", counted, result=True)
    setattr(L, "reference", wrapped)
    for name in ("view", "alloc"):
        saved[name], wrapped = _filling(L, name, counted)
        setattr(L, name, wrapped)
    saved["panels"], wrapped = _panel_loop(L, counted)
    setattr(L, "panels", wrapped)
    kernels = {k: getattr(cg.module.K, k) for k in dir(cg.module.K) if k.startswith("k_")}
    try:
        for k in kernels:
            setattr(cg.module.K, k, _counting(cg.module.K, k, counted)[1])
        cg.run(feeds)
        counted.flush()
    finally:
        for name, fn in saved.items():
            setattr(L, name, fn)
        for k, fn in kernels.items():
            setattr(cg.module.K, k, fn)
    moved = traffic(cg.program)
    assert counted.total == moved.exported, (counted.total, moved.summary())
    assert moved.fused == pytest.approx(588.6e6, rel=1e-3)          # the figure the studio shows for the recipe
    assert moved.exported <= 1.05 * moved.fused, moved.summary()     # the GEMM epilogues run panel by panel
    assert sum("L.panels" in line for st in cg.program.statements for line in st.lines) == 3   # the MLP GEMMs
