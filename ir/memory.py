"""Memory footprint over a schedule: liveness of containers and peak bytes.

Kernels run in ``graph.topo_order()``. Interface containers (inputs, parameters,
optimizer state, constants) live for the whole step; a transient or output is
allocated when its producer runs and a transient is freed after its last reader.
``peak_bytes`` is the largest sum of live bytes at any kernel (its inputs and
outputs both live). Containers in the same ``graph.meta['buffers']`` group
(``memory_reuse``) share one allocation sized by the largest member.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.containers import Role
from ir.graph import Graph


@dataclass(frozen=True)
class Lifetime:
    container: str
    start: int          # index of the producing kernel (-1: live on entry)
    end: int            # index of the last reading kernel (len(order): live on exit)
    nbytes: int


def lifetimes(graph: Graph) -> dict[str, Lifetime]:
    order = graph.topo_order()
    last = len(order)
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for k, node in enumerate(order):
        for m in node.outputs:
            if m is not None:
                start.setdefault(m.container, k)
        for m in node.inputs:
            if m is not None:
                end[m.container] = k
    out = {}
    for name, c in graph.containers.items():
        if name not in start and name not in end and name not in graph.inputs and name not in graph.values:
            continue
        s = -1 if name in graph.inputs or name in graph.values else start.get(name, -1)
        e = last if name in graph.outputs or c.role is not Role.TRANSIENT else end.get(name, s)
        out[name] = Lifetime(name, s, max(e, s), c.nbytes(graph.bindings))
    return out


def buffer_groups(graph: Graph) -> dict[str, str]:
    """container -> buffer name (containers sharing memory after ``memory_reuse``)."""
    groups = graph.meta.get("buffers")
    if not groups:
        return {}
    import json
    table = json.loads(groups) if isinstance(groups, str) else groups
    return {c: buf for buf, members in table.items() for c in members}


def peak_bytes(graph: Graph) -> int:
    """Peak of live bytes over the topological schedule (shared buffers counted once)."""
    lives = lifetimes(graph)
    share = buffer_groups(graph)
    n = len(graph.nodes)
    events: list[dict[str, int]] = [dict() for _ in range(n + 2)]
    for life in lives.values():
        key = share.get(life.container, life.container)
        for k in range(life.start + 1, min(life.end, n) + 2):
            slot = events[k]
            slot[key] = max(slot.get(key, 0), life.nbytes)
    return max((sum(slot.values()) for slot in events), default=0)
