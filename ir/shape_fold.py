"""Shape subgraphs folded into constants at import, so legacy exports get static shapes.

The TorchScript exporter writes shapes as computations: position ids as ``Shape → Gather →
Unsqueeze → Slice``, a channel split as ``Shape → Gather → Div → Slice``, a window
padding as ``Shape → … → Concat → Pad``, an ``nn.Upsample``'s scales as ``Concat`` of two float
``Constant``s (Resize's roi and scales are the float inputs folded). onnx's shape inference (even with data
propagation) loses track of some of them, and the values they feed (``Slice`` bounds,
``Pad`` pads, ``Reshape`` targets, ``Expand`` shapes, ``ConstantOfShape`` sizes) then have
no static shape. Once the graph inputs' shapes are static (or bound), those computations
are constants: ``fold_shape_inputs(model, types, opsets)`` replaces every integer input
of a node whose outputs are not fully known by its value (``ir.constant_values``: Shape
and Size of static tensors, small integer arithmetic, evaluated one node at a time with
``onnx.reference``; nothing from the model is evaluated as code) and removes the shape
nodes nothing reads any more. Only values that depend on nothing but static shapes and
non-overridable initializers are folded, so equal-valued parameters are never merged
(onnxsim's constant merging would tie them) and the graph computes what it did. A shape
that is still unknown after that (it depends on data: ``NonZero``, a reshape target read
from an input) is taken from one onnxruntime run on inputs of the declared shapes
(``probe_shapes``); ``dcstudio inspect`` says how many shapes came from where.
"""
from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from ir import dtypes
from ir.constant_values import FOLDABLE, ConstantValues
from ir.errors import ShapeError

INTEGER = {TensorProto.INT64, TensorProto.INT32}
_SHAPE_OPS = FOLDABLE | {"Shape", "Size", "Constant"}


def _onnx_types(types: dict[str, tuple]) -> dict[str, tuple]:
    """``shape_infer`` types (dtype name, dims with '?'/symbols) as ``(onnx elem type, shape | None)``."""
    out = {}
    for name, (dt, shape) in types.items():
        static = all(isinstance(d, int) for d in shape)
        code = dtypes.NAME_TO_ONNX.get(dt)
        if code is not None:
            out[name] = (code, tuple(shape) if static else None)
    return out


def unknown_outputs(model: ModelProto, types: dict[str, tuple]) -> list[str]:
    """Node outputs whose shape is not fully static."""
    out = []
    for node in model.graph.node:
        for o in node.output:
            t = types.get(o)
            if o and (t is None or not all(isinstance(d, int) for d in t[1])):
                out.append(o)
    return out


def folds_float(node: NodeProto, k: int) -> bool:
    """Whether input ``k`` of ``node`` is folded although it is a float: Resize's roi and scales."""
    return node.op_type == "Resize" and k in (1, 2)


def fold_shape_inputs(model: ModelProto, types: dict[str, tuple], opsets: dict[str, int]) -> int:
    """Fold the constant integer inputs of nodes with unknown output shapes (see the module
    docstring); returns the number of values folded (0: nothing changed)."""
    g = model.graph
    overridable = {vi.name for vi in g.input}
    frozen = {t.name: t for t in g.initializer if t.name not in overridable}
    onnx_types = _onnx_types(types)
    consts = ConstantValues(g, frozen, onnx_types, opsets.get("", 17))
    producer = {o: n for n in g.node for o in n.output if o}
    unknown = set(unknown_outputs(model, types))
    folded: dict[str, TensorProto] = {}
    for node in g.node:
        if not any(o in unknown for o in node.output):
            continue
        for k, name in enumerate(node.input):
            src = producer.get(name)
            if not name or name in folded or src is None or len(src.output) != 1:
                continue
            if onnx_types.get(name, (None,))[0] not in INTEGER and not folds_float(node, k):
                continue
            value = consts.value(name)
            if value is not None:
                folded[name] = numpy_helper.from_array(np.asarray(value), name)
    if not folded:
        return 0
    kept = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in folded)]
    del g.node[:]
    g.node.extend(_drop_dead_shape_nodes(kept, {o.name for o in g.output}))
    g.initializer.extend(folded.values())
    return len(folded)


def _drop_dead_shape_nodes(nodes: list, outputs: set[str]) -> list:
    """Shape-computation nodes whose results nothing reads any more (after folding)."""
    nodes = list(nodes)
    while True:
        used = {i for n in nodes for i in n.input if i} | outputs
        dead = [k for k, n in enumerate(nodes) if n.domain in ("", "ai.onnx") and n.op_type in _SHAPE_OPS
                and not any(o in used for o in n.output if o)]
        if not dead:
            return nodes
        for k in reversed(dead):
            del nodes[k]


def infer_folding(model: ModelProto, opsets: dict[str, int], infer, rounds: int = 4) -> tuple[dict, dict[str, int]]:
    """``infer(model)`` (``shape_infer.infer_types``), folding shape inputs into ``model`` and
    inferring again while that leaves shapes unknown; what is still unknown then takes its
    shape from one onnxruntime run (``probe_shapes``). Returns (types, counts) with counts
    ``{"folded": values folded, "probed": shapes from onnxruntime}`` (zeros left out)."""
    types, counts = infer(model), {}
    for _ in range(rounds):
        if not unknown_outputs(model, types):
            break
        nodes, n_inits = [_copy(n) for n in model.graph.node], len(model.graph.initializer)
        n = fold_shape_inputs(model, types, opsets)
        if not n:
            break
        try:
            types = infer(model)
        except ShapeError:
            # onnx's data propagation can trip over values it now knows (a Sub of two int64
            # matrices is taken for a Sub of two shape vectors): keep the graph unfolded
            del model.graph.node[:]
            model.graph.node.extend(nodes)
            del model.graph.initializer[n_inits:]
            types = infer(model)
            break
        counts["folded"] = counts.get("folded", 0) + n
    unknown = [n for n in unknown_outputs(model, types) if n not in shapes_from_input_values(model, types)]
    if unknown:
        n = probe_shapes(model, types, unknown)
        if n:
            try:
                types = infer(model)
                counts["probed"] = n
            except ShapeError:                 # the same data-propagation trip as above: undo
                del model.graph.value_info[len(model.graph.value_info) - n:]
                types = infer(model)
    return types, counts


# Inputs that set a shape (not indices, not data): an integer graph input reaching one of them
# makes the result's shape depend on the input's values, which no single run can pin down.
SHAPE_ARGS = {"Reshape": (1,), "Expand": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3), "Tile": (1,),
              "ConstantOfShape": (0,), "Range": (0, 1, 2), "TopK": (1,), "OneHot": (1,), "Resize": (1, 2, 3),
              "Upsample": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "CenterCropPad": (1,)}
INDEX_OPS = {"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Scatter", "Where"}
DATA_SHAPED = {"NonZero", "Unique", "Compress", "StringSplit"}


def shapes_from_input_values(model: ModelProto, types: dict[str, tuple]) -> set[str]:
    """Values whose shape depends on the *values* (not the shapes) of graph inputs: such a
    shape may differ from run to run, so ``probe_shapes`` leaves it unknown."""
    g = model.graph
    valued = {vi.name for vi in g.input}                     # depends on an input's values
    shaped: set[str] = set()                                 # its shape depends on them
    for node in g.node:
        ins = list(node.input)
        if node.op_type in ("Shape", "Size"):
            if any(i in shaped for i in ins):           # the shape it reads varies with the data
                valued.update(o for o in node.output if o)
            continue
        tainted = [k for k, i in enumerate(ins) if i in valued]
        if tainted:
            valued.update(o for o in node.output if o)
        integer = [k for k in tainted if _is_integer(types.get(ins[k], ("",))[0])]
        sets_shape = (any(k in SHAPE_ARGS.get(node.op_type, ()) for k in tainted)
                      or node.op_type in DATA_SHAPED and tainted
                      or node.op_type not in SHAPE_ARGS and node.op_type not in INDEX_OPS
                      and any(k >= 1 for k in integer))
        if sets_shape or any(i in shaped for i in ins):
            shaped.update(o for o in node.output if o)
    return shaped


def _copy(node: NodeProto) -> NodeProto:
    c = NodeProto()
    c.CopyFrom(node)
    return c


def _is_integer(dtype_name: str) -> bool:
    return dtype_name.startswith(("int", "uint")) or dtype_name == "bool"


def probe_shapes(model: ModelProto, types: dict[str, tuple], names: list[str]) -> int:
    """Shapes of ``names`` from one onnxruntime run on inputs of the declared (static) shapes:
    floats drawn from N(0, 1) with a fixed seed, integers 0, booleans False. They are written
    into ``model`` as value infos; returns how many (0 when onnxruntime cannot run the model,
    an input shape is not static, or a value's type is unknown: the import then stops with
    its usual error naming the value)."""
    try:
        import onnxruntime as ort
    except ImportError:                                   # pragma: no cover - a core dependency
        return 0
    g = model.graph
    inits = {t.name for t in g.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in g.input:
        if vi.name in inits:
            continue
        t = types.get(vi.name)
        if t is None or not all(isinstance(d, int) for d in t[1]):
            return 0
        dt = np.dtype(dtypes.to_numpy(t[0]))
        feeds[vi.name] = (rng.standard_normal(t[1]).astype(dt) if dt.kind == "f" else np.zeros(t[1], dt))
    wanted = [n for n in names if n in types and dtypes.NAME_TO_ONNX.get(types[n][0]) is not None]
    probe = ModelProto()
    probe.CopyFrom(model)
    probe.ir_version = min(probe.ir_version, 10)           # onnxruntime 1.31 reads IR <= 13
    outs = {o.name for o in probe.graph.output}
    for n in wanted:
        if n not in outs:
            probe.graph.output.append(helper.make_tensor_value_info(n, dtypes.NAME_TO_ONNX[types[n][0]], None))
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3                      # errors only: no notes on stderr
        sess = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    except Exception:  # noqa: BLE001 - any failure means "no shapes from onnxruntime"
        return 0
    known = {vi.name for vi in g.value_info}
    count = 0
    for n in wanted:
        if n in got and n not in known:
            g.value_info.append(helper.make_tensor_value_info(n, dtypes.NAME_TO_ONNX[types[n][0]],
                                                             list(np.shape(got[n]))))
            count += 1
    return count
