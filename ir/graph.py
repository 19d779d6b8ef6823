"""The graph: containers, compute nodes (ops and maps) and their memlets.

A ``Graph`` is one dataflow state. Compute nodes (``OpNode``/``MapNode``) are
kept in a topological order; their input and output memlets name containers,
and the access nodes (one per container) and edges drawn by the GUI are derived
from them. Use-def bookkeeping (``producer``/``consumers``) is updated by the
mutators here — never assign ``node.inputs`` of a node that is in a graph
without calling ``graph.rewire(node)`` afterwards.
"""
from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from ir.containers import Container, Role
from ir.errors import GraphError
from ir.ids import IdAuthority
from ir.memlet import Memlet
from ir.node_table import NodeTable
from ir.nodes import AccessNode, MapNode, OpNode

ComputeNode = OpNode | MapNode


@dataclass(frozen=True, slots=True)
class Edge:
    """A derived edge between an access node and a compute node."""

    src: str
    dst: str
    memlet: Memlet
    src_conn: str | None = None
    dst_conn: str | None = None


class Graph:
    """A data-centric graph of one training step (or forward pass)."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.containers: dict[str, Container] = {}
        self.nodes: NodeTable = NodeTable()              # kernels by id, in schedule order
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.values: dict[str, np.ndarray] = {}      # initializer values (weights, constants)
        self.bindings: dict[str, int] = {}           # symbolic dimension -> size
        self.opsets: dict[str, int] = {}             # domain -> opset version
        self.meta: dict[str, str] = {}               # source file, sha256, format, …
        self.ids = IdAuthority()
        self._access_ids: dict[str, str] = {}
        self._producer: dict[str, str] = {}
        self._consumers: dict[str, list[str]] = {}     # lists replaced on change, never edited: clones share them
        self._positions: dict[str, float] | None = None  # topological positions, when ``nodes`` is not sorted
        self._order_ok: bool | None = True               # is ``nodes`` in a topological order? None: unknown
        self._dirty: set[str] | None = set()             # if unknown: the kernels linked since it was sorted

    # --- containers ---------------------------------------------------------------------
    def add_container(self, c: Container) -> Container:
        if c.name in self.containers:
            raise GraphError(f"container '{c.name}' already exists", None, self)
        self.containers[c.name] = c
        self._access_ids[c.name] = self.ids.claim("data:" + c.name)
        return c

    def set_container(self, c: Container) -> None:
        """Replace a container's description (shape/dtype/role) keeping its access id."""
        if c.name not in self.containers:
            self.add_container(c)
        else:
            self.containers[c.name] = c

    def remove_container(self, name: str) -> None:
        if self._producer.get(name) or self._consumers.get(name):
            raise GraphError(f"container '{name}' is still in use", None, self)
        del self.containers[name]
        self.ids.release(self._access_ids.pop(name))
        self.values.pop(name, None)

    def container(self, name: str) -> Container:
        try:
            return self.containers[name]
        except KeyError:
            raise GraphError(f"no container named '{name}'", None, self) from None

    def access_id(self, name: str) -> str:
        return self._access_ids[name]

    def access_nodes(self) -> Iterator[AccessNode]:
        for name, ident in self._access_ids.items():
            yield AccessNode(ident, name)

    # --- compute nodes ------------------------------------------------------------------
    def node(self, ident: str) -> ComputeNode:
        try:
            return self.nodes[ident]
        except KeyError:
            raise GraphError(f"no node with id '{ident}'", None, self,
                             hint="The id may be stale: list ids with `dcstudio inspect`") from None

    def add_node(self, node: ComputeNode, *, before: str | None = None) -> ComputeNode:
        """Insert ``node`` (its id must be unique) at the end or before node ``before``."""
        if node.id in self.nodes:
            raise GraphError(f"duplicate node id '{node.id}'", node, self)
        self.ids._taken.add(node.id)
        if before is None:
            self.nodes[node.id] = node
        else:
            self.nodes.insert(node.id, node, before)
        self._link(node)
        return node

    def replace_node(self, old: str, node: ComputeNode, edit: Callable[[], None] | None = None) -> ComputeNode:
        """Put ``node`` where node ``old`` is in ``nodes`` (``old`` leaves; the use-def is rebuilt
        from ``node``'s memlets; ``edit``, run while neither is linked, may change those memlets).
        O(1): a new id takes the old one's place in ``nodes`` (``NodeTable.rename``)."""
        prev = self.node(old)
        if node.id != old and node.id in self.nodes:
            raise GraphError(f"duplicate node id '{node.id}'", node, self)
        self._unlink(prev)
        if edit is not None:
            edit()
        if node.id == old:
            self.nodes[old] = node                  # an existing key keeps its place
        else:
            self.ids.release(old)
            self.ids._taken.add(node.id)
            self.nodes.rename(old, node.id, node)
        self._link(node)
        return node

    def remove_node(self, ident: str) -> ComputeNode:
        node = self.node(ident)
        self._unlink(node)
        del self.nodes[ident]
        self.ids.release(ident)
        return node

    def rewire(self, node: ComputeNode) -> None:
        """Recompute use-def entries of ``node`` after its memlets changed (old entries are
        found by node id, since the memlets that made them are gone)."""
        for name, users in list(self._consumers.items()):
            if node.id in users:
                self._consumers[name] = [u for u in users if u != node.id]
        for name in [c for c, p in self._producer.items() if p == node.id]:
            del self._producer[name]
        self._link(node)

    def _link(self, node: ComputeNode) -> None:
        self._positions = None
        dirty = getattr(self, "_dirty", None)
        if self._order_ok is False or dirty is None:
            self._dirty = None         # unknown: the next check reads every memlet
        else:
            dirty.add(node.id)         # a new or rewired node may be read by an earlier one
        self._order_ok = None
        for m in node.outputs:
            if m is None:
                continue
            other = self._producer.get(m.container)
            if other is not None and other != node.id:
                raise GraphError(f"container '{m.container}' is already written by '{other}'",
                                 node, self, hint="Every container has exactly one writer")
            self._producer[m.container] = node.id
        for name in {m.container for m in node.inputs if m is not None}:
            self._consumers[name] = self._consumers.get(name, []) + [node.id]

    def _unlink(self, node: ComputeNode) -> None:
        self._positions = None
        for m in node.outputs:
            if m is not None and self._producer.get(m.container) == node.id:
                del self._producer[m.container]
        for name in {m.container for m in node.inputs if m is not None}:
            users = self._consumers.get(name, [])
            if node.id in users:
                self._consumers[name] = [u for u in users if u != node.id]

    def producer(self, container: str) -> ComputeNode | None:
        ident = self._producer.get(container)
        return self.nodes[ident] if ident is not None else None

    def producer_id(self, container: str) -> str | None:
        """The id of the kernel writing ``container`` (None for inputs and weights)."""
        return self._producer.get(container)

    def consumers(self, container: str) -> list[ComputeNode]:
        return [self.nodes[i] for i in self._consumers.get(container, [])]

    # --- queries ------------------------------------------------------------------------
    def edges(self) -> Iterator[Edge]:
        """Access→node and node→access edges, derived from the memlets."""
        for node in self.nodes.values():
            for k, m in enumerate(node.inputs):
                if m is not None:
                    yield Edge(self._access_ids[m.container], node.id, m, None, f"in{k}")
            for k, m in enumerate(node.outputs):
                if m is not None:
                    yield Edge(node.id, self._access_ids[m.container], m, f"out{k}", None)

    def predecessors(self, node: ComputeNode) -> list[ComputeNode]:
        seen: dict[str, ComputeNode] = {}
        for m in node.inputs:
            if m is not None and (p := self.producer(m.container)) is not None:
                seen.setdefault(p.id, p)
        return list(seen.values())

    def predecessor_ids(self, node: ComputeNode) -> set[str]:
        """The ids of the kernels writing ``node``'s inputs (``predecessors`` without building a list)."""
        producer = self._producer
        return {p for m in node.inputs if m is not None and (p := producer.get(m.container)) is not None}

    def ancestors(self, idents: Iterable[str]) -> set[str]:
        """``idents`` (kernel ids) and the ids of every kernel they depend on."""
        seen: set[str] = set()
        stack = list(idents)
        nodes = self.nodes
        while stack:
            ident = stack.pop()
            if ident not in seen:
                seen.add(ident)
                stack.extend(self.predecessor_ids(nodes[ident]) - seen)
        return seen

    def successors(self, node: ComputeNode) -> list[ComputeNode]:
        seen: dict[str, ComputeNode] = {}
        for m in node.outputs:
            if m is not None:
                for c in self.consumers(m.container):
                    seen.setdefault(c.id, c)
        return list(seen.values())

    def topo_order(self) -> list[ComputeNode]:
        """Compute nodes in a topological order, stable w.r.t. insertion order."""
        if self.is_sorted():
            return list(self.nodes.values())
        ids = list(self.nodes)
        index = dict(zip(ids, range(len(ids))))
        nodes = list(self.nodes.values())
        indeg = [0] * len(ids)
        succ: list[list[int]] = [[] for _ in ids]
        for k, node in enumerate(nodes):
            preds = {index[p] for m in node.inputs if m is not None
                     and (p := self._producer.get(m.container)) is not None}
            indeg[k] = len(preds)
            for p in preds:
                succ[p].append(k)
        ready = [k for k, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        out: list[ComputeNode] = []
        while ready:
            k = heapq.heappop(ready)
            out.append(nodes[k])
            for s in succ[k]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(out) != len(nodes):
            stuck = [nodes[k] for k, d in enumerate(indeg) if d > 0]
            raise GraphError("the graph has a cycle", stuck[0], self,
                             hint="A node (transitively) consumes its own output; remove the cycle")
        return out

    def is_sorted(self) -> bool:
        """True if ``nodes`` is already in a topological order (every container read is written
        by an earlier node), without a sort; remembered until a node is added or rewired
        (removing nodes keeps an order topological). Since the last sorted state, only the
        kernels linked since can break the order, so only their memlets are read (one pass over
        every memlet when that state is unknown)."""
        if getattr(self, "_order_ok", None) is not None:
            return self._order_ok
        dirty = getattr(self, "_dirty", None)
        self._order_ok = self._check_sorted() if dirty is None else self._check_linked(dirty)
        self._dirty = set()
        return self._order_ok

    def _check_linked(self, idents: Iterable[str]) -> bool:
        """Every edge into and out of ``idents`` runs forward in ``nodes`` (the others did already)."""
        label, producer, consumers = self.nodes.label, self._producer, self._consumers
        for ident in idents:
            node = self.nodes.get(ident)
            if node is None:
                continue
            at = label(ident)
            for m in node.inputs:
                if m is not None and (p := producer.get(m.container)) is not None and label(p) >= at:
                    return False
            for m in node.outputs:
                if m is not None and any(label(c) <= at for c in consumers.get(m.container, ())):
                    return False
        return True

    def _check_sorted(self) -> bool:
        seen: set[str] = set()
        producer = self._producer
        for ident, node in self.nodes.items():
            for m in node.inputs:
                if m is not None:
                    p = producer.get(m.container)
                    if p is not None and p not in seen:
                        return False
            seen.add(ident)
        return True

    def position(self, ident: str) -> float:
        """A number that orders ``ident`` in a topological order: its ``NodeTable.label`` when ``nodes`` is
        sorted (O(1)), else its index in ``topo_order`` (cached until the use-def changes)."""
        if self.is_sorted():
            return self.nodes.label(ident)
        if getattr(self, "_positions", None) is None:
            self._positions = {n.id: k for k, n in enumerate(self.topo_order())}
        return self._positions[ident]

    def depends(self, src: str, dst: str, *, indirectly: bool = False) -> bool:
        """True if kernel ``dst`` depends on kernel ``src`` (``indirectly``: through some other
        kernel, not only by reading ``src``'s results). The search visits only kernels placed
        between the two in topological order, so an adjacent pair costs a few steps; none when
        every other kernel ``dst`` reads from comes before ``src`` (a saved activation read far
        downstream, in a backward pass); and it grows the smaller of two frontiers, forward from
        ``src`` and backward from ``dst``, until they meet or one runs out: a forward walk alone
        crossed every kernel between a forward activation and its backward reader."""
        limit, low = self.position(dst), self.position(src)
        if low >= limit:
            return False
        preds = self.predecessor_ids(self.nodes[dst])
        if not indirectly and src in preds:
            return True
        position = self.position
        back = {p for p in preds if p != src and position(p) > low}
        if not back:
            return False        # every other path into dst starts before src: none leaves src
        ahead = {s for s in self._successor_ids(src) if s != dst and position(s) < limit}
        seen_ahead, seen_back = set(ahead), set(back)
        while ahead and back:
            if not seen_ahead.isdisjoint(seen_back):
                return True
            if len(ahead) <= len(back):
                ahead = {s for k in ahead for s in self._successor_ids(k)
                         if s not in seen_ahead and position(s) < limit}
                seen_ahead |= ahead
            else:
                back = {p for k in back for p in self.predecessor_ids(self.nodes[k])
                        if p not in seen_back and position(p) > low}
                seen_back |= back
        return not seen_ahead.isdisjoint(seen_back)

    def _successor_ids(self, ident: str) -> set[str]:
        consumers = self._consumers
        return {c for m in self.nodes[ident].outputs if m is not None for c in consumers.get(m.container, ())}

    def splice(self, remove: Iterable[str], add: Iterable[ComputeNode]) -> None:
        """Remove nodes ``remove``, add ``add``, and restore a topological order of ``nodes``:
        a single new kernel (a fusion's) moves in front of its first reader when all it reads
        is written before that, keeping every other node in place; otherwise a full sort."""
        sorted_before = self.is_sorted()
        for ident in remove:
            self.remove_node(ident)
        added = list(add)
        for node in added:
            self.add_node(node)
        if not (sorted_before and len(added) == 1 and self._place(added[0])):
            self.sort()

    def _place(self, node: ComputeNode) -> bool:
        """Move ``node`` (just appended) in front of its first reader; False if a node it reads
        comes after that reader (then only a sort can order them). O(its memlets): the order's
        labels compare kernels, and the move relinks one."""
        label = self.nodes.label
        last_read = max((label(p) for m in node.inputs if m is not None
                         and (p := self._producer.get(m.container)) is not None and p != node.id), default=None)
        readers = [c for m in node.outputs if m is not None for c in self._consumers.get(m.container, ())
                   if c != node.id]
        first = min(readers, key=label, default=None)
        if first is not None and last_read is not None and last_read >= label(first):
            return False
        if first is not None:
            self.nodes.move_before(node.id, first)
        self._order_ok, self._dirty = True, set()
        self._positions = None
        return True

    def sort(self) -> None:
        """Reorder ``nodes`` topologically (stable w.r.t. the current order)."""
        if not self.is_sorted():
            self.nodes = NodeTable((n.id, n) for n in self.topo_order())
            self._order_ok, self._dirty = True, set()

    def kernels(self) -> list[ComputeNode]:
        """Top-level ops and maps: one launch each."""
        return list(self.nodes.values())

    def by_role(self, *roles: Role) -> list[Container]:
        return [c for c in self.containers.values() if c.role in roles]

    def clone(self) -> "Graph":
        """A structural copy: new node objects, shared immutable memlets/exprs/arrays."""
        return self.clone_sharing(self.nodes)

    def clone_sharing(self, copied: Iterable[str]) -> "Graph":
        """A copy that shares every node object except those in ``copied`` (structural copies):
        copy-on-write for an edit that may change or remove only ``copied`` (a transformation's
        ``affected`` set) and add new nodes. The undo stack then holds one copy of each
        untouched node instead of one per step."""
        g = copy.copy(self)
        deep = copied if isinstance(copied, (set, dict)) else set(copied)
        g.containers = dict(self.containers)
        g.nodes = self.nodes.copy()
        for k in deep:
            if k in g.nodes:
                g.nodes[k] = _copy_node(g.nodes[k])       # an existing id keeps its place
        g.inputs, g.outputs = list(self.inputs), list(self.outputs)
        g.values = dict(self.values)
        g.bindings, g.opsets, g.meta = dict(self.bindings), dict(self.opsets), dict(self.meta)
        g.ids = IdAuthority(set(self.ids._taken))
        g._access_ids = dict(self._access_ids)
        g._producer = dict(self._producer)
        g._consumers = dict(self._consumers)      # the lists are replaced, never edited in place
        dirty = getattr(self, "_dirty", None)
        g._dirty = None if dirty is None else set(dirty)
        return g

    def used_containers(self) -> Iterable[str]:
        return set(self._producer) | {k for k, v in self._consumers.items() if v}


_SLOTS: dict[type, tuple[str, ...]] = {}


def _shallow(n):
    """``copy.copy`` for our slotted nodes, without the pickle protocol (4x faster; a clone of
    BERT-base copies ~14,000 nodes per applied step)."""
    cls = type(n)
    names = _SLOTS.get(cls)
    if names is None:
        names = _SLOTS[cls] = tuple(dict.fromkeys(s for c in cls.__mro__ for s in getattr(c, "__slots__", ())))
    new = object.__new__(cls)
    for name in names:
        try:
            object.__setattr__(new, name, getattr(n, name))
        except AttributeError:        # an unset slot stays unset
            pass
    return new


def _copy_node(n: ComputeNode) -> ComputeNode:
    new = _shallow(n)
    new.inputs, new.outputs = list(n.inputs), list(n.outputs)
    if isinstance(n, OpNode):
        new.attrs = dict(n.attrs)
    else:
        new.body = [_copy_body(b) for b in n.body]
        new.params, new.locals = list(n.params), dict(n.locals)
    return new


def _copy_body(b):
    if isinstance(b, MapNode):
        return _copy_node(b)
    new = _shallow(b)
    new.inputs = dict(b.inputs)
    return new
