"""Recurrent layers (ONNX ``RNN``, ``GRU``, ``LSTM``) unrolled into standard ops: ``expand_recurrent``.

Each layer becomes, per direction, over the static sequence length T:

- one GEMM for the input projection of every time step, ``X[T, B, I] @ W^T + Wb`` (with ``layout`` 1
  the input is transposed first), split into its T rows;
- per step, one GEMM of the previous hidden state against all gates at once, ``H @ R^T + Rb``
  (cuDNN's fused gates), then the gates' elementwise math (``Add``, ``Sigmoid``, ``Tanh``, ``Mul``,
  ``Sub``), which the recipe fuses into one map per step;
- ``Y``, ``Y_h`` (and ``Y_c``) concatenated from the steps' states, under the layer's output names.

A missing initial state is zero: the first step then has no recurrent GEMM. ``sequence_lens``
masks every step with ``Where`` (a finished sequence keeps its state and outputs zeros; the
reverse direction, which walks from T - 1 down, starts each sequence at its own last step).
Peepholes (``P``), ``clip``, GRU's ``linear_before_reset`` (PyTorch's GRU sets it) and the
parameterless activations are supported; ``input_forget``, ``activation_alpha``/``_beta`` and the
``Affine``/``ScaledTanh`` activations are refused, naming the variant. The unrolled ops have
gradient rules, kernels and fusions already, so training graphs, the reference executor and the
recipe need nothing recurrent-specific.
"""
from __future__ import annotations

import numpy as np
from onnx import GraphProto, NodeProto, helper, numpy_helper

from ir.errors import GraphError, NodeRef, ShapeError, UnsupportedOpError
from ir.recurrent_packs import Packs, TypeOf

RECURRENT_OPS = ("RNN", "GRU", "LSTM")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "leakyrelu": "LeakyRelu",
                "thresholdedrelu": "ThresholdedRelu", "hardsigmoid": "HardSigmoid", "elu": "Elu",
                "softsign": "Softsign", "softplus": "Softplus"}
_INPUTS = {"RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
           "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
           "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")}



class RecurrentVariantError(UnsupportedOpError):
    """A recurrent layer variant the unrolling does not implement."""

    def __init__(self, node: NodeProto, variant: str, path: str | None = None) -> None:
        self.op_type = node.op_type
        GraphError.__init__(self, f"unsupported {node.op_type} variant: {variant}", NodeRef(node), path=path,
                            hint=f"Export the layer without it (PyTorch's nn.{node.op_type} never uses it)")


def has_recurrent(graph: GraphProto) -> bool:
    return any(n.op_type in RECURRENT_OPS and n.domain in ("", "ai.onnx") for n in graph.node)


def expand_recurrent(graph: GraphProto, type_of: TypeOf, path: str | None = None, *, opset: int = 17,
                     initializers=None) -> int:
    """Replace every RNN/GRU/LSTM node of ``graph`` by its unrolled ops, in place (topological order is
    kept). Returns how many layers were expanded. ``opset`` (the default domain's) and ``initializers``
    (when kept outside ``graph``) let ``Packs`` read the constants of the weights' packing."""
    taken = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    taken |= {o for n in graph.node for o in n.output} | {n.name for n in graph.node}
    packs = Packs(graph, type_of, opset, initializers)
    nodes: list[NodeProto] = []
    count = 0
    for node in graph.node:
        if node.op_type not in RECURRENT_OPS or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        nodes.extend(_Layer(node, type_of, taken, path, packs).expand())
        count += 1
    if count:
        del graph.node[:]
        graph.node.extend(packs.without_unread(nodes, {o.name for o in graph.output}))
    return count


class _Emitter:
    """Appends ONNX nodes with fresh names under the layer's scope."""

    def __init__(self, scope: str, taken: set[str], elem: int, packs: Packs) -> None:
        self.scope, self.taken, self.elem, self.nodes = scope, taken, elem, []
        self.packs = packs

    def fresh(self, stem: str) -> str:
        k, name = 0, f"{self.scope}/{stem}"
        while name in self.taken:
            k += 1
            name = f"{self.scope}/{stem}_{k}"
        self.taken.add(name)
        return name

    def op(self, op_type: str, *inputs: str, n_out: int = 1, out: str | None = None, **attrs):
        outs = [out] if out else [self.fresh(f"{op_type}_out") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(op_type), **attrs))
        return outs if n_out > 1 else outs[0]

    def const(self, value: np.ndarray) -> str:
        name = self.fresh("Constant_out")
        self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh("Constant"),
                                           value=numpy_helper.from_array(value, name)))
        return name

    def ints(self, *values: int) -> str:
        return self.const(np.asarray(values, dtype=np.int64))

    def scalar(self, value: float) -> str:
        return self.const(np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(self.elem)))

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        if len(sizes) == 1:
            return [x]
        return self.op("Split", x, self.ints(*sizes), axis=axis, n_out=len(sizes))

    def squeeze(self, x: str, *axes: int) -> str:
        return self.op("Squeeze", x, self.ints(*axes))

    def unsqueeze(self, x: str, *axes: int) -> str:
        return self.op("Unsqueeze", x, self.ints(*axes))

    def per_direction(self, x: str, d: int) -> list[str]:
        """Split a [D, ...] value into D values without the leading axis (the stacked pieces themselves
        when ``x`` is a stack of D, ``Packs.per_direction``)."""
        pieces = self.packs.per_direction(x, d)
        if pieces is not None:
            return pieces
        return [self.squeeze(p, 0) for p in self.split(x, [1] * d, 0)]


class _Layer:
    def __init__(self, node: NodeProto, type_of: TypeOf, taken: set[str], path: str | None,
                 packs: Packs) -> None:
        self.node, self.path = node, path
        self.op = node.op_type
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        names = _INPUTS[self.op]
        self.inp = {names[k]: i for k, i in enumerate(node.input) if i and k < len(names)}
        self.hidden = int(self.attrs.get("hidden_size", 0))
        direction = self.attrs.get("direction", b"forward")
        self.direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        self.dirs = 2 if self.direction == "bidirectional" else 1
        self.layout = int(self.attrs.get("layout", 0))
        self._check()
        x_type = type_of(self.inp["X"])
        shape = x_type[1] if x_type else None
        seq = shape[1 if self.layout else 0] if shape else None
        if not isinstance(seq, (int, np.integer)):
            raise ShapeError(f"the sequence length of {self.op} input '{self.inp['X']}' is not static "
                             f"(shape {shape})", NodeRef(node), path=path,
                             hint="Export with a fixed sequence length or bind the dimension (--bind)")
        self.steps = int(seq)
        if not self.hidden:
            r_type = type_of(self.inp["R"])
            self.hidden = int(r_type[1][-1]) if r_type and r_type[1] else 0
        self.em = _Emitter(node.name or node.output[0], taken, x_type[0], packs)
        self.acts = self._activations()
        self._clip: tuple[str, str] | None = None

    def _check(self) -> None:
        if int(self.attrs.get("input_forget", 0)):
            raise RecurrentVariantError(self.node, "input_forget=1 (coupled input and forget gates)", self.path)
        for name in ("activation_alpha", "activation_beta"):
            if self.attrs.get(name):
                raise RecurrentVariantError(self.node, f"{name} (parameterized activations)", self.path)
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise RecurrentVariantError(self.node, f"direction={self.direction!r}", self.path)

    def _activations(self) -> list[tuple[str, ...]]:
        given = [a.decode() if isinstance(a, bytes) else str(a) for a in self.attrs.get("activations", [])]
        per = len(_DEFAULT_ACTS[self.op])
        given = given or list(_DEFAULT_ACTS[self.op]) * self.dirs
        if len(given) == per:
            given = given * self.dirs
        if len(given) != per * self.dirs:
            raise RecurrentVariantError(self.node, f"{len(given)} activations (a {self.direction} {self.op} takes "
                                        f"{per} per direction)", self.path)
        out = []
        for name in given:
            if name.lower() not in _ACTIVATIONS:
                raise RecurrentVariantError(self.node, f"activation {name!r} (supported: "
                                            f"{', '.join(sorted(_ACTIVATIONS.values()))})", self.path)
        for d in range(self.dirs):
            out.append(tuple(_ACTIVATIONS[a.lower()] for a in given[d * per:(d + 1) * per]))
        return out

    # ---- the unrolled graph ------------------------------------------------------------------

    def expand(self) -> list[NodeProto]:
        em, d = self.em, self.dirs
        x = self.inp["X"]
        if self.layout:
            x = em.op("Transpose", x, perm=[1, 0, 2])
        w, r = em.per_direction(self.inp["W"], d), em.per_direction(self.inp["R"], d)
        bias = em.per_direction(self.inp["B"], d) if "B" in self.inp else [None] * d
        peep = em.per_direction(self.inp["P"], d) if "P" in self.inp else [None] * d
        h0 = self._initial("initial_h")
        c0 = self._initial("initial_c")
        masks = self._masks()
        ys, hs, cs = [], [], []
        for k in range(d):
            reverse = self.direction == "reverse" or k == 1
            y, h, c = self._direction(k, x, w[k], r[k], bias[k], peep[k], h0[k], c0[k], masks, reverse)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        outs = list(self.node.output) + [""] * 3
        self._emit_output(outs[0], ys, 1, (2, 0, 1, 3))
        self._emit_output(outs[1], hs, 0, (1, 0, 2), unsqueeze=True)
        if self.op == "LSTM":
            self._emit_output(outs[2], cs, 0, (1, 0, 2), unsqueeze=True)
        return em.nodes

    def _initial(self, name: str) -> list[str | None]:
        if name not in self.inp:
            return [None] * self.dirs
        value = self.inp[name]
        if self.layout:
            value = self.em.op("Transpose", value, perm=[1, 0, 2])
        return self.em.per_direction(value, self.dirs)

    def _masks(self) -> list[str] | None:
        """Per step, ``t < sequence_lens`` as a [B, 1] boolean (None without sequence_lens)."""
        if "sequence_lens" not in self.inp:
            return None
        em = self.em
        lens = em.op("Cast", self.inp["sequence_lens"], to=7)
        return [em.unsqueeze(em.op("Less", em.const(np.asarray(t, dtype=np.int64)), lens), 1)
                for t in range(self.steps)]

    def _emit_output(self, out: str, parts: list[str], axis: int, perm: tuple, unsqueeze: bool = False) -> None:
        if not out:
            return
        em = self.em
        if unsqueeze:
            parts = [em.unsqueeze(p, 0) for p in parts]
        final = out if not self.layout else None
        joined = em.op("Concat", *parts, axis=axis, out=final) if len(parts) > 1 else \
            em.op("Identity", parts[0], out=final)
        if self.layout:
            em.op("Transpose", joined, perm=list(perm), out=out)

    def _direction(self, k, x, w, r, bias, peep, h, c, masks, reverse):
        em, gh = self.em, GATES[self.op] * self.hidden
        wb = rb = None
        if bias is not None:
            wb, rb = em.packs.halves(bias, gh) or em.split(bias, [gh, gh], 0)
        w, wb, self._x_order = self._unpacked(w, wb)
        split_r = self.op == "GRU" and not int(self.attrs.get("linear_before_reset", 0))
        r, rb, self._h_order = self._unpacked(r, rb, allowed=not split_r)   # that GRU splits R's rows 2:1
        proj = em.op("MatMul", x, em.op("Transpose", w, perm=[1, 0]))
        if wb is not None:
            proj = em.op("Add", proj, wb)
        rows = [em.squeeze(p, 0) for p in em.split(proj, [1] * self.steps, 0)]
        rt = em.op("Transpose", r, perm=[1, 0])
        pi = po = pf = None
        if peep is not None:
            pi, po, pf = em.split(peep, [self.hidden] * 3, 0)
        order = range(self.steps - 1, -1, -1) if reverse else range(self.steps)
        ys: dict[int, str] = {}
        zero = em.scalar(0.0) if masks is not None else None
        step = getattr(self, f"_{self.op.lower()}_step")
        for t in order:
            h_new, c_new = step(k, rows[t], rt, rb, h, c, (pi, po, pf))
            y = h_new
            if masks is not None:
                keep = masks[t]
                y = em.op("Where", keep, h_new, zero)
                h_new = em.op("Where", keep, h_new, h if h is not None else zero)
                if c_new is not None:
                    c_new = em.op("Where", keep, c_new, c if c is not None else zero)
            if self.node.output[0]:
                ys[t] = em.unsqueeze(y, 0, 1)
            h, c = h_new, c_new
        if not ys:
            return None, h, c
        steps = [ys[t] for t in range(self.steps)]
        return em.op("Concat", *steps, axis=0) if len(steps) > 1 else steps[0], h, c

    def _unpacked(self, weight: str, bias: str | None, allowed: bool = True):
        """``(weight, bias, order)``: the tensor a reordered weight (and its bias, reordered alike) slices
        and the gate order (``Packs.gate_blocks``), or the arguments as given in the ONNX order."""
        identity = tuple(range(GATES[self.op]))
        got = self.em.packs.gate_blocks(weight, self.hidden) if allowed else None
        if got is None:
            return weight, bias, identity
        bias_got = self.em.packs.gate_blocks(bias, self.hidden) if bias is not None else (None, got[1])
        if bias_got is None or bias_got[1] != got[1]:
            return weight, bias, identity
        return got[0], bias_got[0], got[1]

    def _gates(self, value: str, axis: int, order: tuple[int, ...]) -> list[str]:
        """``value``'s gate pre-activations in the ONNX order, from blocks laid out in ``order``."""
        parts = self.em.split(value, [self.hidden] * GATES[self.op], axis)
        return [parts[o] for o in order]

    def _recurrent(self, rt: str, rb: str | None, h: str | None) -> str | None:
        """``H @ R^T + Rb`` (all gates at once), ``Rb`` alone at a zero state, None if neither."""
        if h is None:
            return rb
        hr = self.em.op("MatMul", h, rt)
        return self.em.op("Add", hr, rb) if rb is not None else hr

    def _act(self, name: str, x: str) -> str:
        clip = self.attrs.get("clip")
        if clip is not None:
            if self._clip is None:          # one pair of bound constants per layer
                self._clip = (self.em.scalar(-float(clip)), self.em.scalar(float(clip)))
            x = self.em.op("Clip", x, *self._clip)
        return self.em.op(name, x)

    def _add(self, a: str, b: str | None) -> str:
        return a if b is None else self.em.op("Add", a, b)

    def _rnn_step(self, k, row, rt, rb, h, _c, _peep):
        return self._act(self.acts[k][0], self._add(row, self._recurrent(rt, rb, h))), None

    def _gru_step(self, k, row, rt, rb, h, _c, _peep):
        """Every gate's pre-activation is split before the elementwise math, so the whole step's gate
        math reads GEMM outputs and fuses into one map."""
        em, n = self.em, self.hidden
        f, g = self.acts[k]
        x_z, x_r, x_h = self._gates(row, 1, self._x_order)
        before_reset = int(self.attrs.get("linear_before_reset", 0))
        if before_reset:                   # r * (H @ Rh^T + Rbh): all three gates in one GEMM
            hr = self._recurrent(rt, rb, h)
            h_z, h_r, h_h = self._gates(hr, -1, self._h_order) if hr is not None else (None,) * 3
        else:                              # (r * H) @ Rh^T + Rbh: the candidate's GEMM waits for r
            rt_zr, rt_h = em.split(rt, [2 * n, n], 1)
            rb_zr, rb_h = em.split(rb, [2 * n, n], 0) if rb is not None else (None, None)
            hr = self._recurrent(rt_zr, rb_zr, h)
            h_z, h_r = em.split(hr, [n, n], -1) if hr is not None else (None, None)
        z, r = self._act(f, self._add(x_z, h_z)), self._act(f, self._add(x_r, h_r))
        if before_reset:
            cand = self._add(x_h, em.op("Mul", r, h_h) if h_h is not None else None)
        else:
            cand = self._add(x_h, self._recurrent(rt_h, rb_h, em.op("Mul", r, h)) if h is not None else rb_h)
        hh = self._act(g, cand)
        if h is None:                      # H = (1 - z) * hh + z * 0
            return em.op("Sub", hh, em.op("Mul", z, hh)), None
        return em.op("Add", hh, em.op("Mul", z, em.op("Sub", h, hh))), None

    def _lstm_step(self, k, row, rt, rb, h, c, peep):
        em, n = self.em, self.hidden
        f, g, act_h = self.acts[k]
        pi, po, pf = peep
        hr = self._recurrent(rt, rb, h)
        parts = zip(self._gates(row, 1, self._x_order),
                    self._gates(hr, -1, self._h_order) if hr is not None else [None] * 4)
        i_pre, o_pre, f_pre, c_pre = (self._add(x, y) for x, y in parts)
        if pi is not None and c is not None:
            i_pre = em.op("Add", i_pre, em.op("Mul", pi, c))
            f_pre = em.op("Add", f_pre, em.op("Mul", pf, c))
        i_gate = self._act(f, i_pre)
        cand = em.op("Mul", i_gate, self._act(g, c_pre))
        c_new = cand if c is None else em.op("Add", em.op("Mul", self._act(f, f_pre), c), cand)
        if pi is not None:
            o_pre = em.op("Add", o_pre, em.op("Mul", po, c_new))
        h_new = em.op("Mul", self._act(f, o_pre), em.op(act_h, c_new))
        return h_new, c_new
