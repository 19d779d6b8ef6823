"""The profiler's instrumented step: every kernel statement timed, guarded and skippable.

``timed_step(prog, plan)`` is the text of
``_step_timed(W, B, R, T, S, P, SKIP, ERR, <inputs>)``, which runs the same
statements as ``_step`` (same order, same planned buffers: ``plan.step``, the module's own plan, whose
pool ``B`` the module's ``_SLOTS`` size — the loss statements first) and, ``k`` being a statement's position in
``prog.statements``:

- appends each statement's ``perf_counter_ns`` duration to ``T[k]`` and its start to ``S[k]``;
- writes ``k`` into ``P[0]`` (a shared memory-mapped int64) before statement ``k``, so a
  parent that kills a hung or crashed worker knows which kernel it was running;
- records an exception a statement raises in ``ERR[k]`` and carries on with zero-filled
  outputs, and skips (zero-fills) the statements in ``SKIP`` — kernels that hung or
  crashed in an earlier worker — so every other kernel is still measured.

A selection is profiled as a graph of its own (``cutout``), instrumented the same way.
"""
from __future__ import annotations

from codegen.program.namespace import literal
from codegen.program.module import alloc_line
from codegen.program.module_plan import ModulePlan
from codegen.program.program import Alloc, Program
from codegen.program.schedule import merged


def _zero_fill(prog: Program, writes) -> list[str]:
    out = []
    for c in writes:
        try:
            out.append(alloc_line(prog, Alloc(c, "zeros"), _NO_PLAN))
        except Exception:  # noqa: BLE001 - an unknown dtype: leave the name unbound, report the error
            out.append(f"{prog.var(c)} = None")
    return out or ["pass"]


class _Empty:
    slot_of: dict = {}
    out_slot_of: dict = {}


_NO_PLAN = _Empty()


def timed_step(prog: Program, module_plan: ModulePlan) -> str:
    g = prog.graph
    step = module_plan.step                        # what _step runs, in its order, on its buffers
    plan, position = step.slots, {id(st): k for k, st in enumerate(prog.statements)}
    params = ", ".join(["W", "B", "R", "T", "S", "P", "SKIP", "ERR"] + [prog.var(c) for c in g.inputs])
    lines = ["import time as _time", "", "", f"def _step_timed({params}):",
             "    _ns = _time.perf_counter_ns"]
    used = {c for st in prog.statements for c in st.reads} | set(g.outputs)
    lines += [f"    {prog.var(c)} = W[{literal(prog.var(c))}]" for c in g.values if c in used and c not in g.inputs]
    for st, free in zip(merged(step.steps), step.frees):
        k = position[id(st)]
        body = [alloc_line(prog, a, plan) for a in st.allocs] + list(st.lines)
        block = [st.head, f"P[0] = {k}", "P[1] += 1", "_t = _ns()", f"S[{k}] = _t", "try:",
                 f"    if {k} in SKIP:", "        raise _Skipped()"]
        block += ["    " + text for text in body]
        block += ["except Exception as _e:",
                  f"    ERR[{k}] = 'skipped' if isinstance(_e, _Skipped) else f'{{type(_e).__name__}}: {{_e}}'"]
        block += ["    " + text for text in _zero_fill(prog, st.writes)]
        block.append(f"T[{k}].append(_ns() - _t)")
        lines += ["    " + text for text in block]
        if free:
            lines.append("    " + " = ".join(prog.var(c) for c in sorted(free)) + " = None")
    items = ", ".join(f"{literal(c)}: {prog.var(c)}" for c in g.outputs)
    lines += [f"    return {{{items}}}", "", "",
              "class _Skipped(Exception):", "    pass", ""]
    return "\n".join(lines)
