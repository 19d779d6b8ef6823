"""The state of one kernel being printed, shared by every backend's renderer.

A renderer walks a top-level ``MapNode`` and prints it line by line. What that walk keeps is the
same in every backend, so it lives here once (``KernelWalk``); a backend subclasses it with its
``Dialect`` (indent, literals, how a local is declared) and adds what only it does (numba: ``prange``
schedules; CUDA: thread parameters, block reductions and atomics):

- ``arrays``: global containers in order of first access, named ``a0, a1, …`` (``collect``, which also
  lists ``written`` and refuses a map that is not loop-safe, ``kernel.check_loop_safe``);
- ``extents``: loop extents passed as arguments ``n0, n1, …``; ``params``: IR param → printed name;
- ``locals``: IR local → (printed name, dtype), declared at the identity of their first write's wcr
  (``declare_locals``, ``identity``);
- ``combine``: how a wcr folds a new value into an accumulator, spelled the same in every backend
  (NaN-propagating ``dcs_max``/``dcs_min``; each backend defines them, numba as helpers it adds);
- ``body``/``loops``: a map's locals and statements, nested maps as loops (``loop_head``, ``close_to``),
  tasklets as the backend prints them (``tasklet``; ``accumulate`` folds a value into its target);
- ``element``: a point memlet as the backend indexes it, from ``point_subset`` (which refuses a whole-container
  read and a range inside a map body);
- hoisting, for a backend that prints ``pre`` before its loops (numba): ``invariant_reads`` loads the reads at
  constant indices once, ``hoist`` computes the subexpressions over only such values once;
- ``lines``/``depth``/``line``: the printed body.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from codegen.program.expr_print import ExprPrinter
from codegen.program.kernel import UnsupportedMap, check_loop_safe, first_wcr, kernel_locals
from ir import expr as E
from ir.graph import Graph
from ir.memlet import Memlet, Range, Wcr
from ir.nodes import MapNode, Tasklet


@dataclass(frozen=True)
class Dialect:
    """What a backend's kernel text looks like, in a few entries."""

    indent: str                                   # one level of the body
    literal: Callable[[object, str], str]         # a constant of a dtype
    declare: Callable[[str, str, str], str]       # (name, dtype, initial value) -> the declaring line
    helper_combines: bool = False                 # max/min combines call helpers the kernel module defines
    close: str | None = None                      # the line ending a loop's block (None: indentation ends it)
    statement: str = "{}"                         # a statement around its code ("{};" in C)


class KernelWalk(ABC):
    """State of one kernel being printed (see the module docstring)."""

    dialect: Dialect

    def __init__(self, m: MapNode, graph: Graph) -> None:
        self.m, self.graph = m, graph
        self.local_names = kernel_locals(m)
        self.arrays: dict[str, str] = {}                 # container -> a<k>
        self.written: list[str] = []
        self.extents: list[int] = []
        self.params: dict[str, str] = {}                 # IR param -> printed name
        self.locals: dict[str, tuple[str, str]] = {}     # IR local -> (printed name, dtype)
        self.helpers: set[str] = set()
        self.lines: list[str] = []
        self.depth = 1
        self.pre: list[str] = []                         # statements before the loops (hoisted values, buffers)
        self.hoisted: dict[str, str] = {}                # printed value -> h<k>
        self.invariant: dict[tuple, str] = {}            # (container, subset) read once -> h<k>

    def line(self, text: str) -> None:
        self.lines.append(self.dialect.indent * self.depth + text)

    def array(self, container: str) -> str:
        if container not in self.arrays:
            self.arrays[container] = f"a{len(self.arrays)}"
        return self.arrays[container]

    @contextmanager
    def renamed(self, params: dict[str, str] | None = None,
                locals: dict[str, tuple[str, str]] | None = None) -> Iterator[None]:
        """Print with some IR params and locals under other names (a register copy, the next row's
        accumulators); each name is back as it was afterwards (absent again if it was absent)."""
        saved = [(table, key, table.get(key)) for table, names in ((self.params, params), (self.locals, locals))
                 for key in names or {}]
        self.params.update(params or {})
        self.locals.update(locals or {})
        try:
            yield
        finally:
            for table, key, old in saved:
                if old is None:
                    table.pop(key, None)
                else:
                    table[key] = old

    def collect(self) -> None:
        """Number the global containers (first access order, inputs before the output of each
        tasklet), list the written ones, and check loop safety."""
        for node, _ in self.m.walk():
            if not isinstance(node, Tasklet):
                continue
            for mem in list(node.inputs.values()) + [node.output]:
                if mem.container not in self.local_names:
                    self.array(mem.container)
            out = node.output.container
            if out not in self.local_names and out not in self.written:
                self.written.append(out)
        check_loop_safe(self.m, set(self.written), self.local_names)

    def extent(self, value: int) -> str:
        """A loop extent passed as an argument, ``n<k>``."""
        self.extents.append(int(value))
        return f"n{len(self.extents) - 1}"

    def bound(self, e: E.Expr) -> str:
        """A loop bound: an index expression over the params printed so far, else an extent argument."""
        free = E.free_vars(e)
        if free and free <= set(self.params):
            return self.index(e)
        if free - set(self.graph.bindings):
            raise UnsupportedMap(f"loop bound {E.to_text(e)} uses unknown names")
        return self.extent(int(E.evaluate(e, dict(self.graph.bindings))))

    def body(self, m: MapNode) -> None:
        """``m``'s locals, then its statements in order: nested maps as loops, tasklets as stores."""
        self.declare_locals(m)
        for stmt in m.body:
            if isinstance(stmt, MapNode):
                self.loops(stmt)
            else:
                self.tasklet(stmt)

    def loops(self, m: MapNode, parallel: bool = False) -> None:
        """Loops over ``m``'s params around its body, the first one a parallel loop if ``parallel``."""
        depth = self.depth
        for k, (p, r) in enumerate(m.params):
            self.open_loop(p, r, parallel and k == 0)
        self.body(m)
        self.close_to(depth)

    def open_loop(self, p: str, r: Range, parallel: bool = False) -> str:
        """Open a loop of IR param ``p`` over ``r`` (one level deeper); returns its printed name ``p<k>``."""
        name = f"p{len(self.params)}"
        head = self.loop_head(name, r, parallel)
        self.params[p] = name
        self.line(head)
        self.depth += 1
        return name

    def close_to(self, depth: int) -> None:
        """End the blocks opened below ``depth``."""
        while self.depth > depth:
            self.depth -= 1
            if self.dialect.close is not None:
                self.line(self.dialect.close)

    def accumulate(self, target: str, wcr: str | None, value: str) -> str:
        """The statement folding ``value`` into ``target`` by ``wcr`` (a plain assignment without one)."""
        return self.dialect.statement.format(f"{target} = {self.combine(wcr, target, value)}")

    @abstractmethod
    def index(self, e: E.Expr) -> str:
        """An index expression over the printed params."""

    @abstractmethod
    def element(self, mem: Memlet) -> str:
        """The printed element of a point memlet of a global container (its indices: ``point_subset``)."""

    def point_subset(self, mem: Memlet) -> tuple:
        """The indices of a point memlet of a global container: a whole-container memlet of a one-element
        container is its element 0; a whole-container read of more, or a range inside a map body, is refused."""
        if mem.subset is None:
            container = self.graph.container(mem.container)
            if container.numel(self.graph.bindings) != 1:
                raise UnsupportedMap(f"tasklet reads all of '{mem.container}' (not one element)")
            return tuple(E.Const(0, "int64") for _ in container.shape)
        if any(isinstance(ix, Range) for ix in mem.subset):
            raise UnsupportedMap(f"range subset of '{mem.container}' inside a map body")
        return tuple(mem.subset)

    @abstractmethod
    def loop_head(self, name: str, r: Range, parallel: bool) -> str:
        """The line opening a loop of ``name`` over ``r``."""

    @abstractmethod
    def tasklet(self, t: Tasklet) -> None:
        """Print the statement of tasklet ``t``."""

    def identity(self, wcr: str | None, dt: str) -> str:
        """An accumulator's initial value: the wcr's identity (``ir.memlet.Wcr``), 0 without one."""
        return self.dialect.literal(0 if wcr is None else Wcr(wcr).identity(dt), dt)

    def combine(self, wcr: str | None, old: str, new: str) -> str:
        """``new`` folded into ``old`` by ``wcr`` (max and min NaN-propagating, as ``np.maximum``)."""
        if wcr is None:
            return new
        if wcr in ("max", "min"):
            if self.dialect.helper_combines:
                self.helpers.add(f"dcs_{wcr}")
            return f"dcs_{wcr}({old}, {new})"
        return f"{old} {'+' if wcr == 'sum' else '*'} {new}"

    @abstractmethod
    def local(self, loc: str, dtype: str, wcr: str | None) -> tuple[str, str]:
        """The printed name and type of local ``loc`` (of IR ``dtype``, first written with ``wcr``)."""

    def declare_locals(self, m: MapNode) -> None:
        """``m``'s locals, each declared at its initial value."""
        first = first_wcr(m)
        for loc, c in m.locals.items():
            if c.shape != ():
                raise UnsupportedMap(f"local '{loc}' has shape {list(c.shape)}; only scalar locals are supported")
            name, dt = self.local(loc, c.dtype, first.get(loc))
            self.locals[loc] = (name, dt)
            self.line(self.dialect.declare(name, dt, self.identity(first.get(loc), dt)))

    # --- hoisting ---------------------------------------------------------------------------------
    def invariant_reads(self) -> None:
        """Reads of containers the map does not write, at constant indices: loaded once into ``pre``."""
        for node, _ in self.m.walk():
            if not isinstance(node, Tasklet):
                continue
            for mem in node.inputs.values():
                key = (mem.container, mem.subset)
                if mem.container in self.arrays and mem.container not in self.written and key not in self.invariant \
                        and self._constant_index(mem):
                    name = self.invariant[key] = f"h{len(self.pre)}"
                    self.pre.append(self.dialect.declare(name, self.graph.container(mem.container).dtype,
                                                         self.element(mem)))

    def _constant_index(self, mem: Memlet) -> bool:
        if mem.subset is None:
            return self.graph.container(mem.container).numel(self.graph.bindings) == 1
        return all(isinstance(ix, E.Const) for ix in mem.subset)

    def hoist(self, e: E.Expr, invariant: set[str], printer: ExprPrinter) -> E.Expr:
        """``e`` with each maximal subtree over no parameter (only ``invariant`` reads and constants) replaced
        by a value computed once in ``pre`` (one per printed text), which ``printer`` then names."""
        if isinstance(e, (E.Var, E.Const)):
            return e
        if E.free_vars(e) <= invariant:
            text, dt = printer.emit(e), printer.dtype(e)
            name = self.hoisted.get(text)
            if name is None:
                name = self.hoisted[text] = f"h{len(self.pre)}"
                self.pre.append(self.dialect.declare(name, dt, text))
            key = "#" + name
            printer.names[key], printer.types[key] = name, dt  # type: ignore[index]
            return E.Var(key)
        if isinstance(e, E.Un):
            return E.Un(e.op, self.hoist(e.a, invariant, printer))
        if isinstance(e, E.Bin):
            return E.Bin(e.op, self.hoist(e.a, invariant, printer), self.hoist(e.b, invariant, printer))
        if isinstance(e, E.Select):
            return E.Select(*(self.hoist(x, invariant, printer) for x in (e.cond, e.a, e.b)))
        return E.Cast(self.hoist(e.a, invariant, printer), e.dtype)
