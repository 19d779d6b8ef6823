"""``mixed_precision`` (level 4): store transients in bfloat16/float16, compute in float32.

Before → after (``dtype="bfloat16"``, anchor: the map producing ``a``)::

    container a: float32[8, 128, 3072] transient
    %gelu = map[i0=0:8, i1=0:128, i2=0:3072] { t: a[i0, i1, i2] = gelu(h[i0, i1, i2]) }
    %dgelu = map[j0=0:8, j1=0:128, j2=0:3072] { u: d[j0, j1, j2] = (a[j0, j1, j2] * g[j0, j1, j2]) }
    %a2d = Reshape(a, shape) -> (a2d)
    %dw = Gemm(a2d, dy) {transA=1} -> (gw)
    →
    container a: bfloat16[8, 128, 3072] transient
    container a2d: bfloat16[1024, 3072] transient                    # a view keeps the storage type
    %gelu = map[…] { t: a[i0, i1, i2] = bfloat16(gelu(h[i0, i1, i2])) }          # cast on store
    %dgelu = map[…] { u: d[j0, j1, j2] = (float32(a[j0, j1, j2]) * g[…]) }       # upcast on load
    %a2d = Reshape(a, shape) -> (a2d)
    %dw = Gemm(a2d, dy) {transA=1} -> (gw)              # contractions widen and accumulate in fp32

The producer computes in float32 and rounds once when it stores; every reader upcasts
when it loads, so all arithmetic and every reduction (wcr) stays float32. Bytes moved for
the chosen containers halve. Scope: the anchor kernel's float32 transient outputs, or only
``container`` when that parameter is set. The match list offers bfloat16 (the default
instance); float16 is the same transformation with ``dtype="float16"``. Graph inputs, outputs, parameters and optimizer
state never change type, so the graph's interface stays float32.

Requirements, each failing with a reason naming the node: the producer is a map (a library
node cannot cast on store — expand it first) whose writes of the container are plain (no
wcr: accumulating in low precision is what AMP must avoid); every reader is a map, a
contraction that widens its operands (MatMul, Gemm, FusedMatMul), a metadata op (Shape,
Size) or a view op (Reshape, Flatten, Squeeze, Unsqueeze, Identity — whose output then
also becomes low precision and whose readers obey the same rule). Plan memory afterwards
(containers in a ``memory_reuse`` buffer are refused).

float16 is refused for kernels of the backward pass (``transforms.phases``): without loss
scaling, small gradients flush to float16 subnormals (on BERT-base, whose MSE loss averages
786,432 elements, storing every transient in float16 gave a median gradient error of 6 %
and 70 % on a LayerNorm bias). bfloat16 keeps float32's exponent range.

Tolerance (measured, ``tests/unit/transforms/test_mixed_precision.py``), errors relative to
max(a tensor's largest magnitude, 1e-3):

- bfloat16, every eligible transient (activations, their gradients, parameter gradients):
  loss within 1e-3 and every parameter gradient within ``BF16_RTOL`` = 3e-2. Measured on the
  BERT-small step (``ort_artifacts/bert_layer_small``, expanded): loss 3.6e-4, gradients
  2.7e-2 worst (query/key weights: their gradient passes the softmax backward), median 6e-3;
  on BERT-base (expanded and map-fused): loss 2.0e-5, gradients 2.1e-2 worst, median 1.5e-3.
- float16, forward activations only: loss within 1e-4 and gradients within ``FP16_RTOL`` =
  5e-3 (BERT-small measured in the test).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Iterable, Iterator

from ir import expr as E
from ir import fused_ops, memory
from ir.graph import Graph
from ir.nodes import MapNode, OpNode, Tasklet
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.phases import forward_kernels, has_loss
from transforms.registry import register

LOW_TYPES = ("bfloat16", "float16")
WIDENING_OPS = frozenset(op for _, op in fused_ops.CONTRACTIONS if op != "Einsum")
METADATA_OPS = frozenset({"Shape", "Size"})
BF16_RTOL = 3e-2
FP16_RTOL = 5e-3
ComputeNode = OpNode | MapNode


@dataclass(frozen=True)
class _Plan:
    kernel: ComputeNode
    stores: tuple[str, ...]                 # containers the kernel casts on store
    lowered: tuple[str, ...]                # stores plus the view outputs that follow them
    skipped: tuple[tuple[str, str], ...]    # (container, reason) left in float32


@register
@dataclass(frozen=True)
class MixedPrecision(Transformation):
    name: ClassVar[str] = "mixed_precision"
    level: ClassVar[int] = 4
    dtype: str = "bfloat16"
    container: str = ""

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        if self.container:
            p = graph.producer(self.container) if self.container in graph.containers else None
            if p is not None and (within is None or p.id in set(within)):
                yield self.match(p.id, label=f"store '{self.container}' in {self.dtype}")
            return
        for node in scope(graph, within):
            if isinstance(node, MapNode) and any(_float_transient(graph, m.container) for m in node.outputs):
                yield self.match(node.id, label=f"store the outputs of '{node.id}' in {self.dtype}")

    @property
    def tolerance(self) -> float:
        """The stated relative tolerance of gradients after this transformation (module docstring)."""
        return FP16_RTOL if self.dtype == "float16" else BF16_RTOL

    def _plan(self, graph: Graph, match: Match) -> _Plan | MatchResult:
        if self.dtype not in LOW_TYPES:
            return fail(f"dtype '{self.dtype}' is not a storage type for mixed precision ({', '.join(LOW_TYPES)})")
        if len(match.anchors) != 1:
            return fail("mixed_precision takes one anchor: the kernel that produces the containers")
        node = graph.nodes.get(match.anchors[0])
        if node is None:
            return fail(f"no node '{match.anchors[0]}'", match.anchors[0])
        outs = [m.container for m in node.outputs if m is not None]
        if self.container and self.container not in outs:
            return fail(f"'{node.id}' does not write '{self.container}'", node.id)
        if self.dtype == "float16" and has_loss(graph) and node.id not in forward_kernels(graph):
            return fail(f"'{node.id}' belongs to the backward pass: float16 gradients underflow without loss "
                        "scaling; store them in bfloat16", node.id)
        stores, lowered, skipped = [], [], []
        for c in [self.container] if self.container else outs:
            found = _lowerable(graph, node, c)
            if isinstance(found, str):
                skipped.append((c, found))
            else:
                stores.append(c)
                lowered.extend(found)
        if not stores:
            return fail(skipped[0][1] if skipped else f"'{node.id}' writes nothing", node.id)
        return _Plan(node, tuple(stores), tuple(dict.fromkeys(lowered)), tuple(skipped))

    def check(self, graph: Graph, match: Match) -> MatchResult:
        plan = self._plan(graph, match)
        return plan if isinstance(plan, MatchResult) else OK

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        plan = self._plan(graph, match)
        return match.anchors if isinstance(plan, MatchResult) else _touching(graph, plan)

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        plan = self._plan(graph, match)
        if isinstance(plan, MatchResult):
            raise ValueError(plan.reason)
        touching = _touching(graph, plan)
        for name in plan.lowered:
            graph.set_container(replace(graph.container(name), dtype=self.dtype))
        _cast_stores(plan.kernel, set(plan.stores), self.dtype)
        for ident in touching:
            node = graph.nodes[ident]
            if isinstance(node, MapNode):
                _upcast_loads(node, set(plan.lowered))
        return Touched(changed=touching)

    def figures(self, before: Graph, after: Graph) -> dict[str, Any]:
        changed = [n for n, c in after.containers.items()
                   if n in before.containers and before.containers[n].dtype != c.dtype]
        saved = sum(before.container(n).nbytes(before.bindings) - after.container(n).nbytes(after.bindings)
                    for n in changed)
        return {"containers": changed, "storage_bytes_saved": saved}


def _float_transient(graph: Graph, name: str) -> bool:
    c = graph.containers[name]
    return c.is_transient and c.dtype == "float32" and name not in graph.outputs


def _lowerable(graph: Graph, producer: ComputeNode, name: str) -> list[str] | str:
    """The containers that become low precision with ``name`` (it and its views), or why not."""
    c = graph.container(name)
    if not c.is_transient or name in graph.outputs or name in graph.inputs:
        return f"'{name}' is part of the graph's interface ({c.role.value}): its type stays {c.dtype}"
    if c.dtype != "float32":
        return f"'{name}' is {c.dtype}, not float32"
    if not isinstance(producer, MapNode):
        return (f"'{producer.id}' ({producer.op_type}) is a library node: it cannot cast '{name}' on store; "
                "expand it first")
    wcr = [t.output.wcr for t, _ in producer.walk() if isinstance(t, Tasklet)
           and t.output.container == name and t.output.wcr is not None]
    if wcr:
        return (f"'{producer.id}' accumulates into '{name}' (wcr={wcr[0]}): storing it in low precision would "
                "accumulate in low precision")
    return _views_and_readers(graph, name)


def _views_and_readers(graph: Graph, name: str) -> list[str] | str:
    planned = set(memory.buffer_groups(graph))
    todo, out = [name], []
    while todo:
        cur = todo.pop()
        if cur in planned:
            return f"'{cur}' shares a buffer (memory_reuse): apply mixed_precision before planning memory"
        out.append(cur)
        for r in graph.consumers(cur):
            if isinstance(r, MapNode) or r.op_type in WIDENING_OPS | METADATA_OPS:
                continue
            if r.op_type not in memory.VIEW_OPS or r.domain:
                return (f"'{r.id}' ({r.op_type}) is a library node that reads '{cur}' without widening it; "
                        "expand it first")
            view = r.outputs[0].container
            if not _float_transient(graph, view):
                return f"view '{view}' of '{cur}' (by '{r.id}') is not a float32 transient"
            todo.append(view)
    return out


def _touching(graph: Graph, plan: _Plan) -> tuple[str, ...]:
    """Every kernel that reads or writes a lowered container, in graph order."""
    ids = {plan.kernel.id}
    for name in plan.lowered:
        ids.update(r.id for r in graph.consumers(name))
        p = graph.producer(name)
        if p is not None:
            ids.add(p.id)
    return tuple(i for i in graph.nodes if i in ids)


def _cast_stores(m: MapNode, names: set[str], dtype: str) -> None:
    for t, _ in m.walk():
        if isinstance(t, Tasklet) and t.output.container in names:
            t.expr = E.Cast(t.expr, dtype)


def _upcast_loads(m: MapNode, names: set[str]) -> None:
    for t, _ in m.walk():
        if isinstance(t, Tasklet):
            conns = {conn: E.Cast(E.Var(conn), "float32") for conn, mem in t.inputs.items() if mem.container in names}
            if conns:
                t.expr = E.substitute(t.expr, conns)


__all__ = ["BF16_RTOL", "FP16_RTOL", "MixedPrecision"]
