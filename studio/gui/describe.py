"""Text the GUI shows about kernels, groups and containers: box labels, edge tooltips, properties.

Pure functions of the graph, its ``Ledger`` and the scope tree (no Qt), so they are
tested without a display. Properties are small HTML documents (escaped: names
come from the model file) with the printed IR of the kernel (``ir.printer``).
"""
from __future__ import annotations

import html
import re
import weakref

from ir.fused_ops import has_epilogue, is_group, members
from ir.graph import Graph
from ir.movement import Estimate, Ledger
from ir.nodes import MapNode, OpNode
from ir.printer import node_to_text
from ir.serialize import _node_from_json
from studio.text import human_bytes, human_count
from studio.gui.scope_tree import ScopeTree
from studio.gui.timings import human_seconds

MAX_EDGE_LINES = 8


FRIENDLY = {"LayerNormalization": "LayerNorm", "LayerNormalizationGrad": "LayerNorm grad",
            "BatchNormalization": "BatchNorm", "BatchNormInternal": "BatchNorm", "BatchNormalizationGrad":
            "BatchNorm grad", "Softmax": "softmax", "SoftmaxGrad": "softmax grad", "SoftmaxGrad_13": "softmax grad",
            "LogSoftmax": "log-softmax", "Gelu": "GELU", "GeluGrad": "GELU grad", "FastGelu": "GELU",
            "QuickGelu": "SiLU", "QuickGeluGrad": "SiLU grad", "Relu": "ReLU", "ReluGrad": "ReLU grad",
            "Sigmoid": "sigmoid", "SigmoidGrad": "sigmoid grad", "Tanh": "tanh", "Dropout": "dropout",
            "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "MatMul": "GEMM", "Gemm": "GEMM",
            "FusedMatMul": "GEMM", "SoftmaxCrossEntropyLoss": "cross-entropy", "Sum": "gradient sum"}
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Neg", "Reciprocal", "Cast", "Where", "Exp",
                         "Log", "Abs", "Sign", "Max", "Min", "Erf", "Identity", "Equal", "Less", "Greater", "Not",
                         "And", "Or", "Clip", "Floor", "Ceil", "Round", "Expand"})


def kernel_title(node: OpNode | MapNode) -> str:
    """What a kernel computes, named from its lineage (the ops it was made from): "LayerNorm + residual",
    "GEMM + bias + GELU", "AdamW × 16"; a library call by its op (its domain is in the properties)."""
    if isinstance(node, OpNode):
        return _op_title(node) + (f" [{node.impl}]" if node.impl != "default" else "")
    ops, update = _lineage(node.label), optimizer_title(node)
    if not update:
        return ops_title(ops, node)
    return " + ".join([x for x in _named(ops) if "elementwise" not in x] + [update])    # "sum + AdamW update"


def fit_title(title: str, fits) -> str:
    """``title`` shortened at its " + " joints until ``fits(text)``: "LayerNorm + residual + …", never an op
    name cut in the middle (None when not even the first part fits: the caller elides that one at its end)."""
    parts = title.split(" + ")
    for k in range(len(parts), 0, -1):
        text = " + ".join(parts[:k]) + (" + …" if k < len(parts) else "")
        if fits(text):
            return text
    return None


def _op_title(node: OpNode) -> str:
    if is_group(node):
        return f"GEMM × {len(members(node))}"
    name = FRIENDLY.get(node.op_type, node.op_type)
    if not has_epilogue(node):
        return name
    epilogue = [op for op in _lineage(_node_from_json(node.attrs["epilogue"]).label) if op != node.op_type]
    return " + ".join([name, *_named(epilogue, bias=True)])


def _lineage(label: str) -> list[str]:
    """The op types a fused map was made from, in order (its label joins them with +, > and |)."""
    return [part.split(":")[0].strip() for part in re.split(r"[+>|]", label or "") if part.strip()]


def _named(ops: list[str], bias: bool = False) -> list[str]:
    """Readable parts: named ops once each, in order; an Add just before a norm is the residual, an
    epilogue's Add the bias; the remaining arithmetic counted."""
    out, rest = [], 0
    for k, op in enumerate(ops):
        if op in ELEMENTWISE:
            follows = ops[k + 1] if k + 1 < len(ops) else ""
            part = ("residual" if op == "Add" and "Norm" in follows else "bias" if op == "Add" and bias else None)
            if part is None:
                rest += 1
            elif part not in out:
                out.append(part)
            continue
        name = FRIENDLY.get(op, op)
        if name not in out:
            out.append(name)
    if rest:
        out.append(f"{rest} elementwise" if out else f"elementwise × {rest}")
    return out


def ops_title(ops: list[str], node: MapNode) -> str:
    if not ops:
        return f"map[{len(node.params)}d] {len(node.body)} tasklet{'s' * (len(node.body) != 1)}"
    named = _named(ops)
    if "residual" in named:                      # the norm first: "LayerNorm + residual"
        named.remove("residual")
        named.insert(1, "residual")
    return " + ".join(named)


def optimizer_title(node: MapNode) -> str:
    """An optimizer update (its outputs are ``p.new`` with ``p.m.new``/``p.v.new`` or ``p.momentum.new``):
    "AdamW × 16" for a map updating 16 parameters."""
    outs = {m.container for m in node.outputs if m is not None}
    params = {o[:-4] for o in outs if o.endswith(".new") and not o.endswith((".m.new", ".v.new", ".momentum.new"))}
    if not params:
        return ""
    kind = ("AdamW" if any(f"{p}.v.new" in outs for p in params) else "Lion" if any(f"{p}.m.new" in outs for p in params)
            else "SGD")
    return kind + (f" × {len(params)}" if len(params) > 1 else " update")


_GROUP_BYTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def group_bytes(tree: ScopeTree, ledger: Ledger) -> dict[str, int]:
    """Bytes moved by each group of ``tree`` under ``ledger`` (a state's ledger does not change once
    made), computed once per pair."""
    kept = _GROUP_BYTES.get(ledger)
    if kept is None or kept[0] is not tree:
        kernels = ledger.kernels
        kept = _GROUP_BYTES[ledger] = (tree, tree.sums(lambda k: kernels[k].bytes if k in kernels else 0))
    return kept[1]


def box_text(graph: Graph, tree: ScopeTree, ledger: Ledger, key: str) -> tuple[str, str]:
    """(title, subtitle) of a box: op type and name, or group label and its size and bytes."""
    if tree.is_group(key):
        g = tree.groups[key]
        return f"⊞ {g.label}", f"{g.size} kernels · {human_bytes(group_bytes(tree, ledger)[key])}"
    node = graph.nodes[key]
    return kernel_title(node), tree.label(key)


def container_line(graph: Graph, name: str) -> str:
    c = graph.containers[name]
    try:
        size = human_bytes(c.nbytes(graph.bindings))
    except KeyError:
        size = "? B"
    shape = ", ".join(str(d) for d in c.shape)
    return f"{name}: {c.dtype}[{shape}] {c.role.value} · {size}"


def container_bytes(graph: Graph, name: str) -> int:
    try:
        return graph.containers[name].nbytes(graph.bindings)
    except KeyError:
        return 0


def edge_label(graph: Graph, containers: list[str]) -> str:
    """An edge's label: ``f32[8, 128, 768] · 3.1 MB`` for one container, else ``3 tensors · 9.4 MB``."""
    if not containers:
        return ""
    total = human_bytes(sum(container_bytes(graph, n) for n in containers))
    if len(containers) == 1 and containers[0] in graph.containers:
        c = graph.containers[containers[0]]
        return f"{c.dtype}[{', '.join(str(d) for d in c.shape)}] · {total}"
    return f"{len(containers)} tensors · {total}"


def edge_tooltip(graph: Graph, containers: list[str]) -> str:
    """The containers an aggregated edge carries, with shapes and bytes (the first few)."""
    total = sum(container_bytes(graph, n) for n in containers)
    lines = [f"{len(containers)} container{'s' * (len(containers) != 1)}, {human_bytes(total)}"]
    lines += [container_line(graph, n) for n in containers[:MAX_EDGE_LINES]]
    if len(containers) > MAX_EDGE_LINES:
        lines.append(f"… and {len(containers) - MAX_EDGE_LINES} more")
    return "\n".join(lines)


def _row(*cells: str) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _memlet_rows(graph: Graph, memlets, direction: str) -> list[str]:
    rows = []
    for k, m in enumerate(memlets):
        if m is None:
            rows.append(_row(f"{direction}{k}", "<i>omitted</i>", "", ""))
            continue
        c = graph.containers[m.container]
        shape = ", ".join(str(d) for d in c.shape)
        rows.append(_row(f"{direction}{k}", html.escape(m.to_text()), f"{c.dtype}[{shape}] {c.role.value}",
                         human_bytes(container_bytes(graph, m.container))))
    return rows


def _figures(est: Estimate) -> str:
    return (f"<p><b>read</b> {human_bytes(est.bytes_read)} · <b>written</b> {human_bytes(est.bytes_written)} · "
            f"<b>FLOPs</b> {human_count(est.flops)} · <b>intensity</b> {est.intensity:.2f} FLOP/B · "
            f"<b>accesses</b> {human_count(est.accesses)}</p>")


MAX_ORIGINS = 8


def made_from(origins: tuple[str, ...], ident: str) -> str:
    """"made from N kernels: a, b, … (and M more)" for a kernel a step derived from others ('' otherwise)."""
    if not origins or origins == (ident,):
        return ""
    shown = ", ".join(origins[:MAX_ORIGINS])
    more = f" and {len(origins) - MAX_ORIGINS} more" if len(origins) > MAX_ORIGINS else ""
    return f"made from {len(origins)} original kernel{'s' * (len(origins) != 1)}: {shown}{more}"


def kernel_tooltip(graph: Graph, ledger: Ledger, ident: str, time_us: float | None = None,
                   origins: tuple[str, ...] = ()) -> str:
    """The hover text of a kernel: op and id, its first output's shape, bytes and FLOPs, the
    measured time when a profile ran, and the kernels it was made from."""
    node = graph.nodes[ident]
    e = ledger.kernels.get(ident, Estimate())
    lines = [f"{kernel_title(node)} · {ident}"]
    out = next((m.container for m in node.outputs if m is not None), None)
    if out is not None and out in graph.containers:
        lines.append("out " + container_line(graph, out))
    lines.append(f"moved {human_bytes(e.bytes)} (read {human_bytes(e.bytes_read)}, written "
                 f"{human_bytes(e.bytes_written)}) · {human_count(e.flops)} FLOPs · {e.intensity:.2f} FLOP/B")
    if time_us is not None:
        lines.append(f"measured {human_seconds(time_us * 1e-6)} (median of the last profile)")
    if text := made_from(origins, ident):
        lines.append(text)
    return "\n".join(lines)


def kernel_html(graph: Graph, tree: ScopeTree, ledger: Ledger, ident: str, origins: tuple[str, ...] = ()) -> str:
    """Properties of one kernel: identity, lineage, attributes, memlets with shapes, figures and printed IR."""
    node = graph.nodes[ident]
    esc = html.escape
    lineage = made_from(origins, ident)
    parts = [f"<h3>{esc(kernel_title(node))}</h3>",
             f"<p><b>id</b> {esc(node.id)}<br><b>name</b> {esc(node.name)}<br>"
             f"<b>pass</b> {tree.passes[ident].value if tree.passes.get(ident) else '?'}"
             + (f"<br><b>created by</b> {esc(node.provenance[0])} (step {node.provenance[1]})"
                if node.provenance else "")
             + (f"<br><b>{esc(lineage.split(':', 1)[0])}</b>:{esc(lineage.split(':', 1)[1])}" if lineage else "")
             + "</p>"]
    if isinstance(node, OpNode):
        parts.append(f"<p><b>domain</b> {esc(node.domain or 'ai.onnx')} · <b>opset</b> {node.opset} · "
                     f"<b>impl</b> {esc(node.impl)}</p>")
        if node.attrs:
            parts.append("<table>" + "".join(_row(f"<b>{esc(k)}</b>", esc(_short(v)))
                                             for k, v in sorted(node.attrs.items())) + "</table>")
    parts.append(_figures(ledger.kernels.get(ident, Estimate())))
    parts.append("<table cellspacing=4><tr><th>slot</th><th>memlet</th><th>container</th><th>bytes</th></tr>"
                 + "".join(_memlet_rows(graph, node.inputs, "in") + _memlet_rows(graph, node.outputs, "out"))
                 + "</table>")
    parts.append(f"<pre style=\"white-space: pre-wrap\">{esc(node_to_text(node))}</pre>")        # wrapped: never cut
    return "".join(parts)


def group_html(graph: Graph, tree: ScopeTree, ledger: Ledger, key: str) -> str:
    g = tree.groups[key]
    members = tree.members(key)
    est = sum((ledger.kernels.get(i, Estimate()) for i in members), Estimate())
    ops: dict[str, int] = {}
    for i in members:
        title = kernel_title(graph.nodes[i])
        ops[title] = ops.get(title, 0) + 1
    top = ", ".join(f"{html.escape(k)} ×{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:12])
    return (f"<h3>group {html.escape(g.label)}</h3><p><b>scope</b> {html.escape(key.removeprefix('group:'))}"
            f"<br><b>kernels</b> {g.size} · <b>pass</b> {g.pass_.value if g.pass_ else 'mixed'}</p>"
            + _figures(est) + f"<p>{top}</p>")


def _short(v) -> str:
    text = repr(v.tolist()) if hasattr(v, "tolist") else repr(v)
    return text if len(text) <= 120 else text[:117] + "…"
