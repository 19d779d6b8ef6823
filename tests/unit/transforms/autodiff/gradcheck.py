"""The gradient-rule oracle shared by the rule tests: one-op graphs, central differences, ORT, torch.

``check_op(case)`` builds a forward model of one ONNX node whose inputs are
initializers (or graph inputs, ``fed``), generates its backward graph with the test loss
``sum_k sum(y_k * w_k)`` (random ``w_k``, ``losses.weighted_sum``), and compares the
parameter gradients

- run by the NumPy reference executor (``import_proto`` + ``run``) in float64,
- run by plain onnxruntime (float64, or float32 for the ops ORT has only in float32:
  Conv, ConvTranspose, AveragePool, GlobalAveragePool, Erf, Gelu, HardSigmoid, …),
- against central differences of the forward model in float64 (relative to the largest
  gradient; inputs above ``FD_SAMPLES`` elements are probed at that many random
  coordinates),
- and, when ``torch_fn`` is given, against ``torch.autograd`` in float64 (to 1e-7:
  ONNX float attributes such as ``alpha`` are float32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from transforms.autodiff.losses import weighted_sum
from transforms.autodiff.options import TrainingOptions
from transforms.autodiff.training_graph import build

FD_STEP = 1e-6
FD_SAMPLES = 48   # central differences at this many coordinates per input (all of them when fewer)


@dataclass
class OpCase:
    """One forward node: inputs in ONNX order (``None`` for an absent optional input)."""

    op_type: str
    inputs: Sequence[np.ndarray | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    n_outputs: int = 1
    opset: int = 17
    trainable: Sequence[int] | None = None     # input positions to differentiate (default: float inputs)
    loss_outputs: Sequence[int] | None = None  # outputs in the loss (default: every float output)
    ort_float64: bool = True                   # False: ORT runs the float32 copy of the case
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)  # extra TrainingOptions
    fd_step: float = FD_STEP
    fed: Sequence[int] = ()    # input positions that are graph inputs (fed at run time), not initializers
    fixed: Sequence[int] = ()  # float input positions that keep their dtype (Resize's float32 roi and scales)

    def feeds(self) -> dict[str, np.ndarray]:
        return {f"in{i}": np.asarray(self.inputs[i]) for i in self.fed}

    def names(self) -> list[str]:
        return ["" if v is None else f"in{i}" for i, v in enumerate(self.inputs)]

    def trainable_names(self) -> list[str]:
        idx = self.trainable
        if idx is None:
            idx = [i for i, v in enumerate(self.inputs) if v is not None and np.asarray(v).dtype.kind == "f"]
        return [f"in{i}" for i in idx]


def forward_model(case: OpCase, dtype: np.dtype = np.dtype(np.float64)) -> onnx.ModelProto:
    """The one-node forward model of ``case`` with float inputs cast to ``dtype``."""
    inits, inputs = [], []
    for i, (name, v) in enumerate(zip(case.names(), case.inputs)):
        if v is not None:
            arr = np.asarray(v)
            arr = arr.astype(dtype) if arr.dtype.kind == "f" and i not in case.fixed else arr
            if i in case.fed:
                inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype),
                                                            list(arr.shape)))
            else:
                inits.append(numpy_helper.from_array(arr, name))
    outs = [f"out{k}" for k in range(case.n_outputs)]
    node = helper.make_node(case.op_type, case.names(), outs, name=f"the_{case.op_type}", **case.attrs)
    graph = helper.make_graph([node], "one_op", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    typed = {vi.name: vi for vi in inferred.graph.output}
    model.graph.output.extend(typed[o] for o in outs)
    return model


def _float_outputs(model: onnx.ModelProto, case: OpCase) -> list[str]:
    picked = case.loss_outputs if case.loss_outputs is not None else range(case.n_outputs)
    floats = (TensorProto.FLOAT, TensorProto.DOUBLE)
    by_name = {o.name: o for o in model.graph.output}
    return [f"out{k}" for k in picked if by_name[f"out{k}"].type.tensor_type.elem_type in floats]


def loss_weights(case: OpCase) -> dict[str, np.ndarray]:
    """Random weights ``w_k`` for the loss, shaped like the outputs the forward model computes."""
    model = forward_model(case)
    outs = _float_outputs(model, case)
    values = run(import_proto(model), case.feeds(), outputs=outs)
    rng = np.random.default_rng(case.seed + 1000)
    return {o: rng.standard_normal(values[o].shape) for o in outs}


def training_model(case: OpCase, dtype: np.dtype, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    fwd = forward_model(case, dtype)
    opts = TrainingOptions(optimizer=None, trainable=tuple(case.trainable_names()), **case.options)
    return build(fwd, opts, loss=weighted_sum(weights), loss_outputs=list(weights))


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds or {})
    return dict(zip([o.name for o in sess.get_outputs()], outs))


def central_differences(case: OpCase, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """d loss / d input for every trainable input, from the forward model in float64.

    Large inputs are probed at ``FD_SAMPLES`` random coordinates; the other entries are NaN
    (``assert_close`` skips them)."""
    graph = import_proto(forward_model(case))
    values = {n: np.asarray(v, dtype=np.float64) for n, v in zip(case.names(), case.inputs)
              if n in case.trainable_names()}

    def loss(feeds: dict[str, np.ndarray]) -> float:
        res = run(graph, {**case.feeds(), **feeds}, outputs=list(weights))
        return float(sum(np.sum(res[o] * w) for o, w in weights.items()))

    grads = {}
    rng = np.random.default_rng(case.seed + 7)
    for name, base in values.items():
        g = np.full_like(base, np.nan)
        coords = list(np.ndindex(base.shape))
        if len(coords) > FD_SAMPLES:
            coords = [coords[k] for k in rng.choice(len(coords), FD_SAMPLES, replace=False)]
        for i in coords:
            h = case.fd_step * max(1.0, abs(base[i]))
            up, down = base.copy(), base.copy()
            up[i] += h
            down[i] -= h
            g[i] = (loss({**values, name: up}) - loss({**values, name: down})) / (2 * h)
        grads[name] = g
    return grads


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, label: str) -> None:
    """Elementwise closeness at the scale of the whole expected gradient."""
    assert got.shape == want.shape, f"{label}: shape {got.shape} != {want.shape}"
    probed = ~np.isnan(want)
    want, got = want[probed], np.asarray(got, np.float64)[probed]
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-12)
    err = float(np.abs(got - want).max(initial=0.0)) / scale
    assert err <= rtol, f"{label}: max error {err:.3g} (relative to max |grad| {scale:.3g}) > {rtol}"


def generated_gradients(case: OpCase) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(executor gradients of the generated float64 graph, the loss weights) without other oracles."""
    weights = loss_weights(case)
    res = run(import_proto(training_model(case, np.dtype(np.float64), weights)), case.feeds())
    return {n: res[f"{n}_grad"] for n in case.trainable_names()}, weights


def check_op(case: OpCase, torch_fn: Callable[..., Any] | None = None, *, fd_rtol: float = 1e-6,
             ort32_rtol: float = 2e-4) -> dict[str, np.ndarray]:
    """Run every oracle on ``case``; return the executor's gradients."""
    weights = loss_weights(case)
    model = training_model(case, np.dtype(np.float64), weights)
    onnx.checker.check_model(model, full_check=True)
    names = case.trainable_names()
    ref = run(import_proto(model), case.feeds())
    fd = central_differences(case, weights)
    for n in names:
        assert_close(ref[f"{n}_grad"], fd[n], fd_rtol, f"{case.op_type} executor vs finite differences, {n}")
    if case.ort_float64:
        got = ort_run(model, case.feeds())
        rtol = fd_rtol
    else:
        feeds32 = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in case.feeds().items()}
        got = ort_run(training_model(case, np.dtype(np.float32), weights), feeds32)
        rtol = ort32_rtol
    for n in names:
        assert_close(got[f"{n}_grad"], fd[n], rtol, f"{case.op_type} onnxruntime vs finite differences, {n}")
        assert_close(got[f"{n}_grad"], ref[f"{n}_grad"], rtol, f"{case.op_type} onnxruntime vs executor, {n}")
    if torch_fn is not None:
        tg = torch_grads(case, torch_fn, weights)
        for n in names:
            assert_close(ref[f"{n}_grad"], tg[n], 1e-7, f"{case.op_type} executor vs torch.autograd, {n}")
    return {n: ref[f"{n}_grad"] for n in names}


def torch_grads(case: OpCase, torch_fn: Callable[..., Any], weights: dict[str, np.ndarray]
                ) -> dict[str, np.ndarray]:
    """Gradients of ``sum(torch_fn(*inputs) * w)`` by torch.autograd in float64."""
    import torch
    names = case.trainable_names()
    tensors = []
    for n, v in zip(case.names(), case.inputs):
        if v is None:
            tensors.append(None)
            continue
        t = torch.tensor(np.asarray(v, dtype=np.float64) if np.asarray(v).dtype.kind == "f" else np.asarray(v))
        tensors.append(t.requires_grad_(n in names))
    outs = torch_fn(*tensors)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    total = sum((o * torch.tensor(weights[f"out{k}"])).sum() for k, o in enumerate(outs) if f"out{k}" in weights)
    total.backward()
    return {n: t.grad.numpy() for n, t in zip(case.names(), tensors) if n in names}


def rand(shape: Sequence[int], seed: int = 0, low: float = -1.0, high: float = 1.0, away: float = 0.0
         ) -> np.ndarray:
    """Uniform random float64 values; ``away`` keeps them at least that far from 0 (kinks)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(low, high, size=tuple(shape))
    if away:
        x = np.where(np.abs(x) < away, np.sign(x + 1e-12) * (away + np.abs(x)), x)
    return x
