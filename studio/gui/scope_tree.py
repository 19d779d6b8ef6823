"""The scope tree: kernels grouped by their ONNX name prefixes, collapsed and expanded by the view.

A kernel's *scope path* comes from its name (``scope_path``):

- ``/layer/attention/self/MatMul_1`` → ``layer/attention/self`` (torch-style ``/`` scopes);
- ``Add:layer.attention.self.query.weight.denom`` → ``layer/attention/self/query/weight``
  (a dotted parameter path after an op prefix, as optimizer kernels are named);
- ``fused:/layer/output/Add/expanded`` → ``layer/output/Add`` (lower-case provenance
  prefixes such as ``fused:`` are dropped, so derived kernels stay in their scope).

The *raw* tree has one group per scope path (``group:`` + the path), children in the
order of their first kernel; a numbered group is labelled with its parent's name (``layer 7``,
not ``7``). Each raw group is then *realized* bottom-up: a group with
one child is replaced by that child (no singleton boxes; a group keeps the joined
label, ``intermediate/dense``), and a group with more than ``max_children`` children
is split into chunks of about ``chunk`` children each (by pass, in topological
order), repeatedly, so that no layout is ever asked for more than ``max_children``
items. Every data dependency between two kernels becomes an *aggregated edge* in the
lowest group holding both, between the two children of that group that contain them
(``edges``), carrying the containers.

``tree.updated(graph, touched)`` is the tree of the next graph (after an apply, undo,
redo or revert) when only the kernels ``touched`` differ (removed, added or changed,
``graph_diff.touched``): a raw group with no touched kernel (and no kernel whose pass
changed) below it realizes exactly as before, so its groups, passes and inner edges
are reused, and only the groups on the touched kernels' paths are realized again.
The result equals ``ScopeTree(graph)`` (tested). A tree is never changed after it is
built: trees of earlier graphs stay valid (and share the reused groups).
No Qt here: the view reads this tree.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Iterable

from ir.graph import Graph
from studio.gui.passes import Pass, classify
from transforms.layers import layer_of

ROOT = "group:"
STACKED = ROOT + "~"          # a layer's group in a stacked tree: ``group:~layer 7``
PHASE_NAMES = {Pass.FORWARD: "forward", Pass.BACKWARD: "grad", Pass.OPTIMIZER: "update"}
OUTSIDE_LAYERS = "outside layers"
MAX_CHILDREN = 120
CHUNK = 48
_PROVENANCE = re.compile(r"^(?:[a-z_]+:(?!:))+")
_DOTTED = re.compile(r"^(?:[A-Za-z_]\w*:(?!:))?(\w+(?:\.\w+)+)$")


@lru_cache(maxsize=200_000)
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


def raw_ancestors(raw_key: str) -> Iterable[str]:
    """``raw_key`` and the raw groups above it, up to the root (raw keys are scope paths)."""
    key = raw_key
    while key != ROOT:
        yield key
        key = key.rsplit("/", 1)[0] if "/" in key[len(ROOT):] else ROOT
    yield ROOT


@dataclass
class Group:
    key: str
    label: str
    parent: str | None
    children: list[str] = field(default_factory=list)
    size: int = 0                    # number of kernels inside
    pass_: Pass | None = None        # the one pass of all its kernels, None when mixed


def _inside(path: tuple[str, ...], ident: str, stacked: set) -> tuple[str, ...]:
    """A kernel's scopes inside its stacked group: for a layer's kernel, ``path`` after the layer's
    numbered component (``grad/layer/7/attention/self`` → ``attention/self``); otherwise ``path``
    without a leading phase word (``grad/classifier`` → ``classifier``)."""
    hit = layer_of(ident)
    if hit is not None and hit[0] in stacked:
        want = (*hit[0].stem.split("."), str(hit[1]))
        for k in range(len(want) - 1, len(path)):
            if path[k - len(want) + 1:k + 1] == want:
                return path[k + 1:]
    return path[1:] if path[:1] and path[0] in PHASE_NAMES.values() else path


def stacked_paths(graph: Graph, passes: dict[str, Pass | None]) -> tuple[dict[str, tuple[str, ...]], set]:
    """Where a training step's kernels go in a stacked tree: ``(layer, phase)`` (``~layer 7``, ``grad``)
    for the kernels of families of two layers or more, ``(~outside layers, phase)`` for the others; and
    those families. ({}, set()) for a model without repeated layers or without a backward pass."""
    if all(p is Pass.FORWARD for p in passes.values()):
        return {}, set()
    found: dict[str, tuple] = {}
    indices: dict = {}
    for ident in graph.nodes:
        hit = layer_of(ident)
        if hit is not None:
            found[ident] = hit
            indices.setdefault(hit[0], set()).add(hit[1])
    stacked = {family for family, seen in indices.items() if len(seen) > 1}
    if not stacked:
        return {}, set()
    tag = STACKED[len(ROOT):]
    return {ident: (f"{tag}{found[ident][0].stem} {found[ident][1]}" if found.get(ident, (None,))[0] in stacked
                    else f"{tag}{OUTSIDE_LAYERS}", PHASE_NAMES[passes[ident]]) for ident in graph.nodes}, stacked


class _Raw:
    """The raw tree of a graph: one group per scope path, children in first-kernel order."""

    def __init__(self, graph: Graph, stacked: tuple[dict[str, tuple[str, ...]], set] = ({}, set())) -> None:
        self.children: dict[str, list[str]] = {ROOT: []}
        self.label: dict[str, str] = {ROOT: graph.name}
        self.parent: dict[str, str] = {}             # kernel -> its raw group
        self.leaf_label: dict[str, str] = {}
        known: dict[tuple[str, ...], str] = {}       # scope path -> its group (most kernels share one)
        where, families = stacked
        for node in graph.nodes.values():
            path, leaf = scope_path(node.name or node.id)
            if node.id in where:
                path = where[node.id] + _inside(path, node.id, families)
            self.leaf_label[node.id] = leaf
            key = known.get(path)
            if key is None:
                key = known[path] = self._group_for(path)
            self.parent[node.id] = key
            self.children[key].append(node.id)

    def _group_for(self, path: tuple[str, ...]) -> str:
        key = ROOT
        for k in range(len(path)):
            child = ROOT + "/".join(path[: k + 1])
            if child not in self.children:
                self.children[child] = []
                self.label[child] = f"{path[k - 1]} {path[k]}" if k and path[k].isdigit() else path[k]
                if k == 0 and child.startswith(STACKED):
                    self.label[child] = path[0][len(STACKED) - len(ROOT):]
                self.children[key].append(child)
            key = child
        return key


class ScopeTree:
    """Groups, parents, passes and aggregated edges of one graph (see the module docstring)."""

    def __init__(self, graph: Graph, *, max_children: int = MAX_CHILDREN, chunk: int = CHUNK, stack: bool = True,
                 _reuse: tuple["ScopeTree", set[str]] | None = None) -> None:
        self.max_children, self.chunk, self.stack = max_children, chunk, stack
        self.passes: dict[str, Pass | None] = dict(classify(graph))
        self.order = {ident: k for k, ident in enumerate(graph.nodes)}
        raw = _Raw(graph, stacked_paths(graph, self.passes) if stack else ({}, set()))
        self.leaf_label, self.raw_parent = raw.leaf_label, raw.parent
        self.groups: dict[str, Group] = {}
        self.parent: dict[str, str] = {}
        self.realized: dict[str, str] = {}           # raw group -> the item standing for it
        self.own_label: dict[str, str] = {}          # raw group -> that item's label, before parents join theirs
        self._inside: dict[str, str] = {}            # kernel -> the reused fragment holding it
        self._reused_groups: list[str] = []
        old, dirty = self._dirty(raw, _reuse)
        self._realize(raw, ROOT, old, dirty)
        root = self.groups[ROOT]                     # a stacked tree lists its layers first, as the Outline does
        root.children.sort(key=lambda c: not c.startswith(STACKED) or c == STACKED + OUTSIDE_LAYERS)
        self.chain: dict[str, tuple[str, ...]] = {}
        self._chains()
        self.edges: dict[str, dict[tuple[str, str], list[str]]] = {}
        self._aggregate(graph, old)

    def updated(self, graph: Graph, touched: Iterable[str]) -> "ScopeTree":
        """The tree of ``graph``, which differs from this tree's graph only in the kernels ``touched``."""
        return ScopeTree(graph, max_children=self.max_children, chunk=self.chunk, stack=self.stack,
                         _reuse=(self, set(touched)))

    # --- what can be reused ------------------------------------------------------------
    def _dirty(self, raw: _Raw, reuse) -> tuple["ScopeTree | None", set[str]]:
        """The old tree and the raw groups to realize again (all of them without an old tree)."""
        if reuse is None:
            return None, set(raw.children)
        old, touched = reuse
        touched = touched | {i for i, p in self.passes.items() if old.passes.get(i, p) != p}
        kept_new = [i for i in self.order if i not in touched]
        kept_old = [i for i in old.order if i not in touched]
        if kept_new != kept_old:                     # untouched kernels moved: realize everything
            return None, set(raw.children)
        dirty: set[str] = set()
        for ident in touched:
            for p in (raw.parent.get(ident), old.raw_parent.get(ident)):
                if p is not None:
                    dirty.update(raw_ancestors(p))
        return old, dirty

    def _reused(self, old: "ScopeTree", raw: _Raw, raw_key: str) -> str:
        """Take the realized fragment of clean raw group ``raw_key`` from ``old``; the item standing for it.
        Its groups are shared with ``old``, except the top one (copied: its label and parent may change)."""
        top = old.realized[raw_key]
        stack = [top]
        while stack:
            item = stack.pop()
            if item not in old.groups:
                self._inside[item] = top
                continue
            g = old.groups[item]
            self.groups[item] = g if item != top else replace(g, label=old.own_label[raw_key], parent=None)
            self.passes[item] = g.pass_
            self._reused_groups.append(item)
            for c in g.children:
                self.parent[c] = item
            stack.extend(g.children)
        inner = [raw_key]
        while inner:                                 # the raw groups inside: how they were realized
            key = inner.pop()
            self.realized[key], self.own_label[key] = old.realized[key], old.own_label[key]
            inner.extend(c for c in raw.children[key] if c in raw.children)
        return top

    # --- realizing ----------------------------------------------------------------------
    def _realize(self, raw: _Raw, key: str, old: "ScopeTree | None", dirty: set[str]) -> str:
        """Realize raw group ``key`` (see the module docstring); the item standing for it."""
        items = []
        for child in raw.children[key]:
            if child not in raw.children:
                items.append(child)
            elif old is not None and child not in dirty:
                items.append(self._reused(old, raw, child))
            else:
                items.append(self._realize(raw, child, old, dirty))
        if key != ROOT and len(items) == 1:
            only = items[0]
            if only in self.groups:
                label = f"{raw.label[key]}/{self.groups[only].label}"
                self.groups[only].label = label
                self.own_label[key] = label
            else:
                self.own_label[key] = self.leaf_label[only]
            self.realized[key] = only
            return only
        self.groups[key] = Group(key, raw.label[key], None, items)
        for item in items:
            self.parent[item] = key
        level = 0
        while len(self.groups[key].children) > self.max_children:
            level += 1
            self._chunk(key, level)
        self._summarize(key)
        self.realized[key], self.own_label[key] = key, raw.label[key]
        return key

    def _first(self, item: str) -> int:
        while item in self.groups:
            item = self.groups[item].children[0]
        return self.order[item]

    def _chunk(self, key: str, level: int) -> None:
        g = self.groups[key]
        by_pass: dict[str, list[str]] = {}
        for item in sorted(g.children, key=self._first):
            p = self.passes[item]
            by_pass.setdefault(p.value if p else "mixed", []).append(item)
        g.children = []
        for pname, members in by_pass.items():
            n = -(-len(members) // self.chunk)
            for k in range(n):
                part = members[k * len(members) // n:(k + 1) * len(members) // n]
                ckey = f"{key}/#{level}.{pname}.{k}"
                label = f"{pname} {k * len(members) // n + 1}–{(k + 1) * len(members) // n}"
                self.groups[ckey] = Group(ckey, label, key, part)
                g.children.append(ckey)
                self.parent[ckey] = key
                for item in part:
                    self.parent[item] = ckey
                self._summarize(ckey)

    def _summarize(self, key: str) -> None:
        """Size and pass of group ``key`` from its (realized) children."""
        g = self.groups[key]
        kinds = {self.passes[c] for c in g.children}
        g.size = sum(self.groups[c].size if c in self.groups else 1 for c in g.children)
        g.pass_ = next(iter(kinds)) if len(kinds) == 1 else None
        self.passes[key] = g.pass_

    def _chains(self) -> None:
        """``chain`` (the groups above each item, root first) and each group's ``parent``."""
        stack = [ROOT]
        while stack:
            key = stack.pop()
            up = self.chain.get(key, ()) + (key,)
            for c in self.groups[key].children:
                self.chain[c] = up
                if c in self.groups:
                    if self.groups[c].parent != key:  # never a shared group: those keep their parent
                        self.groups[c].parent = key
                    stack.append(c)

    # --- edges --------------------------------------------------------------------------
    def _aggregate(self, graph: Graph, old: "ScopeTree | None") -> None:
        """Aggregated edges; those with both ends in one reused fragment are the old ones."""
        inside, chain, producer_id = self._inside, self.chain, graph.producer_id
        for node in graph.nodes.values():
            f = inside.get(node.id)
            for m in node.inputs:
                if m is None or (p := producer_id(m.container)) is None or p == node.id:
                    continue
                if f is not None and inside.get(p) == f:
                    continue
                a, b = chain[p] + (p,), chain[node.id] + (node.id,)
                k = 0
                while k < min(len(a), len(b)) and a[k] == b[k]:
                    k += 1
                names = self.edges.setdefault(a[k - 1], {}).setdefault((a[k], b[k]), [])
                if m.container not in names:
                    names.append(m.container)
        for key in self._reused_groups:
            if key in old.edges:
                self.edges[key] = old.edges[key]

    # --- queries ----------------------------------------------------------------------
    def is_group(self, item: str) -> bool:
        return item in self.groups

    def members(self, item: str) -> list[str]:
        """The kernel ids inside ``item`` (itself when it is a kernel), in graph order."""
        out: list[str] = []
        todo = [item]
        while todo:
            key = todo.pop()
            if key in self.groups:
                todo.extend(self.groups[key].children)
            else:
                out.append(key)
        return sorted(out, key=self.order.__getitem__)

    def sums(self, value: Callable[[str], float]) -> dict[str, float]:
        """Every group's sum of ``value(kernel)`` over its members, in one pass over the tree
        (a 24-layer step's plates and boxes summed their members each, on the GUI thread)."""
        out: dict[str, float] = {}

        def total(key: str) -> float:
            if key not in self.groups:
                return value(key)
            if key not in out:
                out[key] = sum(total(c) for c in self.groups[key].children)
            return out[key]
        for key in self.groups:
            total(key)
        return out

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

    @property
    def stacked(self) -> bool:
        """The root holds the layers' groups (``stacked_paths``): the view lays it out as a grid."""
        return any(c.startswith(STACKED) for c in self.groups[ROOT].children)

    def initial_expansion(self, budget: int = 160) -> set[str]:
        """Open the biggest groups first while the number of shown items stays within ``budget``; in a
        stacked tree, the layers only (each shows its forward, grad and update)."""
        expanded: set[str] = set()
        shown = len(self.groups[ROOT].children)
        if self.stacked:
            outside = STACKED + OUTSIDE_LAYERS
            for c in self.groups[ROOT].children:
                extra = len(self.groups[c].children) - 1 if c.startswith(STACKED) and c != outside else 0
                if extra and shown + extra <= budget:
                    expanded.add(c)
                    shown += extra
            return expanded
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
