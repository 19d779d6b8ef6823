"""Which maps are row or column reductions, and the launch shape each one gets (pure Python).

``plan_for(map, graph)`` returns a ``Plan`` or, when the map is not one, a ``Refusal`` whose
``reason`` says why (so tests and tools can show it). The pattern is the shape
``expand``/``reduction_fusion``/``map_fusion`` produce for Softmax, LogSoftmax, LayerNorm and
its gradient, SoftmaxGrad, ReduceSum/ReduceMean and bias gradients::

    map[i…] {                               # the map's own params: one row (or column) each
      local _max, _sum                      # scalars
      map[r…] { _max (wcr=max) = x[i…, r] }            # a nested map reducing into a local
      map[r…] { _sum (wcr=sum) = exp(x[i…, r] - _max) } # …or into y[i…] (wcr), indexed by i… only
      _inv = 1 / _sum                       # statements between them
      map[r…] { out[i…, r] = … _inv … }     # a nested map using the results
    }

Conditions (each failure is a ``Refusal`` naming it): nested maps one level deep with constant
ranges; at least one *reduction target* — a map local, or a global element indexed by the
map's params only, written with a wcr inside a nested map; a target is not read in the nested
map that reduces it and is written there with one wcr; other plain writes inside a nested map
index every param of both maps (one writer per element); no container is both read and
written by the map (threads of a block would race on it); float or integer accumulators.

Layout decides the kind — it is what makes loads coalesced. Each global access in a nested
map votes *row* when its last index is the nested map's last param (neighbouring threads of a
block read neighbouring elements) and *column* when it is the map's last param (neighbouring
columns are neighbouring threads). More column votes: ``columns``; else at least one row vote:
``rows``, or ``warp_rows`` for rows up to ``WARP_ROW_MAX`` long (a warp per row, no shared
memory, no block barrier). Launch shapes:

- ``rows``: ``threads = clamp(pow2ceil(L / ELEMS_PER_THREAD), 64, 1024)`` for a row of ``L`` —
  768 → 256, 3072 → 1024: a few elements per thread keeps loads in flight while the block
  stays small enough for several rows per SM (their re-reads of the row then hit L1);
- ``warp_rows``: ``ROW_LANES`` = 16 lanes per row (two rows per warp) where the rows fill the
  blocks exactly, else 32; ``ROWS_PER_WARP_BLOCK`` warps per block (128 threads);
- ``columns``: ``(32, ry)`` with ``ry = clamp(pow2floor(L / ROWS_PER_THREAD), 2, 32)``: 32
  adjacent columns make each warp load 128 contiguous bytes, ``ry`` warps split the rows.
Short rows (``L < 32``) and short columns (``L < MIN_COLUMN``) keep one thread per point.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir import expr as E
from ir.graph import Graph
from ir.maps import trip_count
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

WARP = 32
WARP_ROW_MAX = 128
ELEMS_PER_THREAD = 4
MAX_BLOCK = 1024
MIN_ROW_BLOCK = 64
ROWS_PER_WARP_BLOCK = 4
ROW_LANES = 16             # lanes per row in ``warp_rows`` where the rows fill the blocks (else 32): two rows per
#                            warp, twice the points per thread. H100, BERT-base softmax (12,288 rows of 128):
#                            5.2 µs with 32 lanes, 4.3 with 16, 6.0 with 8; its gradient 4.0, 3.8 and 4.1 µs
ROWS_PER_THREAD = 16
MIN_COLUMN = 64
WCR_OP = {"sum": 0, "prod": 1, "max": 2, "min": 3}   # the template argument of dcs_op, dcs_warp and dcs_cas


@dataclass(frozen=True)
class Target:
    """What one nested map reduces: a map local, or one global element (``subset`` over the map's params)."""

    container: str
    subset: tuple | None
    wcr: str
    is_local: bool


@dataclass(frozen=True)
class Plan:
    kind: str                              # rows | warp_rows | columns
    row_length: int                        # the longest nested iteration space
    block: tuple[int, int]
    per_block: int                         # rows (rows, warp_rows) or columns (columns) per block
    targets: tuple[tuple[Target, ...], ...]  # per nested map, in body order
    lanes: int = WARP                      # warp_rows: lanes per row (a warp takes WARP // lanes rows)


@dataclass(frozen=True)
class Refusal:
    reason: str

    def __bool__(self) -> bool:            # a refusal is falsy: ``if plan:``
        return False


def pow2ceil(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def pow2floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def row_block(length: int) -> int:
    """Threads of a block-per-row kernel for rows of ``length``."""
    return max(MIN_ROW_BLOCK, min(MAX_BLOCK, pow2ceil(-(-length // ELEMS_PER_THREAD))))


def column_split(length: int) -> int:
    """Threads splitting the rows of each column (``blockDim.y``) for columns of ``length``."""
    return max(2, min(WARP, pow2floor(length // ROWS_PER_THREAD)))


def choose_shape(layout: str, length: int) -> tuple[str, tuple[int, int], int] | Refusal:
    """(kind, block, per_block) for a reduction of ``layout`` over ``length`` elements."""
    if layout == "columns":
        if length < MIN_COLUMN:
            return Refusal(f"columns of {length} < {MIN_COLUMN} rows: one thread per column is enough")
        return "columns", (WARP, column_split(length)), WARP
    if length < WARP:
        return Refusal(f"rows of {length} < {WARP}: a warp per row would idle most lanes")
    if length <= WARP_ROW_MAX:
        return "warp_rows", (WARP, ROWS_PER_WARP_BLOCK), ROWS_PER_WARP_BLOCK
    return "rows", (row_block(length), 1), 1


def plan_for(m: MapNode, graph: Graph) -> Plan | Refusal:
    """The block-reduction plan of top-level map ``m``, or why it has none."""
    nested = [s for s in m.body if isinstance(s, MapNode)]
    if not nested:
        return Refusal("no nested map")
    if any(isinstance(x, MapNode) for n in nested for x in n.body):
        return Refusal("a nested map has maps inside it")
    lengths = []
    for n in nested:
        count = _constant_count(n, graph)
        if isinstance(count, Refusal):
            return count
        lengths.append(count)
    top = [p for p, _ in m.params]
    targets = []
    for n in nested:
        found = _targets(m, n, top)
        if isinstance(found, Refusal):
            return found
        targets.append(found)
    if not any(targets):
        return Refusal("no nested map reduces into a map local or an element indexed by the map's params")
    both = _read_and_written(m)
    if both:
        return Refusal(f"the map reads '{both}', which it also writes: threads of a block would race")
    layout = _layout(nested, top)
    if isinstance(layout, Refusal):
        return layout
    shape = choose_shape(layout, max(lengths))
    if isinstance(shape, Refusal):
        return shape
    kind, block, per_block = shape
    lanes = _row_lanes(m, graph, max(lengths)) if kind == "warp_rows" else WARP
    return Plan(kind, max(lengths), block, per_block * (WARP // lanes), tuple(targets), lanes)


def _row_lanes(m: MapNode, graph: Graph, length: int) -> int:
    """``ROW_LANES`` where a warp can take several whole rows: the rows fill every block exactly (a
    warp's rows then run, and exchange, together) and each row has a point for every lane."""
    if ROW_LANES >= WARP or length < ROW_LANES or WARP % ROW_LANES:
        return WARP
    if any((E.free_vars(r.start) | E.free_vars(r.stop)) - set(graph.bindings) for _, r in m.params):
        return WARP
    rows = trip_count(m.params, graph.bindings)
    return ROW_LANES if rows % (ROWS_PER_WARP_BLOCK * (WARP // ROW_LANES)) == 0 else WARP


def _constant_count(n: MapNode, graph: Graph) -> int | Refusal:
    env = set(graph.bindings)
    for p, r in n.params:
        if (E.free_vars(r.start) | E.free_vars(r.stop)) - env:
            return Refusal(f"nested param '{p}' has a range that depends on another param")
    return trip_count(n.params, graph.bindings)


def _targets(m: MapNode, n: MapNode, top: list[str]) -> tuple[Target, ...] | Refusal:
    """The reduction targets of nested map ``n`` (or why its writes do not fit the pattern)."""
    inner = [p for p, _ in n.params]
    found: dict[tuple, Target] = {}
    for t in n.body:
        out = t.output
        if out.container in n.locals:
            continue
        if out.container in m.locals:
            if out.wcr not in WCR_OP:
                return Refusal(f"map local '{out.container}' is written without a wcr inside a nested map")
            target = Target(out.container, None, out.wcr, True)
        elif out.wcr in WCR_OP and _index_vars(out) <= set(top):
            target = Target(out.container, out.subset, out.wcr, False)
        elif out.wcr is None and not set(top + inner) <= _direct_vars(out):
            return Refusal(f"'{out.container}' is written inside a nested map at an index that does not hold "
                           "every param: the last writer would be a race")
        else:
            continue
        key = (target.container, target.subset)
        if found.setdefault(key, target).wcr != target.wcr:
            return Refusal(f"'{out.container}' is reduced with two wcrs in one nested map")
    for t in n.body:
        for mem in t.inputs.values():
            if any(mem.container == k[0] and (k[1] is None or mem.subset == k[1]) for k in found):
                return Refusal(f"'{mem.container}' is read inside the nested map that reduces it")
    return tuple(found.values())


def _index_vars(mem: Memlet) -> frozenset[str]:
    return frozenset().union(*(E.free_vars(ix) for ix in (mem.subset or ()) if not isinstance(ix, Range)))


def _direct_vars(mem: Memlet) -> set[str]:
    return {ix.name for ix in (mem.subset or ()) if isinstance(ix, E.Var)}


def _read_and_written(m: MapNode) -> str | None:
    reads, writes = set(), set()
    local = set(m.locals) | {x for s in m.body if isinstance(s, MapNode) for x in s.locals}
    for node, _ in m.walk():
        if isinstance(node, Tasklet):
            reads |= {mem.container for mem in node.inputs.values()} - local
            if node.output.container not in local:
                writes.add(node.output.container)
    both = sorted(reads & writes)
    return both[0] if both else None


def _layout(nested: list[MapNode], top: list[str]) -> str | Refusal:
    rows = cols = 0
    for n in nested:
        last_inner = n.params[-1][0] if n.params else None
        for t in n.body:
            for mem in list(t.inputs.values()) + [t.output]:
                if not mem.subset or mem.container in n.locals:
                    continue
                last = mem.subset[-1]
                name = last.name if isinstance(last, E.Var) else None
                rows += name is not None and name == last_inner
                cols += name is not None and bool(top) and name == top[-1]
    if cols > rows:
        return "columns"
    if rows:
        return "rows"
    return Refusal("no access in a nested map is contiguous along its row or along the map's columns")
