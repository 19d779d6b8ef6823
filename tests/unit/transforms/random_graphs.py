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
  SoftmaxGrad_13, LayerNormalizationGrad), weight gradients ``Xᵀ·dY`` (as a Gemm, or as a 1×1
  conv's transposed-batch Conv between transposes, as autodiff writes it), bias gradients (a sum
  over rows), and updates written with standard ops (SGD, momentum) or as ``ai.dcstudio``
  AdamW/SGD/Lion ops;
- with ``concat=True``, Concat (of a value and others that agree on every other axis, itself
  included), Split and Slice, drawn often: kernels that read concatenations (DenseNet);
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

from dataclasses import dataclass

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper

from codegen.numpy_ref.feeds import feeds_for
from ir.graph import Graph
from tests.unit.transforms.random_ops import CONCAT_OPS, MS, OPS, Builder, Value, grad_op, random_ops

STUDIO = "ai.dcstudio"
OPTIMIZERS = ("sgd", "momentum", "SGD", "AdamW", "Lion", "none")


@dataclass(frozen=True)
class RandomGraph:
    """A generated model; its repr is the ONNX text form, so a failing example reads as a graph."""

    model: onnx.ModelProto
    training: bool

    def __repr__(self) -> str:
        return "RandomGraph(\n" + onnx.printer.to_text(self.model.graph) + "\n)"

    def _repr_pretty_(self, printer, cycle) -> None:       # how hypothesis prints a falsifying example
        printer.text(repr(self))


def feeds(graph: Graph) -> dict[str, np.ndarray]:
    """The reference executor's inputs: ``feeds_for`` with a learning rate of 0.25."""
    out = feeds_for(graph)
    for name in ("learning_rate", "lr"):
        if name in out:
            out[name] = np.full_like(out[name], 0.25)
    return out


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
    conv = [(x, d) for x in b.pool if len(p.shape) == 2 and len(x.shape) == 2 and x.shape[1] == p.shape[1]
            for d in bwd if len(d.shape) == 2 and d.shape == (x.shape[0], p.shape[0])]
    kinds = [k for k, ok in (("rows", rows), ("same", same), ("gemm", gemm), ("conv", conv), ("decay", True)) if ok]
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
    elif kind == "conv":
        _conv_gradient(b, *b.draw(st.sampled_from(conv), label="conv pair"), p, name)
    else:
        d = b.pick(bwd, "d") if bwd else b.pick(b.pool, "d")
        s = b.emit("ReduceMean", [d.name], [b.value("ReduceMean", (), d.mag, 0.0, "bwd")], keepdims=0)[0]
        b.emit("Mul", [p.name, s.name], [b.value("Mul", p.shape, p.mag * s.mag, 0.0, "bwd", name=name)])
    return name


def _conv_gradient(b: Builder, x: Value, d: Value, p: Value, name: str) -> None:
    """``<p>_grad = Dᵀ·X`` written the way autodiff writes a 1×1 conv's weight gradient: X (r, c) and
    D (r, a) as (1, c, r, 1) and (1, a, r, 1) images, their first two axes swapped, a Conv with D as
    the (r, 1) kernel, its result (c, a, 1, 1) swapped back and reshaped to p's (a, c)."""
    (r, c), a = x.shape, d.shape[1]
    swap = [1, 0, 2, 3]
    images = []
    for v, ch in ((x, c), (d, a)):
        t = b.emit("Transpose", [v.name], [b.value("Transpose", (ch, r), v.mag, 0.0, "bwd")], perm=[1, 0])[0]
        img = b.emit("Reshape", [t.name, b.const(np.array([1, ch, r, 1], np.int64), "shape")],
                     [b.value("Reshape", (1, ch, r, 1), v.mag, 0.0, "bwd")])[0]
        images.append(b.emit("Transpose", [img.name], [b.value("Transpose", (ch, 1, r, 1), v.mag, 0.0, "bwd")],
                             perm=swap)[0])
    raw = b.emit("Conv", [images[0].name, images[1].name],
                 [b.value("Conv", (c, a, 1, 1), x.mag * d.mag * r, 0.0, "bwd")], kernel_shape=[r, 1])[0]
    back = b.emit("Transpose", [raw.name], [b.value("Transpose", (a, c, 1, 1), raw.mag, 0.0, "bwd")], perm=swap)[0]
    b.emit("Reshape", [back.name, b.const(np.array([a, c], np.int64), "shape")],
           [b.value("Reshape", p.shape, raw.mag, 0.0, "bwd", name=name)])


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
def training_steps(draw, training: bool | None = None, min_ops: int = 2, max_ops: int = 6,
                   concat: bool = False) -> RandomGraph:
    """A ``RandomGraph`` (see the module docstring); ``training`` None draws either kind; ``concat``
    adds Concat, Split and Slice to the menu, drawn often (DenseNet-like graphs)."""
    menu = CONCAT_OPS if concat else OPS
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
    random_ops(b, draw(st.integers(min_ops, max_ops), label="forward ops"), "fwd", menu)
    if training:
        _backward(b, draw, params, min_ops, max_ops, menu)
    _finish(b)
    declared = draw(st.booleans(), label="declare output shapes")
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, b.shapes[o] if declared else None)
               for o in b.outputs]
    graph = helper.make_graph(b.nodes, "random", b.inputs, outputs, b.inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1), helper.make_opsetid(STUDIO, 1)]
    return RandomGraph(helper.make_model(graph, opset_imports=opsets), training)


def _backward(b: Builder, draw, params: list[Value], min_ops: int, max_ops: int, menu: dict) -> None:
    fwd = [v for v in b.pool if v.phase == "fwd"]
    last = fwd[-1] if fwd else b.pool[0]
    op = draw(st.sampled_from(("ReduceSum", "ReduceMean")), label="loss")
    b.names.add("loss")
    b.emit(op, [last.name], [b.value(op, (), last.mag, 0.0, "loss", name="loss")], keepdims=0)
    b.pool.pop()                                  # the loss is read by nothing
    b.outputs.append("loss")
    b.add_input("dy", last.shape, "input")
    b.pool[-1].phase = "bwd"
    random_ops(b, draw(st.integers(min_ops, max_ops), label="backward ops"), "bwd", dict(menu, grad=grad_op))
    lr = b.add_input("learning_rate", (), "lr")
    lr1 = b.add_input("lr", (1,), "lr")
    step = b.add_input("step", (1,), "step", dtype=TensorProto.INT64)
    for p, grad in [(p, _gradient(b, p)) for p in params]:
        _update(b, p, grad, lr.name, lr1.name, step.name)
    used = {i for node in b.nodes for i in node.input}
    keep = [vi for vi in b.inputs if vi.name in used or vi.name == "x"]
    del b.inputs[:]
    b.inputs.extend(keep)
