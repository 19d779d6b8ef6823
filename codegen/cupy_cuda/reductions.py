"""Row and column reductions as block kernels: the threads of a block share a row (or a column).

``block_kernel(map, graph, storage)`` prints the maps ``reduction_pattern.plan_for`` accepts
(Softmax, LogSoftmax, LayerNorm forward and backward, SoftmaxGrad, ReduceSum/ReduceMean, bias
gradients, and what ``map_fusion`` fused around them) and returns None for the rest, which
``cuda_source`` prints one thread per point. Why: one thread walking a row of 768 serially
leaves the GPU with 1024 threads for 786k elements and makes a warp's 32 loads land 768
floats apart (32 transactions instead of one): 30–100× below bandwidth.

**Rows** (``rows``: one block per row; ``warp_rows``: one warp per row, 4 rows per block). The
block index is the point of the map's params; the map's statements run in body order:

- a nested map runs *strided*: thread ``t`` takes points ``t, t + blockDim, …`` of its (flattened,
  last param fastest) iteration space, so a warp's loads of ``x[row, r]`` are one 128-byte line;
- what it reduces (a map local, or an element ``y[row…]`` written with a wcr) goes into a
  per-thread partial starting at the wcr identity, combined in float32 (also for bf16/fp16
  storage) in body order within the thread; after the loop each partial is reduced with
  ``__shfl_xor_sync`` (``dcs_warp``: a butterfly, then lane 0's value broadcast, so the lanes
  agree bit for bit), lane 0 of each warp writes it to ``__shared__`` (one slot per reduction,
  written once: a single ``__syncthreads`` per nested map and no reuse hazards), and every thread
  combines the warps' values in warp order — the result is in every thread's registers;
- the reduced value is combined into the local (``t = t ⊕ s``, so a value before the nested map
  counts once) or, by thread 0 only, into the global element;
- statements between nested maps run in every thread (their locals stay uniform across the
  block, so no broadcast is needed); those writing global memory run in thread 0 only;
- other writes inside a nested map index both the row and the strided param (one writer per
  element) or are shared between rows (a bias gradient fused into LayerNorm backward: ``atomicAdd``).
Warp rows skip shared memory and barriers; a warp whose row is past the end returns at once.

**Rows held in registers** (``rows`` and ``warp_rows``). When every nested map walks the same
iteration space and a thread takes at most ``CACHE_STEPS`` of its points, the strided loops are
unrolled (``for (it = 0; it < K; ++it) j = first + it * stride``) and each global element that
more than one nested map loads (LayerNorm's ``x``: sum, variance, output) is loaded once into a
per-thread register array ``cN[K]`` by the first nested map that reads it and read from there by
the rest. Before, every pass re-read the row from L1/L2: LayerNorm forward ran at 29–69 % and
softmax at 42 % of copy bandwidth on an H100. The kernel's inputs are never written in it
(``plan_for`` refuses such maps), so a register copy cannot go stale; the per-thread order of
every partial sum is unchanged, so results are bit-identical to the uncached loops.

**Columns** (bias gradients: ``db[c] = Σ_r dy[r, c]``, with the optimizer update fused after it).
Block ``(32, ry)``: ``threadIdx.x`` picks one of 32 adjacent columns, so each warp reads 128
contiguous bytes per row, and the ``ry`` warps split the rows (thread ``y`` sums rows ``y, y+ry,
…``). The partials meet in a ``__shared__ [ry][32]`` array (conflict-free: a warp touches one
row of it) and every thread combines the ``ry`` values of its column in order. Atomics across
blocks would give more blocks (split the rows over blocks too) but the sum would not be known
until the grid ends, and the fused epilogue (AdamW on the bias) needs it in the same kernel;
with 768 columns the ``(32, 32)`` blocks give 24 blocks of 32 warps (24k threads, each reading
32 coalesced rows) against 768 serial threads before — a 2-kernel split-K is left for later.
Threads past the last column stay for the barrier but load nothing (``active``).

Every block kernel carries ``__launch_bounds__(threads)`` (so the compiler never uses more
registers than a block of that size can get) and a ``Launch`` record (``launch.py``) that the
exported launcher uses: grid from the extents, block shape, static shared bytes.
"""
from __future__ import annotations

from codegen.cupy_cuda.c_expr import to_cuda
from codegen.cupy_cuda.cuda_source import (C_TYPES, COMPUTE, LOAD, STORE, _collect, _combine, _Cuda, _declare_locals,
                                           _identity, _store, _value, finish)
from codegen.cupy_cuda.launch import CudaKernel, launch
from codegen.cupy_cuda.reduction_pattern import WARP, WCR_OP, Plan, Target, plan_for, pow2floor
from codegen.program.kernel import UnsupportedMap
from ir import expr as E
from ir.graph import Graph
from ir.maps import range_bounds
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

SHUFFLE_TYPES = ("float32", "float64", "int32", "int64")
CACHE_STEPS = 8            # at most this many points of a row per thread for the unrolled, cached loops
CACHE_REGISTERS = 48       # at most this many cached values per thread (K per cached element)
SPLIT_MIN = 1 << 16        # a row this long, in a kernel of at most SPLIT_MAX_ROWS rows, is split over blocks
SPLIT_MAX_ROWS = 64
SPLIT_ELEMS_PER_THREAD = 8
ROWS_PER_SUMMING_BLOCK = 4  # rows a block takes when it sums into elements shared by all rows
MIN_SUMMING_BLOCKS = 256    # …while keeping at least this many blocks
LEADER = {"rows": "threadIdx.x == 0", "warp_rows": "threadIdx.x == 0", "columns": "active && threadIdx.y == 0"}


def block_kernel(m: MapNode, graph: Graph, *, storage: str | None = None) -> CudaKernel | None:
    """The block kernel of ``m`` if it is a row or column reduction this printer handles, else None."""
    plan = plan_for(m, graph)
    if not plan:
        return None
    try:
        return _print(m, graph, storage, plan)
    except (KeyError, ValueError):       # UnsupportedMap included: the points printer decides
        return None


class _Slots:
    """The ``__shared__`` arrays of one kernel: one per reduced partial, written once."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.decls: list[str] = []
        self.bytes = 0
        self.partials = 0

    def partial(self) -> str:
        self.partials += 1
        return f"s{self.partials - 1}"

    def add(self, dt: str) -> str:
        name = f"dcs_s{len(self.decls)}"
        x, y = self.plan.block
        dims = f"[{y}][{x}]" if self.plan.kind == "columns" else f"[{x // WARP}]"
        self.decls.append(f"__shared__ {C_TYPES[dt]} {name}{dims};")
        self.bytes += (x * y if self.plan.kind == "columns" else x // WARP) * _size(dt)
        return name


def _size(dt: str) -> int:
    return {"float32": 4, "float64": 8, "int32": 4, "int64": 8}[dt]


def _print(m: MapNode, graph: Graph, storage: str | None, plan: Plan) -> CudaKernel:
    k = _Cuda(m, graph, storage)
    _collect(k)
    x, y = plan.block
    k.line(f"// {plan.kind}: block ({x}, {y}); the longest nested map has {plan.row_length} points")
    at = len(k.lines)
    cache = _RowCache.plan(k, plan, [s for s in m.body if isinstance(s, MapNode)])
    split = _Split.plan(k, plan, m) if cache is None else None
    if cache is not None and cache.rows > 1:
        cache.open_rows(k)
    _params(k, plan, cache, split)
    _declare_locals(k, m)
    if cache is not None:
        cache.declare(k)
    slots = _Slots(plan)
    nested = iter(plan.targets)
    for stmt in m.body:
        if isinstance(stmt, MapNode):
            _strided(k, plan, stmt, next(nested), slots, cache, split)
        else:
            _guarded(k, plan, stmt)
    per_block, threads = plan.per_block, len(m.params)
    if cache is not None and cache.rows > 1:
        cache.close_rows(k, plan)
        per_block = cache.rows
    if split is not None:            # the blocks of a row are one more (virtual) extent of the grid
        k.extents.append(split.blocks)
        threads += 1
    k.lines[at:at] = ["  " + d for d in slots.decls]
    how = launch(plan.kind, plan.block, per_block, k.extents, threads, slots.bytes)
    return finish(k, "\n".join(k.lines), f"__launch_bounds__({x * y})", how,
                  split.globals() if split is not None else "", threads)


def _params(k: _Cuda, plan: Plan, cache: _RowCache | None = None, split: _Split | None = None) -> None:
    """The map's params from the block (and, for warp rows, the warp) index; the last one fastest."""
    counts = []
    for p, r in k.m.params:
        start, stop, step = range_bounds(r, k.graph.bindings)
        counts.append((p, start, step))
        k.extents.append(max(0, -(-(stop - start) // step)))
    n = len(counts)
    if plan.kind == "rows" and cache is not None and cache.rows > 1:
        total = " * ".join(f"n{i}" for i in range(n)) or "1"
        k.line("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;")
        k.line(f"long long rest = (long long)blockIdx.x * {cache.rows} + rr;")
        k.line(f"if (rest >= {total}) break;       // uniform across the block: no barrier is skipped by some")
    elif plan.kind == "rows" and split is not None:
        k.line("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;")
        k.line(f"const long long row = blockIdx.x / {split.blocks}; const int chunk = blockIdx.x % {split.blocks};")
        k.line("long long rest = row;")
    elif plan.kind == "rows":
        k.line("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;")
        k.line("long long rest = blockIdx.x;")
    elif plan.kind == "warp_rows":
        total = " * ".join(f"n{i}" for i in range(n)) or "1"
        k.line(f"long long rest = (long long)blockIdx.x * {plan.per_block} + threadIdx.y;")
        k.line(f"if (rest >= {total}) return;")
    else:
        last, start, step = counts.pop()
        k.line(f"const long long tiles = (n{n - 1} + {WARP - 1}) / {WARP};")
        k.line("long long rest = blockIdx.x;")
        k.line(f"const long long col = (rest % tiles) * {WARP} + threadIdx.x; rest /= tiles;")
        k.line(f"const bool active = col < n{n - 1};")
        k.params[last] = f"p{n - 1}"
        k.line(f"const long long p{n - 1} = {start} + col * {step};")
    for i in reversed(range(len(counts))):
        p, start, step = counts[i]
        k.params[p] = f"p{i}"
        k.line(f"const long long p{i} = {start} + (rest % n{i}) * {step}; rest /= n{i};")


def _guarded(k: _Cuda, plan: Plan, t: Tasklet) -> None:
    """A statement between nested maps: every (active) thread computes locals, the leader writes memory."""
    line = _store(k, t.output, _value(k, t))
    if t.output.container not in k.locals:
        line = f"if ({LEADER[plan.kind]}) {{ {line} }}"
    elif plan.kind == "columns":
        line = f"if (active) {{ {line} }}"
    k.line(line)


def _strided(k: _Cuda, plan: Plan, n: MapNode, targets: tuple[Target, ...], slots: _Slots,
             cache: _RowCache | None, split: _Split | None = None) -> None:
    """Nested map ``n`` strided over the block's threads, then its reductions."""
    k.line(f"{{  // nested map over {', '.join(p for p, _ in n.params)}: strided over the block's threads")
    k.depth += 1
    partials = {}
    for tg in targets:
        dt = _partial_type(k, tg)
        name = slots.partial()
        partials[(tg.container, tg.subset)] = (name, dt, tg)
        k.line(f"{C_TYPES[dt]} {name} = {_identity(tg.wcr, dt)};")
    _loop(k, plan, n, partials, cache, split)
    if partials:
        _reduce(k, plan, partials, slots)
    if split is not None:
        split.combine(k, plan, partials, slots)
    for name, dt, tg in partials.values():
        _combine_into(k, plan, tg, name)
    k.depth -= 1
    k.line("}")


def _partial_type(k: _Cuda, tg: Target) -> str:
    dt = k.locals[tg.container][1] if tg.is_local else k.dtype(tg.container)
    dt = COMPUTE.get(dt, dt)
    if dt not in SHUFFLE_TYPES:
        raise UnsupportedMap(f"reduction into '{tg.container}' of type {dt}: block reductions take {SHUFFLE_TYPES}")
    return dt


def _counts(k: _Cuda, n: MapNode) -> list[tuple[str, int, int, int]]:
    """(param, start, step, count) of each param of nested map ``n``."""
    counts = []
    for p, r in n.params:
        start, stop, step = range_bounds(r, k.graph.bindings)
        counts.append((p, start, step, max(0, -(-(stop - start) // step))))
    return counts


def _stride(plan: Plan) -> tuple[str, int]:
    return {"rows": ("threadIdx.x", plan.block[0]), "warp_rows": ("threadIdx.x", WARP),
            "columns": ("threadIdx.y", plan.block[1])}[plan.kind]


def _loop(k: _Cuda, plan: Plan, n: MapNode, partials: dict, cache: _RowCache | None = None,
          split: _Split | None = None) -> None:
    counts = _counts(k, n)
    total = 1
    for *_, c in counts:
        total *= c
    ix = "long long" if total >= 2**31 else "int"
    first, stride = _stride(plan)
    cond = "active && " if plan.kind == "columns" else ""
    if split is not None:            # this block's chunk of the row
        k.line(f"const {ix} lo = ({ix})chunk * {split.chunk};")
        k.line(f"for ({ix} j = lo + {first}; j < {total} && j < lo + {split.chunk}; j += {stride}) {{")
        k.depth += 1
    elif cache is None:
        k.line(f"for ({ix} j = {first}; {cond}j < {total}; j += {stride}) {{")
        k.depth += 1
    else:
        k.line("#pragma unroll")
        k.line(f"for (int it = 0; it < {cache.steps}; ++it) {{")
        k.depth += 1
        k.line(f"const {ix} j = {first} + it * {stride};")
        if total % stride:
            k.line(f"if (j < {total}) {{")
            k.depth += 1
    names = []
    for p, *_ in counts:
        names.append(f"p{len(k.params)}")
        k.params[p] = names[-1]
    _positions(k, counts, names, ix)
    _declare_locals(k, n)
    if cache is not None:
        cache.fill(k, n)
    saved = k.owners
    k.owners = set(saved) | {p for p, _ in n.params}
    for t in n.body:
        value = cache.value(k, n, t) if cache is not None else _value(k, t)
        key = (t.output.container, None if t.output.container in k.m.locals else t.output.subset)
        shared = cache.shared_sum(k, n, t) if cache is not None else None
        if key in partials:
            name, _, tg = partials[key]
            k.line(f"{name} = {_combine(tg.wcr, name, f'({value})')};")
        elif shared is not None:
            k.line(f"{shared}[it] += ({value});")
        else:
            k.line(_store(k, t.output, value))
    k.owners = saved
    closing = 1 + (cache is not None and total % stride != 0)
    for _ in range(closing):
        k.depth -= 1
        k.line("}")


def _positions(k: _Cuda, counts: list[tuple[str, int, int, int]], names: list[str], ix: str = "long long") -> None:
    """``names[i] = start_i + (position i of flat index j) * step_i``, the last param fastest."""
    if len(counts) > 1:
        k.line(f"{ix} rj = j;")
    for i, (_, start, step, c) in reversed(list(enumerate(counts))):
        pos = "j" if len(counts) == 1 else ("rj" if i == 0 else f"rj % {c}")
        k.line(f"const long long {names[i]} = {start} + (long long)({pos}) * {step};"
               + (f" rj /= {c};" if len(counts) > 1 and i > 0 else ""))


def _owned_by_row(k: _Cuda, mem: Memlet) -> bool:
    """Whether ``mem``'s index moves with the map's own params (each row its own element)."""
    top = {p for p, _ in k.m.params}
    return any(E.free_vars(ix) & top for ix in (mem.subset or ()) if not isinstance(ix, Range))


class _Split:
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
    def plan(cls, k: _Cuda, plan: Plan, m: MapNode) -> _Split | None:
        nested = [s for s in m.body if isinstance(s, MapNode)]
        if plan.kind != "rows" or len(nested) != 1 or m.body[0] is not nested[0]:
            return None
        rows = 1
        for _, r in m.params:
            start, stop, step = range_bounds(r, k.graph.bindings)
            rows *= max(0, -(-(stop - start) // step))
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
        decls.append(f"__device__ unsigned int dcs_count[{self.rows}] = {{0}};   // blocks done, per row")
        return "\n".join(decls) + "\n"

    def combine(self, k: _Cuda, plan: Plan, partials: dict, slots: _Slots) -> None:
        """After the block's own reduction: publish it; the last block of the row reduces them all."""
        slots.decls.append("__shared__ bool dcs_last;")
        stores = []
        for name, dt, _ in partials.values():
            scratch = f"dcs_p{len(self.arrays)}"
            self.arrays.append((scratch, C_TYPES[dt]))
            stores.append((scratch, name, dt))
        k.line("if (threadIdx.x == 0) {")
        for scratch, name, _ in stores:
            k.line(f"  {scratch}[row * {self.blocks} + chunk] = {name};")
        k.line("  __threadfence();       // the partial is visible before the count says so")
        k.line(f"  dcs_last = atomicAdd(&dcs_count[row], 1u) == {self.blocks - 1}u;")
        k.line("}")
        k.line("__syncthreads();")
        k.line("if (!dcs_last) return;   // uniform: the whole block leaves")
        k.line("__threadfence();")
        for (scratch, name, dt), (_, _, tg) in zip(stores, partials.values()):
            k.line(f"{name} = threadIdx.x < {self.blocks} ? __ldcg(&{scratch}[row * {self.blocks} + threadIdx.x])"
                   f" : {_identity(tg.wcr, dt)};")
        _reduce(k, plan, partials, slots)
        k.line("if (threadIdx.x == 0) { dcs_count[row] = 0; }   // ready for the next launch")


class _RowCache:
    """The unrolled loops of a row kernel and the global elements its nested maps share in registers."""

    def __init__(self, steps: int, arrays: dict[str, str], first: dict[str, int], maps: list[MapNode],
                 dtypes: dict[str, str]) -> None:
        self.steps = steps
        self.arrays = arrays           # canonical element -> its register array
        self.first = first             # canonical element -> index of the nested map that loads it
        self.maps = maps
        self.dtypes = dtypes           # canonical element -> compute dtype
        self.sums: dict[str, tuple[str, str]] = {}   # shared sums: canonical element -> (register array, dtype)
        self.rows = 1                  # rows per block (``rows`` kind with shared sums)
        self.counts: list[tuple[str, int, int, int]] = []
        self.total = 0

    @classmethod
    def plan(cls, k: _Cuda, plan: Plan, nested: list[MapNode]) -> _RowCache | None:
        """None unless every nested map walks the same points and a thread takes few of them."""
        if plan.kind not in ("rows", "warp_rows") or not nested:
            return None
        for i, (p, _) in enumerate(k.m.params):     # the names ``_params`` gives them (keys print with them)
            k.params.setdefault(p, f"p{i}")
        shapes = {tuple((start, step, c) for _, start, step, c in _counts(k, n)) for n in nested}
        if len(shapes) != 1:
            return None
        total = 1
        for *_, c in next(iter(shapes)):
            total *= c
        steps = -(-total // _stride(plan)[1])
        if not 0 < steps <= CACHE_STEPS:          # (rows of no points: nothing to cache)
            return None
        uses: dict[str, list[int]] = {}
        dtypes: dict[str, str] = {}
        for i, n in enumerate(nested):
            for key, mem in _canonical_loads(k, n).items():
                uses.setdefault(key, []).append(i)
                dtypes[key] = k.dtype(mem.container)
        shared = sorted((key for key, at in uses.items() if len(at) > 1), key=lambda key: (-len(uses[key]), key))
        shared = shared[:CACHE_REGISTERS // steps]
        arrays, first = {}, {}
        for key in sorted(shared, key=lambda key: (uses[key][0], key)):
            arrays[key] = f"c{len(arrays)}"
            first[key] = uses[key][0]
        cache = cls(steps, arrays, first, nested, {key: COMPUTE.get(dt, dt) for key, dt in dtypes.items()})
        cache.counts, cache.total = _counts(k, nested[0]), total
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
                key = _canonical(k, n, out)
                if key is None or out.wcr != "sum" or out.container in k.locals or _owned_by_row(k, out):
                    continue
                if key not in self.sums:
                    self.sums[key] = (f"g{len(self.sums)}", COMPUTE.get(k.dtype(out.container), k.dtype(out.container)))
        rows = 1
        for _, r in k.m.params:
            start, stop, step = range_bounds(r, k.graph.bindings)
            rows *= max(0, -(-(stop - start) // step))
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
        found = self.sums.get(_canonical(k, n, t.output))
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
        first, stride = _stride(plan)
        k.line("#pragma unroll")
        k.line(f"for (int it = 0; it < {self.steps}; ++it) {{")
        k.depth += 1
        k.line(f"const int j = {first} + it * {stride};")
        guard = self.total % stride != 0
        if guard:
            k.line(f"if (j < {self.total}) {{")
            k.depth += 1
        _positions(k, self.counts, [f"q{i}" for i in range(len(self.counts))])
        for key, (name, dt) in self.sums.items():
            k.line(f"atomicAdd(&{key}, ({C_TYPES[dt]})({name}[it]));")
        for _ in range(1 + guard):
            k.depth -= 1
            k.line("}")

    def fill(self, k: _Cuda, n: MapNode) -> None:
        """In the first nested map that reads them: load this iteration's cached elements."""
        at = self.maps.index(n)
        loads = _canonical_loads(k, n)
        for key, name in self.arrays.items():
            if self.first[key] == at:
                k.line(f"{name}[it] = {_loaded(k, loads[key])};")

    def value(self, k: _Cuda, n: MapNode, t: Tasklet) -> str:
        """The tasklet's expression, its cached inputs read from registers."""
        names = {}
        for conn, mem in t.inputs.items():
            key = _canonical(k, n, mem)
            if key in self.arrays:
                names[conn] = f"{self.arrays[key]}[it]"
            elif mem.container in k.locals:
                names[conn] = k.locals[mem.container][0]
            else:
                names[conn] = _loaded(k, mem)
        names.update(k.params)
        return to_cuda(t.expr, names)


def _canonical(k: _Cuda, n: MapNode, mem: Memlet) -> str | None:
    """The element ``mem`` names with ``n``'s params as their positions (``q0``, ``q1``…): equal in
    two nested maps of the same points exactly when they load the same element at the same ``j``;
    None for locals and for elements that do not move along the row."""
    if mem.container in k.locals or mem.container not in k.arrays:
        return None
    inner = {p for p, _ in n.params}
    if not any(E.free_vars(ix) & inner for ix in (mem.subset or ()) if not isinstance(ix, Range)):
        return None
    saved = dict(k.params)
    k.params.update({p: f"q{i}" for i, (p, _) in enumerate(n.params)})
    try:
        return k.element(mem)
    finally:
        k.params.clear()
        k.params.update(saved)


def _canonical_loads(k: _Cuda, n: MapNode) -> dict[str, Memlet]:
    """canonical element -> the first memlet of ``n`` that loads it, in body order."""
    found: dict[str, Memlet] = {}
    for t in n.body:
        for mem in t.inputs.values():
            key = _canonical(k, n, mem)
            if key is not None:
                found.setdefault(key, mem)
    return found


def _loaded(k: _Cuda, mem: Memlet) -> str:
    """The load of ``mem`` as the kernel computes with it (16-bit storage widened to float)."""
    text, dt = k.element(mem), k.dtype(mem.container)
    return LOAD[dt].format(text) if dt in LOAD else text


def _reduce(k: _Cuda, plan: Plan, partials: dict, slots: _Slots) -> None:
    """Every partial reduced over the block (or warp); the result in every thread."""
    items = [(name, dt, WCR_OP[tg.wcr]) for name, dt, tg in partials.values()]
    if plan.kind in ("rows", "warp_rows"):
        for name, _, op in items:
            k.line(f"{name} = dcs_warp<{op}>({name});")
        if plan.kind == "warp_rows":
            return
    shared = [slots.add(dt) for _, dt, _ in items]
    if plan.kind == "rows":
        k.line("if (lane == 0) { " + " ".join(f"{s}[warp] = {name};" for s, (name, _, _) in zip(shared, items)) + " }")
        k.line("__syncthreads();")
        k.line(" ".join(f"{name} = {s}[0];" for s, (name, _, _) in zip(shared, items)))
        count, at = plan.block[0] // WARP, "{}[w]"
    else:
        k.line(" ".join(f"{s}[threadIdx.y][threadIdx.x] = {name};" for s, (name, _, _) in zip(shared, items)))
        k.line("__syncthreads();")
        k.line(" ".join(f"{name} = {s}[0][threadIdx.x];" for s, (name, _, _) in zip(shared, items)))
        count, at = plan.block[1], "{}[w][threadIdx.x]"
    combine = " ".join(f"{name} = dcs_op<{op}>({name}, {at.format(s)});" for s, (name, _, op) in zip(shared, items))
    k.line(f"for (int w = 1; w < {count}; ++w) {{ {combine} }}")


def _combine_into(k: _Cuda, plan: Plan, tg: Target, partial: str) -> None:
    if tg.is_local:
        name, _ = k.locals[tg.container]
        k.line(f"{name} = {_combine(tg.wcr, name, partial)};")
        return
    mem = Memlet(tg.container, tg.subset)
    dt = k.dtype(tg.container)
    target = k.element(mem)
    old = LOAD[dt].format(target) if dt in LOAD else target
    new = _combine(tg.wcr, old, partial)
    k.line(f"if ({LEADER[plan.kind]}) {{ {target} = {STORE[dt].format(new) if dt in STORE else new}; }}")
