"""Launch shapes of the CUDA kernels: the record a kernel carries and the grid formula.

Every kernel the backend prints (``cuda_source`` for points, ``reductions`` for rows and
columns) is a ``CudaKernel``: the CPU backend's ``KernelSource`` plus a ``Launch``. The
exported launcher (``export.LAUNCHER``) launches with the record's block shape and computes
the grid from the extents it is called with, through ``grid_blocks`` — whose source is
copied into the launcher verbatim (``inspect.getsource``), so the exported formula and the
one tests check are the same text.

Kinds (the first ``threads`` extents of the kernel are the counts of the map's own
parameters; their product is the number of *points*, rows or columns of the launch):

- ``points``    one thread per point, ``POINTS_BLOCK`` threads per block (``(total + 255) // 256``);
- ``rows``      one block of ``block[0]`` threads per row (grid = rows);
- ``warp_rows`` one warp per row, ``block[1]`` rows per block (grid = ceil(rows / block[1]));
- ``columns``   ``block = (32, ry)``: 32 adjacent columns per block (the last extent is tiled by
                32), ``ry`` threads splitting the rows of each column; one block per tile and
                point of the leading extents.

``shared_bytes`` is the *static* shared memory the kernel declares (``__shared__`` arrays sized
in the text, checked by the compiler); launches pass no dynamic shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from codegen.program.kernel import KernelSource

POINTS_BLOCK = 256
KINDS = ("points", "rows", "warp_rows", "columns")


@dataclass(frozen=True)
class Launch:
    kind: str                  # one of KINDS
    block: tuple[int, int]     # (blockDim.x, blockDim.y)
    per_block: int             # points, rows or columns (of the tiled last extent) per block
    split_last: bool           # columns: the last extent is tiled, each leading point gets its own blocks
    grid: int                  # blocks for the map's own sizes (the launcher recomputes it)
    shared_bytes: int = 0      # static shared memory per block


@dataclass(frozen=True)
class CudaKernel(KernelSource):
    """A CUDA kernel: ``source`` is CUDA C; ``launch`` is how the exported launcher starts it,
    ``storage`` the C element type each container is stored as, ``threads`` how many leading
    extents are spread over threads."""

    storage: dict[str, str] = field(default_factory=dict)
    threads: int = 0
    launch: Launch = Launch("points", (POINTS_BLOCK, 1), POINTS_BLOCK, False, 0)


def grid_blocks(extents, threads, per_block, split_last):
    """Blocks of one launch: ``extents[:threads]`` are the counts of the map's own parameters."""
    lead = 1
    for n in extents[:max(threads - 1, 0)]:
        lead *= n
    last = extents[threads - 1] if threads else 1
    if split_last:
        return lead * ((last + per_block - 1) // per_block)
    return (lead * last + per_block - 1) // per_block


def launch(kind: str, block: tuple[int, int], per_block: int, extents: Sequence[int], threads: int,
           shared_bytes: int = 0) -> Launch:
    """The ``Launch`` of a kernel whose first ``threads`` extents are ``extents[:threads]``."""
    if kind not in KINDS:
        raise ValueError(f"unknown launch kind {kind!r}; expected one of {KINDS}")
    split = kind == "columns"
    return Launch(kind, block, per_block, split, grid_blocks(list(extents), threads, per_block, split), shared_bytes)
