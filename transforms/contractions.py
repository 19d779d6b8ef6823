"""Contractions in index notation: MatMul, Gemm, FusedMatMul and Einsum as one ``Contraction``.

A ``Contraction`` names one letter per axis of every operand and of the output
(``Gemm(A, B) {transA=1}`` is ``km,kn->mn``). Layout and view rewrites edit the
letters, and ``emit`` turns the result back into the cheapest library node:

- ``MatMul`` when the operands are read as they are;
- ``Gemm`` (2-D) or ``com.microsoft::FusedMatMul`` when transposition flags
  (``transA/transB``, ``transBatchA/transBatchB``) express the new layout;
- ``Einsum`` otherwise (any axis permutation, and contracted or batch axes that a
  view split into several: ``(b·l)k,(b·l)n->kn`` read reshape-free as ``blk,bln->kn``).

FusedMatMul semantics (as the reference executor): ``transBatch`` moves axis 0 to
position rank−2, then ``trans`` swaps the last two axes. Batch axes are not
broadcast here (sizes must agree), so every letter has one size.

Relation used by ``permute``: an operand or output ``old = transpose(new, q)``
reads ``new`` instead with letters ``L_new[q[k]] = L_old[k]``.
"""
from __future__ import annotations

import string
from dataclasses import dataclass, replace

from ir import fused_ops
from ir.graph import Graph
from ir.memlet import Memlet
from ir.nodes import OpNode
from transforms.views import View, blocks, static_shape

LETTERS = string.ascii_lowercase + string.ascii_uppercase
MS = "com.microsoft"
FLAG_CHOICES = ((False, False), (False, True), (True, False), (True, True))  # (transBatch, trans)
CONTRACTION_OPS = tuple(fused_ops.CONTRACTIONS)     # (domain, op) of the plain contractions


class ContractionError(Exception):
    """Why a node cannot be read as, or rewritten to, a contraction (message only)."""


@dataclass(frozen=True)
class Contraction:
    """``output[out] = alpha · Σ Π operands[k][letters[k]] (+ beta · bias)``."""

    operands: tuple[str, ...]
    letters: tuple[tuple[str, ...], ...]
    output: str
    out_letters: tuple[str, ...]
    alpha: float = 1.0
    bias: Memlet | None = None
    beta: float = 1.0


def is_contraction(node) -> bool:
    return isinstance(node, OpNode) and (node.domain, node.op_type) in CONTRACTION_OPS


def fused_perm(rank: int, trans_batch: bool, trans: bool) -> list[int]:
    """The axes FusedMatMul reads an operand in: effective = transpose(x, perm)."""
    perm = list(range(rank))
    if trans_batch and rank > 2:
        perm = list(range(1, rank - 1)) + [0, rank - 1]
    if trans:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _stored(effective: list[str], perm: list[int]) -> tuple[str, ...]:
    out = [""] * len(perm)
    for k, axis in enumerate(perm):
        out[axis] = effective[k]
    return tuple(out)


def spec_of(graph: Graph, node: OpNode) -> Contraction:
    """The contraction ``node`` computes (``ContractionError`` if it is none we handle)."""
    if not is_contraction(node):
        raise ContractionError(f"'{node.id}' ({node.qualified_type}) is not a contraction")
    if node.op_type == "Einsum":
        return _einsum_spec(node)
    ins = [m.container if m is not None else None for m in node.inputs]
    if len(ins) < 2 or None in ins[:2]:
        raise ContractionError(f"'{node.id}' ({node.op_type}) lacks an operand")
    shapes = [static_shape(graph, n) for n in ins[:2]]
    out_shape = static_shape(graph, node.outputs[0].container)
    if None in shapes or out_shape is None:
        raise ContractionError(f"'{node.id}' ({node.op_type}) has symbolic shapes")
    if min(len(s) for s in shapes) < 2:
        raise ContractionError(f"'{node.id}' ({node.op_type}) has a 1-D operand")
    a = node.attrs
    gemm = node.op_type == "Gemm"
    tb = (bool(a.get("transBatchA", 0)), bool(a.get("transBatchB", 0))) if not gemm else (False, False)
    tr = (bool(a.get("transA", 0)), bool(a.get("transB", 0)))
    perms = [fused_perm(len(s), tb[k], tr[k]) for k, s in enumerate(shapes)]
    eff = [[s[p] for p in perm] for s, perm in zip(shapes, perms)]
    ro = len(out_shape)
    batch, (m, n, k) = list(LETTERS[:ro - 2]), LETTERS[ro - 2:ro + 1]
    wants = [batch[ro - len(eff[0]):] + [m, k], batch[ro - len(eff[1]):] + [k, n]]
    for dims, want in zip(eff, wants):
        lead = len(dims) - 2
        if list(dims[:lead]) != list(out_shape[ro - 2 - lead:ro - 2]):
            raise ContractionError(f"'{node.id}' ({node.op_type}) broadcasts batch dimensions")
    bias = node.inputs[2] if gemm and len(node.inputs) > 2 else None
    return Contraction(tuple(ins[:2]), tuple(_stored(w, p) for w, p in zip(wants, perms)),
                       node.outputs[0].container, tuple(batch + [m, n]), float(a.get("alpha", 1.0)),
                       bias, float(a.get("beta", 1.0)))


def _einsum_spec(node: OpNode) -> Contraction:
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    if "..." in eq or "->" not in eq:
        raise ContractionError(f"'{node.id}' (Einsum '{eq}') uses an ellipsis or an implicit output")
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(node.inputs) or any(len(set(t)) != len(t) for t in terms + [rhs]):
        raise ContractionError(f"'{node.id}' (Einsum '{eq}') repeats a letter within one term")
    return Contraction(tuple(m.container for m in node.inputs), tuple(tuple(t) for t in terms),
                       node.outputs[0].container, tuple(rhs))


def permute(spec: Contraction, old: str, new: str, q: tuple[int, ...]) -> Contraction:
    """``spec`` reading/writing ``new`` where ``old = transpose(new, q)``."""
    def moved(letters: tuple[str, ...]) -> tuple[str, ...]:
        return _stored(list(letters), list(q))
    letters = tuple(moved(ls) if name == old else ls for name, ls in zip(spec.operands, spec.letters))
    operands = tuple(new if name == old else name for name in spec.operands)
    out, out_letters = spec.output, spec.out_letters
    if out == old:
        if spec.bias is not None:
            raise ContractionError("its bias C would have to be transposed too")
        out, out_letters = new, moved(out_letters)
    return replace(spec, operands=operands, letters=letters, output=out, out_letters=out_letters)


def _fresh(used: set[str]) -> str:
    letter = next(ch for ch in LETTERS if ch not in used)
    used.add(letter)
    return letter


def _splits(spec: Contraction, views: dict[int, View]) -> dict[str, tuple[int, ...]]:
    """Letters that views merge from several source dimensions → the source sizes."""
    split: dict[str, tuple[int, ...]] = {}
    kept: set[str] = set()
    for k, v in views.items():
        for ga, gb in blocks(v.source_shape, v.target_shape) or ():
            if len(gb) != 1:
                raise ContractionError(f"view '{v.node_id}' splits a dimension of '{v.source}'")
            letter = spec.letters[k][gb[0]]
            sizes = tuple(v.source_shape[a] for a in ga)
            if len(ga) == 1:
                kept.add(letter)
            elif split.setdefault(letter, sizes) != sizes:
                raise ContractionError(f"views merge axis '{letter}' from different shapes")
    for letter in split:
        if letter in spec.out_letters:
            raise ContractionError(f"a view merges output axis '{letter}' (the result keeps its shape)")
        if letter in kept:
            raise ContractionError(f"axis '{letter}' is merged by one view and not by another")
        for name, ls, k in zip(spec.operands, spec.letters, range(len(spec.operands))):
            if letter in ls and k not in views:
                raise ContractionError(f"operand '{name}' is not a view that splits axis '{letter}'")
    return split


def absorb_views(spec: Contraction, views: dict[int, View]) -> Contraction:
    """``spec`` reading the sources of the views on operands ``views`` (index → View)."""
    split = _splits(spec, views)
    used = {ch for ls in spec.letters for ch in ls} | set(spec.out_letters)
    parts = {letter: [letter] + [_fresh(used) for _ in sizes[1:]] for letter, sizes in split.items()}
    operands, letters = list(spec.operands), list(spec.letters)
    for k, v in views.items():
        new = [""] * len(v.source_shape)
        groups = blocks(v.source_shape, v.target_shape) or []
        for ga, gb in groups:
            letter = spec.letters[k][gb[0]]
            for axis, part in zip(ga, parts.get(letter, [letter])):
                new[axis] = part
        for axis, d in enumerate(v.target_shape):
            letter = spec.letters[k][axis]
            if d == 1 and any(letter in ls for j, ls in enumerate(spec.letters) if j != k):
                raise ContractionError(f"view '{v.node_id}' drops axis '{letter}', which other operands use")
            if d == 1 and letter in spec.out_letters:
                raise ContractionError(f"view '{v.node_id}' drops axis '{letter}' of the output")
        operands[k], letters[k] = v.source, tuple(ch or _fresh(used) for ch in new)
    return replace(spec, operands=tuple(operands), letters=tuple(letters))


def _flags(spec: Contraction):
    """(operand order, (tbA, tA), (tbB, tB)) expressing ``spec`` as a (batched) GEMM, or None."""
    out = spec.out_letters
    if len(spec.operands) != 2 or len(out) < 2:
        return None
    batch, (m, n) = list(out[:-2]), out[-2:]
    for order in ((0, 1), (1, 0)):
        la, lb = spec.letters[order[0]], spec.letters[order[1]]
        ks = [ch for ch in la if ch in lb and ch not in out]
        if len(ks) != 1 or max(len(la), len(lb)) != len(out) or min(len(la), len(lb)) < 2:
            continue
        want_a = batch[len(batch) - (len(la) - 2):] + [m, ks[0]]
        want_b = batch[len(batch) - (len(lb) - 2):] + [ks[0], n]
        fa = next((f for f in FLAG_CHOICES if [la[p] for p in fused_perm(len(la), *f)] == want_a), None)
        fb = next((f for f in FLAG_CHOICES if [lb[p] for p in fused_perm(len(lb), *f)] == want_b), None)
        if fa is not None and fb is not None:
            return order, fa, fb
    return None


def emit(graph: Graph, node: OpNode, spec: Contraction, allow_einsum: bool = True) -> OpNode:
    """A copy of ``node`` (same id) computing ``spec``: MatMul, Gemm, FusedMatMul or Einsum."""
    found = _flags(spec)
    outs = [Memlet(spec.output)]
    if found is not None:
        order, (tba, ta), (tbb, tb) = found
        ins = [Memlet(spec.operands[order[0]]), Memlet(spec.operands[order[1]])]
        two_d = all(len(spec.letters[k]) == 2 for k in order) and not (tba or tbb)
        if not (ta or tb or tba or tbb) and spec.alpha == 1.0 and spec.bias is None:
            return _op(graph, node, "MatMul", "", ins, outs, {})
        if two_d:
            attrs = _set({"transA": ta, "transB": tb}, spec)
            if spec.bias is not None:
                attrs["beta"] = spec.beta
            return _op(graph, node, "Gemm", "", ins + ([spec.bias] if spec.bias else []), outs, attrs)
        if spec.bias is None:
            attrs = _set({"transA": ta, "transB": tb, "transBatchA": tba, "transBatchB": tbb}, spec)
            return _op(graph, node, "FusedMatMul", MS, ins, outs, attrs)
    if spec.bias is not None or spec.alpha != 1.0:
        raise ContractionError("it has a bias or alpha ≠ 1, so only transposition flags could express "
                               "the new layout, and they cannot")
    if not allow_einsum:
        raise ContractionError("transposition flags cannot express the new layout (Einsum not allowed)")
    eq = ",".join("".join(ls) for ls in spec.letters) + "->" + "".join(spec.out_letters)
    return _op(graph, node, "Einsum", "", [Memlet(n) for n in spec.operands], outs, {"equation": eq})


def _set(flags: dict[str, bool], spec: Contraction) -> dict:
    """The flags that are set, and alpha when it is not 1 (the ops' defaults are 0 and 1)."""
    attrs = {k: 1 for k, v in flags.items() if v}
    if spec.alpha != 1.0:
        attrs["alpha"] = spec.alpha
    return attrs


def _op(graph: Graph, node: OpNode, op_type: str, domain: str, ins, outs, attrs) -> OpNode:
    opset = graph.opsets.get(domain, 1 if domain else 17)
    impl = node.impl if op_type != "Einsum" else "default"
    return OpNode(node.id, op_type, ins, outs, domain=domain, attrs=attrs, impl=impl, opset=opset,
                  name=node.name, provenance=node.provenance)


__all__ = ["CONTRACTION_OPS", "Contraction", "ContractionError", "absorb_views", "emit", "fused_perm",
           "is_contraction", "permute", "spec_of"]
