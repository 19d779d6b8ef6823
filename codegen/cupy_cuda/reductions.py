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

**Rows held in registers** and **summing blocks**: ``row_cache.py``. **Long rows split over
blocks** (the loss's full reduction), the last block combining: ``split_blocks.py``.

**Columns** (bias gradients: ``db[c] = Σ_r dy[r, c]``, with the optimizer update fused after it).
Block ``(32, ry)``: ``threadIdx.x`` picks one of 32 adjacent columns, so each warp reads 128
contiguous bytes per row, and the ``ry`` warps split the rows (thread ``y`` sums rows ``y, y+ry,
…``). The partials meet in a ``__shared__ [ry][32]`` array (conflict-free: a warp touches one
row of it) and every thread combines the ``ry`` values of its column in order. With few
columns (768: 24 blocks) the rows are split over blocks too, the last block of each column tile
combining the partials and running the fused epilogue (AdamW on the bias): ``split_blocks.py``.
Threads past the last column stay for the barrier but load nothing (``active``).

Every block kernel carries ``__launch_bounds__(threads)`` (so the compiler never uses more
registers than a block of that size can get) and a ``Launch`` record (``launch.py``) that the
exported launcher uses: grid from the extents, block shape, static shared bytes.
"""
from __future__ import annotations

from codegen.cupy_cuda.cuda_source import C_TYPES, LOAD, STORE, _Cuda, _store, _value, finish
from codegen.cupy_cuda.launch import CudaKernel, launch
from codegen.cupy_cuda.reduction_pattern import WARP, WCR_OP, Plan, Target, plan_for
from codegen.cupy_cuda.row_cache import RowCache, positions, thread_stride
from codegen.cupy_cuda.split_blocks import ColumnSplit, RowSplit
from codegen.program.expr_print import compute_dtype
from codegen.program.kernel import UnsupportedMap
from ir import dtypes
from ir.graph import Graph
from ir.maps import param_counts
from ir.memlet import Memlet
from ir.nodes import MapNode, Tasklet

SHUFFLE_TYPES = dtypes.WIDE_TYPES
LEADER = {"rows": "threadIdx.x == 0", "warp_rows": "threadIdx.x == 0", "columns": "active && threadIdx.y == 0"}


def _leader(plan: Plan) -> str:
    """The thread that stores a row's result (the first lane of the row's lanes)."""
    if plan.kind == "warp_rows" and plan.lanes < WARP:
        return f"threadIdx.x % {plan.lanes} == 0"
    return LEADER[plan.kind]


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
    return dtypes.to_numpy(dt).itemsize


def _print(m: MapNode, graph: Graph, storage: str | None, plan: Plan) -> CudaKernel:
    k = _Cuda(m, graph, storage)
    k.collect()
    x, y = plan.block
    k.line(f"// {plan.kind}: block ({x}, {y}); the longest nested map has {plan.row_length} points")
    at = len(k.lines)
    cache = RowCache.plan(k, plan, [s for s in m.body if isinstance(s, MapNode)])
    split = (RowSplit.plan(k, plan, m) or ColumnSplit.plan(k, plan, m)) if cache is None else None
    if cache is not None and cache.rows > 1:
        cache.open_rows(k)
    _params(k, plan, cache, split)
    k.declare_locals(m)
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
    if isinstance(split, RowSplit):  # the blocks of a row are one more (virtual) extent of the grid
        k.extents.append(split.blocks)
        threads += 1
    elif split is not None:          # the chunks of a column tile: the first extent (``_params``)
        threads += 1
    k.lines[at:at] = ["  " + d for d in slots.decls]
    how = launch(plan.kind, plan.block, per_block, k.extents, threads, slots.bytes)
    return finish(k, "\n".join(k.lines), f"__launch_bounds__({x * y})", how,
                  split.globals() if split is not None else "", threads)


def _params(k: _Cuda, plan: Plan, cache: RowCache | None = None,
            split: RowSplit | ColumnSplit | None = None) -> None:
    """The map's params from the block (and, for warp rows, the warp) index; the last one fastest."""
    counts = []
    off = 0
    if isinstance(split, ColumnSplit):
        k.extents.append(split.blocks)        # n0: the chunk, outermost in the grid
        off = 1
    for p, start, step, count in param_counts(k.m.params, k.graph.bindings):
        counts.append((p, start, step))
        k.extents.append(count)
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
        if plan.lanes < WARP:         # several rows per warp: the rows fill the blocks (no lane returns alone)
            k.line(f"long long rest = (long long)blockIdx.x * {plan.per_block} + threadIdx.y * {WARP // plan.lanes}"
                   f" + threadIdx.x / {plan.lanes};")
        else:
            k.line(f"long long rest = (long long)blockIdx.x * {plan.per_block} + threadIdx.y;")
        k.line(f"if (rest >= {total}) return;")
    else:
        last, start, step = counts.pop()
        k.line(f"const long long tiles = (n{n - 1 + off} + {WARP - 1}) / {WARP};")
        k.line("long long rest = blockIdx.x;")
        if off:
            k.line(f"const long long group = blockIdx.x % {split.groups};")
        k.line(f"const long long col = (rest % tiles) * {WARP} + threadIdx.x; rest /= tiles;")
        k.line(f"const bool active = col < n{n - 1 + off};")
        k.params[last] = f"p{n - 1}"
        k.line(f"const long long p{n - 1} = {start} + col * {step};")
    for i in reversed(range(len(counts))):
        p, start, step = counts[i]
        k.params[p] = f"p{i}"
        k.line(f"const long long p{i} = {start} + (rest % n{i + off}) * {step}; rest /= n{i + off};")
    if isinstance(split, ColumnSplit):
        k.line("const int chunk = (int)rest;   // what is left of the block index: its chunk of the rows")


def _guarded(k: _Cuda, plan: Plan, t: Tasklet) -> None:
    """A statement between nested maps: every (active) thread computes locals, the leader writes memory."""
    line = _store(k, t.output, _value(k, t))
    if t.output.container not in k.locals:
        line = f"if ({_leader(plan)}) {{ {line} }}"
    elif plan.kind == "columns":
        line = f"if (active) {{ {line} }}"
    k.line(line)


def _strided(k: _Cuda, plan: Plan, n: MapNode, targets: tuple[Target, ...], slots: _Slots,
             cache: RowCache | None, split: RowSplit | ColumnSplit | None = None) -> None:
    """Nested map ``n`` strided over the block's threads, then its reductions."""
    k.line(f"{{  // nested map over {', '.join(p for p, _ in n.params)}: strided over the block's threads")
    k.depth += 1
    partials = {}
    for tg in targets:
        dt = _partial_type(k, tg)
        name = slots.partial()
        partials[(tg.container, tg.subset)] = (name, dt, tg)
        k.line(f"{C_TYPES[dt]} {name} = {k.identity(tg.wcr, dt)};")
    _loop(k, plan, n, partials, cache, split)
    if partials:
        _reduce(k, plan, partials, slots)
    if split is not None:
        split.combine(k, plan, partials, slots, _reduce)
    for name, dt, tg in partials.values():
        _combine_into(k, plan, tg, name)
    k.depth -= 1
    k.line("}")


def _partial_type(k: _Cuda, tg: Target) -> str:
    dt = k.locals[tg.container][1] if tg.is_local else k.dtype(tg.container)
    dt = compute_dtype(dt)
    if dt not in SHUFFLE_TYPES:
        raise UnsupportedMap(f"reduction into '{tg.container}' of type {dt}: block reductions take {SHUFFLE_TYPES}")
    return dt


def _loop(k: _Cuda, plan: Plan, n: MapNode, partials: dict, cache: RowCache | None = None,
          split: RowSplit | ColumnSplit | None = None) -> None:
    counts = param_counts(n.params, k.graph.bindings)
    total = 1
    for *_, c in counts:
        total *= c
    ix = "long long" if total >= 2**31 else "int"
    first, stride = thread_stride(plan)
    cond = "active && " if plan.kind == "columns" else ""
    if split is not None:            # this block's chunk of the row (of the columns' rows)
        k.line(f"const {ix} lo = ({ix})chunk * {split.chunk};")
        k.line(f"for ({ix} j = lo + {first}; {cond}j < {total} && j < lo + {split.chunk}; j += {stride}) {{")
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
    positions(k, counts, names, ix)
    k.declare_locals(n)
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
            k.line(k.accumulate(name, tg.wcr, f"({value})"))
        elif shared is not None:
            k.line(f"{shared}[it] += ({value});")
        else:
            k.line(_store(k, t.output, value))
    k.owners = saved
    closing = 1 + (cache is not None and total % stride != 0)
    for _ in range(closing):
        k.depth -= 1
        k.line("}")


def _reduce(k: _Cuda, plan: Plan, partials: dict, slots: _Slots) -> None:
    """Every partial reduced over the block (or warp); the result in every thread."""
    items = [(name, dt, WCR_OP[tg.wcr]) for name, dt, tg in partials.values()]
    if plan.kind in ("rows", "warp_rows"):
        lanes = plan.lanes if plan.kind == "warp_rows" else WARP
        for name, _, op in items:
            k.line(f"{name} = dcs_warp<{op}>({name});" if lanes == WARP else
                   f"{name} = dcs_lanes<{op}, {lanes}>({name});")
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
        k.line(k.accumulate(name, tg.wcr, partial))
        return
    mem = Memlet(tg.container, tg.subset)
    dt = k.dtype(tg.container)
    target = k.element(mem)
    old = LOAD[dt].format(target) if dt in LOAD else target
    new = k.combine(tg.wcr, old, partial)
    k.line(f"if ({_leader(plan)}) {{ {target} = {STORE[dt].format(new) if dt in STORE else new}; }}")
