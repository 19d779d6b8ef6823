"""A top-level map as a CUDA kernel: a block kernel for a row or column reduction (``reductions``), else one
thread per point (``cuda_source.points_kernel``)."""
from __future__ import annotations

from codegen.cupy_cuda import reductions
from codegen.cupy_cuda.cuda_source import points_kernel
from codegen.cupy_cuda.launch import CudaKernel
from ir.graph import Graph
from ir.nodes import MapNode


def kernel_source(m: MapNode, graph: Graph, *, storage: str | None = None, schedule: str = "auto") -> CudaKernel:
    """The CUDA kernel of top-level map ``m`` (``UnsupportedMap`` when it has none).

    ``schedule="auto"`` prints a row or column reduction as a block kernel (``reductions``)
    when ``reduction_pattern`` finds one, else one thread per point; ``"points"`` forces the latter."""
    if schedule not in ("auto", "points"):
        raise ValueError(f"unknown schedule {schedule!r}; expected 'auto' or 'points'")
    if schedule == "auto":
        block = reductions.block_kernel(m, graph, storage=storage)
        if block is not None:
            return block
    return points_kernel(m, graph, storage=storage)
