"""A readable text form of the IR, for golden tests and the GUI's properties pane.

Example::

    graph g (kind=forward)
      container x: float32[2, 4] input
      ...
      %Add_0 = Add(x, b) -> (y)
      %Relu_0/expanded = map[i0=0:2, i1=0:4] {
        t0: y[i0, i1] = max(x[i0, i1], 0.0)
      }
"""
from __future__ import annotations

from ir import expr as E
from ir.graph import Graph
from ir.memlet import Memlet
from ir.nodes import MapNode, OpNode, Tasklet


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _attr(v) -> str:
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"tensor<{v.dtype}{_shape(v.shape)}>" if v.size > 8 else repr(v.tolist())
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v)


NESTED_ATTRS = ("epilogue", "members")   # fused nodes (ir.fused_ops): printed below the op line


def op_to_text(n: OpNode) -> str:
    ins = ", ".join(m.container if m is not None else "_" for m in n.inputs)
    outs = ", ".join(m.container if m is not None else "_" for m in n.outputs)
    attrs = ", ".join(f"{k}={_attr(v)}" for k, v in sorted(n.attrs.items()) if k not in NESTED_ATTRS)
    impl = f" impl={n.impl}" if n.impl != "default" else ""
    attrs_txt = f" {{{attrs}}}" if attrs else ""
    return f"%{n.id} = {n.qualified_type}({ins}){attrs_txt} -> ({outs}){impl}"


def tasklet_to_text(t: Tasklet) -> str:
    names = {conn: m.to_text() for conn, m in t.inputs.items()}
    rhs = E.to_text(E.substitute(t.expr, {k: E.Var(v) for k, v in names.items()}))
    wcr = f" (wcr={t.output.wcr})" if t.output.wcr else ""
    out = Memlet(t.output.container, t.output.subset).to_text()
    return f"{t.id}: {out}{wcr} = {rhs}"


def map_to_text(m: MapNode, indent: str = "") -> list[str]:
    params = ", ".join(f"{p}={r.to_text()}" for p, r in m.params)
    head = f"{indent}%{m.id} = map[{params}] {{" if not indent else f"{indent}map[{params}] {{"
    lines = [head]
    inner = indent + "  "
    for name, c in m.locals.items():
        lines.append(f"{inner}local {name}: {c.dtype}{_shape(c.shape)}")
    for b in m.body:
        if isinstance(b, MapNode):
            lines.extend(map_to_text(b, inner))
        else:
            lines.append(inner + tasklet_to_text(b))
    lines.append(f"{indent}}}")
    if not indent:
        ins = ", ".join(x.to_text() for x in m.inputs)
        outs = ", ".join(x.to_text() for x in m.outputs)
        lines.append(f"# reads {ins}; writes {outs}")
    return lines


def _nested_lines(attrs: dict, indent: str) -> list[str]:
    """A fused node's epilogue map and grouped members, indented under its op line."""
    from ir.serialize import _node_from_json
    lines = []
    if "epilogue" in attrs:
        epi = map_to_text(_node_from_json(attrs["epilogue"]), indent)
        lines.extend([epi[0].replace("map[", "epilogue map[", 1)] + epi[1:])
    for k, rec in enumerate(attrs.get("members", ())):
        dom = f"{rec['domain']}::" if rec["domain"] else ""
        lines.append(f"{indent}member {k}: {dom}{rec['op_type']}(inputs {rec['inputs']}) -> (outputs {rec['outputs']})")
        lines.extend(_nested_lines(rec["attrs"], indent + "  "))
    return lines


def node_to_text(n) -> str:
    if isinstance(n, OpNode):
        return "\n".join([op_to_text(n)] + _nested_lines(n.attrs, "  "))
    return "\n".join(map_to_text(n))


def to_text(graph: Graph, *, containers: bool = True) -> str:
    lines = [f"graph {graph.name} (kind={graph.meta.get('kind', '?')})"]
    if graph.bindings:
        lines.append("  bindings " + ", ".join(f"{k}={v}" for k, v in sorted(graph.bindings.items())))
    if containers:
        for c in graph.containers.values():
            lines.append(f"  container {c.name}: {c.dtype}{_shape(c.shape)} {c.role.value}")
    lines.append("  inputs " + ", ".join(graph.inputs))
    lines.append("  outputs " + ", ".join(graph.outputs))
    from ir.memory import buffers_to_text  # the buffer plan of memory_reuse, if any
    lines.extend("  " + line for line in buffers_to_text(graph))
    for n in graph.nodes.values():
        lines.extend("  " + line for line in node_to_text(n).splitlines())
    return "\n".join(lines) + "\n"
