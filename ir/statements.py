"""What a statement of an exported program is (``codegen.program``): every layer that reads programs, their
timings or their bytes names the kinds through this enum, never as bare strings."""
from __future__ import annotations

from enum import StrEnum


class StatementKind(StrEnum):
    """A ``StrEnum``: a member compares, formats and serializes as its value (``"kernel"``, …)."""

    KERNEL = "kernel"          # a generated kernel launch
    BLAS = "blas"              # a library contraction (GEMM, batched GEMM, convolution)
    VIEW = "view"              # an alias of its input: no data moves
    CONSTANT = "constant"      # a value folded at export (a Shape of a static tensor)
    REFERENCE = "reference"    # the reference kernel of the op (NumPy), run as is
    EXTERN = "extern"          # a node no backend generates: the reference executor runs it


FREE_KINDS = frozenset({StatementKind.VIEW, StatementKind.CONSTANT})
"""Statements that move no data and take no time of their own."""
