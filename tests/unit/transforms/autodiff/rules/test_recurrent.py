"""Recurrent layers (ONNX RNN, GRU, LSTM, unrolled by ``ir.recurrent``): gradients of every input against
finite differences, onnxruntime (float32: its RNN kernels have no float64) and the executor, and against
PyTorch's own cells (``torch._VF.gru``/``lstm``/``rnn_*``, the kernels ``nn.GRU`` & co. run) where ONNX and
PyTorch share the variant; the variants are refused by name where the unrolling has none."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from ir.errors import ShapeError
from ir.onnx_import import import_proto
from ir.recurrent import GATES, RecurrentVariantError
from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

T, N, I, H = 4, 2, 3, 3
# ONNX gate order -> PyTorch's: GRU (z, r, h) -> (r, z, n); LSTM (i, o, f, c) -> (i, f, g, o)
TORCH_ORDER = {"RNN": [0], "GRU": [1, 0, 2], "LSTM": [0, 2, 3, 1]}


def _case(op: str, dirs: int = 1, *, attrs=None, bias=True, h0=False, c0=False, peep=False, lens=None,
          seed=0) -> OpCase:
    g = GATES[op]
    inputs = [rand((T, N, I), seed), rand((dirs, g * H, I), seed + 1), rand((dirs, g * H, H), seed + 2),
              rand((dirs, 2 * g * H), seed + 3) if bias else None,
              np.asarray(lens, np.int32) if lens is not None else None,
              rand((dirs, N, H), seed + 4) if h0 else None]
    if op == "LSTM":
        inputs += [rand((dirs, N, H), seed + 5) if c0 else None, rand((dirs, 3 * H), seed + 6) if peep else None]
    while inputs[-1] is None:
        inputs.pop()
    direction = {1: "forward", 2: "bidirectional"}[dirs]
    return OpCase(op, inputs, {"hidden_size": H, "direction": direction, **(attrs or {})},
                  n_outputs=3 if op == "LSTM" else 2, ort_float64=False, seed=seed)


def _torch_params(op: str, w, r, b, dirs: int) -> list:
    def reorder(t):
        return torch.cat([t[k * H:(k + 1) * H] for k in TORCH_ORDER[op]])
    g = GATES[op]
    params = []
    for d in range(dirs):
        params += [reorder(w[d]), reorder(r[d]), reorder(b[d, :g * H]), reorder(b[d, g * H:])]
    return params


def _torch_fn(op: str, dirs: int, kind: str = ""):
    """Y [T, D, N, H], Y_h (and Y_c) from PyTorch's kernel for the ONNX inputs (x, W, R, B, lens, h0, c0)."""
    def fn(x, w, r, b, _lens=None, h0=None, c0=None):
        params = _torch_params(op, w, r, b, dirs)
        flags = (True, 1, 0.0, False, dirs == 2, False)
        if op == "LSTM":
            y, hn, cn = torch._VF.lstm(x, (h0, c0), params, *flags)
            extra = (cn,)
        else:
            y, hn = getattr(torch._VF, "gru" if op == "GRU" else f"rnn_{kind}")(x, h0, params, *flags)
            extra = ()
        return (y.view(T, N, dirs, H).permute(0, 2, 1, 3), hn) + extra
    return fn


@pytest.mark.parametrize("dirs", [1, 2], ids=["forward", "bidirectional"])
def test_gru_as_pytorch_runs_it(dirs):
    check_op(_case("GRU", dirs, attrs={"linear_before_reset": 1}, h0=True, seed=dirs), _torch_fn("GRU", dirs))


@pytest.mark.parametrize("dirs", [1, 2], ids=["forward", "bidirectional"])
def test_lstm_as_pytorch_runs_it(dirs):
    check_op(_case("LSTM", dirs, h0=True, c0=True, seed=10 + dirs), _torch_fn("LSTM", dirs))


@pytest.mark.parametrize("kind", ["tanh", "relu"])
def test_rnn_as_pytorch_runs_it(kind):
    attrs = {"activations": ["Relu", "Relu"]} if kind == "relu" else {}      # one per direction
    check_op(_case("RNN", 2, attrs=attrs, h0=True, seed=20), _torch_fn("RNN", 2, kind))


@pytest.mark.parametrize("case", [
    _case("GRU", attrs={"direction": "reverse"}, seed=30),                        # linear_before_reset 0
    _case("GRU", 2, bias=False, lens=[4, 2], seed=31),                            # masked, zero state
    _case("LSTM", peep=True, c0=True, h0=True, attrs={"clip": 0.9}, seed=32),
    _case("LSTM", 2, peep=True, lens=[3, 4], seed=33),
    _case("LSTM", attrs={"activations": ["HardSigmoid", "Softsign", "Softplus"]}, seed=34),
    _case("RNN", attrs={"activations": ["LeakyRelu"]}, h0=True, seed=35),
    _case("GRU", 2, attrs={"activations": ["Elu", "Softsign", "ThresholdedRelu", "Tanh"]}, seed=36),
], ids=["gru-reverse-reset-after", "gru-lens", "lstm-peepholes-clip", "lstm-bidirectional-lens",
        "lstm-activations", "rnn-leakyrelu", "gru-activations-per-direction"])
def test_recurrent_variants(case):
    check_op(case)


def test_batch_first_layout():
    case = _case("GRU", attrs={"layout": 1, "linear_before_reset": 1}, h0=True, seed=40)
    case.inputs[0] = np.ascontiguousarray(case.inputs[0].transpose(1, 0, 2))
    case.inputs[5] = np.ascontiguousarray(case.inputs[5].transpose(1, 0, 2))
    check_op(case)


def _node_model(op: str, attrs: dict, x_shape=(T, N, I)) -> onnx.ModelProto:
    g = GATES[op]
    inputs = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, list(x_shape))]
    inits = [onnx.numpy_helper.from_array(rand((1, g * H, d), s).astype(np.float32), n)
             for n, d, s in (("W", I, 1), ("R", H, 2))]
    node = helper.make_node(op, ["X", "W", "R"], ["Y"], name="layer", hidden_size=H, **attrs)
    out = helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph([node], "g", inputs, [out], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op,attrs,variant", [
    ("LSTM", {"input_forget": 1}, "input_forget=1"),
    ("GRU", {"activations": ["Sigmoid", "Tanh"], "activation_alpha": [0.5]}, "activation_alpha"),
    ("RNN", {"activations": ["ScaledTanh"]}, "activation 'ScaledTanh'"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh"]}, "2 activations (a forward LSTM takes 3 per direction)"),
])
def test_unsupported_variants_are_named(op, attrs, variant):
    with pytest.raises(RecurrentVariantError) as err:
        import_proto(_node_model(op, attrs))
    msg = str(err.value)
    assert f"node 'layer' ({op}" in msg and f"unsupported {op} variant: {variant}" in msg
    assert f"nn.{op}" in msg


def test_a_symbolic_sequence_length_is_refused_with_the_fix():
    with pytest.raises(ShapeError) as err:
        import_proto(_node_model("GRU", {}, x_shape=("seq", N, I)))
    assert "sequence length" in str(err.value) and "--bind" in str(err.value)
    assert import_proto(_node_model("GRU", {}, x_shape=("seq", N, I)), bindings={"seq": T}).containers["Y"].shape \
        == (T, 1, N, H)


def test_weights_packed_per_direction_are_read_as_their_pieces():
    """Exporters pack a bidirectional layer's weights: ``Concat`` on axis 0 of ``Unsqueeze(·, [0])`` or of a
    ``Reshape`` to (1, …). The unrolled layer reads the pieces themselves (no Split/Squeeze of the pack, nor
    their gradients in a training step) and computes what onnxruntime computes on the packed model."""
    import onnxruntime as ort

    from codegen.numpy_ref.executor import run
    g, f = GATES["GRU"], onnx.TensorProto.FLOAT
    pieces = {n: rand(s, k).astype(np.float32) for k, (n, s) in enumerate(
        [("Wf", (g * H, I)), ("Wb", (g * H, I)), ("Rf", (g * H, H)), ("Rb", (g * H, H))])}
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in pieces.items()]
    inits += [onnx.numpy_helper.from_array(np.asarray(v, np.int64), n)
              for n, v in (("zero", [0]), ("one_shape_w", [1, g * H, I]))]
    nodes = [helper.make_node("Unsqueeze", ["Wf", "zero"], ["Wf1"]),
             helper.make_node("Reshape", ["Wb", "one_shape_w"], ["Wb1"]),
             helper.make_node("Concat", ["Wf1", "Wb1"], ["W"], axis=0),
             helper.make_node("Unsqueeze", ["Rf", "zero"], ["Rf1"]),
             helper.make_node("Unsqueeze", ["Rb", "zero"], ["Rb1"]),
             helper.make_node("Concat", ["Rf1", "Rb1"], ["R"], axis=0),
             helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="layer", hidden_size=H,
                              direction="bidirectional", linear_before_reset=1)]
    proto = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", f, [T, N, I])],
                                                [helper.make_tensor_value_info("Y", f, None)], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    proto = onnx.shape_inference.infer_shapes(proto)        # value_info for W and R, as exporters write it
    graph = import_proto(proto)
    packs = {"W", "R"}
    readers = [n for n in graph.nodes.values() if any(m is not None and m.container in packs for m in n.inputs)]
    assert not readers, [n.id for n in readers]
    packers = [n.id for n in graph.nodes.values() if {"W", "R", "Wf1", "Wb1", "Rf1", "Rb1"} & {m.container for m in
                                                                                         n.outputs if m is not None}]
    assert not packers, f"the unread packs are dropped: {packers}"
    assert not {"W", "R", "Wf1", "Wb1", "Rf1", "Rb1"} & set(graph.containers), "and so are their values"
    x = rand((T, N, I), 9).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(run(graph, {"X": x})["Y"], want, rtol=1e-5, atol=1e-6)


def _reordered_model(op: str, attrs: dict, shape_bounds: bool = False) -> onnx.ModelProto:
    """A bidirectional layer packed as the TorchScript exporter packs ``nn.GRU``/``nn.LSTM``: per direction and
    projection, PyTorch's tensor (its gate order) sliced gate by gate into the ONNX order, concatenated, and
    stacked; the bias as the input and the recurrent bias, each reordered alike, concatenated. ``shape_bounds``:
    the Slice bounds computed from the tensor's ``Shape``, as the dynamo exporter writes them."""
    g, f = GATES[op], onnx.TensorProto.FLOAT
    onnx_from_torch = [TORCH_ORDER[op].index(k) for k in range(g)]     # ONNX gate j = PyTorch block order[j]
    inits, nodes, stacks = [], [], {"W": [], "R": [], "B": []}

    def reordered(src: str, name: str) -> str:
        parts = []
        for j, block in enumerate(onnx_from_torch):
            bounds = [onnx.numpy_helper.from_array(np.asarray([v], np.int64), f"{name}.slice{j}.{e}")
                      for e, v in (("s", block * H), ("e", (block + 1) * H), ("a", 0))]
            inits.extend(bounds)
            names = [b.name for b in bounds]
            if shape_bounds:                     # start = Shape(src)[0] / g * block (and end alike)
                nodes.append(helper.make_node("Shape", [src], [f"{name}.len{j}"], start=0, end=1))
                for e, k in (("s", 0), ("e", 1)):
                    per_gate, bound = f"{name}.h{j}{e}", f"{name}.{j}{e}"
                    nodes.extend([helper.make_node("Div", [f"{name}.len{j}", "gates"], [per_gate]),
                                  helper.make_node("Mul", [per_gate, f"block{block + k}"], [bound])])
                names[:2] = [f"{name}.{j}s", f"{name}.{j}e"]
            nodes.append(helper.make_node("Slice", [src] + names, [f"{name}.slice{j}"]))
            parts.append(f"{name}.slice{j}")
        nodes.append(helper.make_node("Concat", parts, [name], axis=0))
        return name

    for d in range(2):
        for key, shape in (("W", (g * H, I)), ("R", (g * H, H)), ("Bw", (g * H,)), ("Br", (g * H,))):
            inits.append(onnx.numpy_helper.from_array(rand(shape, 10 * d + len(inits)).astype(np.float32),
                                                      f"t_{key}{d}"))
        packed = {key: reordered(f"t_{key}{d}", f"{key}{d}") for key in ("W", "R", "Bw", "Br")}
        nodes.append(helper.make_node("Concat", [packed["Bw"], packed["Br"]], [f"B{d}"], axis=0))
        for key, value in (("W", packed["W"]), ("R", packed["R"]), ("B", f"B{d}")):
            nodes.append(helper.make_node("Unsqueeze", [value, "zero"], [f"{key}{d}.stacked"]))
            stacks[key].append(f"{key}{d}.stacked")
    inits.append(onnx.numpy_helper.from_array(np.asarray([0], np.int64), "zero"))
    inits.append(onnx.numpy_helper.from_array(np.asarray([g], np.int64), "gates"))
    inits += [onnx.numpy_helper.from_array(np.asarray([k], np.int64), f"block{k}") for k in range(g + 1)]
    nodes += [helper.make_node("Concat", parts, [key], axis=0) for key, parts in stacks.items()]
    nodes.append(helper.make_node(op, ["X", "W", "R", "B"], ["Y"], name="layer", hidden_size=H,
                                  direction="bidirectional", **attrs))
    return helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", f, [T, N, I])],
                                               [helper.make_tensor_value_info("Y", f, None)], inits),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op,attrs,slices_left,shape_bounds", [
    ("GRU", {"linear_before_reset": 1}, 0, False), ("LSTM", {}, 0, False), ("GRU", {}, 2 * 2 * 3, False),
    ("LSTM", {}, 0, True)])
def test_weights_reordered_gate_by_gate_are_read_unsliced(op, attrs, slices_left, shape_bounds):
    """Gate-reordered weights (``_reordered_model``): the GEMMs run on PyTorch's tensors and the unrolling takes
    their gates in PyTorch's order, with no Slice left, and computes what onnxruntime computes, also with the
    bounds computed from shapes. A GRU with ``linear_before_reset=0`` splits R's rows 2:1, so its R and
    recurrent bias stay packed (12 Slices)."""
    import onnxruntime as ort

    from codegen.numpy_ref.executor import run
    proto = _reordered_model(op, attrs, shape_bounds)
    graph = import_proto(proto)
    slices = [n.id for n in graph.nodes.values() if n.op_type == "Slice"]
    assert len(slices) == slices_left, slices
    x = rand((T, N, I), 9).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(run(graph, {"X": x})["Y"], want, rtol=1e-5, atol=1e-6)
