"""Reductions split over several blocks, for ``reductions``: the last block to finish combines.

A block of a reduction kernel reduces one chunk, stores its partial in a module-scope
``__device__`` array and counts itself in (``atomicAdd`` after a ``__threadfence``); the last
block of its group to arrive combines the partials in chunk order (deterministic), resets the
count for the next launch (so a captured CUDA graph replays it), and alone runs what comes after
the nested map (the statements, a fused optimizer update). Kernels: one nested map, first in the
map's body.
"""
from __future__ import annotations

import numpy as np

from codegen.cupy_cuda.cuda_source import C_TYPES, _Cuda
from codegen.cupy_cuda.reduction_pattern import WARP, WCR_OP, Plan
from ir.maps import param_counts, trip_count
from ir.nodes import MapNode

SPLIT_MIN = 1 << 16        # a row this long, in a kernel of at most SPLIT_MAX_ROWS rows, is split over blocks
SPLIT_MAX_ROWS = 64
SPLIT_ELEMS_PER_THREAD = 8
COLUMN_SPLIT_MIN = 256     # columns at least this long, in a kernel of fewer than COLUMN_SPLIT_BLOCKS blocks…
COLUMN_SPLIT_BLOCKS = 128
COLUMN_TARGET_BLOCKS = 256  # …get their rows split over blocks up to about this many blocks in all
COLUMN_ROWS_PER_THREAD = 4


class RowSplit:
    """A long row (a full reduction: the loss) split over ``blocks`` blocks. Before, one block of
    1,024 threads walked all of it: 106 µs for the 3.15 MB loss sum of the BERT-base step on an
    H100 (30 GB/s, 5 % of the step). Each block now reduces one chunk, its thread 0 stores the
    partial in a module-scope ``__device__`` array and counts itself in; the last block to arrive
    combines the partials in chunk order (deterministic), resets the count for the next launch
    (so a captured graph replays), and alone runs the statements after the nested map."""

    def __init__(self, rows: int, blocks: int, chunk: int) -> None:
        self.rows, self.blocks, self.chunk = rows, blocks, chunk
        self.arrays: list[tuple[str, str]] = []     # (name, C type) of the partials' scratch arrays

    @classmethod
    def plan(cls, k: _Cuda, plan: Plan, m: MapNode) -> RowSplit | None:
        nested = [s for s in m.body if isinstance(s, MapNode)]
        if plan.kind != "rows" or len(nested) != 1 or m.body[0] is not nested[0]:
            return None
        rows = trip_count(m.params, k.graph.bindings)
        threads = plan.block[0]
        if not 0 < rows <= SPLIT_MAX_ROWS or plan.row_length < SPLIT_MIN:
            return None
        blocks = min(threads, -(-plan.row_length // (threads * SPLIT_ELEMS_PER_THREAD)))
        if blocks < 2:
            return None
        chunk = -(-plan.row_length // blocks)
        chunk = -(-chunk // threads) * threads                 # whole strides: every block starts at a lane 0
        return cls(rows, -(-plan.row_length // chunk), chunk)

    def globals(self) -> str:
        decls = [f"__device__ {ct} {name}[{self.rows * self.blocks}];" for name, ct in self.arrays]
        decls.append(f"__device__ unsigned int KERNEL_count[{self.rows}] = {{0}};   // blocks done, per row")
        return "\n".join(decls) + "\n"

    def combine(self, k: _Cuda, plan: Plan, partials: dict, slots, reduce) -> None:
        """After the block's own reduction: publish it; the last block of the row reduces them all
        (``reduce``: the block reduction of ``reductions``, into new ``slots``)."""
        slots.decls.append("__shared__ int dcs_last[1];")
        slots.bytes += 4
        stores = []
        for name, dt, _ in partials.values():
            scratch = f"KERNEL_p{len(self.arrays)}"
            self.arrays.append((scratch, C_TYPES[dt]))
            stores.append((scratch, name, dt))
        k.line("if (threadIdx.x == 0) {")
        for scratch, name, _ in stores:
            k.line(f"  {scratch}[row * {self.blocks} + chunk] = {name};")
        k.line("  __threadfence();       // the partial is visible before the count says so")
        k.line(f"  dcs_last[0] = atomicAdd(&KERNEL_count[row], 1u) == {self.blocks - 1}u;")
        k.line("}")
        k.line("__syncthreads();")
        k.line("if (!dcs_last[0]) return;   // uniform: the whole block leaves")
        k.line("__threadfence();")
        for (scratch, name, dt), (_, _, tg) in zip(stores, partials.values()):
            k.line(f"{name} = threadIdx.x < {self.blocks} ? __ldcg(&{scratch}[row * {self.blocks} + threadIdx.x])"
                   f" : {k.identity(tg.wcr, dt)};")
        reduce(k, plan, partials, slots)
        k.line("if (threadIdx.x == 0) { KERNEL_count[row] = 0; }   // ready for the next launch")


class ColumnSplit:
    """The rows of a column reduction (a bias gradient, with its fused optimizer update) split over
    ``blocks`` blocks when the columns alone give too few: 768 columns make 24 blocks of (32, 32)
    threads on a GPU of 132 SMs (the LayerNorm and value-bias gradients of the BERT-base step ran
    at 37–45 % of copy bandwidth). The chunk is the outermost (first) extent of the grid; a group
    is the blocks of one tile of 32 columns. Each column's partial goes to a ``__device__`` array;
    the last block of the group sums a column's partials in chunk order (one thread per column),
    shares the totals through ``__shared__`` memory and runs the rest of the map."""

    def __init__(self, blocks: int, chunk: int, groups: int) -> None:
        self.blocks, self.chunk, self.groups = blocks, chunk, groups
        self.arrays: list[tuple[str, str]] = []

    @classmethod
    def plan(cls, k: _Cuda, plan: Plan, m: MapNode) -> ColumnSplit | None:
        nested = [s for s in m.body if isinstance(s, MapNode)]
        if plan.kind != "columns" or len(nested) != 1 or m.body[0] is not nested[0] or not m.params:
            return None
        extents = [c for *_, c in param_counts(m.params, k.graph.bindings)]
        groups = -(-extents[-1] // WARP)
        for n in extents[:-1]:
            groups *= n
        ry = plan.block[1]
        if not 0 < groups < COLUMN_SPLIT_BLOCKS or plan.row_length < COLUMN_SPLIT_MIN:
            return None
        blocks = min(-(-COLUMN_TARGET_BLOCKS // groups), plan.row_length // (ry * COLUMN_ROWS_PER_THREAD))
        if blocks < 2:
            return None
        chunk = -(-plan.row_length // blocks)
        chunk = -(-chunk // ry) * ry
        return cls(-(-plan.row_length // chunk), chunk, groups)

    def globals(self) -> str:
        decls = [f"__device__ {ct} {name}[{self.groups * WARP * self.blocks}];" for name, ct in self.arrays]
        decls.append(f"__device__ unsigned int KERNEL_count[{self.groups}] = {{0}};   // blocks done, per column tile")
        return "\n".join(decls) + "\n"

    def combine(self, k: _Cuda, plan: Plan, partials: dict, slots, reduce=None) -> None:
        """After the block's reduction (every thread holds its column's partial): publish; the last
        block of the group combines each column's partials and gives the totals to every thread."""
        slots.decls.append("__shared__ int dcs_last[1];")
        slots.bytes += 4
        at = f"(group * {WARP} + threadIdx.x) * {self.blocks}"
        items = []
        for name, dt, tg in partials.values():
            scratch, shared = f"KERNEL_p{len(self.arrays)}", f"dcs_b{len(self.arrays)}"
            self.arrays.append((scratch, C_TYPES[dt]))
            slots.decls.append(f"__shared__ {C_TYPES[dt]} {shared}[{WARP}];")
            slots.bytes += WARP * np.dtype(dt).itemsize
            items.append((scratch, shared, name, dt, tg))
        k.line("if (active && threadIdx.y == 0) {")
        for scratch, _, name, _, _ in items:
            k.line(f"  {scratch}[{at} + chunk] = {name};")
        k.line("  __threadfence();       // the partials are visible before the count says so")
        k.line("}")
        k.line("__syncthreads();")
        k.line("if (threadIdx.x == 0 && threadIdx.y == 0) {")
        k.line(f"  dcs_last[0] = atomicAdd(&KERNEL_count[group], 1u) == {self.blocks - 1}u;")
        k.line("}")
        k.line("__syncthreads();")
        k.line("if (!dcs_last[0]) return;   // uniform: the whole block leaves")
        k.line("__threadfence();")
        k.line("if (active && threadIdx.y == 0) {")
        for scratch, shared, name, dt, tg in items:
            k.line(f"  {name} = {k.identity(tg.wcr, dt)};")
            k.line(f"  for (int c = 0; c < {self.blocks}; ++c) {{ {name} = dcs_op<{WCR_OP[tg.wcr]}>({name}, "
                   f"__ldcg(&{scratch}[{at} + c])); }}")
            k.line(f"  {shared}[threadIdx.x] = {name};")
        k.line("}")
        k.line("__syncthreads();")
        k.line(" ".join(f"{name} = {shared}[threadIdx.x];" for _, shared, name, _, _ in items))
        k.line("if (threadIdx.x == 0 && threadIdx.y == 0) { KERNEL_count[group] = 0; }   // ready for the next launch")
