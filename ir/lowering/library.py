"""Implementation choices of library nodes (ops that stay library calls, not maps).

``LIBRARY_IMPLS[op_type]`` lists the implementations an ``OpNode.impl`` may name,
the first being the default. All give the same results to fp32 tolerance; they
differ in how the work is blocked (the reference executor honours the choice,
codegen backends map it to their own kernels):

- contractions (MatMul, Gemm, FusedMatMul): ``blas`` (one BLAS call) or
  ``blocked`` (the reduction dimension split into cache-sized panels);
- Conv: ``im2col`` (gather windows, one GEMM) or ``direct`` (one small
  contraction per kernel offset, no window buffer).
"""
from __future__ import annotations

from ir.nodes import OpNode

LIBRARY_IMPLS: dict[str, tuple[str, ...]] = {
    "MatMul": ("blas", "blocked"),
    "Gemm": ("blas", "blocked"),
    "FusedMatMul": ("blas", "blocked"),
    "Conv": ("im2col", "direct"),
}


def library_impls(node: OpNode) -> tuple[str, ...]:
    """The implementation choices of a library node; () when it has none."""
    return LIBRARY_IMPLS.get(node.op_type, ()) if isinstance(node, OpNode) else ()
