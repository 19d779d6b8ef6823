"""Row caching: later sweeps of a row read the value every sweep recomputes from a row buffer.

A reduction fused with its elementwise producers sweeps each row several times, and every
sweep recomputes the producers from global rows. LayerNorm after bias + residual:

    map[i] { map[j] { s = x[i,j] + b[j] + r[i,j]; sum += s }            # sweep 1
             mean = …
             map[j] { s = x[i,j] + b[j] + r[i,j]; sq += (s − mean)² }   # sweep 2
             inv = …
             map[j] { s = x[i,j] + b[j] + r[i,j]; y[i,j] = … s … } }    # sweep 3

Here the first sweep also stores ``s`` in a row buffer (``nxt[j] = s``) and the later ones
read ``s = cur[j]``: one L1-resident stream instead of two rows from L2 and the adds again.
Then the rows are *skewed* (``can_skew``): the first sweep of row i + 1 runs inside the last
sweep of row i, into the other of two buffers, so the reads of the next row overlap the
writes of this one as in a triad (without it, the row's phases take turns on the memory
bus). Each sweep sees the same values as before; only the order the compiler sums a
reduction in may differ (kernels reassociate anyway, ``loopnest.FASTMATH``).
Bias + residual + LayerNorm on 4096 rows of 4096 floats, one thread, share of a triad in
the same run: three sweeps 55–61 %, buffer 62–69 %, buffer and skew 70–75 %.

``plan`` finds the common *prefix*: the leading tasklets of every sweep that are equal up to
the sweep's parameter, write sweep locals without a wcr, and read only the sweep parameter,
earlier prefix locals and containers the map never writes (so they cannot change between
sweeps). All sweeps run over one range. Later sweeps may read only the prefix's last local.
``emit`` prints the top-level map like ``Nest.loops`` with that substitution. Buffers are
allocated before the loops, or inside the ``prange`` loop (one per thread's iteration). A map
with one row param under ``prange`` runs blocks of ``CHUNK_ROWS`` rows per iteration, each
block skewed on its own (two buffers per block, not per row).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ir import dtypes
from ir import expr as E
from ir.nodes import MapNode, Tasklet

from codegen.numba_cpu.loopnest import Nest
from codegen.program.kernel import first_wcr

_HOLE = E.Var("·")
CHUNK_ROWS = 64
"""Rows per ``prange`` iteration when the map has one row param (each block is skewed alone)."""


@dataclass(frozen=True)
class RowCache:
    sweeps: tuple[MapNode, ...]   # the nested maps sharing the prefix, in body order
    length: int                   # how many leading tasklets of each sweep the buffer replaces
    skew: bool = False            # the next row's first sweep runs inside this row's last (``can_skew``)
    chunked: bool = False         # one row param under prange: blocks of ``CHUNK_ROWS`` rows, each skewed


def _sweeps(m: MapNode) -> list[MapNode]:
    return [s for s in m.body if isinstance(s, MapNode)]


def _key(t: Tasklet, sweep: MapNode, prefix_locals: list[str], frozen: set[str]) -> tuple | None:
    """``t`` as a value independent of the sweep's names, or None if it cannot be a prefix tasklet."""
    if t.output.wcr is not None or t.output.container not in sweep.locals:
        return None
    param = sweep.params[0][0]
    ins = []
    for conn, mem in sorted(t.inputs.items()):
        if mem.container in prefix_locals:
            ins.append((conn, "local", prefix_locals.index(mem.container)))
        elif mem.container in frozen and mem.subset is not None:
            ins.append((conn, mem.container, tuple(E.substitute(ix, {param: _HOLE}) for ix in mem.subset)))
        else:
            return None
    return E.substitute(t.expr, {param: _HOLE}), tuple(ins)


def _prefix_keys(sweep: MapNode, frozen: set[str]) -> list[tuple]:
    keys: list[tuple] = []
    names: list[str] = []
    for t in sweep.body:
        key = _key(t, sweep, names, frozen) if isinstance(t, Tasklet) else None
        if key is None:
            break
        keys.append(key)
        names.append(t.output.container)
    return keys


def _reads_only_last(sweep: MapNode, length: int) -> bool:
    """After the prefix, ``sweep`` reads none of the prefix locals but the last."""
    hidden = {t.output.container for t in sweep.body[:length - 1]}
    return not any(isinstance(t, Tasklet) and {m.container for m in t.inputs.values()} & hidden
                   for t in sweep.body[length:])


def plan(m: MapNode, written: set[str], parallel: bool = False) -> RowCache | None:
    """The row cache of top-level map ``m`` (which writes ``written``; its first param under ``prange`` if
    ``parallel``), or None if it has none."""
    sweeps = _sweeps(m)
    if len(sweeps) < 2 or any(len(s.params) != 1 or _sweeps(s) for s in sweeps):
        return None
    ranges = {s.params[0][1] for s in sweeps}
    (r,) = ranges if len(ranges) == 1 else (None,)
    if r is None or r.step != 1 or r.start != E.Const(0, "int64") or E.free_vars(r.stop) & set(m.param_names):
        return None
    frozen = {mem.container for node, _ in m.walk() if isinstance(node, Tasklet)
              for mem in node.inputs.values()} - written - {n for s in sweeps for n in s.locals} - set(m.locals)
    keys = [_prefix_keys(s, frozen) for s in sweeps]
    length = 0
    while all(len(k) > length for k in keys) and len({k[length] for k in keys}) == 1:
        length += 1
    while length and not all(_reads_only_last(s, length) for s in sweeps[1:]):
        length -= 1
    if not length or sweeps[0].locals[sweeps[0].body[length - 1].output.container].dtype not in dtypes.WIDE_TYPES:
        return None
    cache = RowCache(tuple(sweeps), length)
    chunked = parallel and len(m.params) == 1 and can_skew(m, cache, False)
    return replace(cache, skew=chunked or can_skew(m, cache, parallel), chunked=chunked)


def emit(nest: Nest, m: MapNode, parallel: bool, cache: RowCache) -> None:
    """Print top-level map ``m`` with ``cache``: skewed (``_skewed_rows``) when ``cache.skew``, else
    the default loop order with one buffer."""
    depth = nest.depth
    skew, chunked = cache.skew, cache.chunked
    for k, (p, r) in enumerate(m.params[:-1] if skew else m.params):
        nest.open_loop(p, r, parallel and k == 0)
    lo, hi = "0", nest.bound(m.params[-1][1].stop) if m.params else "1"
    if chunked:                      # one row param under prange: threads take blocks of CHUNK_ROWS rows
        nest.line(f"for pc in prange(({hi} + {CHUNK_ROWS - 1}) // {CHUNK_ROWS}):")
        nest.depth += 1
        nest.line(f"lo = pc * {CHUNK_ROWS}")
        nest.line(f"hi = min({hi}, lo + {CHUNK_ROWS})")
        lo, hi = "lo", "hi"
    last = cache.sweeps[0].body[cache.length - 1].output.container
    size, dt = nest.bound(cache.sweeps[0].params[0][1].stop), dtypes.NUMPY_NAMES[cache.sweeps[0].locals[last].dtype]
    for buf in ("c0", "c1") if skew else ("c0",):
        (nest.line if parallel else nest.pre.append)(f"{buf} = np.empty({size}, {dt})")
    if skew:
        _skewed_rows(nest, m, cache, lo, hi)
    else:
        nest.declare_locals(m)
        for stmt in m.body:
            _statement(nest, stmt, cache, "c0")
    nest.depth = depth


def can_skew(m: MapNode, cache: RowCache, parallel: bool) -> bool:
    """Whether the first sweep of the next row can run inside the last sweep of this one: the map
    starts and ends with a cached sweep, the first sweep writes only its own locals and row
    reductions (wcr) and reads no row local, and its row param is not the ``prange`` one."""
    first, last = cache.sweeps[0], cache.sweeps[-1]
    if not m.params or m.body[0] is not first or m.body[-1] is not last or (parallel and len(m.params) == 1):
        return False
    r = m.params[-1][1]
    if r.step != 1 or r.start != E.Const(0, "int64"):
        return False
    for t in first.body:
        out = t.output
        if not (out.container in first.locals or (out.container in m.locals and out.wcr is not None)):
            return False
        if any(mem.container in m.locals for mem in t.inputs.values()):
            return False
    return True


def _skewed_rows(nest: Nest, m: MapNode, cache: RowCache, lo: str, hi: str) -> None:
    """Software-pipelined rows ``lo`` … ``hi`` − 1 of the last row param: a prologue runs the first
    sweep of row ``lo`` into ``nxt``; row q then runs its middle statements from ``cur`` and its last
    sweep fused with the first sweep of row q + 1 (into the other buffer, reductions into ``u<k>``).
    The DRAM reads of the next row overlap the writes of this one, as in a triad."""
    first, last = cache.sweeps[0], cache.sweeps[-1]
    q = m.params[-1][0]
    qname = f"p{len(nest.params)}"
    carried = {t.output.container for t in first.body if t.output.container in m.locals}
    wcr = first_wcr(m)
    next_row = {loc: (f"u{k}", m.locals[loc].dtype) for k, loc in enumerate(sorted(carried))}

    def start_next_row(index: str, buffer: str) -> None:
        nest.line(f"pn = {index}")
        nest.line(f"nxt = {buffer}") if buffer else None
        for loc, (u, dt) in next_row.items():
            nest.line(f"{u} = {nest.identity(wcr.get(loc), dt)}")

    start_next_row(lo, "c0")
    with nest.renamed({q: "pn"}, next_row):
        _statement(nest, first, cache, "nxt")
    nest.params[q] = qname
    nest.line(f"for {qname} in range({lo}, {hi}):")
    nest.depth += 1
    nest.line(f"cur, nxt = (c0, c1) if ({qname} - {lo}) % 2 == 0 else (c1, c0)")
    nest.declare_locals(m)
    for loc, (u, _) in next_row.items():
        nest.line(f"{nest.locals[loc][0]} = {u}")
    for stmt in m.body[1:-1]:
        _statement(nest, stmt, cache, "cur")
    start_next_row(f"{qname} + 1", "")
    nest.line(f"if pn < {hi}:")
    nest.depth += 1
    j = nest.open_loop(*last.params[0])
    _sweep_body(nest, last, cache, "cur", j)
    nest.params[first.params[0][0]] = j
    with nest.renamed({q: "pn"}, next_row):
        _sweep_body(nest, first, cache, "nxt", j)
    nest.depth -= 2
    nest.line("else:")
    nest.depth += 1
    _statement(nest, last, cache, "cur")
    nest.depth -= 2


def _statement(nest: Nest, stmt, cache: RowCache, buffer: str) -> None:
    if isinstance(stmt, MapNode):
        _sweep_body(nest, stmt, cache, buffer, nest.open_loop(*stmt.params[0]))
        nest.depth -= 1
    else:
        nest.tasklet(stmt)


def _sweep_body(nest: Nest, s: MapNode, cache: RowCache, buffer: str, j: str) -> None:
    """Sweep ``s``'s statements at point ``j``: the first sweep stores the cached value in ``buffer``,
    the others read it from there instead of recomputing it."""
    first = s is cache.sweeps[0]
    nest.declare_locals(s)
    for k, t in enumerate(s.body):
        if k < cache.length - 1 and not first:
            continue
        if k == cache.length - 1 and not first:
            nest.line(f"{nest.locals[t.output.container][0]} = {buffer}[{j}]")
            continue
        nest.tasklet(t)
        if k == cache.length - 1:
            nest.line(f"{buffer}[{j}] = {nest.locals[t.output.container][0]}")
