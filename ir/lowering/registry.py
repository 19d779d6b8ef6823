"""The table of expansion rules, one per (domain, op_type), and the library-call reasons.

``@expansion("Add", "Sub", domain="", impls=("default",))`` registers a rule
``build(k: KernelBuilder, impl: str) -> MapNode`` in ``EXPANSIONS``. The first
entry of ``impls`` is the default implementation. Ops that deliberately stay
library calls (BLAS, convolutions, pooling, shape and data-movement ops) are
listed in ``LIBRARY_REASONS`` so that ``can_expand`` can say why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ir.lowering.builder import KernelBuilder
from ir.nodes import MapNode

BuildFn = Callable[[KernelBuilder, str], MapNode]


@dataclass(frozen=True, slots=True)
class Expansion:
    """How one op type becomes a map: its rule and its implementation choices."""

    op_type: str
    domain: str
    build: BuildFn
    impls: tuple[str, ...]

    @property
    def default_impl(self) -> str:
        return self.impls[0]


EXPANSIONS: dict[tuple[str, str], Expansion] = {}


def expansion(*op_types: str, domain: str = "", impls: tuple[str, ...] = ("default",)
              ) -> Callable[[BuildFn], BuildFn]:
    """Register ``build`` as the expansion rule of every op type in ``op_types``."""
    def deco(build: BuildFn) -> BuildFn:
        for op in op_types:
            key = (domain, op)
            if key in EXPANSIONS:
                raise ValueError(f"duplicate expansion rule for {key}")
            EXPANSIONS[key] = Expansion(op, domain, build, tuple(impls))
        return build
    return deco


_BLAS = "is a library call: it keeps a BLAS implementation"
_CONV = "is a library call: convolutions keep their im2col/BLAS implementation"
_POOL = "is a library call: pooling keeps its windowed implementation"
_SHAPE = "is a shape/data-movement op: it stays a library call"
_LOSS = "is a library call: losses with label gathers are not expanded"

LIBRARY_REASONS: dict[str, str] = {
    **dict.fromkeys(("MatMul", "Gemm", "FusedMatMul", "MatMulInteger", "Einsum", "Det"), _BLAS),
    **dict.fromkeys(("Conv", "ConvTranspose", "ConvGrad"), _CONV),
    **dict.fromkeys(("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
                     "GlobalLpPool", "MaxPoolGrad", "AveragePoolGrad"), _POOL),
    **dict.fromkeys(("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Gather", "GatherElements",
                     "GatherND", "Scatter", "ScatterElements", "ScatterND", "Concat", "Split",
                     "Slice", "Pad", "Tile", "Expand", "Shape", "Size", "ConstantOfShape",
                     "Range", "NonZero", "Compress", "OneHot", "TopK", "ArgMax", "ArgMin",
                     "CumSum", "CumProd", "Trilu", "DepthToSpace", "SpaceToDepth",
                     "ReverseSequence", "InPlaceAccumulatorV2"), _SHAPE),
    **dict.fromkeys(("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad",
                     "SoftmaxCrossEntropyLossInternal", "SoftmaxCrossEntropyLossInternalGrad",
                     "NegativeLogLikelihoodLoss"), _LOSS),
}


def lookup(domain: str, op_type: str) -> Expansion | None:
    return EXPANSIONS.get(("" if domain == "ai.onnx" else domain, op_type))


__all__ = ["EXPANSIONS", "Expansion", "LIBRARY_REASONS", "expansion", "lookup"]
