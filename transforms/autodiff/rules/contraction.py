"""Gradient rules for MatMul and Gemm.

``MatMul`` follows NumPy ``matmul``: 1-D operands are promoted (a row for A, a column
for B), batch dimensions broadcast and are summed back. ``dA = dY B^T``, ``dB = A^T dY``;
when B is a 2-D weight and A is batched, ``dB`` is one ``Gemm`` over the flattened
batch. ``Gemm`` (``Y = alpha A' B' + beta C``) picks ``transA``/``transB`` so no
explicit transpose is emitted: e.g. for ``transA=0, transB=1``
``dA = alpha dY B`` and ``dB = alpha dY^T A``.
"""
from __future__ import annotations

from math import prod

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


def _swap_last(rank: int) -> list[int]:
    return list(range(rank - 2)) + [rank - 1, rank - 2]


@gradient("MatMul")
def matmul(em: Emitter, req: GradRequest) -> Grads:
    a, b = req.node.input[:2]
    sa, sb = em.shape(a), em.shape(b)
    a2, sa2 = (a, sa) if len(sa) >= 2 else (em.reshape(a, (1,) + sa), (1,) + sa)
    b2, sb2 = (b, sb) if len(sb) >= 2 else (em.reshape(b, sb + (1,)), sb + (1,))
    sy2 = _promoted_out_shape(sa2, sb2)
    dy = req.dy()
    if sy2 != em.shape(req.node.output[0]):
        dy = em.reshape(dy, sy2)
    da = db = None
    if req.want(0):
        g = em.op("MatMul", dy, em.transpose(b2, _swap_last(len(sb2))))
        da = em.sum_to(g, sy2[:-2] + sa2[-2:], sa2)
        da = da if sa2 == sa else em.reshape(da, sa)
    if req.want(1):
        db = _matmul_db(em, a2, sa2, dy, sy2, sb2)
        db = db if sb2 == sb else em.reshape(db, sb)
    return [da, db]


def _promoted_out_shape(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    batch_a, batch_b = sa[:-2], sb[:-2]
    n = max(len(batch_a), len(batch_b))
    pa = (1,) * (n - len(batch_a)) + batch_a
    pb = (1,) * (n - len(batch_b)) + batch_b
    batch = tuple(max(x, y) for x, y in zip(pa, pb))
    return batch + (sa[-2], sb[-1])


def _matmul_db(em: Emitter, a2: str, sa2: tuple, dy: str, sy2: tuple, sb2: tuple) -> str:
    if len(sb2) == 2 and len(sa2) > 2:
        k, n = sb2
        a_flat = em.reshape(a2, (prod(sa2[:-1]), k))
        dy_flat = em.reshape(dy, (prod(sy2[:-1]), n))
        if prod(sa2[:-1]) == prod(sy2[:-1]):
            return em.op("Gemm", a_flat, dy_flat, transA=1)
    g = em.op("MatMul", em.transpose(a2, _swap_last(len(sa2))), dy)
    return em.sum_to(g, sy2[:-2] + sb2[-2:], sb2)


@gradient("Gemm")
def gemm(em: Emitter, req: GradRequest) -> Grads:
    a, b = req.node.input[:2]
    ta, tb = req.attrs.get("transA", 0), req.attrs.get("transB", 0)
    alpha, beta = req.attrs.get("alpha", 1.0), req.attrs.get("beta", 1.0)
    al = None if alpha == 1.0 else float(alpha)
    dy = req.dy()
    da = db = dc = None
    if req.want(0):
        if not ta:
            da = em.op("Gemm", dy, b, transB=0 if tb else 1, alpha=al)
        else:
            da = em.op("Gemm", b, dy, transA=1 if tb else None, transB=1, alpha=al)
    if req.want(1):
        if not tb:
            db = em.op("Gemm", a, dy, transA=None if ta else 1, alpha=al)
        else:
            db = em.op("Gemm", dy, a, transA=1, transB=1 if ta else None, alpha=al)
    c = req.input(2)
    if c is not None and req.want(2):
        g = dy if beta == 1.0 else em.mul(dy, em.scalar(beta, c))
        dc = em.sum_to(g, em.shape(req.node.output[0]), em.shape(c))
    return [da, db, dc]
