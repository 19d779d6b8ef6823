"""What a module runs, planned before it is printed (``module.py`` prints it and plans nothing).

For ``_step`` and ``_forward``: the steps (statements in order; a step of several runs them side by side
where the fork-join ``schedule`` pairs them), the outputs, the buffer plan (the recorded ``memory_reuse``
buffers the function can honour, the rest greedily: ``buffers.plan``) and, per step, the intermediates whose
last use it is (dropped right after it). ``_step`` computes the loss first (its statements need nothing
else, so any order that puts them first is the same step); ``_forward`` then shares those statements with
``_step`` instead of repeating them (``shared``)."""
from __future__ import annotations

from dataclasses import dataclass

from codegen.program.buffers import Plan, plan
from codegen.program.program import Program
from codegen.program.schedule import Schedule, merged, units
from codegen.program.shared_buffers import recorded_plan
from codegen.program.statement import Statement
from ir.containers import Role


@dataclass(frozen=True)
class FunctionPlan:
    """One generated function: its steps, outputs, buffer plan and the containers freed after each step."""

    steps: list[list[Statement]]
    outputs: list[str]
    slots: Plan
    frees: list[list[str]]


@dataclass(frozen=True)
class ModulePlan:
    """The module's functions (``forward`` None for a predict module) and the schedule they run by."""

    step: FunctionPlan
    forward: FunctionPlan | None
    schedule: Schedule | None = None
    shared: int = 0
    """How many leading steps of ``step`` ``_forward`` runs as they are (both call ``_step_forward``, on the
    step's buffers); 0 when ``_forward`` has statements and a buffer plan of its own."""


def plan_module(prog: Program, schedule: Schedule | None = None, *, forward: bool = True) -> ModulePlan:
    """The plan of ``prog``'s module; ``schedule``: steps that run side by side (``schedule.fork_join``)."""
    steps = units(prog.statements, schedule)
    if not forward:
        return ModulePlan(_function(prog, steps, list(prog.graph.outputs)), None, schedule)
    outputs = forward_outputs(prog)
    keep = needed(prog, outputs)
    steps, shared = loss_first(steps, keep)
    if not set(outputs) <= {c for st in keep for c in st.writes}:
        shared = 0                      # a loss output no statement writes (an initializer passed through)
    step = _function(prog, steps, list(prog.graph.outputs))
    if shared:
        return ModulePlan(step, FunctionPlan(steps[:shared], outputs, step.slots, step.frees[:shared]),
                          schedule, shared)
    return ModulePlan(step, _function(prog, units(prog.statements, schedule, keep=keep), outputs), schedule)


def loss_first(steps: list[list[Statement]], keep: list[Statement]) -> tuple[list[list[Statement]], int]:
    """``steps`` with those that compute the loss (``keep``, closed under what they read) first, in their
    order, and how many they are: ``_forward`` runs just those. A step holding a statement the loss needs
    and one it does not stays where it is, and the count is 0 (``_forward`` then has its own plan)."""
    want = {id(st) for st in keep}
    first = [step for step in steps if any(id(st) in want for st in step)]
    if any(id(st) not in want for step in first for st in step):
        return steps, 0
    return first + [step for step in steps if not any(id(st) in want for st in step)], len(first)


def _function(prog: Program, steps: list[list[Statement]], outputs: list[str]) -> FunctionPlan:
    statements = merged(steps)
    return FunctionPlan(steps, outputs, function_plan(prog, statements, outputs), free_after(statements, set(outputs)))


def free_after(statements: list[Statement], keep: set[str]) -> list[list[str]]:
    """Per statement, the containers whose last use it is (outputs, inputs and weights kept)."""
    last: dict[str, int] = {}
    produced: set[str] = set()
    for k, st in enumerate(statements):
        for c in st.reads + st.writes:
            last[c] = k
        produced.update(st.writes)
    out: list[list[str]] = [[] for _ in statements]
    for c, k in last.items():
        if c in produced and c not in keep:
            out[k].append(c)
    return out


def function_plan(prog: Program, statements: list[Statement], outputs: list[str]) -> Plan:
    """The slots of one function: the recorded buffers it can honour, the rest greedily."""
    recorded = recorded_plan(prog, statements, outputs)
    result = plan(statements, outputs, prog.nbytes, recorded.buffers)
    result.refused, result.covered = recorded.refused, recorded.covered
    return result


def forward_outputs(prog: Program) -> list[str]:
    """Graph outputs that are neither gradients nor new parameters/state (the loss)."""
    g = prog.graph
    plain = [c for c in g.outputs if g.container(c).role in (Role.OUTPUT, Role.TRANSIENT)]
    return plain or list(g.outputs)


def needed(prog: Program, outputs: list[str]) -> list[Statement]:
    need, keep = set(outputs), []
    for st in reversed(prog.statements):
        if need & set(st.writes):
            keep.append(st)
            need.update(st.reads)
    return list(reversed(keep))
