"""Making ORT on-device-training artifacts functional (DESIGN §5, way 2).

ORT's ``training_model.onnx`` hides its gradients: each one flows into a
``com.microsoft::InPlaceAccumulatorV2`` that mutates a graph input
(``<p>_grad.accumulation.buffer``) and returns a flag. ``optimizer_model.onnx``
holds one ``AdamWOptimizer`` over sequences of tensors. Here, at the protobuf
level and before anything else looks at the graph:

- every accumulator is removed and its gradient ``g`` becomes a graph output;
- the accumulation buffers, ``lazy_reset_grad`` and the flag outputs disappear;
- with an optimizer model, the sequence optimizer is split per tensor into
  ``ai.dcstudio::AdamW(lr, step, p, g, p.m, p.v) -> (p.new, p.m.new, p.v.new)``
  with the same attributes, and ``learning_rate``, ``step``, ``p.m``, ``p.v``
  become graph inputs, ``p.new``, ``p.m.new``, ``p.v.new`` graph outputs.
"""
from __future__ import annotations

from onnx import ModelProto, TensorProto, helper

from ir.errors import ModelImportError
from ir.onnx_attrs import attrs_from_onnx

ACCUMULATOR = "InPlaceAccumulatorV2"
BUFFER_SUFFIX = "_grad.accumulation.buffer"
STUDIO_DOMAIN = "ai.dcstudio"


def has_accumulators(model: ModelProto) -> bool:
    return any(n.op_type == ACCUMULATOR for n in model.graph.node)


def functionalize(model: ModelProto, optimizer: ModelProto | None, path: str | None = None) -> list[str]:
    """Rewrite ``model`` in place; return the trainable parameter names in graph-input order."""
    g = model.graph
    grad_of: dict[str, str] = {}
    flags: set[str] = set()
    keep = []
    for node in g.node:
        if node.op_type != ACCUMULATOR:
            keep.append(node)
            continue
        buf = node.input[0]
        if not buf.endswith(BUFFER_SUFFIX):
            raise ModelImportError(f"accumulator '{node.name}' writes '{buf}', which is not a "
                                   f"'<param>{BUFFER_SUFFIX}' input", path=path)
        grad_of[buf[: -len(BUFFER_SUFFIX)]] = node.input[1]
        flags.update(o for o in node.output if o)
    inputs = {vi.name: vi for vi in g.input}
    params = [name for name in inputs if name in grad_of]
    del g.node[:]
    g.node.extend(keep)
    kept_inputs = [vi for vi in g.input if not vi.name.endswith(BUFFER_SUFFIX) and vi.name != "lazy_reset_grad"]
    del g.input[:]
    g.input.extend(kept_inputs)
    outputs = [o for o in g.output if o.name not in flags]
    for p in params:
        outputs.append(_like(inputs[p], grad_of[p]))
    del g.output[:]
    g.output.extend(outputs)
    if optimizer is not None:
        _split_optimizer(model, optimizer, params, grad_of, inputs, path)
    return params


def _like(vi, name: str):
    t = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]
    return helper.make_tensor_value_info(name, t.elem_type, dims)


def _split_optimizer(model: ModelProto, optimizer: ModelProto, params: list[str],
                     grad_of: dict[str, str], inputs: dict, path: str | None) -> None:
    nodes = [n for n in optimizer.graph.node if n.op_type == "AdamWOptimizer"]
    if len(nodes) != 1 or len(optimizer.graph.node) != 1:
        kinds = sorted({n.op_type for n in optimizer.graph.node})
        raise ModelImportError(f"optimizer model holds {kinds}; only a single com.microsoft::AdamWOptimizer "
                               "is supported", path=path)
    opt = nodes[0]
    attrs = attrs_from_onnx(opt)
    opt_inputs = {vi.name: vi for vi in optimizer.graph.input}
    g = model.graph
    lr, step = opt.input[0], opt.input[1]
    g.input.extend([opt_inputs[lr], opt_inputs[step]])
    base = opt.name or "AdamWOptimizer"
    for p in params:
        g.input.extend([_like(inputs[p], f"{p}.m"), _like(inputs[p], f"{p}.v")])
        g.node.append(helper.make_node(
            "AdamW", [lr, step, p, grad_of[p], f"{p}.m", f"{p}.v"],
            [f"{p}.new", f"{p}.m.new", f"{p}.v.new"], name=f"{base}/{p}", domain=STUDIO_DOMAIN,
            **attrs))
        g.output.extend(_like(inputs[p], f"{p}{suffix}") for suffix in (".new", ".m.new", ".v.new"))
    if not any(o.domain == STUDIO_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(STUDIO_DOMAIN, 1))


def step_dtype(model: ModelProto) -> int:
    for vi in model.graph.input:
        if vi.name == "step":
            return vi.type.tensor_type.elem_type
    return TensorProto.INT64
