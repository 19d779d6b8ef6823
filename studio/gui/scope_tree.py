"""The scope tree: kernels grouped by their ONNX name prefixes, collapsed and expanded by the view.

A kernel's *scope path* comes from its name (``scope_path``):

- ``/layer/attention/self/MatMul_1`` → ``layer/attention/self`` (torch-style ``/`` scopes);
- ``Add:layer.attention.self.query.weight.denom`` → ``layer/attention/self/query/weight``
  (a dotted parameter path after an op prefix, as optimizer kernels are named);
- ``fused:/layer/output/Add/expanded`` → ``layer/output/Add`` (lower-case provenance
  prefixes such as ``fused:`` are dropped, so derived kernels stay in their scope).

Groups with one child are replaced by that child (no singleton boxes; a group
keeps the joined label, ``intermediate/dense``), and a group
with more than ``max_children`` children is split into chunks of about ``chunk``
children each (by pass, in topological order), repeatedly, so that no layout is
ever asked for more than ``max_children`` items. Every data dependency between two
kernels becomes an *aggregated edge* in the lowest group holding both, between the
two children of that group that contain them (``edges``), carrying the containers.
No Qt here: the view reads this tree.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ir.graph import Graph
from studio.gui.passes import Pass, classify

ROOT = "group:"
MAX_CHILDREN = 120
CHUNK = 48
_PROVENANCE = re.compile(r"^(?:[a-z_]+:(?!:))+")
_DOTTED = re.compile(r"^(?:[A-Za-z_]\w*:(?!:))?(\w+(?:\.\w+)+)$")


def scope_path(name: str) -> tuple[tuple[str, ...], str]:
    """``(scope segments, leaf label)`` of a kernel name (see the module docstring)."""
    segs = [s for s in _PROVENANCE.sub("", name).split("/") if s]
    if not segs:
        return (), name
    path: list[str] = []
    for seg in segs[:-1]:
        m = _DOTTED.match(seg)
        path.extend(m.group(1).split(".") if m else [seg])
    m = _DOTTED.match(segs[-1])
    if not m:
        return tuple(path), segs[-1]
    parts = m.group(1).split(".")
    return tuple(path + parts[:-1]), parts[-1]


@dataclass
class Group:
    key: str
    label: str
    parent: str | None
    children: list[str] = field(default_factory=list)
    size: int = 0                    # number of kernels inside
    pass_: Pass | None = None        # the one pass of all its kernels, None when mixed


class ScopeTree:
    """Groups, parents, passes and aggregated edges of one graph (see the module docstring)."""

    def __init__(self, graph: Graph, *, max_children: int = MAX_CHILDREN, chunk: int = CHUNK) -> None:
        self.passes: dict[str, Pass | None] = dict(classify(graph))
        self.groups: dict[str, Group] = {ROOT: Group(ROOT, graph.name, None)}
        self.parent: dict[str, str] = {}
        self.order = {ident: k for k, ident in enumerate(graph.nodes)}
        self.leaf_label: dict[str, str] = {}
        for node in graph.nodes.values():
            path, leaf = scope_path(node.name or node.id)
            self.leaf_label[node.id] = leaf
            self._attach(node.id, self._group_for(path))
        self._compress(ROOT)
        self._chunk_all(max_children, chunk)
        self._summarize(ROOT)
        self.chain = {item: self._chain(item) for item in self.parent}
        self.edges: dict[str, dict[tuple[str, str], list[str]]] = {}
        self._aggregate(graph)

    # --- building ---------------------------------------------------------------------
    def _group_for(self, path: tuple[str, ...]) -> str:
        key = ROOT
        for k in range(len(path)):
            child = ROOT + "/".join(path[: k + 1])
            if child not in self.groups:
                self.groups[child] = Group(child, path[k], key)
                self._attach(child, key)
            key = child
        return key

    def _attach(self, item: str, group: str) -> None:
        self.parent[item] = group
        self.groups[group].children.append(item)

    def _compress(self, key: str) -> None:
        """Replace every non-root group that has a single child by that child."""
        g = self.groups[key]
        for k, child in enumerate(list(g.children)):
            while child in self.groups and len(self.groups[child].children) == 1:
                gone = self.groups.pop(child)
                del self.parent[child]
                only = gone.children[0]
                if only in self.groups:
                    self.groups[only].label = f"{gone.label}/{self.groups[only].label}"
                g.children[k] = only
                self.parent[only] = key
                child = only
            if child in self.groups:
                self._compress(child)

    def _first(self, item: str) -> int:
        while item in self.groups:
            item = self.groups[item].children[0]
        return self.order[item]

    def _chunk_all(self, max_children: int, chunk: int) -> None:
        for key in list(self.groups):
            level = 0
            while len(self.groups[key].children) > max_children:
                level += 1
                self._chunk(key, chunk, level)

    def _chunk(self, key: str, chunk: int, level: int) -> None:
        g = self.groups[key]
        items = sorted(g.children, key=self._first)
        by_pass: dict[str, list[str]] = {}
        for item in items:
            p = self._item_pass(item)
            by_pass.setdefault(p.value if p else "mixed", []).append(item)
        g.children = []
        for pname, members in by_pass.items():
            n = -(-len(members) // chunk)
            for k in range(n):
                part = members[k * len(members) // n:(k + 1) * len(members) // n]
                ckey = f"{key}/#{level}.{pname}.{k}"
                label = f"{pname} {k * len(members) // n + 1}–{(k + 1) * len(members) // n}"
                self.groups[ckey] = Group(ckey, label, key)
                self._attach(ckey, key)
                for item in part:
                    self._attach(item, ckey)

    def _item_pass(self, item: str) -> Pass | None:
        if item not in self.groups:
            return self.passes[item]
        kinds = {self._item_pass(c) for c in self.groups[item].children}
        return kinds.pop() if len(kinds) == 1 else None

    def _summarize(self, key: str) -> tuple[int, set]:
        g = self.groups[key]
        size, kinds = 0, set()
        for child in g.children:
            if child in self.groups:
                n, k = self._summarize(child)
            else:
                n, k = 1, {self.passes[child]}
            size, kinds = size + n, kinds | k
        g.size, g.pass_ = size, (next(iter(kinds)) if len(kinds) == 1 else None)
        self.passes[key] = g.pass_
        return size, kinds

    def _chain(self, item: str) -> tuple[str, ...]:
        out = []
        while item in self.parent:
            item = self.parent[item]
            out.append(item)
        return tuple(reversed(out))

    def _aggregate(self, graph: Graph) -> None:
        for node in graph.nodes.values():
            for m in node.inputs:
                if m is None or (p := graph.producer(m.container)) is None or p.id == node.id:
                    continue
                a, b = self.chain[p.id] + (p.id,), self.chain[node.id] + (node.id,)
                k = 0
                while k < min(len(a), len(b)) and a[k] == b[k]:
                    k += 1
                names = self.edges.setdefault(a[k - 1], {}).setdefault((a[k], b[k]), [])
                if m.container not in names:
                    names.append(m.container)

    # --- queries ----------------------------------------------------------------------
    def is_group(self, item: str) -> bool:
        return item in self.groups

    def members(self, item: str) -> list[str]:
        """The kernel ids inside ``item`` (itself when it is a kernel), in graph order."""
        if item not in self.groups:
            return [item]
        out: list[str] = []
        for child in self.groups[item].children:
            out.extend(self.members(child))
        return sorted(out, key=self.order.__getitem__)

    def label(self, item: str) -> str:
        return self.groups[item].label if item in self.groups else self.leaf_label[item]

    def visible(self, item: str, expanded: set[str]) -> str:
        """The item the view shows for ``item``: itself, or its outermost collapsed group."""
        for g in self.chain.get(item, ()):
            if g != ROOT and g not in expanded:
                return g
        return item

    def expanded_groups(self, expanded: set[str]) -> list[str]:
        """Groups shown open (the root and expanded groups under open parents), parents first."""
        out, stack = [], [ROOT]
        while stack:
            key = stack.pop()
            out.append(key)
            stack.extend(c for c in reversed(self.groups[key].children) if c in expanded and c in self.groups)
        return out

    def initial_expansion(self, budget: int = 160) -> set[str]:
        """Open the biggest groups first while the number of shown items stays within ``budget``."""
        expanded: set[str] = set()
        shown = len(self.groups[ROOT].children)
        frontier = [c for c in self.groups[ROOT].children if c in self.groups]
        while frontier:
            frontier.sort(key=lambda c: -self.groups[c].size)
            key = frontier.pop(0)
            extra = len(self.groups[key].children) - 1
            if shown + extra > budget:
                continue
            expanded.add(key)
            shown += extra
            frontier.extend(c for c in self.groups[key].children if c in self.groups)
        return expanded
