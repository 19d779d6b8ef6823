"""One statement of a program (a kernel launch, a BLAS call, a view, a constant, a reference or extern call)
and the buffers it allocates before its call."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alloc:
    """An output buffer the statement needs before its call (``empty``, ``zeros``, ``full``)."""

    container: str
    kind: str = "empty"
    wcr: str | None = None


@dataclass
class Statement:
    node_id: str
    label: str
    kind: str                      # kernel | blas | view | constant | reference | extern
    head: str                      # the comment naming the node
    lines: list[str]               # the call, after the allocations
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    allocs: tuple[Alloc, ...] = ()
    kernel: str | None = None
    tasks: tuple[tuple[str, ...], ...] = ()   # independent parts of ``lines`` (a grouped GEMM's members)
    calls: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (callee, containers its arrays are), as run
