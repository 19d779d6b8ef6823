"""Contractions as program statements: BLAS calls, GEMMs with epilogues, grouped GEMMs.

- MatMul / Gemm / com.microsoft FusedMatMul / two-operand Einsum: one BLAS call writing
  straight into the output's (planned) buffer, ``L.matmul(a, b, out=y)`` …;
- a fused contraction (``ai.dcstudio`` MatMul/Gemm/FusedMatMul with an ``epilogue``,
  made by ``gemm_epilogue_fusion``): the bare contraction into an accumulator buffer
  (a statement-internal temp ``<id>/@acc``, planned like any intermediate), then the
  epilogue map (``ir.fused_ops.epilogue_map``) as a kernel of the backend reading it; on a
  backend with ``panels`` (the CPU) a product larger than a panel is computed and consumed one
  panel at a time (``panels``), so it stays in cache;
- a grouped GEMM (``horizontal_fusion``): each member in order, as above, in one statement.
``statement`` returns None for any other op.
"""
from __future__ import annotations

from codegen.numpy_ref.registry import canonical_domain
from codegen.program import panels
from codegen.program.namespace import literal, sanitize
from codegen.program.statement import Alloc, Statement
from ir import fused_ops
from ir.containers import Container
from ir.nodes import OpNode
from ir.statements import StatementKind


GEMM_KEYWORDS = (("alpha", "alpha", 1.0), ("beta", "beta", 1.0), ("transA", "trans_a", 0), ("transB", "trans_b", 0))
FUSED_MATMUL_KEYWORDS = (("alpha", "alpha", 1.0), ("transA", "trans_a", 0), ("transB", "trans_b", 0),
                         ("transBatchA", "trans_batch_a", 0), ("transBatchB", "trans_batch_b", 0))
"""(ONNX attribute, the library's keyword, its default) of the library's contraction calls."""


def _keywords(attrs: dict, table) -> str:
    """``name=value, `` for each attribute that differs from the library's default (``trans_b=1, ``)."""
    out = ""
    for attr, name, default in table:
        value = type(default)(attrs.get(attr, default))
        if value != default:
            out += f"{name}={literal(value)}, "
    return out


def blas_call(node: OpNode, ins: list[str], out: str) -> str | None:
    """The BLAS call of a plain contraction writing into ``out``, or None."""
    dom, op, a = canonical_domain(node.domain), node.op_type, node.attrs
    if dom == "" and op == "MatMul":
        return f"L.matmul({ins[0]}, {ins[1]}, out={out})"
    if dom == "" and op == "Gemm":
        c = ins[2] if len(ins) > 2 else "None"
        return f"L.gemm({ins[0]}, {ins[1]}, {c}, {_keywords(a, GEMM_KEYWORDS)}out={out})"
    if dom == "com.microsoft" and op == "FusedMatMul":
        return f"L.fused_matmul({ins[0]}, {ins[1]}, {_keywords(a, FUSED_MATMUL_KEYWORDS)}out={out})"
    if dom == "" and op == "Einsum" and len(ins) == 2 and "..." not in str(a.get("equation", "")):
        return f"L.einsum({literal(str(a['equation']))}, {ins[0]}, {ins[1]}, out={out})"
    return None


def statement(prog, node: OpNode, head: str) -> Statement | None:
    if fused_ops.is_group(node):
        parts = [_one(prog, m) for m in fused_ops.members(node)]
        if any(p is None for p in parts):
            return None
        allocs = tuple(a for p in parts for a in p[0])
        lines = [line for p in parts for line in p[1]]
        tasks = tuple(tuple(p[1]) for p in parts)
        calls = tuple(c for p in parts for c in p[4])
        kernels = [p[2] for p in parts if p[2]]
        temps = tuple(t for p in parts for t in p[3])
    else:
        one = _one(prog, node)
        if one is None:
            return None
        allocs, lines, kernel, temps, calls = one
        kernels = [kernel] if kernel else []
        tasks = ()
    reads = tuple(dict.fromkeys(m.container for m in node.inputs if m is not None))
    writes = tuple(m.container for m in node.outputs if m is not None) + temps
    kind = StatementKind.KERNEL if kernels else StatementKind.BLAS
    return Statement(node.id, node.qualified_type, kind, head, lines, reads, writes, allocs,
                     kernels[0] if kernels else None, tasks, calls)


def _one(prog, node: OpNode):
    """(allocs, lines, kernel name or None, temps, calls) of one contraction, or None if it is none."""
    ins = [prog.operand(m.container) if m is not None else "None" for m in node.inputs]
    if not fused_ops.has_epilogue(node):
        outs = [m.container for m in node.outputs if m is not None]
        call = blas_call(node, ins, prog.var(outs[0])) if len(outs) == 1 else None
        if call is None:
            return None
        prog.np_type(outs[0])
        return (Alloc(outs[0]),), [call], None, (), ((call.split("(", 1)[0], _operands(node) + (outs[0],)),)
    base = fused_ops.contraction(node)
    acc = fused_ops.accumulator(prog.graph, node)
    temp = f"{node.id}/@acc"
    prog.temps[temp] = Container(temp, acc.shape, acc.dtype)
    first = next((m.container for m in node.outputs if m is not None), node.id)
    prog.ns.name(("c", temp), f"{sanitize(first)}_acc")    # named after what its epilogue makes
    call = blas_call(base, ins[:fused_ops.slots(node)], prog.var(temp))
    if call is None:
        return None
    epi = fused_ops.rename_containers(fused_ops.epilogue_map(prog.graph, node), {fused_ops.ACC: temp})
    view = fused_ops.overlay(prog.graph, prog.temps[temp])
    ks = prog.make_kernel(epi, view)
    allocs = (Alloc(temp),) + tuple(Alloc(c, ks.init[c].kind, ks.init[c].wcr) for c in ks.outputs)
    for c in ks.outputs:
        prog.np_type(c)
    looped = panels.lines(prog, node, base, call, epi, ks, temp) if prog.panels else None
    if looped is not None:
        text, pk, calls = looped
        prog.kernels.setdefault(pk.name, pk)
        return allocs, text, pk.name, (temp,), calls
    prog.kernels.setdefault(ks.name, ks)
    args = [prog.kernel_arg(c) for c in ks.arrays] + [str(n) for n in ks.extents]
    operands = tuple(m.container for m in node.inputs[:fused_ops.slots(node)] if m is not None)
    calls = ((call.split("(", 1)[0], operands + (temp,)), (f"K.{ks.name}", ks.arrays))
    if prog.panels and prog.nbytes(temp) <= panels.PANEL_BYTES:      # one panel: the product stays in cache
        calls = ((calls[0][0], operands), (calls[1][0], tuple(c for c in ks.arrays if c != temp)))
    return allocs, [call, f"K.{ks.name}({', '.join(args)})"], ks.name, (temp,), calls


def _operands(node: OpNode) -> tuple[str, ...]:
    """The containers a BLAS call of ``node`` reads (absent optional inputs left out)."""
    return tuple(m.container for m in node.inputs if m is not None)
