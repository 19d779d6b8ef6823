"""Rows held in registers, for the row kernels of ``reductions`` (``rows`` and ``warp_rows``).

When every nested map of a row kernel walks the same iteration space and a thread takes at most
``CACHE_STEPS`` of its points, the strided loops are unrolled (``for (it = 0; it < K; ++it) j =
first + it * stride``) and each global element that more than one nested map loads (LayerNorm's
``x``: sum, variance, output) is loaded once into a per-thread register array ``cN[K]`` by the
first nested map that reads it and read from there by the rest. Before, every pass re-read the row
from L1/L2: LayerNorm forward ran at 29–69 % and softmax at 42 % of copy bandwidth on an H100;
with the cache, 120 % and 62 % (measured, ``tests/bench/gpu/variants.py``). The kernel's inputs
are never written in it (``plan_for`` refuses such maps), so a register copy cannot go stale; the
per-thread order of every partial sum is unchanged, so results are bit-identical.

**Summing blocks.** In a ``rows`` kernel whose nested maps add into elements shared by every row
(the LayerNorm gradient's dscale/dbias), a thread's columns are the same in every row: a block
takes ``ROWS_PER_SUMMING_BLOCK`` rows, sums its share in registers (``gN[K]``) and adds once after
its rows — a quarter of the atomics, which serialize per address in L2 (LayerNorm backward: 25 →
58–73 % of copy; 1, 2 and 8 rows per block measured slower than 4).
"""
from __future__ import annotations

import math

from codegen.cupy_cuda.cuda_source import C_TYPES, _Cuda, _value, loaded
from codegen.cupy_cuda.reduction_pattern import WARP, Plan, pow2floor
from codegen.program.expr_print import compute_dtype
from ir import expr as E
from ir.maps import param_counts, trip_count
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

CACHE_STEPS = 8            # at most this many points of a row per thread for the unrolled, cached loops
CACHE_REGISTERS = 48       # at most this many cached values per thread (K per cached element)
PREFETCH = True            # elements only a later nested map reads are loaded by the first one too
ROWS_PER_SUMMING_BLOCK = 4  # rows a block takes when it sums into elements shared by all rows
MIN_SUMMING_BLOCKS = 256    # …while keeping at least this many blocks


def thread_stride(plan: Plan) -> tuple[str, int]:
    if plan.kind == "warp_rows" and plan.lanes < WARP:
        return f"(threadIdx.x % {plan.lanes})", plan.lanes
    return {"rows": ("threadIdx.x", plan.block[0]), "warp_rows": ("threadIdx.x", WARP),
            "columns": ("threadIdx.y", plan.block[1])}[plan.kind]


def positions(k: _Cuda, counts: list[tuple[str, int, int, int]], names: list[str], ix: str = "long long") -> None:
    """``names[i] = start_i + (position i of flat index j) * step_i``, the last param fastest."""
    if len(counts) > 1:
        k.line(f"{ix} rj = j;")
    for i, (_, start, step, c) in reversed(list(enumerate(counts))):
        pos = "j" if len(counts) == 1 else ("rj" if i == 0 else f"rj % {c}")
        k.line(f"const long long {names[i]} = {start} + (long long)({pos}) * {step};"
               + (f" rj /= {c};" if len(counts) > 1 and i > 0 else ""))


def owned_by_row(k: _Cuda, mem: Memlet) -> bool:
    """Whether ``mem``'s index moves with the map's own params (each row its own element)."""
    top = {p for p, _ in k.m.params}
    return any(E.free_vars(ix) & top for ix in (mem.subset or ()) if not isinstance(ix, Range))


class RowCache:
    """The unrolled loops of a row kernel and the global elements its nested maps share in registers."""

    def __init__(self, steps: int, arrays: dict[str, str], first: dict[str, int], maps: list[MapNode],
                 dtypes: dict[str, str]) -> None:
        self.steps = steps
        self.arrays = arrays           # canonical element -> its register array
        self.first = first             # canonical element -> index of the nested map that loads it
        self.maps = maps
        self.dtypes = dtypes           # canonical element -> compute dtype
        self.sums: dict[str, tuple[str, str]] = {}   # shared sums: canonical element -> (register array, dtype)
        self.prefetched: dict[str, MapNode] = {}   # element read by one later nested map -> that map
        self.rows = 1                  # rows per block (``rows`` kind with shared sums)
        self.counts: list[tuple[str, int, int, int]] = []
        self.total = 0

    @classmethod
    def plan(cls, k: _Cuda, plan: Plan, nested: list[MapNode]) -> RowCache | None:
        """None unless every nested map walks the same points and a thread takes few of them."""
        if plan.kind not in ("rows", "warp_rows") or not nested:
            return None
        for i, (p, _) in enumerate(k.m.params):     # the names ``_params`` gives them (keys print with them)
            k.params.setdefault(p, f"p{i}")
        counts = [param_counts(n.params, k.graph.bindings) for n in nested]
        shapes = {tuple((start, step, c) for _, start, step, c in each) for each in counts}
        if len(shapes) != 1:
            return None
        total = math.prod(c for *_, c in next(iter(shapes)))
        steps = -(-total // thread_stride(plan)[1])
        if not 0 < steps <= CACHE_STEPS:          # (rows of no points: nothing to cache)
            return None
        uses: dict[str, list[int]] = {}
        dtypes: dict[str, str] = {}
        for i, n in enumerate(nested):
            for key, mem in canonical_loads(k, n).items():
                uses.setdefault(key, []).append(i)
                dtypes[key] = k.dtype(mem.container)
        shared = sorted((key for key, at in uses.items() if len(at) > 1), key=lambda key: (-len(uses[key]), key))
        shared = shared[:CACHE_REGISTERS // steps]
        later = sorted(key for key, at in uses.items() if len(at) == 1 and at[0] > 0)
        later = later[:max(0, CACHE_REGISTERS // steps - len(shared))] if PREFETCH else []
        arrays, first = {}, {}
        for key in sorted(shared, key=lambda key: (uses[key][0], key)) + later:
            arrays[key] = f"c{len(arrays)}"
            first[key] = 0 if key in later else uses[key][0]
        cache = cls(steps, arrays, first, nested, {key: compute_dtype(dt) for key, dt in dtypes.items()})
        cache.prefetched = {key: nested[uses[key][0]] for key in later}
        cache.counts, cache.total = counts[0], total
        if plan.kind == "rows":
            cache._plan_rows(k, plan)
        return cache

    def _plan_rows(self, k: _Cuda, plan: Plan) -> None:
        """Rows per block for a kernel whose nested maps add into elements shared by every row (the
        LayerNorm gradient's dscale/dbias): a thread's columns are the same in every row, so it sums
        its share of ``ROWS_PER_SUMMING_BLOCK`` rows in registers and adds them once, cutting the
        atomics (which serialize per address in L2) by that factor."""
        for n in self.maps:
            for t in n.body:
                out = t.output
                key = canonical(k, n, out)
                if key is None or out.wcr != "sum" or out.container in k.locals or owned_by_row(k, out):
                    continue
                if key not in self.sums:
                    self.sums[key] = (f"g{len(self.sums)}", compute_dtype(k.dtype(out.container)))
        rows = trip_count(k.m.params, k.graph.bindings)
        if self.sums:
            self.rows = max(1, min(ROWS_PER_SUMMING_BLOCK, pow2floor(max(1, rows // MIN_SUMMING_BLOCKS))))
        if self.rows == 1:
            self.sums = {}

    def declare(self, k: _Cuda) -> None:
        for key, name in self.arrays.items():
            k.line(f"{C_TYPES[self.dtypes[key]]} {name}[{self.steps}];   // {key} of this thread's points, in registers")

    def shared_sum(self, k: _Cuda, n: MapNode, t: Tasklet) -> str | None:
        """The register array summing tasklet ``t``'s shared element over this block's rows, if it has one."""
        if not self.sums or t.output.wcr != "sum":
            return None
        found = self.sums.get(canonical(k, n, t.output))
        return found[0] if found else None

    def open_rows(self, k: _Cuda) -> None:
        for key, (name, dt) in self.sums.items():
            k.line(f"{C_TYPES[dt]} {name}[{self.steps}] = {{}};   // {key}: this block's rows, summed")
        k.line(f"for (int rr = 0; rr < {self.rows}; ++rr) {{   // {self.rows} rows per block")
        k.depth += 1

    def close_rows(self, k: _Cuda, plan: Plan) -> None:
        """End of the row loop (a barrier: the next row reuses the shared slots), then one atomic per
        shared element and thread."""
        k.line("__syncthreads();")
        k.depth -= 1
        k.line("}")
        first, stride = thread_stride(plan)
        k.line("#pragma unroll")
        k.line(f"for (int it = 0; it < {self.steps}; ++it) {{")
        k.depth += 1
        k.line(f"const int j = {first} + it * {stride};")
        guard = self.total % stride != 0
        if guard:
            k.line(f"if (j < {self.total}) {{")
            k.depth += 1
        positions(k, self.counts, [f"q{i}" for i in range(len(self.counts))])
        for key, (name, dt) in self.sums.items():
            k.line(f"atomicAdd(&{key}, ({C_TYPES[dt]})({name}[it]));")
        for _ in range(1 + guard):
            k.depth -= 1
            k.line("}")

    def fill(self, k: _Cuda, n: MapNode) -> None:
        """In the first nested map that reads them: load this iteration's cached elements."""
        at = self.maps.index(n)
        loads = canonical_loads(k, n)
        for key, name in self.arrays.items():
            if self.first[key] == at and key not in self.prefetched:
                k.line(f"{name}[it] = {loaded(k, loads[key])};")
        if at != 0 or not self.prefetched:
            return
        later_loads = {id(m): canonical_loads(k, m) for m in self.prefetched.values()}
        for key, later in self.prefetched.items():
            # the later map's params are at this map's positions (same points, same order)
            with k.renamed({p: k.params[q] for (p, _), (q, _) in zip(later.params, n.params)}):
                k.line(f"{self.arrays[key]}[it] = {loaded(k, later_loads[id(later)][key])};   // prefetched")

    def value(self, k: _Cuda, n: MapNode, t: Tasklet) -> str:
        """The tasklet's expression, its cached inputs read from registers."""
        def held(mem: Memlet) -> str | None:
            key = canonical(k, n, mem)
            return f"{self.arrays[key]}[it]" if key in self.arrays else None
        return _value(k, t, held)


def canonical(k: _Cuda, n: MapNode, mem: Memlet) -> str | None:
    """The element ``mem`` names with ``n``'s params as their positions (``q0``, ``q1``…): equal in
    two nested maps of the same points exactly when they load the same element at the same ``j``;
    None for locals and for elements that do not move along the row."""
    if mem.container in k.locals or mem.container not in k.arrays:
        return None
    inner = {p for p, _ in n.params}
    if not any(E.free_vars(ix) & inner for ix in (mem.subset or ()) if not isinstance(ix, Range)):
        return None
    with k.renamed({p: f"q{i}" for i, (p, _) in enumerate(n.params)}):
        return k.element(mem)


def canonical_loads(k: _Cuda, n: MapNode) -> dict[str, Memlet]:
    """canonical element -> the first memlet of ``n`` that loads it, in body order."""
    found: dict[str, Memlet] = {}
    for t in n.body:
        for mem in t.inputs.values():
            key = canonical(k, n, mem)
            if key is not None:
                found.setdefault(key, mem)
    return found
