"""Static types and shapes for every value of an ONNX graph.

onnx's own shape inference (strict, with data propagation) does most of the
work. Ops it does not know (com.microsoft training ops, ORT's opset-16
LayerNormalization, our ``ai.dcstudio`` optimizer ops) get rules from
``SHAPE_RULES``; the two alternate until nothing changes. A real mismatch
(incompatible dimensions) raises ``ShapeError`` naming the node.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from onnx import ModelProto, TensorProto, TypeProto, ValueInfoProto, helper, shape_inference

from ir import dtypes
from ir.errors import ShapeError
from ir.onnx_attrs import attrs_from_onnx

TensorType = tuple[str, tuple]
UNKNOWN_RANK = ("...",)                 # the shape of a value whose rank is not known statically          # (dtype name, shape of int | str)
Rule = Callable[[list["TensorType | None"], dict[str, Any], int], list["TensorType | None"]]
SHAPE_RULES: dict[tuple[str, str], Rule] = {}

_HARD = re.compile(r"Incompatible|mismatch|Invalid rank|cannot broadcast|not compatible",
                   re.IGNORECASE)
_NODE_IN_MSG = re.compile(r"node name: ([^)]*)\)")


def rule(*names: str, domain: str = "com.microsoft"):
    def deco(fn: Rule) -> Rule:
        for n in names:
            SHAPE_RULES[(domain, n)] = fn
        return fn
    return deco


def _tt(vi: ValueInfoProto | TypeProto) -> TensorType | None:
    tp = vi.type if isinstance(vi, ValueInfoProto) else vi
    if not tp.HasField("tensor_type"):
        return None
    t = tp.tensor_type
    if t.elem_type == 0:
        return None
    if not t.HasField("shape"):
        try:
            return dtypes.from_onnx(t.elem_type), UNKNOWN_RANK
        except ValueError:
            return None
    dims: list[int | str] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
            dims.append(str(d.dim_param))
        else:
            dims.append("?")
    try:
        return dtypes.from_onnx(t.elem_type), tuple(dims)
    except ValueError:
        return None


def _known(model: ModelProto) -> dict[str, TensorType]:
    g = model.graph
    out: dict[str, TensorType] = {}
    for init in g.initializer:
        out[init.name] = (dtypes.from_onnx(init.data_type), tuple(int(d) for d in init.dims))
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = _tt(vi)
        if t is not None and (vi.name not in out or _vague(out[vi.name][1])):
            out[vi.name] = t
    return out


def _vague(shape: tuple) -> bool:
    return "?" in shape or shape == UNKNOWN_RANK


def _run_onnx(model: ModelProto, path: str | None) -> ModelProto:
    """onnx's inference without its data propagation: shape values computed in the graph
    (Shape → Gather → Concat → Reshape) are folded by ``infer_folding`` instead, and data
    propagation was 90 % of the call's time — 0.19 s on a 12-layer step, all of it holding the
    GIL (the studio loading the model froze for as long)."""
    try:
        return shape_inference.infer_shapes(model, strict_mode=True, data_prop=False)
    except shape_inference.InferenceError as e:
        msg = str(e)
        if _HARD.search(msg) and "number of op outputs" not in msg:
            found = _NODE_IN_MSG.search(msg)
            node = next((n for n in model.graph.node if found and n.name == found.group(1)), None)
            detail = msg.split("\n")[0][:300]
            raise ShapeError(f"shape inference found a mismatch: {detail}", _NodeRef(node),
                             hint="Fix the model's shapes or re-export it", path=path) from None
        return shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)


class _NodeRef:
    """Minimal node-like view of a NodeProto for error messages."""

    def __init__(self, node) -> None:
        self.id = node.name if node is not None else "?"
        self.name = self.id
        self.op_type = node.op_type if node is not None else "?"
        self.kind = None


def infer_types(model: ModelProto, opsets: dict[str, int], path: str | None = None) -> dict[str, TensorType]:
    """Types and shapes of all values that can be inferred (name -> (dtype, shape))."""
    work = _without_weights(model)
    _declare_outputs(work, _known(work))
    for _ in range(8):
        work = _run_onnx(work, path)
        known = _known(work)
        added = _apply_rules(work, known, opsets)
        if not added:
            return known
        for name, (dt, shape) in added.items():
            work.graph.value_info.append(
                helper.make_tensor_value_info(name, dtypes.NAME_TO_ONNX[dt], list(shape)))
        _declare_outputs(work, added)
    return _known(work)


_KEPT_VALUES = 64            # float initializers up to this size keep their values (Resize scales)
_KEPT_INTEGERS = 4096        # integer ones (shapes, axes, indices) up to this size
_FLOATING = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


def _without_weights(model: ModelProto) -> ModelProto:
    """A copy of ``model`` for shape inference whose large initializers are typed graph inputs
    instead: no op's output shape depends on a weight's values, and onnx's inference serializes
    and copies the model on every run (three copies of 350 MB for a 12-layer BERT-base step)."""
    work = ModelProto()
    g, wg = model.graph, work.graph
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(work, field, getattr(model, field))
    work.opset_import.extend(model.opset_import)
    work.functions.extend(model.functions)
    wg.name = g.name
    wg.node.extend(g.node)
    wg.input.extend(g.input)
    wg.output.extend(g.output)
    wg.value_info.extend(g.value_info)
    wg.sparse_initializer.extend(g.sparse_initializer)
    inputs = {vi.name for vi in g.input}
    for init in g.initializer:
        n = 1
        for d in init.dims:
            n *= int(d)
        floating = init.data_type in _FLOATING
        if n > (_KEPT_VALUES if floating else _KEPT_INTEGERS):
            if init.name not in inputs:
                wg.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            wg.initializer.append(init)
    return work


def _declare_outputs(model: ModelProto, types: dict[str, TensorType]) -> None:
    """Graph outputs declared without a (full) shape take the shape found for them: onnx types
    a value by its output declaration, so a vague one hid what a rule or a graph input says
    from the ops that read the value."""
    for out in model.graph.output:
        declared, found = _tt(out), types.get(out.name)
        if declared is not None and _vague(declared[1]) and found is not None and not _vague(found[1]):
            out.CopyFrom(helper.make_tensor_value_info(out.name, dtypes.NAME_TO_ONNX[found[0]], list(found[1])))


def _apply_rules(model: ModelProto, known: dict[str, TensorType], opsets: dict[str, int]) -> dict[str, TensorType]:
    added: dict[str, TensorType] = {}
    for node in model.graph.node:
        outs = [o for o in node.output if o]
        if all(_settled(o, known) or o in added for o in outs):
            continue
        dom = "" if node.domain in ("", "ai.onnx") else node.domain
        fn = SHAPE_RULES.get((dom, node.op_type)) or SHAPE_RULES.get(("*", node.op_type))
        if fn is None:
            continue
        ins = [(known.get(i) or added.get(i)) if i else None for i in node.input]
        try:
            res = fn(ins, attrs_from_onnx(node), opsets.get(dom, 1))
        except (TypeError, IndexError, KeyError):
            continue  # inputs not known yet; try again next round
        for name, t in zip(node.output, res):
            if name and t is not None and not _settled(name, known) and not (name in known and _vague(t[1])):
                added[name] = t
    return added


def _settled(name: str, known: dict[str, TensorType]) -> bool:
    """Known with a definite shape; a graph output declared without one (``UNKNOWN_RANK``) or
    with unknown dimensions is refined by the rules."""
    return name in known and not _vague(known[name][1])


# --- rules for ops onnx does not know ----------------------------------------------------------

def _same(k: int):
    def fn(ins, attrs, opset):
        return [ins[k]]
    return fn


for _name, _k in (("ReluGrad", 0), ("SigmoidGrad", 0), ("TanhGrad", 0), ("GeluGrad", 0), ("FastGeluGrad", 0),
                  ("QuickGeluGrad", 0), ("Gelu", 0), ("FastGelu", 0), ("QuickGelu", 0),
                  ("Scale", 0), ("SoftmaxGrad_13", 0), ("SoftmaxGrad", 0), ("LogSoftmaxGrad_13", 0),
                  ("LogSoftmaxGrad", 0), ("DropoutGrad", 0), ("BiasGelu", 0), ("BiasGeluGrad_dX", 0)):
    rule(_name)(_same(_k))


@rule("SoftmaxCrossEntropyLossGrad")
def _sce_grad(ins, attrs, opset):
    return [ins[1]]  # dX has the shape of log_prob


@rule("LayerNormalization", "SimplifiedLayerNormalization", domain="*")
def _layernorm(ins, attrs, opset):
    dt, shape = ins[0]
    axis = attrs.get("axis", -1)
    axis = axis + len(shape) if axis < 0 else axis
    stat = tuple(shape[:axis]) + (1,) * (len(shape) - axis)
    stat_dt = "float32" if dt in ("float16", "bfloat16") else dt
    return [(dt, shape), (stat_dt, stat), (stat_dt, stat)]


@rule("LayerNormalizationGrad")
def _layernorm_grad(ins, attrs, opset):
    return [ins[1], ins[2], ins[2]]


@rule("SimplifiedLayerNormalizationGrad")
def _simplified_layernorm_grad(ins, attrs, opset):
    return [ins[1], ins[2]]       # (dY, X, scale, inv_std_dev) -> (dX, dscale)


@rule("BatchNormInternal")
def _bn_internal(ins, attrs, opset):
    stat = ins[1]
    return [ins[0], stat, stat, stat, stat]


@rule("BatchNormalizationGrad")
def _bn_grad(ins, attrs, opset):
    return [ins[1], ins[2], ins[2]]


@rule("ConvGrad")
def _conv_grad(ins, attrs, opset):
    w = ins[2]
    return [ins[1], w, (w[0], (w[1][0],))]


@rule("FusedMatMul")
def _fused_matmul(ins, attrs, opset):
    (dt, a), (_, b) = ins[0], ins[1]
    a, b = list(a), list(b)
    if attrs.get("transA"):
        a[-2], a[-1] = a[-1], a[-2]
    if attrs.get("transB"):
        b[-2], b[-1] = b[-1], b[-2]
    batch = a[:-2] if len(a) >= len(b) else b[:-2]
    return [(dt, tuple(batch) + (a[-2], b[-1]))]


@rule("InPlaceAccumulatorV2")
def _accumulator(ins, attrs, opset):
    return [("bool", (1,)), ins[0]]


@rule("MaxPoolGrad", domain="")
def _maxpool_grad(ins, attrs, opset):
    return [None]  # needs the forward input's shape: filled from the graph's value_info


@rule("AdamW", domain="ai.dcstudio")
def _adamw(ins, attrs, opset):
    return [ins[2], ins[4], ins[5]]


@rule("SGD", "Lion", domain="ai.dcstudio")
def _sgd_lion(ins, attrs, opset):
    return [ins[1], ins[3]]
