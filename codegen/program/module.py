"""A ``Program`` as the text of one Python module: ``_step``, ``_forward`` and ``Model``.

The module (the ``model.py`` of an exported package; a cached file in-process) holds:

- the import block, which is all that differs between the two modes:
  ``export`` imports its siblings (``kernels``, ``_lib``, ``_ref``), ``inprocess``
  imports the same code from dcstudio and its kernels from the kernel cache. The
  text is the same for every backend: arrays are made, converted and viewed only
  through ``L`` (the backend's library: NumPy for the CPU, CuPy for CUDA) and kernels
  are called as ``K.k_<what>_<sha>(arrays…, extents…)``;
- ``INPUTS``/``OUTPUTS``/``FORWARD_OUTPUTS`` (the model's own names, as ASCII string
  literals), input dtypes and shapes, ``UPDATES`` (``p.new`` → ``p`` pairs for ``Model.train_step``)
  and ``TRAINING`` (``codegen.program.training``: learning rate, step and mask inputs);
- the reference-kernel tables ``_REF_k``/``_CTX_k``;
- the memory plan: ``ARENA_BYTES`` (bytes of ``_step``'s intermediate slots), ``SLOT_OF``
  (intermediate → slot), ``SHARED_BUFFERS`` (the honoured ``memory_reuse`` buffers:
  name → (slot, bytes, members)) and a comment block listing them, their in-place members
  and every recorded member that fell back to the greedy planner, with the reason;
- ``_step(W, B, R, <inputs>)``: one statement per kernel in topological order, each under a
  comment naming its node id; intermediates live in the planned buffers ``B``
  (``buffers``: allocated once per ``Model``, reused every step) and every intermediate
  name is dropped (``x = None``) right after its last use; it returns
  ``{output name: array}`` (outputs are fresh arrays, or the recycled buffers ``R``);
- ``_forward``: the same with only the kernels the loss needs. ``_step`` runs those first
  (``module_plan.loss_first``), so they are printed once, as ``_step_forward``, which ``_step``
  and ``_forward`` both call. ``_forward`` keeps statements and a buffer plan of its own when
  a schedule pairs a loss statement with a backward one, or when a loss output is written by no
  statement (an initializer the graph returns as it is: ``_step_forward`` could not return it);
- ``Model = _runtime.bind(globals())``: the training object of ``codegen.program.runtime``
  (a copy of it, ``_runtime.py``, in a package), with weights and default inputs (``W``, from
  ``weights.npz`` or given); in a package ``PREDICT`` is its eval program ``predict.py`` (the same
  text with ``mode="predict"``: ``_step`` only) or None.

``line_map`` maps generated line numbers to node ids (torch.fx's ``_lineno_map``) for
error messages.
"""
from __future__ import annotations

import re

from codegen.program.buffers import Plan
from codegen.program.namespace import comment, literal
from codegen.program.program import Alloc, Program
from codegen.program.statement import Statement
from codegen.program.module_plan import FunctionPlan, ModulePlan, plan_module
from codegen.program.schedule import Schedule
from codegen.program.training import training_table
from codegen.program.wrap import WIDTH, wrap_text
from ir import memory
from ir.dtypes import HALF_FLOATS
from ir.memlet import Wcr

EXPORT_IMPORTS = """import os

import numpy as np

from . import _lib as L
{runtime}from . import kernels as K
from ._ref import kernels as _ref_kernels  # noqa: F401  (fills the reference kernel table)
from ._ref.registry import OpContext, lookup as _lookup

EXTERN = {{}}
"""

LOAD_WEIGHTS = {
    "export": '''

def _load_weights():
    path = os.path.join(DIRECTORY, "weights.npz")
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}
''',
    "predict": '''

def _load_weights():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "predict_weights.npz")
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}
''',
    "inprocess": '''

def _load_weights():
    raise TypeError("an in-process program is given its weights: Model(weights)")
''',
}

RUNTIME = {   # where Model comes from (codegen.program.runtime), the eval program, the package folder
    "export": ("from . import _runtime\n", "DIRECTORY = os.path.dirname(os.path.abspath(__file__))\n"),
    "inprocess": ("from codegen.program import runtime as _runtime\n", "DIRECTORY = None\nPREDICT = None\n"),
    "predict": ("", ""),
}
MODEL = "\n\nModel = _runtime.bind(globals())  # codegen.program.runtime: steps, state, checkpoints, ONNX\n"


def alloc_line(prog: Program, a: Alloc, slots: Plan) -> str:
    var, shape, np_type = prog.var(a.container), literal(prog.shape(a.container)), prog.np_type(a.container)
    init = "" if a.kind == "empty" else f", {literal(a.kind)}" + (f", {fill_literal(prog, a)}" if a.wcr else "")
    if a.container in slots.slot_of:
        return f"{var} = L.view(B[{slots.slot_of[a.container]}], {shape}, {np_type}{init}){_shared_note(slots, a)}"
    if a.container in getattr(slots, "out_slot_of", {}):
        j = slots.out_slot_of[a.container]
        return (f"{var} = L.view(R[{j}], {shape}, {np_type}{init}) if R is not None else "
                f"L.alloc({shape}, {np_type}{init})")
    return f"{var} = L.alloc({shape}, {np_type}{init})"


def fill_literal(prog: Program, a: Alloc) -> str:
    """The identity of ``a``'s wcr for its dtype, as a literal (``ir.memlet.Wcr.identity``)."""
    dt = prog.container(a.container).dtype
    return literal(Wcr(a.wcr).identity("float32" if dt in HALF_FLOATS else dt))


def _shared_note(slots: Plan, a: Alloc) -> str:
    buf = slots.buffer_of(a.container) if hasattr(slots, "buffer_of") else None
    if buf is None:
        return ""
    inplace = buf.inplace.get(a.container)
    return f"  # {comment(buf.name, 40)}" + (f", in place of {comment(inplace[1], 60)}" if inplace else "")


def ir_arena(graph) -> tuple[int, int]:
    """(``ir.memory.arena_bytes``, the part of it that is not transients: inputs, weights,
    outputs — memory the caller and ``Model`` hold, outside the intermediate arena)."""
    interface = sum(life.nbytes for name, life in memory.lifetimes(graph).items()
                    if not memory.is_plannable(graph, name))
    return memory.arena_bytes(graph), interface


def memory_comment(prog: Program, slots: Plan) -> str:
    """``#`` lines: the arena against ``ir.memory``'s, each honoured recorded buffer and each
    member that fell back."""
    total, interface = ir_arena(prog.graph)
    temps = sum(prog.nbytes(c) for c in slots.slot_of if c in prog.temps)
    lines = [f"# Memory plan of _step: {slots.nbytes} bytes of intermediates in {len(slots.slots)} slots "
             f"(ARENA_BYTES), plus {sum(slots.out_slots)} bytes of recycled outputs.",
             f"# ir.memory.arena_bytes of this graph: {total} = {interface} inputs, weights and outputs "
             f"+ {total - interface} transients (views, constants and reference outputs need no slot; "
             "slots are reused across lifetimes)"
             + (f"; the slots also hold {temps} bytes of GEMM accumulators, which ir.memory does not count."
                if temps else ".")]
    if not slots.shared and not slots.refused:
        return "\n".join(lines + ["# No recorded buffers (memory_reuse): every slot is planned greedily."]) + "\n"
    lines.append(f"# Recorded buffers (memory_reuse), checked on this graph: {len(slots.shared)} honoured, "
                 f"{len(slots.refused)} member(s) planned greedily instead.")
    for buf in slots.shared:
        members = ", ".join(c + (f" (in place of {buf.inplace[c][1]} in {buf.inplace[c][0]})" if c in buf.inplace
                                 else "") for c in buf.members)
        lines.append(f"#   {comment(buf.name, 40)}: slot {slots.shared_slot[buf.name]}, {buf.nbytes} bytes: "
                     f"{comment(members, 400)}")
        views = [f"{c} -> {s}" for c, s in sorted(slots.covered.items()) if s in buf.members]
        if views:
            lines.append(f"#     views in it: {comment(', '.join(views), 400)}")
    for c, why in sorted(slots.refused.items()):
        lines.append(f"#   greedy fallback {comment(c, 80)}: {comment(why, 300)}")
    return "\n".join(lines) + "\n"


def _memory_constants(slots: Plan) -> str:
    shared = {b.name: (slots.shared_slot[b.name], b.nbytes, tuple(b.members)) for b in slots.shared}
    return (f"ARENA_BYTES = {slots.nbytes}\nSLOT_OF = {literal(dict(sorted(slots.slot_of.items())))}\n"
            f"SHARED_BUFFERS = {literal(shared)}\n")


def _function(prog: Program, name: str, fplan: FunctionPlan, schedule: Schedule | None) -> list[str]:
    """``def name(W, B, R, <inputs>)``: the steps in order, returning ``{output: array}``."""
    steps = [st for step in fplan.steps for st in step]
    return ([_signature(prog, name)] + _weights(prog, steps, fplan.outputs) +
            _steps(prog, fplan.steps, fplan.frees, fplan.slots, schedule) + [_return_dict(prog, fplan.outputs)])


def _return_dict(prog: Program, outputs: list[str]) -> str:
    """``return {output name: its variable}``."""
    return "    return {" + ", ".join(f"{literal(c)}: {prog.var(c)}" for c in outputs) + "}"


def _shared_functions(prog: Program, plan: ModulePlan) -> list[str]:
    """``_step_forward`` (the step's first ``plan.shared`` steps, returning the values alive after them),
    ``_step`` (it, then the rest) and ``_forward`` (it, then the loss): the loss's statements once."""
    step, n = plan.step, plan.shared
    first = [st for s in step.steps[:n] for st in s]
    rest = [st for s in step.steps[n:] for st in s]
    freed = {c for free in step.frees[:n] for c in free}
    alive = [c for c in dict.fromkeys(c for st in first for c in st.writes) if c not in freed]
    values = "(" + ", ".join(prog.var(c) for c in alive) + ("," if len(alive) == 1 else "") + ")"
    reads = {c for st in first for c in st.reads}
    inputs = [c for c in prog.graph.inputs if c in reads]
    call = ", ".join(["W", "B", "{R}"] + [prog.var(c) for c in inputs])
    head = ([_signature(prog, "_step_forward", inputs), '    """The statements of the step up to the loss: _step and '
             '_forward both run them."""'] + _weights(prog, first, []) +
            _steps(prog, step.steps[:n], step.frees[:n], step.slots, plan.schedule) + [f"    return {values}"])
    body = ([_signature(prog, "_step"), f"    saved = _step_forward({call.format(R='R')})", f"    {values} = saved"] +
            _weights(prog, rest, [c for c in step.outputs if c not in alive]) +
            _steps(prog, step.steps[n:], step.frees[n:], step.slots, plan.schedule) +
            [_return_dict(prog, step.outputs)])
    loss = ", ".join(f"{literal(c)}: saved[{alive.index(c)}]" for c in plan.forward.outputs)
    doc = '    """The loss: the step\'s first statements, on its buffers (the outputs are fresh arrays)."""'
    forward = [_signature(prog, "_forward"), doc, f"    saved = _step_forward({call.format(R='None')})",
               f"    return {{{loss}}}"]
    return head + ["", ""] + body + ["", ""] + forward


def _signature(prog: Program, name: str, inputs: list[str] | None = None) -> str:
    names = [prog.var(c) for c in (prog.graph.inputs if inputs is None else inputs)]
    return f"def {name}({', '.join(['W', 'B', 'R'] + names)}):"


def _weights(prog: Program, statements: list[Statement], outputs: list[str]) -> list[str]:
    """``x = W['x']`` for every value (weight, constant) ``statements`` read or ``outputs`` return."""
    g = prog.graph
    used = {c for st in statements for c in st.reads} | set(outputs)
    return [f"    {prog.var(c)} = W[{literal(prog.var(c))}]" for c in g.values if c in used and c not in g.inputs]


def _steps(prog: Program, steps: list[list[Statement]], frees: list[list[str]], slots: Plan,
           schedule: Schedule | None) -> list[str]:
    """The steps in order, each intermediate dropped after its last use; a step of several statements
    (or, with a schedule, one grouped GEMM) allocates their outputs, then runs each part as a closure
    side by side (``L.parallel``)."""
    index = {id(st): k for k, st in enumerate(prog.statements)}
    split = schedule.split if schedule is not None else set()   # grouped GEMMs run member by member
    lines = []
    for step, free in zip(steps, frees):
        for st in step:
            lines.append("    " + st.head)
            lines += ["    " + alloc_line(prog, a, slots) for a in st.allocs]
        tasks = [(st, task) for st in step
                 for task in (st.tasks if len(step) == 1 and index[id(st)] in split else (st.lines,))]
        if len(tasks) == 1:
            lines += ["    " + text for text in step[0].lines]
        else:
            for k, (st, task) in enumerate(tasks):
                lines.append(f"    def _p{k}():  # {comment(st.node_id, 90)}")
                lines += ["        " + text for text in task]
            lines.append(f"    L.parallel({', '.join(f'_p{k}' for k in range(len(tasks)))})")
        if free:
            lines += none_lines([prog.var(c) for c in sorted(free)], "    ")
    return lines


def none_lines(names: list[str], indent: str, width: int = WIDTH) -> list[str]:
    """``a = b = None`` lines dropping ``names``, each at most ``width`` characters."""
    lines, current = [], []
    for name in names:
        if current and len(indent) + len(" = ".join(current + [name])) + len(" = None") > width:
            lines.append(indent + " = ".join(current) + " = None")
            current = []
        current.append(name)
    return lines + ([indent + " = ".join(current) + " = None"] if current else [])


def updates(prog: Program) -> list[tuple[str, str]]:
    """(``p.new``, ``p``) for every output that replaces an input of the same name."""
    g = prog.graph
    return [(c, c[:-4]) for c in g.outputs if c.endswith(".new") and c[:-4] in g.inputs]


def _schedule_text(prog: Program, sched: Schedule | None) -> str:
    """The schedule as data: a comment table and ``SCHEDULE`` (steps of statement node ids)."""
    if sched is None:
        return "SCHEDULE = ()  # one statement at a time, in order\n"
    steps = tuple(tuple(prog.statements[k].node_id for k in step) for step in sched.steps if len(step) > 1)
    return ("\n".join(sched.table(prog.statements)) + f"\nWORKERS = {sched.workers}\n"
            f"SCHEDULE = {literal(steps)}  # the steps that run statements side by side (node ids)\n")


def module_text(prog: Program, *, mode: str, doc: str, header: str = "", extra: str = "",
                imports: str | None = None, predict: bool = False, plan: ModulePlan | None = None) -> str:
    """The module (see the module docstring) of ``plan`` (``module_plan.plan_module``; default: the
    program's, in order); ``header`` is a block of ``#`` lines, ``extra`` more functions (the profiler's
    instrumented step). ``mode="inprocess"`` takes its import block from the backend's runner (``imports``:
    it binds ``L``, ``K``, ``EXTERN``); ``mode="predict"`` is a package's eval program (``predict.py``:
    ``_step`` only, no ``Model``); ``predict``: the package has one (``Model.forward`` runs it)."""
    g = prog.graph
    if mode == "inprocess" and imports is None:
        raise ValueError("an in-process module needs its backend's import block")
    if plan is None:
        plan = plan_module(prog, forward=mode != "predict")
    runtime = RUNTIME[mode][0]
    imports = imports + runtime if mode == "inprocess" else EXPORT_IMPORTS.format(runtime=runtime)
    step_plan = plan.step.slots
    parts = [f'"""{doc}"""\n' + header, imports,
             _interface(prog, step_plan), memory_comment(prog, step_plan) + _memory_constants(step_plan),
             _schedule_text(prog, plan.schedule), "\n".join(prog.tables) + ("\n" if prog.tables else "")]
    if mode == "predict":
        parts.append("\n".join(_function(prog, "_step", plan.step, plan.schedule)) + "\n")
    else:
        package = "from . import predict as PREDICT\n" if predict else "PREDICT = None\n" if mode == "export" else ""
        parts[2] += (f"FORWARD_OUTPUTS = {literal(tuple(plan.forward.outputs))}\n"
                     f"UPDATES = {literal(tuple(updates(prog)))}\nTRAINING = {literal(training_table(g))}\n"
                     + _forward_slots(plan) + RUNTIME[mode][1] + package)
        functions = _shared_functions(prog, plan) if plan.shared else (
            _function(prog, "_step", plan.step, plan.schedule) + ["", ""] +
            _function(prog, "_forward", plan.forward, plan.schedule))
        parts.append("\n".join(functions) + "\n")
    parts.append(extra)
    doc_line, rest = parts[0].split("\n", 1)
    parts[0] = doc_line + "\n" + wrap_text(rest)             # the docstring is one line of its own
    parts[1:] = [wrap_text(p) for p in parts[1:]]             # code and comments: lines of at most 120
    return "\n\n".join(p for p in parts if p) + LOAD_WEIGHTS[mode] + (MODEL if mode != "predict" else "")


def _forward_slots(plan: ModulePlan) -> str:
    """``_forward``'s buffers: the step's when it runs the step's first statements (``Model.loss`` then
    uses the step's pool), else its own plan's."""
    if plan.shared:
        return ("_FORWARD_SLOTS = _SLOTS  # _forward runs _step's first statements, on its buffers\n"
                "_FORWARD_OUT_SLOTS = ()\n")
    return (f"_FORWARD_SLOTS = {literal(tuple(plan.forward.slots.slots))}\n"
            f"_FORWARD_OUT_SLOTS = {literal(tuple(plan.forward.slots.out_slots))}\n")


def _interface(prog: Program, step_plan: Plan) -> str:
    """``INPUTS``, ``OUTPUTS``, default inputs, input dtypes and shapes, the step's slots."""
    g = prog.graph
    defaults = {c: prog.var(c) for c in g.inputs if prog.var(c) in prog.arrays}
    comma = "," if len(g.inputs) == 1 else ""
    dts = ", ".join(f"np.dtype({literal(g.container(c).dtype)})" for c in g.inputs)
    shapes = tuple(tuple(g.container(c).concrete_shape(g.bindings)) for c in g.inputs)
    return (f"INPUTS = {literal(tuple(g.inputs))}\nOUTPUTS = {literal(tuple(g.outputs))}\n"
            f"_DEFAULTS = {literal(defaults)}\n_INPUT_DTYPES = ({dts}{comma})\n_INPUT_SHAPES = {literal(shapes)}\n"
            f"_SLOTS = {literal(tuple(step_plan.slots))}  # planned buffers: {step_plan.nbytes} bytes\n"
            f"_OUT_SLOTS = {literal(tuple(step_plan.out_slots))}\n")


_HEAD = re.compile(r"    # (\S+) \(.*\)$|    def _p\d+\(\):  # (\S+)$")


def line_map(text: str) -> dict[int, str]:
    """Generated line number → the node id in the statement comment above it (for tracebacks).
    Statement comments are ``    # <node id> (<label>)``; node ids hold no spaces (``ir.ids``)."""
    out: dict[int, str] = {}
    current = ""
    for k, line in enumerate(text.splitlines(), start=1):
        head = _HEAD.match(line)
        if head:
            current = head.group(1) or head.group(2)
        elif current and line.startswith("    "):
            out[k] = current
    return out


__all__ = ["line_map", "memory_comment", "module_text", "updates", "comment"]
