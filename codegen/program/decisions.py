"""Which containers reach a decision: the forward convolutions that must sum exactly.

A float32 conv sums C·kh·kw products in an order of its own (about 1e-6 relative). Where its result,
or anything computed from it, feeds a choice (a ReLU's mask, a max-pool's argmax, a comparison, a
select, max/min, rounding), that rounding flips a choice about once per ResNet-18 step at batch 8, and
a flipped choice changes every gradient upstream of it by a whole term: a check against the float64
truth then fails by chance. So such a conv sums in float64 (``exact=True``, the CPU backend's
``convolution.conv2d(wide=True)``). Where nothing downstream decides (EfficientNet: SiLU, sigmoid,
BatchNorm, sums, AdamW), a float32 conv errs like onnxruntime's own fp32 run, from which the check's
tolerance is derived, and it runs as one float32 GEMM (a 1×1 conv then needs no im2col copy).

A whitelist: an op is smooth only if it is known to be (``SMOOTH_OPS``), else every input it reads
counts as decided on (Where: its condition); in a map, the inputs that reach a select's condition, a
comparison, max/min, rounding or an integer cast (through the map's local containers), and every
input of a max/min reduction.
"""
from __future__ import annotations

from ir import dtypes
from ir import expr as E
from ir.graph import Graph
from ir.nodes import AccessNode, MapNode, OpNode

SMOOTH_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Erf", "Softplus",
    "MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose", "ConvWeightGrad", "FusedMatMul", "BatchNormalization",
    "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceSumSquare", "GlobalAveragePool", "AveragePool",
    "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss", "Sum", "Mean", "Reshape", "Transpose", "Flatten",
    "Squeeze", "Unsqueeze", "Identity", "Concat", "Split", "Slice", "Expand", "Tile", "Shape", "Size",
    "ConstantOfShape", "Constant", "GroupedGemm"})
"""Ops continuous in their float inputs (Softmax's max is a shift it cancels)."""

SMOOTH_EXPR = frozenset({"neg", "exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "recip", "log1p", "expm1",
                         "add", "sub", "mul", "div", "pow"})



def decision_vars(e: E.Expr) -> set[str]:
    """The variables of ``e`` that feed a choice: a select's condition, a comparison's or max/min's
    operands, rounding, an integer cast. A select's branches pass through unchanged."""
    if isinstance(e, (E.Const, E.Var)):
        return set()
    if isinstance(e, E.Select):
        return set(E.free_vars(e.cond)) | decision_vars(e.a) | decision_vars(e.b)
    if isinstance(e, E.Cast) and e.dtype in dtypes.FLOAT_TYPES or isinstance(e, (E.Un, E.Bin)) and e.op in SMOOTH_EXPR:
        out: set[str] = set()
        for c in E.children(e):
            out |= decision_vars(c)
        return out
    return set(E.free_vars(e))


def decided_inputs(node) -> set[str]:
    """The containers ``node`` reads whose values feed a choice in it (every input of an op that is not
    known to be smooth)."""
    if isinstance(node, AccessNode):
        return set()
    if isinstance(node, OpNode):
        smooth = node.op_type in SMOOTH_OPS and node.domain in ("", "ai.onnx", "ai.dcstudio", "com.microsoft")
        if smooth:
            return set()
        names = node.input_names()
        picked = names[:1] if node.op_type == "Where" and not node.domain else names   # Where: its condition
        return {n for n in picked if n is not None}
    if not isinstance(node, MapNode):
        return set()
    if any(m.wcr not in (None, "sum") for m in node.outputs):
        return set(node.input_names())
    deps: dict[str, set[str]] = {}                 # a map-local container -> the containers it is computed from
    local = set(node.locals)
    for scope in (m for m, _ in node.walk() if isinstance(m, MapNode)):
        local |= set(scope.locals)
    found: set[str] = set()

    def sources(names) -> set[str]:
        out: set[str] = set()
        for name in names:
            out |= deps.get(name, set()) if name in local else {name}
        return out
    for inner, _ in node.walk():
        if isinstance(inner, MapNode):
            continue
        ins = {var: m.container for var, m in inner.inputs.items()}
        target = inner.output.container
        if inner.output.wcr not in (None, "sum"):
            found |= sources(ins.values())
        else:
            found |= sources(ins[v] for v in decision_vars(inner.expr) if v in ins)
        if target in local:
            deps[target] = deps.get(target, set()) | sources(ins.values())
    return found


def reaching(graph: Graph) -> set[str]:
    """Every container from which a choice is reachable (walking back from what each node decides on
    through producers)."""
    marked: set[str] = set()
    stack = [name for node in graph.nodes.values() for name in decided_inputs(node)]
    while stack:
        name = stack.pop()
        if name in marked:
            continue
        marked.add(name)
        producer = graph.producer(name)
        if producer is not None:
            stack.extend(n for n in producer.input_names() if n is not None and n not in marked)
    return marked
