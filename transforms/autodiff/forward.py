"""Preparing a forward model for differentiation: ``prepare_forward(model, options)``.

1. bring the default-domain opset to >= 17 (``onnx.version_converter``) and refuse
   other domains (the training graph must be standard ONNX);
2. copy the nodes and make the values the backward pass reads explicit outputs:
   Dropout's ``mask``, MaxPool's ``Indices`` (row-major), LayerNormalization's ``Mean``
   and ``InvStdDev`` (its rule reuses them when their type is ``x``'s, i.e. not for the
   float32 stash of a float64 model); set BatchNormalization to training mode (batch
   statistics, two running-statistics outputs) or to inference mode, as
   ``options.batchnorm`` says;
3. infer static types on a light copy (large initializers replaced by typed inputs; shape
   computations inference cannot follow are folded to constants and inference repeated);
4. unroll recurrent layers (``ir.recurrent``: RNN, GRU and LSTM become GEMMs and gate maps over
   the static sequence length) and infer the types again;
5. split the initializers into candidate parameters (float) and frozen constants.
Initializer tensors are shared with the input model, never copied here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper, shape_inference, version_converter

from ir.errors import ModelImportError, UnsupportedOpError
from ir.constant_values import ConstantValues
from ir.recurrent import expand_recurrent, has_recurrent
from ir.shape_fold import folds_float
from transforms.autodiff.emitter import FLOAT_ELEMS, ValueType
from transforms.autodiff.options import OptionError, TrainingOptions
from transforms.autodiff.registry import NodeRef

MIN_OPSET = 17
_SMALL_INIT = 1024   # initializers up to this many elements stay constant for shape inference
_FOLD_ROUNDS = 4     # shape-folding rounds when inference leaves shapes unknown


@dataclass(slots=True)
class Forward:
    """The prepared forward model (see module docstring)."""

    model: ModelProto
    nodes: list[NodeProto]
    opset: int
    types: dict[str, ValueType]
    data_inputs: list
    initializers: dict[str, TensorProto]
    prediction: str
    choice: Any = None   # parameters.ParameterChoice of the original model (set by the caller)
    masks: Any = None    # dropout_masks.Masks: training Dropouts whose mask is a step input (set by the caller)

    def float_initializers(self) -> list[str]:
        return [n for n, t in self.initializers.items() if t.data_type in FLOAT_ELEMS]

    def constants(self, trainable: set[str]) -> ConstantValues:
        frozen = {n: t for n, t in self.initializers.items() if n not in trainable}
        return ConstantValues(self.model.graph, frozen, self.types, self.opset)


def default_opset(model: ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return int(op.version)
    return 1


def prepare_forward(model: ModelProto, options: TrainingOptions) -> Forward:
    """See the module docstring."""
    if default_opset(model) < MIN_OPSET:
        model = version_converter.convert_version(model, MIN_OPSET)
    opset = default_opset(model)
    g = model.graph
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(node.op_type, NodeRef(node), domain=node.domain)
    inits = {t.name: t for t in g.initializer}
    outputs = [o.name for o in g.output]
    prediction = options.output or (outputs[0] if outputs else "")
    if prediction not in outputs:
        raise OptionError(f"option output={options.output!r} is not a graph output of the forward model "
                          f"(outputs: {outputs})")
    taken = set(inits) | {vi.name for vi in g.input} | {o for n in g.node for o in n.output}
    nodes = [_prepared(node, options.batchnorm, taken) for node in g.node]
    work = ModelProto()
    work.ir_version = model.ir_version
    work.opset_import.extend(model.opset_import)
    work.graph.name = g.name
    work.graph.node.extend(nodes)
    work.graph.input.extend(g.input)
    work.graph.output.extend(g.output)
    types = _infer_types(work, inits)
    if has_recurrent(work.graph):
        expand_recurrent(work.graph, types.get, opset=opset, initializers=inits)
        types = _infer_types(work, inits)
    data = [vi for vi in g.input if vi.name not in inits]
    return Forward(work, list(work.graph.node), opset, types, data, inits, prediction)


EXTRA_OUTPUTS = {  # optional outputs the backward pass reads, by op type
    "Dropout": ("mask",),
    "MaxPool": ("indices",),
    "LayerNormalization": ("mean", "inv_std_dev"),
    "BatchNormalization": ("running_mean", "running_var"),   # training mode only
}


def _prepared(node: NodeProto, batchnorm: str, taken: set[str]) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    if out.op_type == "MaxPool" and (len(out.output) < 2 or not out.output[1]):
        _set_attr(out, "storage_order", 0)   # nobody reads the indices yet: make them row-major
    if out.op_type == "BatchNormalization":
        _set_attr(out, "training_mode", 1 if batchnorm == "train" else 0)
        if batchnorm == "eval":
            del out.output[1:]
            return out
    for k, suffix in enumerate(EXTRA_OUTPUTS.get(out.op_type, ()), start=1):
        while len(out.output) <= k:
            out.output.append("")
        if not out.output[k]:
            out.output[k] = _fresh(f"{out.output[0]}.{suffix}", taken)
    return out


def _fresh(name: str, taken: set[str]) -> str:
    k, fresh = 0, name
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    taken.add(fresh)
    return fresh


def _set_attr(node: NodeProto, name: str, value: int) -> None:
    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, value))


def _infer_types(work: ModelProto, inits: dict[str, TensorProto]) -> dict[str, ValueType]:
    """Static types by ONNX shape inference on a light copy; shape computations that inference
    cannot follow (``Where(Equal(shape, -1), …)`` of a legacy export) are folded into constants
    and inference runs again (at most ``_FOLD_ROUNDS`` times)."""
    light = ModelProto()
    light.CopyFrom(work)
    declared = {vi.name for vi in light.graph.input}
    for name, t in inits.items():
        if _numel(t) <= _SMALL_INIT:
            light.graph.initializer.append(t)
        elif name not in declared:
            light.graph.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
    types = _inferred(light, inits)
    for _ in range(_FOLD_ROUNDS):
        if not _fold_shape_inputs(light, types):
            break
        types = _inferred(light, inits)
    return types


def _fold_shape_inputs(light: ModelProto, types: dict[str, ValueType]) -> bool:
    """Replace the constant integer inputs of nodes with unknown output shapes (and Resize's float
    scales) by initializers."""
    g = light.graph
    opset = default_opset(light)
    consts = ConstantValues(g, {t.name: t for t in g.initializer}, types, opset)
    producer = {o: n for n in g.node for o in n.output}
    folded: dict[str, TensorProto] = {}
    for node in g.node:
        if all(not o or (types.get(o) or (0, None))[1] is not None for o in node.output):
            continue
        for k, i in enumerate(node.input[1:], start=1):
            src = producer.get(i)
            if not i or i in folded or src is None or len(src.output) != 1:
                continue
            elem = types.get(i, (0,))[0]
            if elem != TensorProto.INT64 and not folds_float(node, k):
                continue
            value = consts.value(i)
            if value is not None:
                folded[i] = numpy_helper.from_array(np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(elem)), i)
    if not folded:
        return False
    kept = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in folded)]
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(folded.values())
    return True


def _inferred(light: ModelProto, inits: dict[str, TensorProto]) -> dict[str, ValueType]:
    try:
        inferred = shape_inference.infer_shapes(light, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several types; all mean "inconsistent model"
        raise ModelImportError(f"shape inference failed on the forward model: {e}",
                               hint="Check the model with onnx.checker") from None
    types: dict[str, ValueType] = {}
    for name, t in inits.items():
        types[name] = (t.data_type, tuple(int(d) for d in t.dims))
    gi = inferred.graph
    for t in gi.initializer:
        types.setdefault(t.name, (t.data_type, tuple(int(d) for d in t.dims)))
    for vi in list(gi.input) + list(gi.value_info) + list(gi.output):
        tt = vi.type.tensor_type
        if vi.name in types or not vi.type.HasField("tensor_type"):
            continue
        shape = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(int(d.dim_value) for d in tt.shape.dim)
        types[vi.name] = (tt.elem_type, shape)
    return types


def _numel(t: TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n
