"""The ops of the random graphs (``random_graphs.py`` says what is generated and why).

``Builder`` emits ONNX nodes and tracks every live ``Value`` with its shape, a bound on its
magnitude, a positive floor and its phase; ``random_ops(b, count, phase, menu)`` appends
``count`` ops drawn from ``KINDS``, one generator per family (``OPS``, plus ``grad_op`` for
the backward pass). A generator only offers an op where its result stays finite and well
conditioned, and returns None when nothing in the pool fits.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
INPUT_MAG = 3.0                  # feeds are N(0, 0.25): |x| < 3 in practice
MAX_MAG = 1e4                    # no value may grow beyond this bound
DIV_FLOOR = 0.05                 # divisors, square roots and reciprocals stay above this
PREFIXES = ("a", "b", "a/b", "a_b", "fwd/layer.0", "bwd/layer.0", "0")
SEPARATORS = ("/", "_", ".")
UNARY = ("Neg", "Abs", "Relu", "Tanh", "Sigmoid", "Exp", "Sqrt", "Reciprocal", "Pow")
BINARY = ("Add", "Sub", "Mul", "Div")
REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax")


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
        """A float32 initializer in [-1, 1], deterministic but with no symmetry: an evenly spaced
        one sums to exactly 0, and outputs that are exactly 0 are rounding noise to compare."""
        rng = np.random.default_rng(len(self.inits))
        arr = rng.uniform(-1.0, 1.0, tuple(shape)).astype(np.float32)
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
    if a.extra.get("zero_sum") in axes:
        op = "ReduceMax"                     # its sum is exactly 0: only rounding noise to compare
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
    # rows of 3 or more: over 2 columns x̂ = ±1, and sums of the output across rows cancel to noise
    cands = [v for v in b.pool if len(v.shape) >= 2 and v.shape[-1] >= 3 and v.mag <= 100]
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


def _concat(b: Builder, phase: str) -> Value | None:
    """Concat along one axis of values that agree on every other axis (a value beside itself, a
    DenseNet's features beside new ones), or Split / Slice of one axis (the concat's gradient)."""
    a = b.operand(b.pool)
    if not a.shape:
        return None
    axis = b.draw(st.sampled_from(range(len(a.shape))), label="concat axis")
    zero = a.extra.get("zero_sum")
    keep = {} if zero is None or zero == axis else {"zero_sum": zero}    # sums along another axis stay 0
    if b.draw(st.booleans(), label="concat or split"):
        fits = [v for v in b.pool if len(v.shape) == len(a.shape)
                and all(d == e for k, (d, e) in enumerate(zip(v.shape, a.shape)) if k != axis)]
        parts = [a] + b.draw(st.lists(st.sampled_from(fits), min_size=1, max_size=2), label="concat parts")
        shape = a.shape[:axis] + (sum(v.shape[axis] for v in parts),) + a.shape[axis + 1:]
        keep = keep if all(v.extra.get("zero_sum") == zero for v in parts) else {}
        out = b.value("Concat", shape, max(v.mag for v in parts), min(v.floor for v in parts), phase, **keep)
        return b.emit("Concat", [v.name for v in parts], [out], axis=axis)[0]
    n = a.shape[axis]
    if n < 2:
        return None
    cut = b.draw(st.integers(1, n - 1), label="cut")
    if b.draw(st.booleans(), label="split or slice"):
        outs = [b.value("Split", a.shape[:axis] + (d,) + a.shape[axis + 1:], a.mag, a.floor, phase, **keep)
                for d in (cut, n - cut)]
        return b.emit("Split", [a.name, b.const(np.array([cut, n - cut], np.int64), "split")], outs, axis=axis)[-1]
    out = b.value("Slice", a.shape[:axis] + (n - cut,) + a.shape[axis + 1:], a.mag, a.floor, phase, **keep)
    ins = [a.name] + [b.const(np.array([v], np.int64), k) for k, v in (("starts", cut), ("ends", n), ("axes", axis))]
    return b.emit("Slice", ins, [out])[0]


def grad_op(b: Builder, phase: str) -> Value | None:
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
        out = b.value("LayerNormalizationGrad", f.shape, d.mag * 1e3, 0.0, phase, zero_sum=len(f.shape) - 1)
        return b.emit("LayerNormalizationGrad", [d.name, x, scale, mean, inv], [out], domain=MS, axis=-1)[0]
    if f.source == "Softmax":
        out = b.value("SoftmaxGrad", f.shape, 2 * d.mag, 0.0, phase, zero_sum=f.extra["axis"] % len(f.shape))
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
CONCAT_OPS = dict(OPS, concat=_concat)   # the menus of ``training_steps(concat=True)``
KINDS = ("unary", "binary", "reduce", "unary", "binary", "softmax", "layernorm", "contraction", "transpose",
         "reshape", "grad", "constants", "binary")
CONCAT_KINDS = ("concat",) * 3           # added when the menu offers it (concat-heavy graphs)       # elementwise ops more likely: chains to fuse


def random_ops(b: Builder, count: int, phase: str, menu: dict) -> None:
    """Append ``count`` ops of the kinds in ``menu`` (``OPS``, and ``grad`` in the backward pass);
    a contraction is often followed by a pointwise op on its product (a GEMM epilogue)."""
    for _ in range(count):
        kinds = KINDS + (CONCAT_KINDS if "concat" in menu else ())
        kind = b.draw(st.sampled_from([k for k in kinds if k in menu]), label=f"{phase} op")
        out = menu[kind](b, phase)
        if kind == "contraction" and out is not None and b.draw(st.booleans(), label="epilogue"):
            b.chain = True                   # bias, activation, scale or residual on the product
            b.draw(st.sampled_from((_unary, _binary)), label="epilogue op")(b, phase)
        b.chain = False
