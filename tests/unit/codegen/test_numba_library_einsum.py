"""The CPU backend's two-operand Einsum (``codegen/numba_cpu/library.py``): one batched
``np.matmul`` on permuted views, equal to ``np.einsum`` for every label arrangement
(batch, free and contracted axes in any order; outer and inner products), writing in
place into a contiguous ``out`` whose axes are batch, a-free, b-free (or through a transposed
view of ``out`` when each operand has one free axis), and falling back
to ``np.einsum`` for what is not a matmul (repeated labels, labels summed out alone)."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.numba_cpu import library as L
from tests.unit.codegen.blas_probe import run_blas_probe

CASES = [
    ("acbe,adbe->abcd", (2, 5, 3, 4), (2, 6, 3, 4)),    # BERT attention scores from (B, L, H, D) heads
    ("cda,cdb->ab", (3, 4, 5), (3, 4, 6)),              # weight gradients: x^T dy over batch and sequence
    ("cda,cdb->ba", (3, 4, 5), (3, 4, 6)),              # ... written transposed: operands swapped
    ("ij,jk->ik", (3, 4), (4, 5)),
    ("ij,kj->ik", (3, 4), (5, 4)),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
    ("i,j->ij", (3,), (4,)),                            # outer product: nothing contracted
    ("i,i->", (3,), (3,)),                              # inner product: a 0-d result
    ("abc,cd->abd", (2, 3, 4), (4, 5)),
    ("abc,cd->dba", (2, 3, 4), (4, 5)),
    ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    ("abce,aebd->acbd", (2, 3, 4, 5), (2, 5, 3, 6)),   # attention's context back in (B, L, H, D): a strided out
    ("aebc,abed->adbc", (2, 5, 3, 4), (2, 3, 5, 6)),
    ("ii,ij->j", (3, 3), (3, 4)),                       # repeated label: np.einsum fallback
    ("ij,jk->k", (3, 4), (4, 5)),                       # i summed out alone: fallback
]


@pytest.mark.parametrize("equation,sa,sb", CASES, ids=[c[0] for c in CASES])
def test_einsum_equals_numpy(equation, sa, sb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    want = np.einsum(equation, a.astype(np.float64), b.astype(np.float64))
    got = L.einsum(equation, a, b)
    assert got.shape == want.shape and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    out = np.full(want.shape, np.nan, np.float32)
    assert L.einsum(equation, a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_product_lands_in_out_without_a_temporary():
    """When out's axes are batch, a-free, b-free the matmul writes into out itself."""
    a = np.ones((2, 3, 4), np.float32)
    b = np.ones((2, 3, 5), np.float32)
    out = np.empty((4, 5), np.float32)
    plan = L._einsum_plan("cda,cdb->ab")
    assert plan[-1] == [0, 1] and L.einsum("cda,cdb->ab", a, b, out=out) is out
    assert (out == 6).all()


def test_one_free_axis_each_in_any_order_lands_in_out_through_a_strided_view(monkeypatch):
    """attention's softmax · V written as (B, L, H, D): the matmul writes through out's transposed view,
    no product is allocated and copied."""
    rng = np.random.default_rng(2)
    s = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    v = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    spy = _MatmulSpy()
    monkeypatch.setattr(L, "np", spy)
    out = np.full((2, 4, 3, 5), np.nan, np.float32)
    assert L.einsum("abce,aebd->acbd", s, v, out=out) is out
    # one call, or one per thread over the batch (``_batched``), each into a view of ``out``
    assert sum(o[0] for o in spy.outs) == 2 and {o[1:] for o in spy.outs} == {(3, 4, 5)} and spy.views_of_out(out)
    np.testing.assert_allclose(out, np.einsum("abce,aebd->acbd", s, v), rtol=1e-5, atol=1e-5)


BATCH_PROBE = """
import json
import numpy as np
from codegen.numba_cpu import library as L
from tests.unit.codegen.blas_probe import run_blas_probe
calls = []
real = np.matmul
class Spy:
    def __getattr__(self, name):
        return getattr(np, name)
    def matmul(self, a, b, *args, **kw):
        calls.append([a.shape[0], L.blas_threads()])
        return real(a, b, *args, **kw)
L.set_threads(4)
before = L.blas_threads()
L.np = Spy()
rng = np.random.default_rng(3)
q, k = (rng.standard_normal((8, 12, 16, 8)).astype(np.float32) for _ in range(2))
big = rng.standard_normal((2, 300, 300)).astype(np.float32)
seen, errors = {}, {}
got = L.einsum("abce,abde->abcd", q, k)
seen["einsum"], errors["einsum"] = calls[:], float(np.abs(got - np.einsum("abce,abde->abcd", q, k)).max())
calls.clear()
got = L.matmul(q, k.swapaxes(-1, -2))
seen["matmul"], errors["matmul"] = calls[:], float(np.abs(got - real(q, k.swapaxes(-1, -2))).max())
calls.clear()
L.matmul(big, big)
seen["big"] = calls[:]
calls.clear()
outs = [np.empty((8, 12, 16, 16), np.float32) for _ in range(2)]
L.parallel(*(lambda o=o: L.einsum("abce,abde->abcd", q, k, out=o) for o in outs))
seen["in_step"] = sorted(calls)
print(json.dumps({"before": before, "after": L.blas_threads(), "seen": seen, "errors": errors,
                  "concurrent": L._concurrent_prange()}))
"""


def test_a_batch_of_small_matrices_runs_split_over_the_threads_on_one_blas_thread_each():
    """``_batched``: attention-sized products (each under SOLO_MACS multiply-adds) run as one part of
    the batch per thread, each part on one BLAS thread; large matrices, and calls inside a parallel
    step (whose tasks already share the threads), stay one call. In a fresh process with BLAS on four
    threads (in CI's process an earlier test may have held BLAS to one; four, so that a task of a
    two-task step still sees two BLAS threads and only the step's lock keeps it from splitting)."""
    res = run_blas_probe(BATCH_PROBE, 4, timeout=120)
    seen = res["seen"]
    one = 1 if res["concurrent"] else 4           # under numba's workqueue layer the parts run in order, uncapped
    assert seen["einsum"] == [[2, one]] * 4 and seen["matmul"] == [[2, one]] * 4, seen
    assert seen["big"] == [[2, 4]]                                  # 27 M multiply-adds each: one call
    assert [n for n, _ in seen["in_step"]] == [8, 8], seen          # inside a step: not split again
    assert res["after"] == 4 and max(res["errors"].values()) < 1e-5


def test_half_precision_operands_accumulate_in_float32():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 64)).astype(np.float16)
    b = rng.standard_normal((64, 8)).astype(np.float16)
    got = L.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16), rtol=1e-3)


def test_transposed_output_swaps_the_operands():
    """out = batch, b-free, a-free is b @ a: still one matmul straight into out."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    out = np.empty((5, 4), np.float32)
    assert L.einsum("cda,cdb->ba", a, b, out=out) is out
    np.testing.assert_array_equal(out, np.einsum("cda,cdb->ba", a, b))
    assert L._PLANS["cdb,cda->ba"][-1] == [0, 1]          # the swapped plan was used and is direct


class _MatmulSpy:
    """NumPy as the library sees it, recording the operand shapes of every ``matmul``."""

    def __init__(self):
        self.shapes, self.outs, self.written = [], [], []

    def __getattr__(self, name):
        return getattr(np, name)

    def matmul(self, a, b, *args, **kw):
        self.shapes.append((a.shape, b.shape))
        if kw.get("out") is not None:
            self.outs.append(kw["out"].shape)
            self.written.append(kw["out"])
        return np.matmul(a, b, *args, **kw)

    def views_of_out(self, out) -> bool:
        return all(np.shares_memory(w, out) for w in self.written) and bool(self.written)


@pytest.mark.parametrize("lead", ["contiguous", "transposed"])
def test_stacked_activations_times_a_weight_is_one_gemm(monkeypatch, lead):
    """(8, 5, 6) activations · a (6, 7) weight: one GEMM over 40 merged rows (NumPy would call BLAS per stacked
    matrix, packing the weight each time); activations whose leading axes do not merge keep the stacked call."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 8, 6) if lead == "transposed" else (8, 5, 6)).astype(np.float32)
    x = x.transpose(1, 0, 2) if lead == "transposed" else x
    w = rng.standard_normal((7, 6)).astype(np.float32)
    spy = _MatmulSpy()
    monkeypatch.setattr(L, "np", spy)
    out = np.empty((8, 5, 7), np.float32)
    assert L.fused_matmul(x, w, 1.0, 0, 1, 0, 0, out=out) is out          # x · wᵀ, as the exported step calls it
    assert spy.shapes == ([((40, 6), (6, 7))] if lead == "contiguous" else [((8, 5, 6), (6, 7))])
    np.testing.assert_allclose(out, np.einsum("abk,nk->abn", x.astype(np.float64), w.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
    half = L.matmul(x.astype(np.float16), w.T.astype(np.float16), out=np.empty((8, 5, 7), np.float16))
    assert half.dtype == np.float16
