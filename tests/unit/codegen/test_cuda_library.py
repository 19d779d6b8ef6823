"""The CUDA library's contractions as cuBLAS strided-batched GEMMs on views (``codegen/cupy_cuda/library.py``).

Every BLAS call of the exported CUDA step (matmul, Gemm, FusedMatMul, two-operand Einsum) runs as
``cublas<t>gemmStridedBatched`` on the operands *as they lie* (transposed and batched views, no
copies), which is what lets the whole step be captured as one CUDA graph. The plan (ops, leading
dimensions, which batch dims merge into one strided batch and which are looped over) is pure
arithmetic: here it runs against a NumPy model of the cuBLAS call that reads memory exactly as
cuBLAS does (column-major, ``lda``/``ldb``/``ldc``, strides between batch members), and the
results must equal ``np.einsum``/``np.matmul``. The device run is ``tests/bench/gpu/lease.py``.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")

from codegen.cupy_cuda import cublas as C  # noqa: E402
from codegen.cupy_cuda import library as L  # noqa: E402


OPERANDS: list[tuple[int, int]] = []     # (start, end) of every array handed to cuBLAS


def _view(ptr, dtype, shape, strides):
    item = np.dtype(dtype).itemsize
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    assert any(lo <= ptr and ptr + span * item <= hi for lo, hi in OPERANDS) or shape == (1,), \
        "cuBLAS would read or write outside the operands"
    raw = (ctypes.c_char * (span * item)).from_address(ptr)
    flat = np.frombuffer(raw, dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, [s * item for s in strides])


class FakeCublas:
    """``cublasSgemmStridedBatched``/``cublasDgemmStridedBatched`` as the cuBLAS documentation defines them."""

    def __init__(self):
        self.calls = 0

    def _gemm(self, dtype, handle, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self.calls += 1
        al = _view(alpha, dtype, (1,), (1,))[0]
        be = _view(beta, dtype, (1,), (1,))[0]
        assert lda >= max(1, k if ta else m) and ldb >= max(1, n if tb else k) and ldc >= max(1, m)
        for i in range(count):
            op_a = _view(a + i * sa * np.dtype(dtype).itemsize, dtype, (m, k), (lda, 1) if ta else (1, lda))
            op_b = _view(b + i * sb * np.dtype(dtype).itemsize, dtype, (k, n), (ldb, 1) if tb else (1, ldb))
            out = _view(c + i * sc * np.dtype(dtype).itemsize, dtype, (m, n), (1, ldc))
            out[...] = al * (op_a.astype(np.float64) @ op_b) + (be * out if be else 0)

    def _batched(self, dtype, handle, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc, count):
        self.batched = getattr(self, "batched", 0) + 1
        arrays = [_view(p, np.int64, (count,), (1,)) for p in (pa, pb, pc)]
        for a, b, c in zip(*arrays):
            self._gemm(dtype, handle, ta, tb, m, n, k, alpha, int(a), lda, 0, int(b), ldb, 0, beta, int(c), ldc, 0, 1)
        return 0

    def cublasSgemmBatched(self, *args):
        return self._batched(np.float32, *args)

    def cublasDgemmBatched(self, *args):
        return self._batched(np.float64, *args)

    def cublasSgemmStridedBatched(self, *args):
        self._gemm(np.float32, *args)
        return 0

    def cublasDgemmStridedBatched(self, *args):
        self._gemm(np.float64, *args)
        return 0


@pytest.fixture
def blas(monkeypatch):
    fake = FakeCublas()
    monkeypatch.setattr(C, "blas", lambda: (fake, 0))
    monkeypatch.setattr(C, "cp", np)              # the members' offsets: host arrays here
    monkeypatch.setattr(C, "POINTERS", {})        # host arrays here: none may outlive the test
    monkeypatch.setattr(C, "_OFFSETS", {})
    OPERANDS.clear()

    def ptr(x):
        OPERANDS.append((x.ctypes.data, x.ctypes.data + x.nbytes))
        return x.ctypes.data
    monkeypatch.setattr(C, "_ptr", ptr)
    monkeypatch.setattr(C, "_stream", lambda: 0)
    monkeypatch.setattr(C, "_set_stream", lambda lib, handle, stream: None)
    return fake


EQUATIONS = [
    ("acbe,adbe->abcd", (2, 5, 3, 4), (2, 6, 3, 4)),     # attention scores, heads interleaved
    ("abce,aebd->acbd", (2, 3, 5, 4), (2, 4, 3, 6)),     # probabilities @ values, back to [b, s, h, d]
    ("cda,cdb->ba", (3, 4, 5), (3, 4, 6)),               # weight gradient over batch and sequence
    ("abec,aebd->acbd", (2, 3, 4, 5), (2, 4, 3, 6)),
    ("aebc,abed->adbc", (2, 4, 3, 5), (2, 3, 4, 6)),
    ("ij,jk->ik", (4, 5), (5, 3)),
    ("ij,kj->ki", (4, 5), (3, 5)),
    ("bij,bjk->bik", (3, 4, 5), (3, 5, 2)),
]


@pytest.mark.parametrize("eq, sa, sb", EQUATIONS, ids=[e[0] for e in EQUATIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_einsum_runs_as_strided_gemms_on_views(blas, monkeypatch, eq, sa, sb, dtype):
    monkeypatch.setattr(L, "cp", np)        # address arrays of pointer batches: host arrays here
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    want = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    out = np.full(want.shape, np.nan, dtype)
    plan = L._einsum_views(eq, a, b, out)
    assert plan is not None, f"{eq} did not map onto strided GEMMs"
    C.run_plan(plan, a, b, out, 1.0)
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    assert blas.calls >= 1
    if eq in ("acbe,adbe->abcd", "abce,aebd->acbd"):   # heads interleaved: one pointer-array launch
        assert getattr(blas, "batched", 0) == 1


def test_pointer_batches_of_new_operands_upload_nothing(blas, monkeypatch):
    """A step captured as a CUDA graph allocates its temporaries from the graph's own pool, so a
    pointer-array batch meets operand addresses the warm-up run never saw, and an upload of their
    address arrays (what GPT-2 and Swin died of: 'H2D transfers are disallowed') fails the capture.
    The members' offsets are uploaded once per plan; addresses are computed from them on the device."""
    monkeypatch.setattr(L, "cp", np)
    eq, sa, sb = EQUATIONS[0]
    rng = np.random.default_rng(3)

    def product():
        a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
        out = np.full((sa[0], sa[2], sa[1], sb[1]), np.nan, np.float32)
        C.run_plan(L._einsum_views(eq, a, b, out), a, b, out, 1.0)
        np.testing.assert_allclose(out, np.einsum(eq, a.astype(np.float64), b), rtol=1e-5, atol=1e-5)
        return a, b, out
    kept = product()                                   # the warm-up: the plan's offsets go up once

    def upload(x, dtype=None):
        raise AssertionError("the current stream is capturing, so H2D transfers are disallowed")
    monkeypatch.setattr(C, "_upload", upload)
    kept = kept, product(), product()                  # new addresses, as in a capture
    assert blas.batched == 3 and len(C._OFFSETS) == 1 and len(C.POINTERS) == 3


def test_non_gemm_einsums_are_refused(blas):
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    assert L._einsum_views("ij,jk->i", a, b, np.empty(3, np.float32)) is None      # k summed in b alone
    assert L._einsum_views("ii,ik->ik", np.ones((4, 4), np.float32), b, np.empty((4, 5), np.float32)) is None


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_with_transposes_alpha_and_bias(blas, monkeypatch, trans_a, trans_b):
    monkeypatch.setattr(L, "cp", np)        # the bias add and the views are NumPy's here
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 4) if trans_a else (4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5) if trans_b else (5, 3)).astype(np.float32)
    c = rng.standard_normal(3).astype(np.float32)
    out = np.full((4, 3), np.nan, np.float32)
    L.gemm(a, b, c, 0.5, 1.0, trans_a, trans_b, out=out)
    want = 0.5 * (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b) + c
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert blas.calls == 1


@pytest.mark.parametrize("sa, sb, flags", [
    ((2, 3, 4, 5), (2, 3, 6, 5), (0, 1, 0, 0)),       # batched, B transposed
    ((3, 4, 5), (5, 6), (0, 0, 0, 0)),                # batch broadcast against a matrix
    ((4, 2, 5), (4, 2, 6), (1, 0, 1, 1)),             # FusedMatMul transBatch: batch moved inward
])
def test_fused_matmul_batched_and_broadcast(blas, monkeypatch, sa, sb, flags):
    monkeypatch.setattr(L, "cp", np)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    va, vb = L._fused_operand(a, flags[0], flags[2]), L._fused_operand(b, flags[1], flags[3])
    want = 2.0 * np.matmul(va.astype(np.float64), vb)
    out = np.full(want.shape, np.nan, np.float32)
    L.fused_matmul(a, b, 2.0, *flags, out=out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert blas.calls >= 1


def test_merge_and_matrix_layouts():
    assert C.merge([(2, 12), (3, 4), (4, 1)]) == (24, 1)
    assert C.merge([(2, 5), (3, 1)]) is None
    assert C.merge([(4, 0), (3, 0)]) == (12, 0)
    assert C.merge([(1, 99), (3, 2)]) == (3, 2)
    assert C._matrix((4, 5), (5, 1), False) == (1, 5)    # row-major: cuBLAS reads the transpose
    assert C._matrix((4, 1), (5, 4), False) == (0, 4)    # column-major as it is
    assert C._matrix((4, 3), (5, 7), False) is None      # neither axis contiguous


def test_scalars_keep_their_shape_on_the_way_to_the_device(monkeypatch):
    """``cupy.ascontiguousarray`` makes a 0-d array 1-d (as NumPy's does): a scalar weight once became
    shape (1,), so a Gather by it kept an axis and the next GEMM refused its output (a ViT's class
    token), and a 0-d loss came back as (1,), failing every --check (found on an H100)."""
    monkeypatch.setattr(L, "cp", np)
    assert L.asarray(np.float32(3.0)).shape == ()
    assert L.asarray(np.arange(6).reshape(2, 3).T).flags.c_contiguous
    assert L.broadcast_to(np.float32(1.0), ()).shape == ()
    assert L.broadcast_to(np.ones(3, np.float32), (2, 3)).flags.c_contiguous


def test_host_fallback_gets_its_tensor_attributes_on_the_host(monkeypatch):
    """A reference op's tensor attributes (ConstantOfShape's value) live on the device with the other
    weights; the NumPy kernel must get them as host arrays (it once got a CuPy array and raised)."""
    monkeypatch.setattr(L, "to_host", lambda x: np.asarray(x) if isinstance(x, FakeDevice) else x)
    monkeypatch.setattr(L, "asarray", lambda x, dtype=None: x)

    class FakeDevice(np.ndarray):
        pass
    seen = {}

    def kernel(inputs, attrs, ctx):
        seen.update(attrs)
        return [np.full(tuple(inputs[0]), attrs["value"][0])]
    value = np.array([2.5], np.float32).view(FakeDevice)
    out, = L.reference(kernel, (np.array([2, 2]),), {"value": value, "axis": 1}, None)
    assert type(seen["value"]) is np.ndarray and seen["axis"] == 1
    assert out.shape == (2, 2) and (out == 2.5).all()


def test_mismatched_shapes_never_reach_cublas(blas):
    """A shape the plan cannot vouch for goes to CuPy's own matmul/einsum (which raise a clear error),
    never to cuBLAS with strides that would read past an operand."""
    a, b = np.ones((3, 4, 5), np.float32), np.ones((2, 5, 6), np.float32)
    assert L._strided_product(a, b, np.empty((3, 4, 6), np.float32)) is False      # batch 2 against 3
    assert L._strided_product(np.ones((4, 5), np.float32), np.ones((6, 2), np.float32),
                              np.empty((4, 2), np.float32)) is False               # k 5 against 6
    assert L._einsum_views("ij,jk->ik", np.ones((4, 5), np.float32), np.ones((6, 2), np.float32),
                           np.empty((4, 2), np.float32)) is None
    assert blas.calls == 0


def test_operands_cublas_cannot_read_are_copied_not_handed_to_cupy_matmul(blas, monkeypatch):
    """A view with no unit stride (every other column) cannot be a cuBLAS operand; a contiguous copy
    can. Before, such products went to ``cupy.matmul``/``cupy.einsum``, whose batched paths upload
    an address table from the host — which a captured CUDA graph refuses."""
    monkeypatch.setattr(L, "cp", np)
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((4, 10)).astype(np.float32)
    a = wide[:, ::2]                                          # strides (10, 2) elements: no unit stride
    b = rng.standard_normal((5, 3)).astype(np.float32)
    assert not L._strided_product(a, b, np.empty((4, 3), np.float32))
    out = np.full((4, 3), np.nan, np.float32)
    L.matmul(a, b, out=out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)
    assert blas.calls == 1
    out2 = np.full((4, 3), np.nan, np.float32)
    L.einsum("ij,jk->ik", a, b, out=out2)
    np.testing.assert_allclose(out2, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)
    assert blas.calls == 2
