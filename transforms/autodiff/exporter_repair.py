"""Undo two rewrites of the dynamo exporter's optimizer that merge or drop parameters.

``repair_dynamo_export(model)`` returns the model (a copy when something changed) and notes:

- **merged duplicates**: the onnxscript optimizer keeps one initializer for parameters with
  identical contents, so a freshly initialized model's LayerNorm weights (all ones) become
  one tensor, ``blocks.0.norm1.weight``, read by every LayerNorm. Training it would tie
  unrelated parameters. A parameter of constant value read by a node whose module
  (``pkg.torch.onnx.name_scopes``) is another one gets its own copy, named
  ``<module>.<attribute>`` as in ``named_parameters()``. (Tied weights, such as GPT-2's
  lm_head and wte, are random, never constant, and stay shared.)
- **dropped zero biases**: ``RemoveOptionalBiasFromGemm`` removes a ``Gemm`` bias that is
  all zeros (a freshly initialized ``Linear``/``Conv1D``). The bias comes back as a zero
  initializer ``<module>.bias``.
The new initializers are marked as torch parameters (``InputSpec.kind``).
"""
from __future__ import annotations

import re

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from transforms.autodiff.parameters import KIND_KEY

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
RULE_KEY = "pkg.onnxscript.rewriter.rule_name"


def _meta(node: NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def _module(node: NodeProto) -> str | None:
    """The module path of the node (the last-but-one name scope), or None."""
    scopes = re.findall(r"'([^']*)'", _meta(node).get(SCOPES_KEY, ""))
    return scopes[-2] if len(scopes) >= 2 and scopes[-2] else None


def repair_dynamo_export(model: ModelProto) -> tuple[ModelProto, list[str]]:
    """See the module docstring."""
    kinds = {vi.name: p.value for vi in model.graph.value_info for p in vi.metadata_props if p.key == KIND_KEY}
    params = {t.name: t for t in model.graph.initializer if kinds.get(t.name) == "PARAMETER"}
    if not params:
        return model, []
    plan = _splits(model, params) + _biases(model, params)
    if not plan:
        return model, []
    out = ModelProto()
    out.CopyFrom(model)
    notes = []
    added: dict[str, TensorProto] = {}
    for node_index, slot, name, value in plan:
        node = out.graph.node[node_index]
        if name not in added:
            added[name] = numpy_helper.from_array(value, name)
            vi = helper.make_tensor_value_info(name, added[name].data_type, list(value.shape))
            helper.set_metadata_props(vi, {KIND_KEY: "PARAMETER"})
            out.graph.value_info.append(vi)
        while len(node.input) <= slot:
            node.input.append("")
        old = node.input[slot]
        node.input[slot] = name
        notes.append(f"{name}: {'separated from ' + old if old else 'zero bias restored'} (node '{node.name}')")
    out.graph.initializer.extend(added.values())
    return out, notes


def _splits(model: ModelProto, params: dict[str, TensorProto]) -> list[tuple]:
    taken = {t.name for t in model.graph.initializer}
    plan = []
    for k, node in enumerate(model.graph.node):
        module = _module(node)
        for slot, name in enumerate(node.input):
            if name not in params or module is None or "." not in name:
                continue
            owner, attr = name.rsplit(".", 1)
            wanted = f"{module}.{attr}"
            if module == owner:
                continue
            value = numpy_helper.to_array(params[name])
            if value.size < 1 or float(value.min()) != float(value.max()) or wanted in taken:
                continue
            plan.append((k, slot, wanted, value.copy()))
    return plan


def _biases(model: ModelProto, params: dict[str, TensorProto]) -> list[tuple]:
    taken = {t.name for t in model.graph.initializer}
    plan = []
    for k, node in enumerate(model.graph.node):
        if node.op_type != "Gemm" or len(node.input) > 2 and node.input[2]:
            continue
        module = _module(node)
        weight = params.get(node.input[1])
        if module is None or weight is None or _meta(node).get(RULE_KEY) != "RemoveOptionalBiasFromGemm":
            continue
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        n = int(weight.dims[0] if trans_b else weight.dims[1])
        name = f"{module}.bias"
        if name in taken:
            continue
        dtype = helper.tensor_dtype_to_np_dtype(weight.data_type)
        plan.append((k, 2, name, np.zeros(n, dtype=dtype)))
    return plan
