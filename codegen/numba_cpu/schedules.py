"""Loop schedules of a kernel's outermost map: the order its loops run in memory.

``plan`` decides a map's ``Schedule`` from the map and the sizes alone, before anything is printed (whether
its outermost loop may run as ``prange``: ``parallel_safe``);
``emit`` prints it; ``Schedule.describe`` says it in a line (``dcstudio profile`` and the Timings dock
show it beside the kernel's time).

All schedules run every statement at every point in body order (the map's semantics);
they differ in loop order, which decides whether the innermost loop walks memory
contiguously (and vectorizes) — on this machine a strided kernel ran 20–90× slower.

- ``default``: the map's params outer to inner, nested maps inside.
- ``rows``: the default order, with a row buffer for the value every sweep of a row
  recomputes (``rowcache``: LayerNorm, softmax fused with their producers).
- ``tiled``: a transpose — a pointwise map that reads along one dimension and writes
  along the other, with at most two arrays contiguous in the last param: the last two
  params run in ``TILE`` blocks, so both arrays stay in cache (2.5x on a 768x3072
  transpose here). With more contiguous arrays (an update reading one transposed
  gradient) the default order wins: the strided array's lines stay in L2 across rows,
  while blocks would break the others' prefetch streams (measured 8 vs 13 ms).
- ``columns``: a map over columns whose nested maps sweep rows (``y[r, c]`` with the
  map over ``c``: bias gradients, a reduction fused with its elementwise producer and
  the optimizer update). The column param is strip-mined into blocks of ``COLUMNS``;
  inside a block, every statement runs for the whole block at once — nested sweeps with
  the rows outside and the block's columns innermost (contiguous, vectorized). The map's
  locals become arrays over the block (one accumulator per column). Interchanging is
  valid because map points are independent and each point still sees its statements,
  and its reduction over rows, in order. When the row is at most ``WHOLE_ROW`` columns the
  block is the whole row: no block loop, the column loop ``range(n)`` from 0. Measured here
  (GELU gradient fused with its bias gradient and AdamW, 1024 rows of 3072, one thread):
  3.2 ms as whole rows against 12.7 ms in blocks of 256 — the blocked loops start at a
  runtime offset, and walking 1 KiB of each row of three arrays defeats the prefetcher.
  In a parallel kernel a large row sweep of whole rows splits its rows into a fixed number of
  ``prange`` chunks with partial accumulators (``_row_split``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ir import dtypes
from ir import expr as E
from ir.graph import Graph
from ir.maps import trip_count, trip_count_or
from ir.memlet import Range
from ir.nodes import MapNode, Tasklet

from codegen.numba_cpu import rowcache
from codegen.numba_cpu.loopnest import Nest
from codegen.program.kernel import accumulator_dtype, first_wcr, kernel_locals

TILE = (32, 256)
COLUMNS = 256
ROW_CHUNKS = 16
"""A whole-row ``columns`` map in a parallel kernel splits each row sweep into at most this many chunks
(a fixed count, so its sums do not depend on the thread count; see ``_row_split``)."""
ROW_SPLIT_MIN = 1 << 20
"""A row sweep of fewer points stays on one thread. Measured here (2 threads, bias gradient with AdamW
over rows of 768): 786K points 0.097 ms serial against 0.144 ms split, 1.6M 0.42 against 0.34, 3.1M
0.86 against 0.72; the BERT-base GELU gradient (3.1M points) 9.4 → 6.1 ms on its recorded inputs."""
PARALLEL_MIN_ITERS = 1 << 16
"""A kernel runs its outermost loop with ``prange`` only from this many iterations on."""
WHOLE_ROW = 16384
"""A ``columns`` map over at most this many columns runs as one block (its accumulators: 128 KiB
per float64 local at most, in L2)."""


def parallel_safe(m: MapNode, graph: Graph, written: set[str]) -> bool:
    """prange over the outermost param: it steps by 1 (numba's prange takes no other step), every global
    write indexes it directly, and it pays (the points of the map and of its nested sweeps, e.g.
    LayerNorm's rows × row length)."""
    if not m.params or m.params[0][1].step != 1 or _work(m, graph) < PARALLEL_MIN_ITERS:
        return False
    outer = E.Var(m.params[0][0])
    for node, _ in m.walk():
        if isinstance(node, Tasklet) and node.output.container in written:
            if node.output.subset is None or outer not in node.output.subset:
                return False
    return trip_count(m.params[:1], graph.bindings) >= 2


def _work(m: MapNode, graph: Graph) -> int:
    """Points a map runs: its own params times (1 + the points of its nested maps)."""
    nested = sum(_work(s, graph) for s in m.body if isinstance(s, MapNode))
    return trip_count(m.params, graph.bindings) * max(1, nested)


@dataclass(frozen=True)
class Schedule:
    """How a kernel's top-level map loops, decided before anything is printed (``plan``)."""

    kind: str                                   # default | tiled | columns | rows
    parallel: bool                              # prange wanted (the kernel is parallel-safe and pays)
    cache: rowcache.RowCache | None = None      # rows: the cached prefix and its layout
    whole: bool = False                         # columns: the whole row is one block
    splits: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()
    """columns: (body position, ((accumulated container, wcr), …)) of each row sweep split over prange chunks"""

    def describe(self, parallel: bool) -> str:
        """One line for a reader (the profile's kernel table): the loop order and what runs in parallel."""
        if self.kind == "tiled":
            text = f"tiled {TILE[0]}x{TILE[1]} (a transpose)"
        elif self.kind == "columns":
            text = "columns innermost, " + ("whole rows" if self.whole else f"blocks of {COLUMNS} columns")
            if self.splits:
                text += f", {len(self.splits)} row sweep{'s' * (len(self.splits) > 1)} in {ROW_CHUNKS} chunks"
        elif self.kind == "rows":
            cache = self.cache
            text = f"rows, {cache.length} value{'s' * (cache.length > 1)} cached over {len(cache.sweeps)} sweeps"
            text += (f", skewed in blocks of {rowcache.CHUNK_ROWS} rows" if cache.chunked else
                     ", skewed" if cache.skew else "")
        else:
            text = "map order"
        return text + (", prange" if parallel else "")


def plan(m: MapNode, graph: Graph, written: set[str], parallel: bool) -> Schedule:
    """The schedule of top-level map ``m`` (writing ``written``; ``parallel``: prange wanted, granted where
    ``parallel_safe``)."""
    parallel = parallel and parallel_safe(m, graph, written)
    kind = choose(m)
    if kind == "columns":
        whole = trip_count_or(m.params[-1:], graph.bindings, WHOLE_ROW + 1) <= WHOLE_ROW
        splits = tuple((k, tuple(acc.items())) for k, stmt in enumerate(m.body) if parallel and whole
                       and isinstance(stmt, MapNode) and (acc := _split_accumulators(m, stmt, graph)))
        return Schedule(kind, parallel, whole=whole, splits=splits)
    cache = rowcache.plan(m, written, parallel) if kind == "default" else None
    if cache is not None and trip_count_or(cache.sweeps[0].params, graph.bindings, ROWCACHE_MIN) >= ROWCACHE_MIN:
        return Schedule("rows", parallel, cache)
    return Schedule(kind, parallel)


def emit(nest: Nest, m: MapNode, schedule: Schedule) -> None:
    """Print ``m``'s loops as ``schedule`` lays them out."""
    if schedule.kind == "tiled":
        _tiled(nest, m, schedule.parallel)
    elif schedule.kind == "columns":
        _columns(nest, m, schedule)
    elif schedule.kind == "rows":
        rowcache.emit(nest, m, schedule.parallel, schedule.cache)
    else:
        nest.loops(m, schedule.parallel)


ROWCACHE_MIN = 512
"""Rows shorter than this are swept again instead of cached: for the BERT-base layer's softmax
(rows of 128) the buffered, skewed schedule took 12.6 ms against 2.5 ms for three plain sweeps
(one thread, 1.6M scores): per row its buffer swap and the skewed next-row sweep cost more than
re-reading a 512-byte row from L1. LayerNorm's 768–4096-wide rows keep the buffer."""


def _simple(r: Range) -> bool:
    return r.step == 1 and isinstance(r.start, E.Const) and int(r.start.value) == 0


def _global_subsets(stmts, local: set[str]):
    for node in stmts:
        walk = node.walk() if isinstance(node, MapNode) else [(node, ())]
        for t, _ in walk:
            if isinstance(t, Tasklet):
                for mem in list(t.inputs.values()) + [t.output]:
                    if mem.container not in local and mem.subset:
                        yield mem.subset


def _last_var(subset) -> str | None:
    ix = subset[-1]
    return ix.name if isinstance(ix, E.Var) else None


def choose(m: MapNode) -> str:
    params = [p for p, _ in m.params]
    if not params or not all(_simple(r) for _, r in m.params):
        return "default"
    local = kernel_locals(m)
    nested = [s for s in m.body if isinstance(s, MapNode)]
    if not nested:
        if len(params) < 2:
            return "default"
        a, b = params[-2], params[-1]
        subsets = list(_global_subsets(m.body, local))
        along_b = sum(_last_var(s) == b for s in subsets)
        along_a = sum(_last_var(s) == a and E.Var(b) in s for s in subsets)
        return "tiled" if along_a and along_b and along_b <= 2 else "default"
    if any(isinstance(x, MapNode) for n in nested for x in n.body) or \
            not all(_simple(r) for n in nested for _, r in n.params):
        return "default"
    q = params[-1]
    inner = list(_global_subsets(nested, local))
    if inner and all(_last_var(s) == q or isinstance(s[-1], E.Const) for s in inner) \
            and any(_last_var(s) == q for s in inner):
        return "columns"
    return "default"


def _tiled(nest: Nest, m: MapNode, parallel: bool) -> None:
    depth = nest.depth
    for k, (p, r) in enumerate(m.params[:-2]):
        nest.open_loop(p, r, parallel and k == 0)
    (pa, ra), (pb, rb) = m.params[-2:]
    na, nb = nest.bound(ra.stop), nest.bound(rb.stop)
    first = "prange" if parallel and len(m.params) == 2 else "range"
    ta, tb = TILE
    nest.line(f"for ia in {first}(({na} + {ta - 1}) // {ta}):")     # prange needs unit steps
    nest.line(f"    ba = ia * {ta}")
    nest.line(f"    for bb in range(0, {nb}, {tb}):")
    nest.depth += 2
    a, b = f"p{len(nest.params)}", f"p{len(nest.params) + 1}"
    nest.params[pa], nest.params[pb] = a, b
    nest.line(f"for {a} in range(ba, min(ba + {ta}, {na})):")
    nest.line(f"    for {b} in range(bb, min(bb + {tb}, {nb})):")
    nest.depth += 2
    nest.declare_locals(m)
    for stmt in m.body:
        nest.tasklet(stmt)
    nest.depth = depth


def _columns(nest: Nest, m: MapNode, schedule: Schedule) -> None:
    depth, whole, splits = nest.depth, schedule.whole, dict(schedule.splits)
    for p, r in m.params[:-1]:
        nest.open_loop(p, r)
    q, rq = m.params[-1]
    nq = nest.bound(rq.stop)
    first = first_wcr(m)
    qv = f"p{len(nest.params)}"
    inits = []
    for loc, c in m.locals.items():
        name = nest.new_local()
        dt = accumulator_dtype(first.get(loc), c.dtype)
        nest.pre.append(f"{name} = np.empty({nq if whole else COLUMNS}, {dtypes.NUMPY_NAMES[dt]})")
        nest.locals[loc] = (f"{name}[{qv if whole else 'qi'}]", dt)
        inits.append(f"{name}[:] = {nest.identity(first.get(loc), dt)}")
    nest.params[q] = qv
    if whole:
        for text in inits:
            nest.line(text)
    else:
        nest.line(f"for qb in range(0, {nq}, {COLUMNS}):")
        nest.depth += 1
        nest.line(f"qe = min(qb + {COLUMNS}, {nq})")
        for text in inits:
            nest.line(text)
    for at, group in _runs(m.body):
        inner = nest.depth
        stmt = group[0]
        if at in splits:
            _row_split(nest, m, stmt, dict(splits[at]), nq, qv)
            continue
        if isinstance(stmt, MapNode):
            for p, r in stmt.params:
                nest.open_loop(p, r)
        if whole:
            nest.line(f"for {qv} in range({nq}):")
        else:
            nest.line(f"for {qv} in range(qb, qe):")
            nest.line(f"    qi = {qv} - qb")
        nest.depth += 1
        if isinstance(stmt, MapNode):
            nest.declare_locals(stmt)
            for t in stmt.body:
                nest.tasklet(t)
        else:
            for t in group:
                nest.tasklet(t)
        nest.depth = inner
    nest.depth = depth


def _split_accumulators(m: MapNode, sweep: MapNode, graph: Graph) -> dict[str, str] | None:
    """Whether the row sweep ``sweep`` of a whole-row ``columns`` map runs split into ``ROW_CHUNKS`` chunks
    of its first row param under ``prange``: the containers it accumulates (column locals, or globals
    accumulated at the column) with their wcr, or None (it stays serial: fewer than ``ROW_SPLIT_MIN``
    points, or a chunk would see another's work — a global written without a wcr at an index without the
    row param, a column local written without a wcr, a value read by the sweep that accumulates it)."""
    row, q = sweep.params[0][0], m.params[-1][0]
    if trip_count_or(m.params[-1:] + sweep.params, graph.bindings, ROW_SPLIT_MIN) < ROW_SPLIT_MIN:
        return None
    acc: dict[str, str] = {}                       # column local or global -> its wcr
    read: set[str] = set()
    for t in sweep.body:
        read |= {mem.container for mem in t.inputs.values()}
        out = t.output
        if out.container in sweep.locals:
            continue
        if out.container in m.locals or out.wcr is not None and _at_column(out.subset, q, row):
            if out.wcr is None or acc.setdefault(out.container, out.wcr) != out.wcr:
                return None
            if out.container not in m.locals and graph.container(out.container).dtype not in dtypes.WIDE_TYPES:
                return None                        # 16-bit floats: no wcr into their bits (loopnest._store)
        elif out.subset is None or E.Var(row) not in out.subset:
            return None
    return acc if acc and not read & set(acc) else None


def _row_split(nest: Nest, m: MapNode, sweep: MapNode, acc: dict[str, str], nq: str, qv: str) -> None:
    """Print the row sweep ``sweep`` split into chunks (``_split_accumulators``): each chunk sums into its
    own row of partial accumulators, combined column by column in chunk order afterwards, so the result
    does not depend on the thread count."""
    depth, parts = nest.depth, {}                  # column local or global -> (its element, its partials)
    stop = nest.bound(sweep.params[0][1].stop)
    k = sum(line.startswith("nch") for line in nest.pre)      # this kernel's k-th split sweep
    nch = f"nch{k}"
    nest.pre.append(f"{nch} = max(1, min({ROW_CHUNKS}, {stop}))")
    for c in acc:
        if c in m.locals:
            name, dt = nest.locals[c]
        else:
            sub = next(t.output.subset for t in sweep.body if t.output.container == c)
            name, dt = f"{nest.array(c)}[{', '.join(nest.index(ix) for ix in sub)}]", nest.graph.container(c).dtype
        part = f"{name.split('[')[0]}p{k}"
        nest.pre.append(f"{part} = np.empty(({ROW_CHUNKS}, {nq}), {dtypes.NUMPY_NAMES[dt]})")
        parts[c] = (name, part, dt)
    nest.line(f"for ck in prange({nch}):")
    nest.depth += 1
    for c, wcr in acc.items():
        nest.line(f"{parts[c][1]}[ck, :] = {nest.identity(wcr, parts[c][2])}")
    (p, _), *rest = sweep.params
    nest.params[p] = f"p{len(nest.params)}"
    nest.line(f"for {nest.params[p]} in range(ck * {stop} // {nch}, (ck + 1) * {stop} // {nch}):")
    nest.depth += 1
    for p2, r2 in rest:
        nest.open_loop(p2, r2)
    nest.line(f"for {qv} in range({nq}):")
    nest.depth += 1
    with nest.renamed(locals={c: (f"{part}[ck, {qv}]", dt) for c, (_, part, dt) in parts.items()}):
        nest.declare_locals(sweep)
        for t in sweep.body:
            nest.tasklet(t)
    nest.depth = depth
    for c, (name, part, _) in parts.items():
        value = nest.combine(acc[c], name, f"{part}[ck, {qv}]")
        nest.line(f"for ck in range({nch}):")
        nest.line(f"    for {qv} in range({nq}):")
        nest.line(f"        {name} = {value}")


def _at_column(subset, q: str, row: str) -> bool:
    """A global's index that names the column param ``q`` and no row (constants elsewhere)."""
    if not subset or E.Var(q) not in subset:
        return False
    return all(ix == E.Var(q) or isinstance(ix, E.Const) for ix in subset)


def _runs(body: list) -> list[tuple[int, list]]:
    """The body as runs of consecutive tasklets (one column loop each) and single nested maps, each with
    the body position it starts at."""
    out: list[tuple[int, list]] = []
    for at, stmt in enumerate(body):
        if isinstance(stmt, Tasklet) and out and isinstance(out[-1][1][0], Tasklet):
            out[-1][1].append(stmt)
        else:
            out.append((at, [stmt]))
    return out
