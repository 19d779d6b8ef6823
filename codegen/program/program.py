"""A graph as a list of Python statements, one per kernel: the program every backend runs.

``build_program(graph, render)`` lowers the graph (``codegen.program.prepare``) and turns every
kernel, in topological order, into a ``Statement``:

- a map → its output buffers (``L.alloc``/``L.view``: empty, zeros or full of the wcr's
  identity) and one call of the kernel the backend renders, ``K.k_<what>_<sha>(arrays…, extents…)``
  (``render``: the numba loop nest, or CUDA C); an elementwise map over short rows is
  rendered over one flat parameter on 1-d views of its arrays (``flatten``);
- MatMul / Gemm / FusedMatMul / Einsum → one BLAS call into the output buffer; a fused
  contraction (``ai.dcstudio``: GEMM + epilogue map) → BLAS into an accumulator buffer, then
  its epilogue as a loop-nest kernel; a grouped GEMM → its members in order (``contractions``);
- Identity, Reshape, Squeeze, Unsqueeze, Flatten, Expand → views (no copy);
- Shape, Size → constants (shapes are static);
- Conv / ConvTranspose / ai.dcstudio ConvWeightGrad / MaxPool → ``L.conv`` / ``L.conv_transpose``
  / ``L.conv_weight_grad`` / ``L.max_pool`` into the outputs' buffers (the
  backend's library picks its implementation, and is handed the reference kernel as a fallback); a
  Conv no choice depends on gets ``exact=False`` (``decisions``: it may sum in float32);
- any other op → its NumPy reference kernel through ``L.reference`` (pooling, losses,
  gathers, and ops other engineers add later: nothing breaks);
- a map the loop-nest printer refuses, or an op without a reference kernel, →
  ``EXTERN[k]`` (in-process only: the reference executor runs it; an export refuses
  the graph and says which node and why).

Names come from one ``Namespace``; arrays (initializers, folded constants, tensor
attributes) go to ``arrays`` (the ``.npz``), never into the source. ``codegen.program.module``
assembles the statements into a module.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codegen.numpy_ref import kernels as _ref_kernels  # noqa: F401  (fills the reference table)
from codegen.numpy_ref.registry import OpContext, canonical_domain, lookup
from codegen.program import contractions, decisions, flatten
from codegen.program.statement import Alloc, Statement  # noqa: F401 (part of this module's API)
from codegen.program.backend import Render
from codegen.program.kernel import KernelSource, UnsupportedMap
from codegen.program.namespace import Namespace, comment, literal
from codegen.program.prepare import lower_for_codegen
from ir import dtypes
from ir.containers import Container
from ir.errors import StudioError
from ir.fused_ops import overlay
from ir.graph import Graph
from ir.memory import VIEW_OPS
from ir.nodes import MapNode, OpNode
from ir.statements import StatementKind

METADATA_OPS = frozenset({"Shape", "Size"})
LIBRARY_CALLS = {("", "Conv"): "L.conv", ("", "ConvTranspose"): "L.conv_transpose",
                 ("ai.dcstudio", "ConvWeightGrad"): "L.conv_weight_grad", ("", "MaxPool"): "L.max_pool"}
# _step's and the profiler's _step_timed's parameters, module constants, the panel loops' variable
RESERVED = ("W", "B", "R", "K", "L", "np", "os", "math", "EXTERN", "OpContext", "Model", "INPUTS", "OUTPUTS",
            "FORWARD_OUTPUTS", "UPDATES", "WORKERS", "SCHEDULE", "ARENA_BYTES", "SLOT_OF", "SHARED_BUFFERS",
            "T", "S", "P", "SKIP", "ERR", "lo", "saved", "_step_forward")


@dataclass
class Program:
    graph: Graph
    ns: Namespace
    statements: list[Statement] = field(default_factory=list)
    kernels: dict[str, KernelSource] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    extern: dict[int, tuple[object, str]] = field(default_factory=dict)   # k -> (node, reason)
    make_kernel: Render | None = None
    temps: dict[str, Container] = field(default_factory=dict)   # statement-internal buffers (GEMM accumulators)
    kernels_may_alias: bool = False   # kernels stay correct when an output aliases an input (numba)
    panels: bool = False              # fused contractions run panel by panel (``panels``; the CPU backend)
    decided: set[str] | None = None   # containers a choice depends on (``decisions.reaching``), once needed

    def var(self, container: str) -> str:
        return self.ns.name(("c", container), container)

    def container(self, name: str) -> Container:
        return self.temps[name] if name in self.temps else self.graph.container(name)

    def is_bits(self, container: str) -> bool:
        """A bfloat16 intermediate, which the program stores as uint16 bits (``halfbits``).
        Graph inputs, outputs and initializers keep their dtype (callers pass NumPy arrays)."""
        g = self.graph
        return self.container(container).dtype == "bfloat16" and not (
            container in g.inputs or container in g.outputs or container in g.values)

    def np_type(self, container: str) -> str:
        dt = self.container(container).dtype
        if self.is_bits(container):
            return "np.uint16"
        if dt not in dtypes.NUMPY_NAMES:
            raise UnsupportedMap(f"'{container}' has dtype {dt}, which NumPy cannot hold without ml_dtypes")
        return dtypes.NUMPY_NAMES[dt]

    def kernel_arg(self, container: str) -> str:
        """``container`` as a kernel argument: float16 arrays are passed as their uint16 bits."""
        var = self.var(container)
        return f"{var}.view(np.uint16)" if self.container(container).dtype == "float16" else var

    def operand(self, container: str) -> str:
        """``container`` as a BLAS operand: bfloat16 bits widened to float32 first."""
        var = self.var(container)
        return f"L.widen_bf16({var})" if self.is_bits(container) else var

    def shape(self, container: str) -> tuple[int, ...]:
        return self.container(container).concrete_shape(self.graph.bindings)

    def nbytes(self, container: str) -> int:
        return self.container(container).nbytes(self.graph.bindings)


def build_program(graph: Graph, render: Render, *, lowered: bool = False, kernels_may_alias: bool = False,
                  panels: bool = False) -> Program:
    """The program of ``graph`` (lowered first unless ``lowered``); ``render`` turns a map into a
    kernel (a backend's ``Backend.renderer(parallel)``). ``kernels_may_alias``: the kernels stay
    right when an output is the buffer of an input (in-place ``memory_reuse`` buffers); ``panels``:
    a GEMM with an epilogue runs panel by panel (``codegen.program.panels``)."""
    g = graph if lowered else lower_for_codegen(graph)
    prog = Program(g, Namespace(RESERVED), kernels_may_alias=kernels_may_alias, panels=panels)
    prog.make_kernel = render
    for name in g.inputs:
        prog.var(name)
    for name, value in g.values.items():
        prog.arrays[prog.var(name)] = np.asarray(value)
    for node in g.topo_order():
        prog.statements.append(_statement(prog, node))
    return prog


def _statement(prog: Program, node) -> Statement:
    head = f"# {comment(node.id, 70)} ({comment(_label(node), 40)})"
    try:
        if isinstance(node, MapNode):
            st = _map(prog, node, head)
        else:
            st = _op(prog, node, head)
    except (UnsupportedMap, KeyError) as e:
        reason = e.args[0] if isinstance(e, UnsupportedMap) else f"unbound dimension {e.args[0]!r}"
        st = _extern(prog, node, head, str(reason))
    if st.kind in (StatementKind.REFERENCE, StatementKind.EXTERN):
        _refuse_bfloat16(prog, node, st)
    return st


class HalfStorageError(StudioError):
    """A node generated code cannot run on bfloat16 tensors."""


def _refuse_bfloat16(prog: Program, node, st: Statement) -> None:
    """Reference kernels would see bfloat16 tensors as raw bits: refuse, naming what to undo."""
    for c in st.reads + st.writes:
        if prog.is_bits(c):
            raise HalfStorageError(
                f"'{node.id}' ({_label(node)}) touches the bfloat16 tensor '{c}', and only maps, contractions "
                f"and views run on bfloat16 in generated code; undo the mixed_precision step that stored '{c}' "
                "in bfloat16, or expand this node into a map first")


def _label(node) -> str:
    return node.label if isinstance(node, MapNode) else node.qualified_type


def _reads(node) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.container for m in node.inputs if m is not None))


def _writes(node) -> tuple[str, ...]:
    return tuple(m.container for m in node.outputs if m is not None)


def _map(prog: Program, m: MapNode, head: str) -> Statement:
    for c in _reads(m) + _writes(m):
        if prog.container(c).dtype == "bfloat16" and not prog.is_bits(c):
            raise UnsupportedMap(f"'{c}' is a bfloat16 graph input, output or initializer, which NumPy cannot "
                                 "hold without ml_dtypes: convert the model's interface to float32 (mixed_precision "
                                 "then stores intermediates in bfloat16)")
    flat = flatten.plan(m, prog.graph)
    ks = prog.make_kernel(flat.map, overlay(prog.graph, *flat.containers)) if flat else prog.make_kernel(m, prog.graph)
    prog.kernels.setdefault(ks.name, ks)
    for c in ks.outputs:
        prog.np_type(c)
    allocs = tuple(Alloc(c, ks.init[c].kind, ks.init[c].wcr) for c in ks.outputs)
    flat_names = {c.name for c in flat.containers} if flat else set()
    args = [prog.kernel_arg(c) + (".reshape(-1)" if c in flat_names else "") for c in ks.arrays] + \
        [str(n) for n in ks.extents]
    reads = tuple(c for c in ks.arrays if c not in ks.outputs)
    return Statement(m.id, m.label, StatementKind.KERNEL, head, [f"K.{ks.name}({', '.join(args)})"], reads, ks.outputs,
                     allocs, ks.name, calls=((f"K.{ks.name}", ks.arrays),))


def _op(prog: Program, node: OpNode, head: str) -> Statement:
    ins = [prog.var(m.container) if m is not None else "None" for m in node.inputs]
    outs = _writes(node)
    fused = contractions.statement(prog, node, head)
    if fused is not None:
        return fused
    lib = _library(prog, node, head, ins)
    if lib is not None:
        return lib
    kind, call = _special(prog, node, ins)
    if call is None:
        kind, call = StatementKind.REFERENCE, _reference_call(prog, node, ins)
        targets = ", ".join(prog.var(m.container) if m is not None else "_" for m in node.outputs) + ", *_"
    else:
        targets = prog.var(outs[0])
    calls = (("L.reference", _reads(node) + outs),) if kind == StatementKind.REFERENCE else ()
    return Statement(node.id, node.qualified_type, kind, head, [f"{targets} = {call}"], _reads(node), outs,
                     calls=calls)


def _special(prog: Program, node: OpNode, ins: list[str]) -> tuple[str, str | None]:
    """Views and folded constants; (kind, None) when the op is neither."""
    dom, op = canonical_domain(node.domain), node.op_type
    if dom == "" and op == "Identity":
        return StatementKind.VIEW, ins[0]
    if dom == "" and op in VIEW_OPS and node.outputs[0] is not None:
        return StatementKind.VIEW, f"{ins[0]}.reshape({literal(prog.shape(node.outputs[0].container))})"
    if dom == "" and op == "Expand":
        return StatementKind.VIEW, f"L.broadcast_to({ins[0]}, {literal(prog.shape(node.outputs[0].container))})"
    if dom == "" and op in METADATA_OPS:
        return StatementKind.CONSTANT, _fold_metadata(prog, node)
    return "", None


def _fold_metadata(prog: Program, node: OpNode) -> str:
    """Shape/Size of a statically shaped tensor: a constant array in the sidecar."""
    src = node.inputs[0].container
    dummy = np.broadcast_to(np.zeros((), dtypes.to_numpy(prog.graph.container(src).dtype)), prog.shape(src))
    value = lookup("", node.op_type)([dummy], dict(node.attrs), OpContext(opset=node.opset))[0]
    key = prog.ns.name(("const", node.id), "const_" + node.outputs[0].container)
    prog.arrays[key] = np.asarray(value)
    return f"W[{literal(key)}]"


def _attrs(prog: Program, node: OpNode) -> str:
    items = []
    for k, v in node.attrs.items():
        if isinstance(v, np.ndarray) or (isinstance(v, list) and any(isinstance(x, np.ndarray) for x in v)):
            key = prog.ns.name(("attr", node.id, k), f"attr_{node.id}_{k}")
            if isinstance(v, list):
                raise UnsupportedMap(f"attribute '{k}' is a list of tensors")
            prog.arrays[key] = np.asarray(v)
            items.append(f"{literal(k)}: W[{literal(key)}]")
        else:
            items.append(f"{literal(k)}: {literal(v)}")
    return "{" + ", ".join(items) + "}"


def _reference_call(prog: Program, node: OpNode, ins: list[str]) -> str:
    return f"L.reference({_reference_args(prog, node, ins)})"


def _reference_args(prog: Program, node: OpNode, ins: list[str]) -> str:
    """``_REF_k, (inputs…), {attrs}, _CTX_k``: a reference kernel, its inputs, attributes and context."""
    if lookup(node.domain, node.op_type) is None:
        raise UnsupportedMap(f"{node.qualified_type} has no NumPy reference kernel")
    k = len(prog.tables) // 2
    shapes, dts = [], []
    for m in node.outputs:
        c = prog.graph.containers.get(m.container) if m is not None else None
        try:
            shapes.append(c.concrete_shape(prog.graph.bindings) if c else None)
        except KeyError:
            shapes.append(None)
        dts.append(f"np.dtype({literal(dtypes.to_numpy(c.dtype).name)})" if c else "None")
    extra = {"impl": node.impl} if node.impl != "default" else {}
    prog.tables.append(f"_REF_{k} = _lookup({literal(canonical_domain(node.domain))}, {literal(node.op_type)})")
    prog.tables.append(f"_CTX_{k} = OpContext(opset={int(node.opset)}, n_outputs={len(node.outputs)}, "
                       f"output_shapes={literal(tuple(shapes))}, output_dtypes=({', '.join(dts)},), "
                       f"label={literal(node.id)}, extra={literal(extra)})")
    return f"_REF_{k}, ({', '.join(ins)},), {_attrs(prog, node)}, _CTX_{k}"


def _library(prog: Program, node: OpNode, head: str, ins: list[str]) -> Statement | None:
    """Convolutions and MaxPool: one library call into the outputs' planned buffers (the library runs
    float32 1-D/2-D ones on BLAS or loop nests, and anything else on the reference kernel it is
    given); a MaxPool's Indices, when the graph reads them, go to ``indices=``."""
    call = LIBRARY_CALLS.get((canonical_domain(node.domain), node.op_type))
    outs = _writes(node)
    if call is None or node.outputs[0] is None or (len(outs) > 1 and node.op_type != "MaxPool") or len(outs) > 2:
        return None
    for c in outs:
        prog.np_type(c)
    extra = f", indices={prog.var(outs[1])}" if len(outs) > 1 else ""
    if call == "L.conv":
        if prog.decided is None:
            prog.decided = decisions.reaching(prog.graph)
        extra += "" if outs[0] in prog.decided else ", exact=False"
    line = f"{call}({_reference_args(prog, node, ins)}, out={prog.var(outs[0])}{extra})"
    return Statement(node.id, node.qualified_type, StatementKind.BLAS, head, [line], _reads(node), outs,
                     tuple(Alloc(c) for c in outs), calls=((call, _reads(node) + outs),))


def _extern(prog: Program, node, head: str, reason: str) -> Statement:
    k = len(prog.extern)
    prog.extern[k] = (node, reason)
    ins = [prog.var(c) for c in _reads(node)]
    outs = [prog.var(c) for c in _writes(node)]
    call = f"EXTERN[{k}]({', '.join(ins)})"
    lines = [f"# runs in the reference executor: {comment(reason)}", f"{', '.join(outs)}, *_ = {call}"]
    return Statement(node.id, _label(node), StatementKind.EXTERN, head, lines, _reads(node), _writes(node),
                     calls=(("EXTERN", _reads(node) + _writes(node)),))
