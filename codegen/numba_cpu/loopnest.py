"""A top-level ``MapNode`` as one numba loop nest: the fused CPU kernel.

``kernel_source(map, graph)`` returns a ``KernelSource``: the text of one ``@njit``
function plus how to call it. The text is *canonical* — arrays are ``a0, a1, …`` (the
global containers in order of first access), loop extents are ``n0, n1, …`` arguments,
parameters ``p0, …``, locals ``t0, …``, hoisted values ``h0, …`` — so maps with the same
structure on different containers or sizes share one compiled function, named after the
op types it fuses and the hash of its text (``k_<what>_<sha>``, ``program.kernel.kernel_name``).
No other name from the model ever reaches the text.

Semantics (the reference's ``codegen/numpy_ref/maps.py``, statement by statement):

- map params become nested ``for`` loops (``prange`` for the outermost when the
  kernel is parallel-safe and large), nested maps inner loops, statements run in
  body order at every point; the loop order follows memory (``schedules``: tiles for
  transposes, columns-innermost for reductions over rows of a map over columns);
- locals become scalar variables, reset at the start of their map's point to the
  identity of their first write's wcr (or 0); a wcr write accumulates
  (``t = t + v``, ``max``, ``min``, ``*``);
- reads that depend on no parameter (``lr[0]``, ``step[0]``) are loaded once before the
  loops, and subexpressions over only such values (AdamW's bias corrections) are
  computed there too;
- outputs are allocated by the caller (``OutputInit``): ``empty`` when one plain write
  covers every element, the wcr identity when written with a wcr, else zeros.

Running all statements at one point before the next point equals the reference's
whole-space-per-statement order when no iteration reads what another writes.
``check_loop_safe`` refuses a map that reads a container it writes at another index;
the caller then keeps the reference for it (``UnsupportedMap``).
"""
from __future__ import annotations

from codegen.numba_cpu import halfbits
from codegen.numba_cpu.exprs import NumbaExpr, literal
from codegen.program.kernel import UnsupportedMap, accumulator_dtype
from codegen.program.walk import Dialect, KernelWalk
from ir import expr as E
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

FASTMATH = ("nsz", "arcp", "contract", "afn", "reassoc")
"""LLVM fast-math flags of every kernel: reassociation lets sum reductions vectorize;
``nnan``/``ninf`` stay off, so inf/NaN behave as in the reference."""

ZERO = "z0"
"""The opaque float32 zero of a kernel calling ``fastmath`` forms: its last extent argument is 0,
so LLVM cannot fold the forms' ``F(c) + z0`` constants (see ``fastmath``)."""


DIALECT = Dialect("    ", literal, lambda name, dt, init: f"{name} = {init}", helper_combines=True)


class Nest(KernelWalk):
    """State of one numba kernel being printed (``program.walk.KernelWalk``), with its hoisting."""

    dialect = DIALECT

    def __init__(self, m: MapNode, graph: Graph, fast: bool) -> None:
        super().__init__(m, graph)
        self.fast = fast
        self.local_count = 0

    # --- names ------------------------------------------------------------------------
    def local(self, loc: str, dtype: str, wcr: str | None) -> tuple[str, str]:
        """``t<k>``, a fresh name (a local printed twice gets two), in its accumulator type."""
        return self.new_local(), accumulator_dtype(wcr, dtype)

    def new_local(self) -> str:
        """A fresh local variable name ``t<k>`` (a local printed twice gets two names)."""
        self.local_count += 1
        return f"t{self.local_count - 1}"

    def index(self, e: E.Expr) -> str:
        names = {p: n for p, n in self.params.items()}
        printer = NumbaExpr({p: "int64" for p in names}, names, fast=False)
        return printer.emit(e) if not isinstance(e, E.Const) else str(int(e.value))

    def loop_head(self, name: str, r: Range, parallel: bool) -> str:
        zero = isinstance(r.start, E.Const) and int(r.start.value) == 0
        step = f", {r.step}" if r.step != 1 else ""     # range(stop, step) would read stop as the start
        lo = ("0, " if step else "") if zero else self.bound(r.start) + ", "
        return f"for {name} in {'prange' if parallel else 'range'}({lo}{self.bound(r.stop)}{step}):"

    def element(self, mem: Memlet) -> str:
        return f"{self.array(mem.container)}[{', '.join(self.index(ix) for ix in self.point_subset(mem)) or '()'}]"

    def tasklet(self, t: Tasklet) -> None:
        tasklet_line(self, t)


# --- statements ---------------------------------------------------------------------------

def tasklet_line(nest: Nest, t: Tasklet) -> None:
    types: dict[str, str] = {}
    names: dict[str, str] = {}
    invariant: set[str] = set()
    for conn, mem in t.inputs.items():
        if mem.container in nest.locals:
            names[conn], types[conn] = nest.locals[mem.container]
            continue
        types[conn] = nest.graph.container(mem.container).dtype
        key = (mem.container, mem.subset)
        if key in nest.invariant:
            names[conn] = nest.invariant[key]
            invariant.add(conn)
        else:
            names[conn] = nest.element(mem)
        if types[conn] in halfbits.LOAD:          # 16-bit floats are uint16 bits: widen on load
            names[conn] = f"{halfbits.LOAD[types[conn]]}({names[conn]})"
            nest.helpers.add(halfbits.LOAD[types[conn]])
            types[conn] = "float32"
    for p, pn in nest.params.items():
        names[p], types[p] = pn, "int64"
        invariant.discard(p)
    printer = NumbaExpr(types, names, nest.fast, zero=ZERO)
    expr = nest.hoist(t.expr, invariant, printer)
    value, vdt = printer.emit(expr), printer.dtype(expr)
    nest.line(_store(nest, t.output, value, vdt, printer))
    nest.helpers |= printer.helpers            # after the store: its cast may call a halfbits helper


def _store(nest: Nest, out: Memlet, value: str, vdt: str, printer: NumbaExpr) -> str:
    if out.container in nest.locals:
        name, dt = nest.locals[out.container]
        return nest.accumulate(name, out.wcr, printer.cast(value, vdt, dt))
    dt = nest.graph.container(out.container).dtype
    if out.wcr is not None and dt in halfbits.STORE:
        raise UnsupportedMap(f"'{out.container}' ({dt}) is accumulated into (wcr {out.wcr}): accumulate in "
                             "float32 (mixed_precision refuses this) or run it with the reference executor")
    return nest.accumulate(nest.element(out), out.wcr, printer.cast(value, vdt, dt))
