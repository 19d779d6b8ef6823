"""Random small training-step ONNX graphs for the property tests (``test_random_graphs.py``).

``training_steps()`` is a hypothesis strategy for ``RandomGraph``: a float32 ONNX model shaped
like a training step — a forward chain from the data ``x`` and parameters, a ``loss``, a
backward chain that re-reads forward activations and the seed gradient ``dy``, parameter
gradients (``<p>_grad``) and an optimizer update (``<p>.new``, ``<p>.<state>.new``) — or, for
some draws, a forward-only graph. The ingredients are what the rewrites meet in real steps,
and where they went wrong before:

- elementwise chains (Add/Sub/Mul/Div, Neg/Abs/Relu/Tanh/Sigmoid/Exp/Sqrt/Reciprocal, Pow
  with a constant exponent) with broadcasts: bias-like ``[N]`` and ``[1, N]`` operands on
  ``[M, N]`` tensors, ``[M, 1]`` row statistics, scalars, ``[M, 1] ∘ [1, N]`` outer shapes;
- reductions (ReduceSum/ReduceMean/ReduceMax over one axis or all, keepdims both ways —
  they lower to maps with wcr), Softmax/LogSoftmax over any axis, LayerNormalization (with
  its Mean/InvStdDev stash for ``LayerNormalizationGrad``);
- MatMul/Gemm (transposition flags, alpha, a bias; often followed by a pointwise epilogue),
  batched MatMul on rank-3 views, Transpose, Reshape (flatten, split rows into a rank-3
  view, merge axes, size-1 dimensions), and ops on constants alone;
- backward ops of the com.microsoft domain (TanhGrad, SigmoidGrad, ReluGrad,
  SoftmaxGrad_13, LayerNormalizationGrad), weight gradients ``Xᵀ·dY``, bias gradients (a sum
  over rows), and updates written with standard ops (SGD, momentum) or as ``ai.dcstudio``
  AdamW/SGD/Lion ops;
- shared operands (``x * x``), fan-out (an op's operand is the newest value half the time,
  else any live value), several graph outputs (some declared without a shape, an input
  passed through), and tensor names that collide once sanitized or shortened (``a/Mul``,
  ``b/Mul``, ``a_Mul``, ``a.Mul``: two locals both named ``_Mul`` once aliased in map_fusion).

Dimensions are 1..6, so the reference executor runs a graph in milliseconds. Every value
carries a bound on its magnitude and, when positive, a floor; an op is only offered where
its result stays finite and well conditioned (Exp of bounded values, Sqrt/Div/Reciprocal of
values bounded away from 0). ``feeds(graph)`` gives the inputs the tests use (``feeds_for``
with a learning rate of 0.25, so that a wrong gradient shows in the updated parameter).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.feeds import feeds_for
from ir.graph import Graph

MS, STUDIO = "com.microsoft", "ai.dcstudio"
INPUT_MAG = 3.0                  # feeds are N(0, 0.25): |x| < 3 in practice
MAX_MAG = 1e4                    # no value may grow beyond this bound
DIV_FLOOR = 0.05                 # divisors, square roots and reciprocals stay above this
PREFIXES = ("a", "b", "a/b", "a_b", "fwd/layer.0", "bwd/layer.0", "0")
SEPARATORS = ("/", "_", ".")
UNARY = ("Neg", "Abs", "Relu", "Tanh", "Sigmoid", "Exp", "Sqrt", "Reciprocal", "Pow")
BINARY = ("Add", "Sub", "Mul", "Div")
REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax")
OPTIMIZERS = ("sgd", "momentum", "SGD", "AdamW", "Lion", "none")


@dataclass
class Value:
    """A tensor of the graph being built: its shape, a bound on ``|v|``, a positive floor (0 if
    it may be ≤ 0) and its phase (``input``, ``param``, ``const``, ``fwd``, ``bwd``)."""

    name: str
    shape: tuple[int, ...]
    mag: float
    floor: float
    phase: str
    source: str = ""            # the op that made it (backward ops pair with Tanh, Softmax, … outputs)
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RandomGraph:
    """A generated model; its repr is the ONNX text form, so a failing example reads as a graph."""

    model: onnx.ModelProto
    training: bool

    def __repr__(self) -> str:
        return "RandomGraph(\n" + onnx.printer.to_text(self.model.graph) + "\n)"

    def _repr_pretty_(self, printer, cycle) -> None:       # hypothesis prints falsifying examples so
        printer.text(repr(self))


def feeds(graph: Graph) -> dict[str, np.ndarray]:
    """The reference executor's inputs: ``feeds_for`` with a learning rate of 0.25."""
    out = feeds_for(graph)
    for name in ("learning_rate", "lr"):
        if name in out:
            out[name] = np.full_like(out[name], 0.25)
    return out


class Builder:
    """Emits ONNX nodes while tracking every live value (see ``Value``)."""

    def __init__(self, draw, dims: tuple[int, int, int]) -> None:
        self.draw = draw
        self.dims = dims
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.pool: list[Value] = []
        self.names: set[str] = set()
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.input_names: list[str] = []
        self.chain = False                   # the next op reads the newest value
        self.scoped = draw(st.booleans(), label="scoped names")

    # --- names -----------------------------------------------------------------------------

    def fresh(self, op: str) -> str:
        """A new tensor name; in the ``scoped`` style names collide once sanitized or shortened."""
        if not self.scoped:
            cand = [f"v{len(self.names)}"]
        else:
            prefix = self.draw(st.sampled_from(PREFIXES), label="prefix")
            sep = self.draw(st.sampled_from(SEPARATORS), label="sep")
            cand = [f"{prefix}{sep}{op}"] + [f"{p}{s}{op}" for p in PREFIXES for s in SEPARATORS]
        name = next((c for c in cand if c not in self.names), None) or f"n{len(self.names)}/{op}"
        self.names.add(name)
        return name

    def node_name(self, op: str, out: str) -> str:
        """Node names: the output's name, the op type (repeated), or none (the importer picks)."""
        if not self.scoped:
            return out
        return self.draw(st.sampled_from((out, op, "")), label="node name")

    # --- building blocks -------------------------------------------------------------------

    def const(self, array: np.ndarray, label: str = "c") -> str:
        name = self.fresh(label)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def add_input(self, name: str, shape, phase: str, dtype=TensorProto.FLOAT, mag=INPUT_MAG, floor=0.0) -> Value:
        self.names.add(name)
        self.input_names.append(name)
        self.shapes[name] = tuple(shape)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        v = Value(name, tuple(shape), mag, floor, phase)
        if dtype == TensorProto.FLOAT and phase in ("input", "param"):
            self.pool.append(v)
        return v

    def const_value(self, shape, phase: str = "const") -> Value:
        """A float32 initializer in [-1, 1] (deterministic in its shape)."""
        arr = np.linspace(-1.0, 1.0, int(np.prod(shape))).astype(np.float32).reshape(shape)
        v = Value(self.const(arr), tuple(shape), 1.0, 0.0, phase)
        self.pool.append(v)
        return v

    def emit(self, op: str, ins: list[str], outs: list[Value], domain: str = "", **attrs) -> list[Value]:
        name = self.node_name(op, outs[0].name)
        self.nodes.append(helper.make_node(op, ins, [o.name for o in outs], name=name or None,
                                           domain=domain or None, **attrs))
        self.pool.extend(o for o in outs if not o.extra.get("hidden"))
        return outs

    def value(self, op: str, shape, mag: float, floor: float, phase: str, name: str | None = None,
              **extra) -> Value:
        mag = max(mag, floor)
        v = Value(name or self.fresh(op), tuple(int(d) for d in shape), mag, floor, phase, op, extra)
        self.shapes[v.name] = v.shape
        return v

    def pick(self, values: list[Value], label: str) -> Value:
        return self.draw(st.sampled_from(values), label=label)

    def operand(self, values: list[Value]) -> Value:
        """An op's first operand: often the newest value (chains to fuse), else any (fan-out)."""
        if self.chain or self.draw(st.booleans(), label="chain"):
            self.chain = False
            return values[-1]
        return self.pick(values, "operand")

    def axes(self, axes) -> str:
        return self.const(np.array(axes, np.int64), "axes")


# --- one random op ----------------------------------------------------------------------------

def _unary(b: Builder, phase: str) -> Value | None:
    a = b.operand(b.pool)
    ok = [op for op in UNARY if _unary_ok(op, a)]
    op = b.draw(st.sampled_from(ok), label="unary")
    ins = [a.name]
    if op == "Pow":
        exps = [2.0, 3.0] + ([0.5, 1.5] if a.floor >= DIV_FLOOR else [])
        e = b.draw(st.sampled_from([x for x in exps if a.mag ** x <= MAX_MAG]), label="exponent")
        ins.append(b.const(np.array(e, np.float32), "exponent"))
        mag, floor = a.mag ** e, (a.floor ** e if a.floor > 0 else 0.0)
    else:
        mag, floor = _unary_bounds(op, a)
    return b.emit(op, ins, [b.value(op, a.shape, mag, floor, phase)])[0]


def _unary_ok(op: str, a: Value) -> bool:
    if op == "Exp":
        return a.mag <= 6
    if op in ("Sqrt", "Reciprocal"):
        return a.floor >= DIV_FLOOR
    if op == "Pow":
        return a.mag ** 2 <= MAX_MAG
    return True


def _unary_bounds(op: str, a: Value) -> tuple[float, float]:
    return {"Neg": (a.mag, 0.0), "Abs": (a.mag, a.floor), "Relu": (a.mag, a.floor),
            "Tanh": (1.0, math.tanh(a.floor)), "Sigmoid": (1.0, 1 / (1 + math.exp(min(a.mag, 80.0)))),
            "Exp": (math.exp(min(a.mag, 80.0)), math.exp(-min(a.mag, 80.0))),
            "Sqrt": (math.sqrt(a.mag), math.sqrt(a.floor)),
            "Reciprocal": (1 / max(a.floor, 1e-30), 1 / a.mag)}[op]


def _broadcasts(a: tuple, b: tuple) -> tuple | None:
    try:
        out = np.broadcast_shapes(a, b)
    except ValueError:
        return None
    return out if len(out) <= 3 else None


def _binary(b: Builder, phase: str) -> Value | None:
    a = b.operand(b.pool)
    partners = [v for v in b.pool if _broadcasts(a.shape, v.shape) is not None]
    kind = b.draw(st.sampled_from(("value", "same", "scalar", "row", "col")), label="operand")
    if kind == "same":
        other = a
    elif kind == "value":
        other = b.pick(partners, "b")
    elif kind == "scalar":
        c = b.draw(st.sampled_from([0.5, 2.0, -1.5]), label="scalar")
        other = Value(b.const(np.array(c, np.float32), "scalar"), (), abs(c), max(c, 0.0), "const")
    elif kind == "col" and len(a.shape) == 2:
        other = b.const_value((a.shape[0], 1))
    else:
        other = b.const_value((a.shape[-1] if a.shape else b.dims[1],))
    ops = [op for op in BINARY if op != "Div" or other.floor >= DIV_FLOOR]
    op = b.draw(st.sampled_from(ops), label="binary")
    x, y = (other, a) if op != "Div" and b.draw(st.booleans(), label="swap") else (a, other)
    mag, floor = {"Add": (x.mag + y.mag, x.floor + y.floor if x.floor and y.floor else 0.0),
                  "Sub": (x.mag + y.mag, 0.0), "Mul": (x.mag * y.mag, x.floor * y.floor),
                  "Div": (x.mag / max(y.floor, 1e-30), x.floor / y.mag)}[op]
    if mag > MAX_MAG:
        return None
    return b.emit(op, [x.name, y.name], [b.value(op, _broadcasts(x.shape, y.shape), mag, floor, phase)])[0]


def _reduce(b: Builder, phase: str) -> Value | None:
    a = b.operand(b.pool)
    op = b.draw(st.sampled_from(REDUCE), label="reduce")
    keep = b.draw(st.booleans(), label="keepdims")
    axis = b.draw(st.sampled_from(list(range(len(a.shape))) + [None]), label="axis")
    axes = list(range(len(a.shape))) if axis is None else [axis]
    shape = tuple(1 if k in axes else d for k, d in enumerate(a.shape) if keep or k not in axes)
    count = int(np.prod([a.shape[k] for k in axes]))
    mag = a.mag * count if op == "ReduceSum" else a.mag
    floor = a.floor * (count if op == "ReduceSum" else 1)
    ins, attrs = [a.name], {"keepdims": int(keep)}
    if axis is not None:
        if op == "ReduceSum":
            ins.append(b.axes([axis]))
        else:
            attrs["axes"] = [axis]
    return b.emit(op, ins, [b.value(op, shape, mag, floor, phase)], **attrs)[0]


def _softmax(b: Builder, phase: str) -> Value | None:
    cands = [v for v in b.pool if len(v.shape) >= 2 and v.mag <= 50]
    if not cands:
        return None
    a = b.operand(cands)
    op = b.draw(st.sampled_from(("Softmax", "LogSoftmax")), label="softmax")
    axis = b.draw(st.sampled_from(tuple(range(-1, len(a.shape) - 1))), label="axis")
    n = a.shape[axis]
    mag, floor = (1.0, math.exp(-2 * a.mag) / n) if op == "Softmax" else (2 * a.mag + math.log(n) + 1, 0.0)
    return b.emit(op, [a.name], [b.value(op, a.shape, mag, floor, phase, axis=axis)], axis=axis)[0]


def _layernorm(b: Builder, phase: str) -> Value | None:
    cands = [v for v in b.pool if len(v.shape) >= 2 and v.shape[-1] >= 2 and v.mag <= 100]
    if not cands:
        return None
    a = b.operand(cands)
    q = a.shape[-1]
    params = [v for v in b.pool if v.shape == (q,) and v.phase in ("param", "const")]
    scale = b.pick(params, "scale") if params and b.draw(st.booleans(), label="param scale") else b.const_value((q,))
    ins = [a.name, scale.name]
    if b.draw(st.booleans(), label="bias"):
        ins.append(b.const_value((q,)).name)
    y = b.value("LayerNorm", a.shape, math.sqrt(q) * scale.mag + 1.0, 0.0, phase)
    outs = [y]
    if b.draw(st.booleans(), label="stash"):
        stat = a.shape[:-1] + (1,)
        outs += [b.value("Mean", stat, a.mag, 0.0, phase), b.value("InvStdDev", stat, 1 / math.sqrt(1e-5), 0.0, phase,
                                                                     hidden=True)]
        y.extra["ln"] = (a.name, scale.name, outs[1].name, outs[2].name)
    return b.emit("LayerNormalization", ins, outs, axis=-1, epsilon=1e-5)[0]


def _contraction(b: Builder, phase: str) -> Value | None:
    mats = [v for v in b.pool if len(v.shape) == 2]
    batched = [v for v in b.pool if len(v.shape) == 3]
    if batched and b.draw(st.booleans(), label="batched"):
        return _batched_matmul(b, b.operand(batched), phase)
    if not mats:
        return None
    a = b.operand(mats)
    ta = b.draw(st.booleans(), label="transA")
    p, q = a.shape[::-1] if ta else a.shape
    rhs = [v for v in mats if q in v.shape and a.mag * v.mag * q <= MAX_MAG]
    if rhs and b.draw(st.booleans(), label="value B"):
        w = b.pick(rhs, "B")
    else:
        w = b.const_value((q, b.draw(st.sampled_from(b.dims), label="R")))
    tb = w.shape[0] != q
    r = w.shape[0] if tb else w.shape[1]
    if a.mag * w.mag * q > MAX_MAG:
        return None
    out = b.value("MatMul", (p, r), a.mag * w.mag * q + 1, 0.0, phase)
    if not (ta or tb) and b.draw(st.booleans(), label="MatMul"):
        return b.emit("MatMul", [a.name, w.name], [out])[0]
    attrs = {"transA": int(ta), "transB": int(tb), "alpha": b.draw(st.sampled_from((1.0, 0.5)), label="alpha")}
    out.mag *= attrs["alpha"]
    ins = [a.name, w.name]
    if b.draw(st.booleans(), label="C"):
        ins.append(b.const_value(b.draw(st.sampled_from(((r,), (p, r), (1, r))), label="C shape")).name)
        out.mag += 1
    return b.emit("Gemm", ins, [out], **attrs)[0]


def _batched_matmul(b: Builder, a: Value, phase: str) -> Value | None:
    """[B, P, Q] @ [Q, R] (a weight) or @ [B, Q, R] (another batched value)."""
    q = a.shape[-1]
    rhs = [v for v in b.pool if v.shape[-2:-1] == (q,) and len(v.shape) in (2, 3) and v.shape[:-2] in ((), a.shape[:1])
           and a.mag * v.mag * q <= MAX_MAG]
    w = b.pick(rhs, "B") if rhs and b.draw(st.booleans(), label="value B") else \
        b.const_value((q, b.draw(st.sampled_from(b.dims), label="R")))
    if a.mag * w.mag * q > MAX_MAG:
        return None
    out = b.value("MatMul", a.shape[:-1] + w.shape[-1:], a.mag * w.mag * q, 0.0, phase)
    return b.emit("MatMul", [a.name, w.name], [out])[0]


def _transpose(b: Builder, phase: str) -> Value | None:
    cands = [v for v in b.pool if len(v.shape) >= 2]
    if not cands:
        return _reshape(b, phase)
    a = b.operand(cands)
    perms = [p for p in itertools.permutations(range(len(a.shape))) if list(p) != sorted(p)]
    perm = b.draw(st.sampled_from(perms), label="perm")
    out = b.value("Transpose", tuple(a.shape[k] for k in perm), a.mag, a.floor, phase)
    return b.emit("Transpose", [a.name], [out], perm=list(perm))[0]


def _reshape(b: Builder, phase: str) -> Value | None:
    a = b.operand(b.pool)
    n = int(np.prod(a.shape))
    shapes = [(n,), (1, n), (n, 1), a.shape] + ([a.shape[::-1]] if len(a.shape) == 2 else [])
    if len(a.shape) == 2:                   # split the rows: [P, Q] -> [p, P / p, Q]
        shapes += [(d, a.shape[0] // d, a.shape[1]) for d in range(1, a.shape[0] + 1) if a.shape[0] % d == 0]
    if len(a.shape) == 3:                   # merge two axes
        shapes += [(a.shape[0] * a.shape[1], a.shape[2]), (a.shape[0], a.shape[1] * a.shape[2])]
    shape = b.draw(st.sampled_from(shapes), label="reshape")
    return b.emit("Reshape", [a.name, b.const(np.array(shape, np.int64), "shape")],
                  [b.value("Reshape", shape, a.mag, a.floor, phase)])[0]


def _grad_op(b: Builder, phase: str) -> Value | None:
    """A com.microsoft backward op on a forward value and a backward value of its shape."""
    fwd = [v for v in b.pool if v.phase == "fwd" and v.source in ("Tanh", "Sigmoid", "Relu", "Softmax", "LayerNorm")]
    pairs = [(f, d) for f in fwd for d in b.pool if d.phase == "bwd" and d.shape == f.shape and d.mag <= 100]
    if not pairs:
        return None
    f, d = b.draw(st.sampled_from(pairs), label="grad pair")
    if f.source == "LayerNorm":
        if "ln" not in f.extra:
            return None
        x, scale, mean, inv = f.extra["ln"]
        out = b.value("LayerNormalizationGrad", f.shape, d.mag * 1e3, 0.0, phase)
        return b.emit("LayerNormalizationGrad", [d.name, x, scale, mean, inv], [out], domain=MS, axis=-1)[0]
    if f.source == "Softmax":
        out = b.value("SoftmaxGrad", f.shape, 2 * d.mag, 0.0, phase)
        return b.emit("SoftmaxGrad_13", [d.name, f.name], [out], domain=MS, axis=f.extra.get("axis", -1))[0]
    op = {"Tanh": "TanhGrad", "Sigmoid": "SigmoidGrad", "Relu": "ReluGrad"}[f.source]
    return b.emit(op, [d.name, f.name], [b.value(op, f.shape, d.mag, 0.0, phase)], domain=MS)[0]


def _on_constants(b: Builder, phase: str) -> Value | None:
    """An elementwise or layout op whose operands are all constants (``constant_folding``)."""
    pool = b.pool
    b.pool = [v for v in pool if v.phase == "const"] or [b.const_value((b.dims[1],))]
    try:
        out = b.draw(st.sampled_from((_unary, _binary, _transpose, _reshape)), label="constant op")(b, phase)
    finally:
        b.pool = pool
    if out is not None:
        pool.append(out)
    return out


OPS = {"unary": _unary, "binary": _binary, "reduce": _reduce, "softmax": _softmax, "layernorm": _layernorm,
       "contraction": _contraction, "transpose": _transpose, "reshape": _reshape, "constants": _on_constants}
KINDS = ("unary", "binary", "reduce", "unary", "binary", "softmax", "layernorm", "contraction", "transpose",
         "reshape", "grad", "constants", "binary")       # elementwise ops more likely: chains to fuse


def _random_ops(b: Builder, count: int, phase: str, menu: dict) -> None:
    for _ in range(count):
        kind = b.draw(st.sampled_from([k for k in KINDS if k in menu]), label=f"{phase} op")
        out = menu[kind](b, phase)
        if kind == "contraction" and out is not None and b.draw(st.booleans(), label="epilogue"):
            b.chain = True                   # bias, activation, scale or residual on the product
            b.draw(st.sampled_from((_unary, _binary)), label="epilogue op")(b, phase)
        b.chain = False


# --- the training step ------------------------------------------------------------------------

def _gradient(b: Builder, p: Value) -> str:
    """Emit ``<p>_grad`` from backward values: a bias gradient (sum over rows), a weight
    gradient (``Xᵀ·dY``), a backward value of p's shape times a scale, or ``p·Σ(bwd)``."""
    name = f"{p.name}_grad"
    b.names.add(name)
    bwd = [v for v in b.pool if v.phase == "bwd"]
    rows = [v for v in bwd if len(v.shape) == len(p.shape) + 1 and v.shape[1:] == p.shape]
    same = [v for v in bwd if v.shape == p.shape]
    gemm = [(x, d) for x in b.pool if len(p.shape) == 2 and len(x.shape) == 2 and x.shape[1] == p.shape[0]
            for d in bwd if len(d.shape) == 2 and d.shape == (x.shape[0], p.shape[1])]
    kinds = [k for k, ok in (("rows", rows), ("same", same), ("gemm", gemm), ("decay", True)) if ok]
    kind = b.draw(st.sampled_from(kinds), label="gradient")
    if kind == "rows":
        d = b.pick(rows, "d")
        out = b.value("ReduceSum", p.shape, d.mag * d.shape[0], 0.0, "bwd", name=name)
        b.emit("ReduceSum", [d.name, b.axes([0])], [out], keepdims=0)
    elif kind == "same":
        d = b.pick(same, "d")
        b.emit("Mul", [d.name, b.const(np.array(0.5, np.float32), "scale")],
               [b.value("Mul", p.shape, d.mag, 0.0, "bwd", name=name)])
    elif kind == "gemm":
        x, d = b.draw(st.sampled_from(gemm), label="gemm pair")
        b.emit("Gemm", [x.name, d.name], [b.value("Gemm", p.shape, x.mag * d.mag * x.shape[0], 0.0, "bwd",
                                                   name=name)], transA=1)
    else:
        d = b.pick(bwd, "d") if bwd else b.pick(b.pool, "d")
        s = b.emit("ReduceMean", [d.name], [b.value("ReduceMean", (), d.mag, 0.0, "bwd")], keepdims=0)[0]
        b.emit("Mul", [p.name, s.name], [b.value("Mul", p.shape, p.mag * s.mag, 0.0, "bwd", name=name)])
    return name


def _update(b: Builder, p: Value, grad: str, lr: str, lr1: str, step: str) -> None:
    """``<p>.new`` (and new state) from the gradient with standard ops or an ai.dcstudio op."""
    kind = b.draw(st.sampled_from(OPTIMIZERS), label="optimizer")
    if kind == "none":
        b.outputs.append(grad)
        return
    if b.draw(st.booleans(), label="emit gradient"):
        b.outputs.append(grad)
    new = f"{p.name}.new"
    b.names.add(new)
    if kind in ("sgd", "momentum"):
        d = grad
        if kind == "momentum":
            m = b.add_input(f"{p.name}.momentum", p.shape, "state", mag=0.01)
            mu = b.const(np.array(0.9, np.float32), "mu")
            scaled = b.emit("Mul", [mu, m.name], [b.value("Mul", p.shape, 0.01, 0.0, "bwd")])[0]
            d = f"{m.name}.new"
            b.emit("Add", [scaled.name, grad], [b.value("Add", p.shape, 0.0, 0.0, "bwd", name=d)])
            b.outputs.append(d)
        step_v = b.emit("Mul", [lr, d], [b.value("Mul", p.shape, 0.0, 0.0, "bwd")])[0]
        b.emit("Sub", [p.name, step_v.name], [b.value("Sub", p.shape, 0.0, 0.0, "bwd", name=new)])
        b.outputs.append(new)
        return
    states = ("m", "v") if kind == "AdamW" else ("m",)
    ins = [lr1] + ([step] if kind == "AdamW" else []) + [p.name, grad]
    outs = [new]
    for s in states:
        ins.append(b.add_input(f"{p.name}.{s}", p.shape, "state", mag=0.01).name)
        outs.append(f"{p.name}.{s}.new")
    b.shapes.update((o, p.shape) for o in outs)
    attrs = {"AdamW": {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "weight_decay": 0.01, "adam_mode": 1},
             "SGD": {"momentum": 0.9}, "Lion": {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1}}[kind]
    b.nodes.append(helper.make_node(kind, ins, outs, name=f"{p.name}/{kind}", domain=STUDIO, **attrs))
    b.outputs.extend(outs)


def _finish(b: Builder) -> None:
    """Graph outputs: a few extra live values (fan-out to the interface), or an input passed through."""
    live = [v.name for v in b.pool if v.phase in ("fwd", "bwd") and v.name not in b.outputs + b.input_names]
    live += [vi.name for vi in b.inputs if vi.name in ("x", "dy")]
    extra = b.draw(st.lists(st.sampled_from(live), max_size=2, unique=True), label="extra outputs") if live else []
    if not b.outputs and not extra and live:
        extra = [live[-1]]
    b.outputs.extend(extra)


@st.composite
def training_steps(draw, training: bool | None = None, min_ops: int = 2, max_ops: int = 6) -> RandomGraph:
    """A ``RandomGraph`` (see the module docstring); ``training`` None draws either kind."""
    if training is None:
        training = draw(st.booleans(), label="training")
    dims = tuple(draw(st.integers(1, 6), label=d) for d in "MNK")
    m, n, k = dims
    b = Builder(draw, dims)
    b.add_input("x", (m, n), "input")
    params = [b.add_input("w", (n,), "param" if training else "input")]
    if draw(st.booleans(), label="matrix parameter"):
        params.append(b.add_input("W", draw(st.sampled_from(((n, k), (k, n))), label="W shape"),
                                  "param" if training else "input"))
    if draw(st.booleans(), label="constant"):
        b.const_value((n,))
    _random_ops(b, draw(st.integers(min_ops, max_ops), label="forward ops"), "fwd", OPS)
    if training:
        _backward(b, draw, params, min_ops, max_ops)
    _finish(b)
    declared = draw(st.booleans(), label="declare output shapes")
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, b.shapes[o] if declared else None)
               for o in b.outputs]
    graph = helper.make_graph(b.nodes, "random", b.inputs, outputs, b.inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1), helper.make_opsetid(STUDIO, 1)]
    return RandomGraph(helper.make_model(graph, opset_imports=opsets), training)


def _backward(b: Builder, draw, params: list[Value], min_ops: int, max_ops: int) -> None:
    fwd = [v for v in b.pool if v.phase == "fwd"]
    last = fwd[-1] if fwd else b.pool[0]
    op = draw(st.sampled_from(("ReduceSum", "ReduceMean")), label="loss")
    b.names.add("loss")
    b.emit(op, [last.name], [b.value(op, (), last.mag, 0.0, "loss", name="loss")], keepdims=0)
    b.pool.pop()                                  # the loss is read by nothing
    b.outputs.append("loss")
    b.add_input("dy", last.shape, "input")
    b.pool[-1].phase = "bwd"
    menu = dict(OPS, grad=_grad_op)
    _random_ops(b, draw(st.integers(min_ops, max_ops), label="backward ops"), "bwd", menu)
    lr = b.add_input("learning_rate", (), "lr")
    lr1 = b.add_input("lr", (1,), "lr")
    step = b.add_input("step", (1,), "step", dtype=TensorProto.INT64)
    for p, grad in [(p, _gradient(b, p)) for p in params]:
        _update(b, p, grad, lr.name, lr1.name, step.name)
    used = {i for node in b.nodes for i in node.input}
    keep = [vi for vi in b.inputs if vi.name in used or vi.name == "x"]
    del b.inputs[:]
    b.inputs.extend(keep)

