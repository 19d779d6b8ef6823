"""Bytes as fused against bytes as exported: what the count says, and what the program runs.

``ir.movement`` counts each kernel once, as the IR fuses it: a GEMM with an epilogue reads its
operands and writes only the epilogue's outputs, a grouped GEMM reads a shared operand once, a
view is a copy. A backend's program may move more or less: a contraction whose epilogue runs as
a separate kernel writes the raw product and reads it back (unless it runs in panels that stay
in cache: ``codegen.program.panels`` states the cache model), members of a group each read the
shared operand, a ``zeros``/``full`` output is filled before its kernel runs, and views move
nothing. ``traffic(prog)`` counts both per statement from the calls the program makes
(``Statement.calls``: every array argument once, by its container's size, plus the fills; a panel
loop's distinct arrays once, its product panel not at all), so
"as exported" is the sum over what the module actually calls (``tests`` run the module with its
calls counted and compare).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from codegen.program.program import Program, Statement
from ir.movement import kernel_estimate
from ir.statements import FREE_KINDS


@dataclass
class StatementTraffic:
    node_id: str
    fused: int
    exported: int
    why: str = ""


@dataclass
class Traffic:
    backend: str
    statements: list[StatementTraffic] = field(default_factory=list)

    @property
    def fused(self) -> int:
        return sum(s.fused for s in self.statements)

    @property
    def exported(self) -> int:
        return sum(s.exported for s in self.statements)

    @property
    def ratio(self) -> float:
        return self.exported / self.fused if self.fused else 1.0

    def summary(self) -> str:
        return (f"bytes as fused {self.fused / 1e6:.1f} MB, as exported ({self.backend}) {self.exported / 1e6:.1f} MB "
                f"({self.ratio - 1:+.1%})")

    def largest_differences(self, n: int = 5) -> list[StatementTraffic]:
        return sorted((s for s in self.statements if s.exported != s.fused),
                      key=lambda s: -abs(s.exported - s.fused))[:n]


def statement_bytes(prog: Program, st: Statement) -> int:
    """Bytes the statement's calls touch (each array argument once) plus its output fills."""
    moved = sum(prog.nbytes(c) for _, containers in st.calls for c in containers)
    return moved + sum(prog.nbytes(a.container) for a in st.allocs if a.kind != "empty")


def _why(prog: Program, st: Statement) -> str:
    if st.kind in FREE_KINDS:
        return "a view or constant: no data moves"
    if prog.temps and any(c in prog.temps for _, cs in st.calls for c in cs):
        return "the GEMM writes its raw product and the epilogue kernel reads it back"
    if len(st.calls) > 1:
        return "each member of the group reads its operands"
    if any(a.kind != "empty" for a in st.allocs):
        return "outputs are filled before the kernel accumulates into them"
    return "the calls' arrays differ from the counted subsets"


def traffic(prog: Program, backend: str = "cpu") -> Traffic:
    """Both counts for every statement of ``prog`` (see the module docstring)."""
    out = Traffic(backend)
    for st in prog.statements:
        node = prog.graph.nodes.get(st.node_id)
        fused = kernel_estimate(prog.graph, node).bytes if node is not None else 0
        exported = statement_bytes(prog, st)
        out.statements.append(StatementTraffic(st.node_id, fused, exported,
                                               _why(prog, st) if exported != fused else ""))
    return out
