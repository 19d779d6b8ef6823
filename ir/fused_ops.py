"""Fused library nodes that transformations create (never imported from ONNX).

Two op kinds of the ``ai.dcstudio`` domain:

- **Contraction with an epilogue** — ``ai.dcstudio::MatMul``, ``ai.dcstudio::Gemm`` and
  ``ai.dcstudio::FusedMatMul``: the contraction of the same-named default-domain
  (``com.microsoft`` for FusedMatMul) op, with the same attributes and its inputs first,
  followed by a pointwise map, the *epilogue*, that reads the raw product ``@acc`` where
  it is produced and writes the op's outputs. ``@acc`` never reaches global memory, so
  the op reads A, B and the epilogue's extra operands once and writes only its outputs.
  Extra attributes: ``gemm_domain`` (the contraction's own domain), ``gemm_inputs`` (how
  many leading inputs are the contraction's: 2, or 3 for Gemm, whose C may be omitted),
  ``acc_shape``/``acc_dtype`` (the raw product) and ``epilogue`` (the map as JSON, with
  canonical container names: ``@acc``, ``@in<k>`` = input k, ``@out<k>`` = output k).
  Keeping ``op_type`` lets ``library_flops`` and ``select_impl`` treat the op as the
  contraction it is.
- **Grouped contraction** — ``ai.dcstudio::GroupedGemm``: several contractions (plain or
  with epilogues) launched as one kernel, so operands they share are read once. Attribute
  ``members``: one record per contraction ``{op_type, domain, attrs, impl, inputs,
  outputs}`` whose ``inputs``/``outputs`` index the group's (``-1``: omitted input).

``epilogue_map`` and ``epilogue_op`` convert between the stored form and a map over the
graph's own container names (reading ``@acc``), which the fusions edit; ``overlay``
gives a view of the graph in which ``@acc`` is a container, for ``ir.maps.finalize``.
"""
from __future__ import annotations

import copy
from typing import Any

from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.maps import finalize, params_for, trip_count
from ir.memlet import Memlet
from ir.nodes import MapNode, OpNode, Tasklet
from ir.serialize import _node_from_json, _node_to_json

STUDIO = "ai.dcstudio"
ACC = "@acc"
GROUP = "GroupedGemm"
CONTRACTIONS = {("", "MatMul"): 2, ("", "Gemm"): 3, ("com.microsoft", "FusedMatMul"): 2, ("", "Einsum"): 2}
EPILOGUE_KEYS = ("gemm_domain", "gemm_inputs", "acc_shape", "acc_dtype", "epilogue")


def base_domain(node: OpNode) -> str:
    """The contraction's own domain ('' or 'com.microsoft')."""
    return node.attrs.get("gemm_domain", "") if node.domain == STUDIO else node.domain


def is_contraction(node: Any) -> bool:
    """A MatMul/Gemm/FusedMatMul/two-operand Einsum library node, plain or with an epilogue."""
    return isinstance(node, OpNode) and (base_domain(node), node.op_type) in CONTRACTIONS \
        and (node.domain != STUDIO or "epilogue" in node.attrs) \
        and (node.op_type != "Einsum" or _two_operand_einsum(str(node.attrs.get("equation", ""))))


def _two_operand_einsum(equation: str) -> bool:
    """``ab,bc->ac``-style: two operands, an explicit output, no ellipsis (one BLAS call)."""
    lhs, arrow, _ = equation.replace(" ", "").partition("->")
    return bool(arrow) and lhs.count(",") == 1 and "..." not in equation


def is_group(node: Any) -> bool:
    return isinstance(node, OpNode) and node.domain == STUDIO and node.op_type == GROUP


def has_epilogue(node: Any) -> bool:
    return isinstance(node, OpNode) and node.domain == STUDIO and "epilogue" in node.attrs


def slots(node: OpNode) -> int:
    """Number of leading inputs that belong to the contraction."""
    return CONTRACTIONS[(base_domain(node), node.op_type)]


def contraction(node: OpNode) -> OpNode:
    """The bare contraction of ``node``, writing ``@acc`` (not part of any graph)."""
    attrs = {k: v for k, v in node.attrs.items() if k not in EPILOGUE_KEYS}
    ins = list(node.inputs[:slots(node)])
    return OpNode(node.id, node.op_type, ins, [Memlet(ACC)], domain=base_domain(node), attrs=attrs,
                  impl=node.impl, opset=node.opset, name=node.name)


def accumulator(graph: Graph, node: OpNode) -> Container:
    """The raw product of contraction ``node`` as a container named ``@acc``."""
    if has_epilogue(node):
        return Container(ACC, tuple(node.attrs["acc_shape"]), node.attrs["acc_dtype"])
    out = graph.container(node.outputs[0].container)
    return Container(ACC, out.concrete_shape(graph.bindings), out.dtype)


def overlay(graph: Graph, *extra: Container) -> Graph:
    """A view of ``graph`` with ``extra`` containers added (nodes and use-def are shared)."""
    view = copy.copy(graph)
    view.containers = {**graph.containers, **{c.name: c for c in extra}}
    return view


def rename_containers(m: MapNode, names: dict[str, str]) -> MapNode:
    """A deep copy of map ``m`` with containers renamed (memlets of every statement)."""
    new = _node_from_json(_node_to_json(m))
    _rename_in(new, names)
    return new


def _rename_in(m: MapNode, names: dict[str, str]) -> None:
    ren = lambda mem: mem.with_container(names.get(mem.container, mem.container))  # noqa: E731
    m.inputs, m.outputs = [ren(x) for x in m.inputs], [ren(x) for x in m.outputs]
    for stmt in m.body:
        if isinstance(stmt, MapNode):
            _rename_in(stmt, names)
        else:
            stmt.inputs = {k: ren(x) for k, x in stmt.inputs.items()}
            stmt.output = ren(stmt.output)


def epilogue_map(graph: Graph, node: OpNode) -> MapNode:
    """The epilogue of ``node`` over the graph's container names (reads ``@acc``).

    A plain contraction has the identity epilogue ``y[i…] = @acc[i…]``."""
    if not has_epilogue(node):
        acc = accumulator(graph, node)
        params = params_for(acc.shape)
        index = tuple(E.Var(p) for p, _ in params)
        out = node.outputs[0].container
        body = [Tasklet(f"{node.id}/acc", E.Var("v"), {"v": Memlet(ACC, index)}, Memlet(out, index))]
        m = MapNode(node.id, params, body, label=node.op_type)
        return finalize(m, overlay(graph, acc))
    names = {f"@in{k}": m.container for k, m in enumerate(node.inputs) if m is not None}
    names.update({f"@out{k}": m.container for k, m in enumerate(node.outputs) if m is not None})
    m = rename_containers(_node_from_json(node.attrs["epilogue"]), names)
    m.id = node.id
    return m


def epilogue_op(graph: Graph, new_id: str, gemm: OpNode, epi: MapNode, acc: Container) -> OpNode:
    """The library node computing ``gemm``'s contraction followed by map ``epi``.

    ``epi`` uses the graph's container names and reads the product as ``@acc``; ``graph``
    is used for nothing but naming checks. Inputs: the contraction's, then the other
    containers ``epi`` reads (in order); outputs: what ``epi`` writes."""
    base = contraction(gemm)
    ins: list[Memlet | None] = list(base.inputs) + [None] * (slots(gemm) - len(base.inputs))
    names: dict[str, str] = {}
    for mem in epi.inputs:
        if mem.container == ACC:
            continue
        present = [k for k, m in enumerate(ins) if m is not None and m.container == mem.container]
        if not present:
            ins.append(Memlet(mem.container))
            present = [len(ins) - 1]
        names[mem.container] = f"@in{present[0]}"
    outs = [Memlet(m.container) for m in epi.outputs]
    names.update({m.container: f"@out{k}" for k, m in enumerate(outs)})
    canon = rename_containers(epi, names)
    canon.id = new_id
    attrs = dict(base.attrs, gemm_domain=base.domain, gemm_inputs=slots(gemm),
                 acc_shape=[int(d) for d in acc.shape], acc_dtype=acc.dtype, epilogue=_node_to_json(canon))
    return OpNode(new_id, gemm.op_type, ins, outs, domain=STUDIO, attrs=attrs, impl=gemm.impl,
                  opset=gemm.opset, name=new_id)


def members(node: OpNode) -> list[OpNode]:
    """The contractions of a grouped node, with the group's container names."""
    out = []
    for k, rec in enumerate(node.attrs["members"]):
        ins = [node.inputs[i] if i >= 0 else None for i in rec["inputs"]]
        outs = [node.outputs[i] for i in rec["outputs"]]
        out.append(OpNode(f"{node.id}#{k}", rec["op_type"], ins, outs, domain=rec["domain"],
                          attrs=rec["attrs"], impl=rec["impl"], name=f"{node.id}#{k}"))
    return out


def group_op(new_id: str, parts: list[OpNode]) -> OpNode:
    """One grouped node running ``parts`` (contractions or groups, flattened) in order."""
    flat = [m for p in parts for m in (members(p) if is_group(p) else [p])]
    ins: list[Memlet] = []
    outs: list[Memlet] = []
    recs = []
    for m in flat:
        idx = []
        for mem in m.inputs:
            if mem is None:
                idx.append(-1)
                continue
            names = [x.container for x in ins]
            if mem.container not in names:
                ins.append(Memlet(mem.container))
                names.append(mem.container)
            idx.append(names.index(mem.container))
        first = len(outs)
        outs.extend(Memlet(x.container) for x in m.outputs)
        recs.append({"op_type": m.op_type, "domain": m.domain, "attrs": dict(m.attrs), "impl": m.impl,
                     "inputs": idx, "outputs": list(range(first, len(outs)))})
    return OpNode(new_id, GROUP, ins, outs, domain=STUDIO, attrs={"members": recs}, name=new_id)


def epilogue_flops(node: OpNode) -> int:
    """FLOPs of the epilogue (tasklet operations × iterations), 0 for a plain contraction."""
    if not has_epilogue(node):
        return 0
    m = _node_from_json(node.attrs["epilogue"])
    total = 0
    for stmt, scopes in m.walk():
        if isinstance(stmt, Tasklet):
            params = [p for s in scopes for p in s.params]
            total += (E.count_flops(stmt.expr) + (1 if stmt.output.wcr else 0)) * trip_count(params, {})
    return total


__all__ = ["ACC", "CONTRACTIONS", "GROUP", "STUDIO", "accumulator", "contraction", "epilogue_flops",
           "epilogue_map", "epilogue_op", "group_op", "has_epilogue", "is_contraction",
           "is_group", "members", "overlay", "rename_containers", "slots"]
