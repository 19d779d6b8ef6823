"""The forward part of a generated training step, in eval mode: ``eval_forward(train)``.

A training step made by ``build_training_graph`` records its forward part in its metadata
(``ir.onnx_import.FORWARD_KEY``, JSON): ``outputs`` (the prediction the loss reads),
``statistics`` (the BatchNorm running statistics it updates) and ``dropout`` (per mask input:
ratio, dropped value ``x``, result ``y``). From that record and the step's own nodes,
``eval_forward`` cuts the model a user deploys, as PyTorch's ``eval()`` runs it:

- the nodes the prediction needs, with training-mode BatchNormalization in inference mode
  (reading the running statistics themselves, one output) and each dropout ``y = x · noise`` as ``Identity(x)``;
- ``state``: the parameters and statistics it reads (by their names in the step), and ``data``:
  the step's other inputs it reads (the model's inputs);
- ``program``: those nodes with data and state as graph inputs (the exported package compiles it
  for ``Model.forward``, fed the trained state);
- ``deploy``: the same with only the data as inputs and without the state's initializers: the
  exported package appends them with the trained values (``Model.export_onnx``).
Ties (a transposed ``lm_head``) stay the nodes the step computes them with, so the deployed
model keeps them. Graphs without the record (onnxruntime-training artifacts, joint graphs,
steps generated before it existed) have no eval forward: ``None``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from onnx import ModelProto, NodeProto, ValueInfoProto, helper, shape_inference

from ir.onnx_import import FORWARD_KEY, forward_metadata


@dataclass(frozen=True)
class EvalForward:
    program: ModelProto
    deploy: ModelProto
    data: tuple[str, ...]
    state: tuple[str, ...]
    outputs: tuple[str, ...]


def forward_record(outputs: list[str], statistics: list[str], dropout: dict[str, dict],
                   aliases: dict[str, str]) -> dict[str, str]:
    """The metadata entry of a training step (``helper.set_model_props`` form)."""
    return {FORWARD_KEY: json.dumps({"outputs": outputs, "statistics": statistics, "dropout": dropout,
                                     "aliases": aliases}, sort_keys=True)}


def _needed(nodes: list[NodeProto], outputs: set[str]) -> list[NodeProto]:
    live, keep = set(outputs), []
    for node in reversed(nodes):
        if any(o in live for o in node.output):
            keep.append(node)
            live.update(i for i in node.input if i)
    return list(reversed(keep))


def _in_eval_mode(node: NodeProto, dropped: dict[str, str], aliases: dict[str, str]) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    if node.op_type == "BatchNormalization":
        for a in list(out.attribute):
            if a.name == "training_mode":
                out.attribute.remove(a)
        del out.output[1:]
        for k, name in enumerate(out.input):
            out.input[k] = aliases.get(name, name)
    elif node.output and node.output[0] in dropped:
        del out.input[:], out.attribute[:]
        out.op_type, out.domain = "Identity", ""
        out.input.append(dropped[node.output[0]])
    return out


def eval_forward(train: ModelProto) -> EvalForward | None:
    """See the module docstring."""
    record = forward_metadata(train)
    outputs = [o for o in record.get("outputs", ()) if isinstance(o, str)] if isinstance(record.get("outputs"),
                                                                                        list) else []
    if not outputs:
        return None
    g = train.graph
    dropout = record.get("dropout") if isinstance(record.get("dropout"), dict) else {}
    dropped = {d["y"]: d["x"] for d in dropout.values() if isinstance(d, dict) and {"x", "y"} <= set(d)}
    aliases = record.get("aliases") if isinstance(record.get("aliases"), dict) else {}
    nodes = [_in_eval_mode(n, dropped, aliases) for n in g.node]
    nodes = _needed(nodes, set(outputs))
    read = {i for n in nodes for i in n.input if i}
    produced_outputs = {o.name for o in g.output}
    stats = set(record.get("statistics") or ())
    trained = {vi.name for vi in g.input if f"{vi.name}.new" in produced_outputs or f"{vi.name}_grad" in
               produced_outputs}
    inputs = [vi for vi in g.input if vi.name in read]
    state = [vi for vi in inputs if vi.name in trained or vi.name in stats]
    names = {vi.name for vi in state}
    data = [vi for vi in inputs if vi.name not in names]
    constants = [t for t in g.initializer if t.name in read and t.name not in names]
    typed = _typed_outputs(train, nodes, data + state, constants, outputs)
    program = _model(train, nodes, data + state, constants, typed, "forward")
    deploy = _model(train, nodes, data, constants, typed, "deploy")
    return EvalForward(program, deploy, tuple(vi.name for vi in data), tuple(vi.name for vi in state),
                       tuple(outputs))


def _model(train: ModelProto, nodes, inputs, initializers, outputs, kind: str) -> ModelProto:
    name = (train.graph.name or "model").removesuffix("_training")
    graph = helper.make_graph(nodes, name if kind == "deploy" else f"{name}_forward", inputs, outputs,
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=list(train.opset_import), producer_name="dcstudio",
                              ir_version=train.ir_version)
    model.doc_string = ("the forward model in eval mode (running statistics, no dropout), cut from its "
                        "dcstudio training step" + ("; trained parameters are written by Model.export_onnx"
                                                     if kind == "deploy" else ""))
    return model


def _typed_outputs(train: ModelProto, nodes, inputs, constants, outputs: list[str]):
    """Value infos of the outputs, by shape inference on the cut (inputs typed, no weights needed)."""
    probe = helper.make_graph(nodes, "probe", inputs, [ValueInfoProto(name=o) for o in outputs],
                              initializer=constants)
    inferred = shape_inference.infer_shapes(helper.make_model(probe, opset_imports=list(train.opset_import),
                                                              ir_version=train.ir_version))
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    return [known[o] if o in known and known[o].type.HasField("tensor_type") else
            helper.make_tensor_value_info(o, 1, None) for o in outputs]
