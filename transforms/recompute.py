"""``recompute`` (level 4): rematerialize a cheap activation right before its backward reader.

Before → after (RAF-style rematerialization; the GELU output ``a`` is kept alive from the
forward pass to the weight gradient, 23 kernels later)::

    %gelu = com.microsoft::Gelu(h) -> (a)                                   # kernel 30
    %fc2 = MatMul(a, w2t) -> (y)                                            # 31, forward
    …
    %dw2 = Reshape(a, shape2d) -> (a2d)                                     # 53, backward
    →
    %gelu = com.microsoft::Gelu(h) -> (a)                                   # a now dies at 31
    %fc2 = MatMul(a, w2t) -> (y)
    …
    %gelu/recompute = com.microsoft::Gelu(h) -> (a/recompute)               # new, right before 53
    %dw2 = Reshape(a/recompute, shape2d) -> (a2d)

Anchors ``(P, C)``: ``P`` writes ``T`` (the outputs of ``P`` that ``C`` reads) and ``C`` is a
backward kernel at least ``min_distance`` kernels later in the schedule. A clone of ``P``
(id ``<P>/recompute``) computes ``T`` again just before ``C``; ``C`` and every later reader of
``T`` read the clone's output. When nothing else reads ``T``, ``P`` stops writing it, and
``P`` disappears when it writes nothing that is read (the kernel has moved).

Rules:

- **Forward vs backward** (``transforms.phases``): the forward pass is every kernel the loss
  depends on — the transitive producers of the graph outputs whose role is ``output``.
  Every other kernel (gradients, optimizer) is backward. A graph without a loss has no
  matches.
- **Cheap.** ``P`` is a map or an expandable op (not a library call such as MatMul/Conv),
  draws no random numbers, and spends at most ``max_flops_per_element`` FLOPs per element
  it writes (``ir.movement``).
- **Clone of a map.** Only the statements ``T`` needs are kept; a local whose value ``P``
  also stores to a container that is still live at ``C`` is read back from there instead
  of being recomputed (a bias+GELU map re-reads the stored pre-activation, not the GEMM).

Δbytes = the clone's reads and writes − what ``P`` no longer writes (can be + or −); the
saved activation's lifetime ends at its last forward reader. ``figures`` reports
``peak_before``/``peak_after`` (``ir.memory.peak_bytes``). Fusing the clone into ``C``
afterwards (``map_fusion``) removes the write and read of ``T``'s copy.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Iterator

from ir import lowering, memory
from ir.containers import Container, Role
from ir.graph import Graph
from ir.pacing import paced
from ir.maps import finalize
from ir.memlet import Memlet
from ir.movement import kernel_estimate
from ir.nodes import MapNode, OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail
from transforms.kernel_slices import drop_writes, kernel_reads, prefer_stored, rename_reads
from transforms.phases import forward_kernels, has_loss
from transforms.registry import register

ComputeNode = OpNode | MapNode
RANDOM_OPS = frozenset({"Dropout", "BiasDropout", "BitmaskDropout", "BitmaskBiasDropout", "RandomNormal",
                        "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"})
OPTIONAL_OUTPUTS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                              "SkipSimplifiedLayerNormalization", "BatchNormalization"})


@dataclass(frozen=True)
class _Plan:
    producer: ComputeNode
    consumer: ComputeNode
    targets: tuple[str, ...]            # outputs of the producer that the consumer reads
    readers: tuple[ComputeNode, ...]    # the consumer and every later reader of the targets
    lives: dict                         # the lifetimes the plan read (``ir.memory.lifetimes``)


@register
@dataclass(frozen=True)
class Recompute(Transformation):
    name: ClassVar[str] = "recompute"
    level: ClassVar[int] = 4
    min_distance: int = 8
    max_flops_per_element: int = 64

    local_matches: ClassVar[bool] = False   # a match depends on the distance in schedule order
    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        if not has_loss(graph):
            return
        order = graph.topo_order()
        pos = {n.id: k for k, n in enumerate(order)}
        fwd = forward_kernels(graph)
        outputs = frozenset(graph.outputs)
        wanted = None if within is None else set(within)
        for p in paced(order):
            for c in self._far_readers(graph, p, pos, fwd, outputs):
                if wanted is not None and p.id not in wanted and c.id not in wanted:
                    continue
                if isinstance(p, OpNode) and self._not_cheap(graph, p) is not None:
                    break
                yield self.match(p.id, c.id, label=f"recompute '{p.id}' before '{c.id}'")

    def _far_readers(self, graph: Graph, p: ComputeNode, pos: dict, fwd: frozenset[str],
                     outputs: frozenset[str]) -> list[ComputeNode]:
        """Per transient output of ``p``: its first backward reader ``min_distance`` or more later."""
        out: dict[str, ComputeNode] = {}
        for m in p.outputs:
            if m is None or m.container in outputs or not graph.containers[m.container].is_transient:
                continue
            far = [c for c in graph.consumers(m.container)
                   if c.id not in fwd and pos[c.id] - pos[p.id] >= self.min_distance]
            if far:
                first = min(far, key=lambda c: pos[c.id])
                out.setdefault(first.id, first)
        return list(out.values())

    def _not_cheap(self, graph: Graph, p: ComputeNode) -> str | None:
        if isinstance(p, OpNode):
            if p.op_type in RANDOM_OPS:
                return f"'{p.id}' ({p.op_type}) draws random numbers: a recomputation would differ"
            if p.op_type not in memory.VIEW_OPS and lowering.can_expand(graph, p) is not None:
                return f"'{p.id}' ({p.op_type}) is a library call: recomputing it is not cheap"
        elems = sum(graph.container(m.container).numel(graph.bindings) for m in p.outputs if m is not None)
        flops = kernel_estimate(graph, p).flops
        if flops > self.max_flops_per_element * max(elems, 1):
            return (f"'{p.id}' spends {flops / max(elems, 1):.0f} FLOPs per element it writes "
                    f"(> max_flops_per_element={self.max_flops_per_element})")
        return None

    def _plan(self, graph: Graph, match: Match) -> _Plan | MatchResult:
        if len(match.anchors) != 2:
            return fail("recompute needs two anchors (producer, backward consumer)")
        p, c = (graph.nodes.get(a) for a in match.anchors)
        for ident, node in zip(match.anchors, (p, c)):
            if node is None:
                return fail(f"no node '{ident}'", ident)
        shared = [m.container for m in p.outputs if m is not None
                  and m.container in {x.container for x in c.inputs if x is not None}]
        if not shared:
            return fail(f"'{c.id}' reads nothing that '{p.id}' writes", p.id, c.id)
        targets = tuple(t for t in shared if t not in graph.outputs and graph.containers[t].is_transient)
        if not targets:
            return fail(f"'{c.id}' reads only interface containers or graph outputs of '{p.id}' "
                        f"({', '.join(shared)}): they are stored anyway", p.id, c.id)
        pos = _positions(graph)
        why = self._placement(graph, p, c, pos) or self._not_cheap(graph, p) or _planned(graph, p, targets)
        if why is None:
            lives = memory.lifetimes(graph)
            why = _kept_alive(graph, p, c, targets, lives, pos[c.id])
        if why is not None:
            return fail(why, p.id, c.id)
        readers = {r.id: r for t in targets for r in graph.consumers(t) if pos[r.id] >= pos[c.id]}
        return _Plan(p, c, targets, tuple(sorted(readers.values(), key=lambda r: pos[r.id])), lives)

    def _placement(self, graph: Graph, p: ComputeNode, c: ComputeNode, pos: dict[str, int]) -> str | None:
        if not has_loss(graph):
            return "the graph has no loss output (role 'output'): forward and backward cannot be told apart"
        if c.id in forward_kernels(graph):
            return f"'{c.id}' is part of the forward pass (the loss depends on it); recompute serves backward readers"
        distance = pos[c.id] - pos[p.id]
        if distance < self.min_distance:
            return (f"'{c.id}' runs {distance} kernel(s) after '{p.id}' (< min_distance={self.min_distance}): "
                    "keeping the activation costs little")
        return None

    def check(self, graph: Graph, match: Match) -> MatchResult:
        return self.prepare(graph, match)[0]

    def prepare(self, graph: Graph, match: Match) -> tuple[MatchResult, _Plan | None]:
        plan = self._plan(graph, match)
        return (plan, None) if isinstance(plan, MatchResult) else (OK, plan)

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        return self.affected_prepared(graph, match, self.prepare(graph, match)[1])

    def affected_prepared(self, graph: Graph, match: Match, prepared: _Plan | None) -> tuple[str, ...]:
        if prepared is None:
            return match.anchors
        return (prepared.producer.id,) + tuple(r.id for r in prepared.readers)

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        res, plan = self.prepare(graph, match)
        if plan is None:
            raise ValueError(res.reason)
        return self.rewrite_prepared(graph, match, step, plan)

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, plan: _Plan) -> Touched:
        p, c = plan.producer, plan.consumer
        renames = {t: _fresh_container(graph, t) for t in plan.targets}
        clone = _clone(graph, p, renames, graph.topo_order().index(c), plan.lives)
        clone.provenance = (self.name, step)
        graph.add_node(clone, before=c.id)
        for r in plan.readers:
            relinked(graph, r, lambda r=r: rename_reads(r, renames))
        removed, changed = _retire(graph, p, plan.targets)
        return Touched(created=(clone.id,), removed=removed, changed=tuple(r.id for r in plan.readers) + changed)

    def figures(self, before: Graph, after: Graph) -> dict[str, Any]:
        return {"peak_before": memory.peak_bytes(before), "peak_after": memory.peak_bytes(after)}


def _positions(graph: Graph) -> dict[str, int]:
    """Kernel id -> its place in the schedule (built once while the graph is held)."""
    return memory.analysis(graph, "positions", lambda: {n.id: k for k, n in enumerate(graph.topo_order())})


def _planned(graph: Graph, p: ComputeNode, targets: tuple[str, ...]) -> str | None:
    owner = {c for members in memory.read_buffers(graph).values() for c in members}
    touched = [n for n in list(targets) + [m.container for m in p.inputs if m is not None] if n in owner]
    if touched:
        return (f"'{touched[0]}' shares a buffer (memory_reuse) and recomputing moves its reads: "
                "plan memory after recompute")
    return None


def _fresh_container(graph: Graph, name: str) -> str:
    base = f"{name}/recompute"
    new, k = base, 1
    while new in graph.containers:
        new, k = f"{base}~{k}", k + 1
    old = graph.container(name)
    graph.add_container(Container(new, old.shape, old.dtype, Role.TRANSIENT))
    return new


def _clone(graph: Graph, p: ComputeNode, renames: dict[str, str], at: int, lives: dict) -> ComputeNode:
    """A copy of ``p`` computing only ``renames``' keys, written to their new names."""
    new_id = graph.ids.claim(f"{p.id}/recompute")
    if isinstance(p, OpNode):
        outs = []
        for k, m in enumerate(p.outputs):
            if m is None or m.container in renames:
                outs.append(None if m is None else Memlet(renames[m.container]))
            elif k > 0 and p.op_type in OPTIONAL_OUTPUTS:
                outs.append(None)
            else:
                outs.append(Memlet(_fresh_container(graph, m.container)))
        return OpNode(new_id, p.op_type, list(p.inputs), outs, domain=p.domain, attrs=dict(p.attrs),
                      impl=p.impl, opset=p.opset, name=new_id)
    work = _slice(graph, p, set(renames), at, lives)
    work.id, work.name, work.label = new_id, new_id, f"{p.label}/recompute"
    extra = sorted(set(work.output_names()) - set(renames))   # outputs p reads back itself
    renames = {**renames, **{g: _fresh_container(graph, g) for g in extra}}
    rename_reads(work, renames, writes=True)
    return finalize(work, graph)


def _slice(graph: Graph, p: MapNode, targets: set[str], at: int, lives: dict) -> MapNode:
    """A copy of map ``p`` computing only ``targets`` at schedule position ``at`` (not in the graph), given
    the graph's lifetimes."""
    work = copy.deepcopy(p)
    keep = targets | (kernel_reads(p) & set(p.output_names()))
    prefer_stored(work, lambda g: g in lives and lives[g].end >= at and g not in keep)
    drop_writes(work, keep=keep)
    return finalize(work, graph)


def _kept_alive(graph: Graph, p: ComputeNode, c: ComputeNode, targets: tuple[str, ...], lives: dict,
                at: int) -> str | None:
    """Why recomputing is not worth it (given the graph's lifetimes and the consumer's place ``at``): the
    clone keeps more input bytes alive than it frees."""
    reads = p.input_names() if isinstance(p, OpNode) else _slice(graph, p, set(targets), at, lives).input_names()
    own = set(p.output_names())                # read back by the clone from its own copies
    longer = [n for n in dict.fromkeys(reads) if n is not None and n not in own and lives[n].end < at]
    cost, freed = sum(lives[n].nbytes for n in longer), sum(lives[t].nbytes for t in targets)
    if cost > freed:
        return (f"recomputing '{p.id}' before '{c.id}' keeps {cost} B of its inputs ({', '.join(longer[:3])}) "
                f"alive longer, more than the {freed} B of {', '.join(targets)} it frees")
    return None


def _retire(graph: Graph, p: ComputeNode, targets: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Stop writing targets nobody reads any more; remove ``p`` if none of its outputs is read."""
    dead = [t for t in targets if not graph.consumers(t)]
    if not dead:
        return (), ()
    outs = [m.container for m in p.outputs if m is not None]
    if all(not graph.consumers(o) and o not in graph.outputs for o in outs):
        graph.remove_node(p.id)
        for o in outs:
            graph.remove_container(o)
        return (p.id,), ()
    if isinstance(p, OpNode):
        drop = {t for t in dead if p.op_type in OPTIONAL_OUTPUTS and p.output_names().index(t) > 0}
    else:
        drop = {t for t in dead if t not in kernel_reads(p)}
    if not drop:
        return (), ()
    relinked(graph, p, lambda: _stop_writing(graph, p, drop))
    for t in drop:
        graph.remove_container(t)
    return (), (p.id,)


def _stop_writing(graph: Graph, p: ComputeNode, drop: set[str]) -> None:
    if isinstance(p, OpNode):
        p.outputs = [None if m is not None and m.container in drop else m for m in p.outputs]
    else:
        drop_writes(p, keep=set(p.output_names()) - drop)
        finalize(p, graph)


def relinked(graph: Graph, node: ComputeNode, edit) -> None:
    """Run ``edit`` (which changes ``node``'s memlets) with ``node`` out of the graph, so the
    use-def entries are rebuilt from its new memlets; it keeps its place in ``graph.nodes``."""
    graph.replace_node(node.id, node, edit)


__all__ = ["Recompute"]
