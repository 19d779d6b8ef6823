"""ONNX import: forward models, ORT training artifacts and standard-op joint graphs.

``import_model(path, bindings=..., optimizer=...)`` returns an ``ir.Graph``:

1. read the file safely (``ir.onnx_load``) and bind symbolic dimensions;
2. make ORT artifacts functional (``ir.ort_training``), finding
   ``optimizer_model.onnx`` beside ``training_model.onnx`` when not given;
3. fold ``Constant`` nodes into initializers, check every input is defined,
   order the nodes topologically (a cycle is an error naming a node on it);
4. infer types and shapes (``ir.shape_infer``);
5. build containers with roles and one ``OpNode`` per ONNX node, with ids
   derived from ONNX names.
Every failure is a ``StudioError`` naming the file and node.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import numpy as np
from onnx import ModelProto, helper, numpy_helper

from ir import dtypes
from ir.claimed_ops import CLAIMED_OPS, is_claimed
from ir.constant_values import constant_attr
from ir.containers import Container, Role
from ir.errors import ModelImportError, ShapeError, UnsupportedOpError
from ir.graph import Graph
from ir.memlet import Memlet
from ir.movement import freeze_bound
from ir.nodes import OpNode
from ir.onnx_attrs import UnsupportedAttribute, attrs_from_onnx
from ir.onnx_load import Digest, opset_map, read_model
from ir.ort_training import functionalize, has_accumulators
from ir.recurrent import expand_recurrent, has_recurrent
from ir.shape_fold import infer_folding
from ir.shape_infer import infer_types

FORWARD_KEY = "dcstudio.forward"   # metadata of a generated training step: its forward part (transforms.autodiff.deploy)
OPTIONS_KEY = "dcstudio.training_options"    # ... and the options it was generated with (TrainingOptions JSON)


class _ProtoNode:
    """Node-like view of an ONNX NodeProto for error messages before ids exist."""

    kind = None

    def __init__(self, node, index: int) -> None:
        self.name = node.name or f"#{index}"
        self.id = self.name
        self.op_type = node.op_type


def import_model(path: str | os.PathLike, *, bindings: Mapping[str, int] | None = None,
                 optimizer: str | os.PathLike | None = None) -> Graph:
    """Import an ONNX file into a Graph (see module docstring)."""
    path = Path(path)
    digest = Digest()
    model = read_model(path, digest=digest)
    opt_model = None
    if has_accumulators(model):
        opt_path = Path(optimizer) if optimizer else path.with_name("optimizer_model.onnx")
        if optimizer or opt_path.exists():
            opt_model = read_model(opt_path)
    graph = import_proto(model, path=str(path), bindings=bindings, optimizer_model=opt_model, copy=False)
    graph.meta["source"] = str(path)
    graph.meta["sha256"] = digest.hexdigest()
    return graph


def import_proto(model: ModelProto, *, path: str | None = None, bindings: Mapping[str, int] | None = None,
                 optimizer_model: ModelProto | None = None, name: str | None = None, copy: bool = True) -> Graph:
    """Import an in-memory ModelProto (the file-level checks are the caller's). The import edits
    its proto: ``copy`` False lets it edit ``model`` itself (a model it read and owns: copying a
    12-layer step holds the GIL for 0.2 s, freezing the studio that loads it)."""
    if copy:
        work = ModelProto()
        work.CopyFrom(model)
    else:
        work = model
    kind = "forward"
    if has_accumulators(work):
        functionalize(work, optimizer_model, path)
        kind = "ort-artifacts"
    _bind_dims(work, dict(bindings or {}))
    _fold_constant_nodes(work, path)
    opsets = opset_map(work)
    _check_support(work, path)
    _check_defined(work, path)
    _topo_sort(work, path)
    types, folded = infer_folding(work, opsets, lambda m: infer_types(m, opsets, path))
    if has_recurrent(work.graph):
        expand_recurrent(work.graph, lambda n: _onnx_type(types.get(n)), path, opset=opsets.get("", 17))
        _fold_constant_nodes(work, path)
        types, folded = infer_folding(work, opsets, lambda m: infer_types(m, opsets, path))
    g = Graph(name or work.graph.name or (Path(path).stem if path else "graph"))
    g.opsets = opsets
    g.bindings = {k: int(v) for k, v in (bindings or {}).items()}
    g.meta.update({p.key: p.value for p in work.metadata_props if p.key in (FORWARD_KEY, OPTIONS_KEY)})
    _add_containers(g, work, types, path, kind)
    trained = {Role.GRADIENT, Role.OPTIMIZER_STATE, Role.PARAMETER}
    if kind == "forward" and any(g.containers[o].role in trained for o in g.outputs):
        kind = "joint"
    g.meta["kind"] = kind
    if folded.get("folded"):
        g.meta["shape_values_folded"] = str(folded["folded"])
    if folded.get("probed"):
        g.meta["shapes_from_onnxruntime"] = str(folded["probed"])
    _add_nodes(g, work, opsets, path)
    freeze_bound(g)
    return g


def _onnx_type(t) -> tuple[int, tuple] | None:
    return None if t is None else (helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(t[0])), t[1])


def _bind_dims(model: ModelProto, bindings: dict[str, int]) -> None:
    if not bindings:
        return
    vis = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    for vi in vis:
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in bindings:
                    d.dim_value = int(bindings[d.dim_param])


def _fold_constant_nodes(model: ModelProto, path: str | None) -> None:
    g = model.graph
    keep = []
    for k, node in enumerate(g.node):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            keep.append(node)
            continue
        try:
            value = constant_attr(node)
        except (UnsupportedAttribute, ValueError) as e:
            raise ModelImportError(f"Constant node cannot be read: {e}", _ProtoNode(node, k), path=path,
                                   hint="Re-export the model") from None
        t = numpy_helper.from_array(value, node.output[0])
        g.initializer.append(t)
    del g.node[:]
    g.node.extend(keep)


def _check_support(model: ModelProto, path: str | None) -> None:
    for k, node in enumerate(model.graph.node):
        if not is_claimed(node.domain, node.op_type):
            dom = "" if node.domain in ("", "ai.onnx") else node.domain
            raise UnsupportedOpError(node.op_type, _ProtoNode(node, k), None, domain=dom,
                                     supported=CLAIMED_OPS.get(dom, ()), path=path)


def _check_defined(model: ModelProto, path: str | None) -> None:
    g = model.graph
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    produced = {o for n in g.node for o in n.output if o}
    for k, node in enumerate(g.node):
        for name in node.input:
            if name and name not in defined and name not in produced:
                raise ModelImportError(
                    f"input '{name}' is not a graph input, not an initializer and not produced by any node",
                    _ProtoNode(node, k), hint="The model is missing an initializer; re-export it with its "
                    "weights (or add the tensor as a graph input)", path=path)
    for out in g.output:
        if out.name not in produced and out.name not in defined:
            raise ModelImportError(f"graph output '{out.name}' is never produced", None, path=path,
                                   hint="Re-export the model")


def _topo_sort(model: ModelProto, path: str | None) -> None:
    g = model.graph
    nodes = list(g.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    state = [0] * len(nodes)          # 0 new, 1 on stack, 2 done
    order: list[int] = []
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack = [(start, iter([producer[i] for i in nodes[start].input if i in producer]))]
        state[start] = 1
        while stack:
            k, deps = stack[-1]
            nxt = next(deps, None)
            if nxt is None:
                stack.pop()
                state[k] = 2
                order.append(k)
            elif state[nxt] == 1:
                raise ModelImportError("the graph has a cycle through this node", _ProtoNode(nodes[nxt], nxt),
                                       hint="A value depends on itself; fix the model so it is acyclic",
                                       path=path)
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter([producer[i] for i in nodes[nxt].input if i in producer])))
    if order != list(range(len(nodes))):
        del g.node[:]
        g.node.extend(nodes[k] for k in order)


def _roles(model: ModelProto, kind: str) -> dict[str, Role]:
    g = model.graph
    outs = [o.name for o in g.output]
    out_set = set(outs)
    inits = {t.name for t in g.initializer}
    roles: dict[str, Role] = {}
    listed = forward_metadata(model).get("statistics")
    statistics = {s for s in listed if isinstance(s, str)} if isinstance(listed, list) else set()
    updated = {i.name for i in g.input if i.name not in statistics
               and (f"{i.name}_grad" in out_set or f"{i.name}.new" in out_set)}
    params = {n for n in updated if n.rsplit(".", 1)[0] not in updated or "." not in n}
    for vi in g.input:
        n = vi.name
        base = n.rsplit(".", 1)[0]
        if n in statistics:
            roles[n] = Role.STATISTIC
        elif n in params:
            roles[n] = Role.PARAMETER
        elif base in params and n != base:
            roles[n] = Role.OPTIMIZER_STATE
        elif n not in inits:
            roles[n] = Role.INPUT
    training = kind != "forward" or bool(params)
    for t in g.initializer:
        if t.name in roles:
            continue
        is_weight = (not training and t.data_type in (1, 10, 11, 16) and len(t.dims) >= 1)
        roles[t.name] = Role.PARAMETER if is_weight else Role.CONSTANT
    for n in outs:
        if n.endswith(".new") and n[:-4] in statistics:
            roles[n] = Role.STATISTIC
        elif n.endswith("_grad"):
            roles[n] = Role.GRADIENT
        elif n.endswith(".new") and n[:-4] in params:
            roles[n] = Role.PARAMETER
        elif n.endswith(".new") and roles.get(n[:-4]) is Role.OPTIMIZER_STATE:
            roles[n] = Role.OPTIMIZER_STATE
        elif n not in roles:
            roles[n] = Role.OUTPUT
    return roles


def forward_metadata(model: ModelProto) -> dict:
    """The ``dcstudio.forward`` record of a generated training step (its prediction, BatchNorm
    statistics, dropout masks), or {} for any other model. Parsed as JSON data, never evaluated."""
    for prop in model.metadata_props:
        if prop.key == FORWARD_KEY:
            try:
                data = json.loads(prop.value)
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def _add_containers(g: Graph, model: ModelProto, types: dict, path: str | None, kind: str) -> None:
    roles = _roles(model, kind)
    gp = model.graph
    for t in gp.initializer:
        g.values[t.name] = numpy_helper.to_array(t)
    names: list[str] = [vi.name for vi in gp.input] + [t.name for t in gp.initializer]
    for node in gp.node:
        names.extend(o for o in node.output if o)
    seen: set[str] = set()
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        if n in g.values:
            arr = g.values[n]
            g.add_container(Container(n, tuple(arr.shape), dtypes.from_numpy(arr.dtype),
                                      roles.get(n, Role.CONSTANT)))
            continue
        t = types.get(n)
        if t is None:
            raise ShapeError(f"cannot infer the type and shape of value '{n}'", _producer_ref(gp, n),
                             hint="Add value_info for it or re-export the model with shapes", path=path)
        g.add_container(Container(n, t[1], t[0], roles.get(n, Role.TRANSIENT)))
    g.inputs = [vi.name for vi in gp.input]
    g.outputs = [o.name for o in gp.output]


def _producer_ref(gp, name: str):
    for k, node in enumerate(gp.node):
        if name in node.output:
            return _ProtoNode(node, k)
    return None


def _add_nodes(g: Graph, model: ModelProto, opsets: dict[str, int], path: str | None) -> None:
    for k, node in enumerate(model.graph.node):
        dom = "" if node.domain in ("", "ai.onnx") else node.domain
        first_out = next((o for o in node.output if o), f"#{k}")
        ident = g.ids.claim(node.name or f"{node.op_type}:{first_out}")
        try:
            attrs = attrs_from_onnx(node)
        except UnsupportedAttribute as e:
            raise UnsupportedOpError(node.op_type, _ProtoNode(node, k), None, domain=dom, path=path) from e
        ins = [Memlet(i) if i else None for i in node.input]
        outs = [Memlet(o) if o else None for o in node.output]
        g.ids.release(ident)
        g.add_node(OpNode(ident, node.op_type, ins, outs, domain=dom, attrs=attrs,
                          opset=opsets.get(dom, 1), name=node.name or ident))
