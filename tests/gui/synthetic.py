"""Synthetic graphs for the GUI tests and benchmarks, built directly in the IR (fast, any size).

- ``training_graph(layers)``: a forward chain per layer (elementwise ops, some reading a
  parameter), a mirrored backward chain reading the saved forward values, parameter
  gradients, and an AdamW-like update per parameter reading its optimizer state; names
  are torch-style scopes (``/model/layer3/Mul_4``, ``Mul:model.layer3.p1.m``), so the
  scope tree groups them by layer and parameter. About 140 kernels per layer.
- ``dense_group(n, deps)``: ``n`` kernels in one scope with ``deps`` random extra data
  dependencies: a group ``dot`` needs tens of seconds for (the layout-timeout tests).
- ``flat_group(n)``: one scope with an ``n``-kernel chain and skip connections.
"""
from __future__ import annotations

import random

from ir.containers import Container, Role
from ir.graph import Graph
from ir.memlet import Memlet
from ir.nodes import OpNode

SHAPE = (16, 16)


def _c(g: Graph, name: str, role: Role = Role.TRANSIENT) -> str:
    g.add_container(Container(name, SHAPE, "float32", role))
    return name


def _op(g: Graph, name: str, op: str, ins: list[str], out: str) -> None:
    g.add_node(OpNode(g.ids.claim(name), op, [Memlet(i) for i in ins], [Memlet(out)], name=name))


def _forward(g: Graph, l: int, x: str, ops: int, params: list[str]) -> list[str]:
    saved = []
    for k in range(ops):
        y = _c(g, f"l{l}.y{k}")
        if k % 4 == 0:
            _op(g, f"/model/layer{l}/Mul_{k}", "Mul", [x, params[k // 4]], y)
        else:
            _op(g, f"/model/layer{l}/{'Relu' if k % 2 else 'Add'}_{k}", "Relu" if k % 2 else "Add",
                [x] if k % 2 else [x, saved[-2] if len(saved) > 1 else x], y)
        saved.append(y)
        x = y
    return saved


def _backward(g: Graph, l: int, dy: str, saved: list[str], params: list[str]) -> tuple[str, dict[str, str]]:
    grads = {}
    for k in reversed(range(len(saved))):
        dx = _c(g, f"l{l}.dx{k}")
        _op(g, f"/model/layer{l}/Op_{k}_Grad/Mul", "Mul", [dy, saved[k]], dx)
        if k % 4 == 0:
            gp = _c(g, f"l{l}.g{k // 4}")
            _op(g, f"/model/layer{l}/Op_{k}_Grad/Mul_dW", "Mul", [dy, saved[k - 1] if k else saved[0]], gp)
            grads[params[k // 4]] = gp
        dy = dx
    return dy, grads


def _update(g: Graph, p: str, grad: str) -> None:
    dotted = p.replace("/", ".")
    m, v = _c(g, f"{p}.m", Role.OPTIMIZER_STATE), _c(g, f"{p}.v", Role.OPTIMIZER_STATE)
    g.inputs += [m, v]
    steps = [("m.new", "Add", [m, grad]), ("v.g2", "Mul", [grad, grad]), ("v.new", "Add", [v, "v.g2"]),
             ("ratio", "Div", ["m.new", "v.new"]), ("new", "Sub", [p, "ratio"])]
    for suffix, op, ins in steps:
        out = _c(g, f"{p}.{suffix}", Role.PARAMETER if suffix == "new" else
                 Role.OPTIMIZER_STATE if suffix.endswith("new") else Role.TRANSIENT)
        _op(g, f"{op}:{dotted}.{suffix}", op, [f"{p}.{i}" if i in ("v.g2", "m.new", "v.new", "ratio") else i
                                                 for i in ins], out)
        if suffix.endswith("new"):
            g.outputs.append(out)


def training_graph(layers: int = 72, ops: int = 40) -> Graph:
    """About ``140 * layers`` kernels (see the module docstring); 72 layers ≈ 10,000."""
    g = Graph("synthetic_training")
    x = _c(g, "x", Role.INPUT)
    g.inputs.append(x)
    saved, params = [], []
    for l in range(layers):
        ps = [_c(g, f"model/layer{l}/p{j}", Role.PARAMETER) for j in range(-(-ops // 4))]
        g.inputs += ps
        params.append(ps)
        saved.append(_forward(g, l, x, ops, ps))
        x = saved[-1][-1]
    loss = _c(g, "loss", Role.OUTPUT)
    _op(g, "/model/loss/ReduceSum", "Relu", [x], loss)
    g.outputs.append(loss)
    dy = _c(g, "dloss")
    _op(g, "/model/loss/ReduceSum_Grad/Identity", "Relu", [loss], dy)
    for l in reversed(range(layers)):
        dy, grads = _backward(g, l, dy, saved[l], params[l])
        for p, grad in grads.items():
            _update(g, p, grad)
    g.meta["kind"] = "joint"
    return g


def dense_group(n: int = 120, deps: int = 1200, seed: int = 0) -> Graph:
    """``n`` kernels in scope ``/blk`` with ``deps`` random extra dependencies (a slow layout)."""
    rng = random.Random(seed)
    g = Graph("dense")
    g.inputs.append(_c(g, "x", Role.INPUT))
    outs = ["x"]
    for k in range(n):
        picks = sorted({outs[rng.randrange(len(outs))] for _ in range(max(1, deps // n))} | {outs[-1]})
        outs.append(_c(g, f"y{k}"))
        _op(g, f"/blk/Sum_{k}", "Sum", picks, outs[-1])
    g.outputs.append(outs[-1])
    return g


def flat_group(n: int = 300) -> Graph:
    """One scope ``/wide`` with an ``n``-kernel chain plus skip connections every 3 kernels."""
    g = Graph("flat")
    g.inputs.append(_c(g, "x", Role.INPUT))
    outs = ["x"]
    for k in range(n):
        ins = [outs[-1]] + ([outs[-4]] if k % 3 == 0 and len(outs) > 4 else [])
        outs.append(_c(g, f"y{k}"))
        _op(g, f"/wide/Sum_{k}", "Sum", ins, outs[-1])
    _op(g, "/head/Relu", "Relu", [outs[-1]], _c(g, "out"))
    g.outputs.append("out")
    return g
