"""The match index: every candidate match of one graph, found once and kept up to date by
re-matching only the neighbourhood of each rewrite.

Finding every match of every transformation walks the whole graph (seconds on a 12-layer
training step), and ranking a match costs a trial rewrite. A studio session applies one
match at a time, and a rewrite changes a handful of kernels, so ``MatchIndex.after(graph,
app)`` derives the index of the graph after an ``Application`` from the one before:

- the *neighbourhood* of the rewrite is the ids it created, removed and changed, its
  anchors, and their producers, consumers and co-readers (kernels reading one of their
  inputs: sibling pairs) in the graph before and after;
- every candidate with an anchor in the neighbourhood is dropped (with its ranking), as
  is every ranking whose ``affected`` kernels meet it (its predicted Δ read them);
- the transformations are asked for their matches ``within`` the neighbourhood and its
  producers and consumers (a dropped match is found again from any of its anchors);
- transformations whose matches are not local (``Transformation.local_matches`` false:
  a match anchored on one kernel that depends on kernels far away, such as buffer reuse
  and recomputation) are re-matched on the whole graph, lazily, when the whole graph's
  candidates are next listed; they are never listed for a selection or a viewport. A match
  found again keeps its ranking unless the rewrite's neighbourhood dropped it, like a local one
  (its check reads lifetimes far away, and runs again when the match is applied);
- a rewrite that changes no kernel (a graph-level edit) re-matches everything.

The result is the same candidate set a full re-match finds (tested on random apply
sequences). A ranking kept from before is exact for its kernels and their neighbours;
a check that reads the graph further away (a fusion that would now close a cycle through
a distant kernel) is caught when the match is applied, which checks again. Indexes are
never edited once derived (``after`` makes a new one sharing the unchanged entries), so
the index of an earlier session state stays valid for undo. ``rank`` fills the ranking
of a candidate in place: a worker thread may rank while the GUI reads the lists.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Iterable, Iterator

from ir.graph import Graph
from ir.pacing import paced
from ir.movement import Estimate
from transforms import engine
from transforms.base import Application, Match, Transformation
from transforms.layers import Family, layer_hash, layer_of, layers
from transforms.registry import TRANSFORMATIONS

Key = tuple  # (transformation name, repr of the instance, anchors)


def key_of(t: Transformation, m: Match) -> Key:
    return (*_instance_key(t), m.anchors)


@lru_cache(maxsize=4096)
def _instance_key(t: Transformation) -> tuple[str, str]:
    """(name, repr) of a transformation instance (frozen dataclasses: equal instances share it)."""
    return t.name, repr(t)


def default_instances() -> list[Transformation]:
    """Every registered transformation's offered parameter choices, in name order."""
    return [t for name in sorted(TRANSFORMATIONS) for t in TRANSFORMATIONS[name].instances()]


def neighbourhood(before: Graph, after: Graph, app: Application) -> set[str]:
    """The ids an application touched (and its anchors), with their producers and consumers
    before and after it."""
    core = set(app.created + app.removed + app.changed + app.anchors)
    hood = set(core)
    for g in (before, after):
        for ident in core:
            node = g.nodes.get(ident)
            if node is not None:
                hood.update(p.id for p in g.predecessors(node))
                hood.update(s.id for s in g.successors(node))
                for m in node.inputs:             # co-readers: sibling pairs change with readers
                    if m is not None:
                        hood.update(c.id for c in g.consumers(m.container))
    return hood


def _widen(graph: Graph, ids: list[str]) -> list[str]:
    """``ids`` and their producers and consumers: a match dropped for one anchor in the
    neighbourhood is found again from any of its anchors (``within`` may look from one side)."""
    out = dict.fromkeys(ids)
    for ident in ids:
        node = graph.nodes[ident]
        out.update(dict.fromkeys(p.id for p in graph.predecessors(node)))
        out.update(dict.fromkeys(s.id for s in graph.successors(node)))
    return list(out)


class MatchIndex:
    """The candidates of ``graph`` (see the module docstring)."""

    def __init__(self, graph: Graph, instances: Iterable[Transformation] | None = None, *,
                 _empty: bool = False) -> None:
        self.graph = graph
        self.instances = list(default_instances() if instances is None else instances)
        self._cands: dict[Key, tuple[Transformation, Match]] = {}
        self._by_node: dict[str, frozenset[Key]] = {}
        self._ranked: dict[Key, engine.Ranked] = {}
        self._watch: dict[str, frozenset[Key]] = {}    # kernel id -> rankings that read it
        self._dirty: set[Transformation] = set()       # graph-wide ones to match on the next full listing
        self._kept_wide: dict[Key, engine.Ranked] = {}  # their rankings from before, for the matches found again
        self._graph_wide = {(t.name, repr(t)) for t in self.instances if not t.local_matches}
        self._layers: dict[Family, dict[int, list[str]]] | None = None   # layers(graph), when first asked
        self._hashes: dict[tuple[Family, int], str] = {}                  # layer -> structural hash
        # class -> (a member's ranking or check, its layer's family and index, what the ranking read or None)
        self._classes: dict[tuple, tuple[engine.Ranked, Family, int, tuple[str, ...] | None]] = {}
        self._checked: dict[Key, engine.Ranked] = {}      # check verdicts whose Δ is not predicted yet
        self._class_of: dict[Key, tuple | None] = {}      # candidate -> its class (class_key)
        if not _empty:
            for t in self.instances:
                self._find(t, None)

    # --- building ------------------------------------------------------------------
    def _find(self, t: Transformation, within: Iterable[str] | None) -> None:
        for m in paced(t.matches(self.graph, None if within is None else list(within)), every=4):
            k = key_of(t, m)
            if k not in self._cands:
                self._cands[k] = (t, m)
                if k in self._kept_wide:
                    self._ranked[k] = self._kept_wide.pop(k)
                for a in m.anchors:
                    self._by_node[a] = self._by_node.get(a, frozenset()) | {k}

    def _drop(self, keys: Iterable[Key]) -> None:
        for k in keys:
            tm = self._cands.pop(k, None)
            if tm is not None:
                for a in tm[1].anchors:
                    rest = self._by_node.get(a, frozenset()) - {k}
                    if rest:
                        self._by_node[a] = rest
                    else:
                        self._by_node.pop(a, None)
            self._ranked.pop(k, None)

    def after(self, graph: Graph, app: Application) -> "MatchIndex":
        """The index of ``graph``, the graph after ``app`` was applied to this index's graph."""
        if not (app.created or app.removed or app.changed):
            return MatchIndex(graph, self.instances)
        new = MatchIndex(graph, self.instances, _empty=True)
        new._cands, new._by_node = dict(self._cands), dict(self._by_node)
        new._ranked, new._watch = dict(self._ranked), dict(self._watch)
        hood = neighbourhood(self.graph, graph, app)
        touched = {layer_of(i) for i in hood}
        # list(...) copies in one C call: a ranking worker may be adding to these caches meanwhile
        new._hashes = {k: h for k, h in list(self._hashes.items()) if k not in touched}
        new._class_of = {k: c for k, c in list(self._class_of.items())
                         if c is None or layer_of(k[2][0]) not in touched}
        stale: set[Key] = set()
        for ident in hood:
            stale |= new._by_node.get(ident, frozenset())
            stale |= new._watch.get(ident, frozenset())
        global_ts = [t for t in self.instances if not t.local_matches]
        wide = {k for k in new._cands if k[:2] in self._graph_wide}
        new._kept_wide = {k: new._ranked[k] for k in wide - stale if k in new._ranked}
        new._drop(stale | wide)
        new._dirty = set(global_ts)
        inside = _widen(graph, [i for i in hood if i in graph.nodes])
        for t in self.instances:
            if t.local_matches:
                new._find(t, inside)
        return new

    # --- reading -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._cands)

    def candidates(self, within: Iterable[str] | None = None) -> Iterator[tuple[Transformation, Match]]:
        """Candidates with an anchor in ``within`` (all when None), in a stable order. Transformations
        whose matches are graph-wide decisions (``local_matches`` false: buffer reuse, recomputation)
        are listed for the whole graph only: ranking one reads the whole schedule."""
        if within is None:
            for t in list(self._dirty):           # graph-wide transformations, matched when asked
                self._find(t, None)
                self._dirty.discard(t)
            keys = self._cands.keys()
        else:
            found: set[Key] = set()
            for ident in within:
                found |= self._by_node.get(ident, frozenset())
            keys = sorted((k for k in found if k[:2] not in self._graph_wide), key=lambda k: (k[0], k[1], k[2]))
        for k in list(keys):
            tm = self._cands.get(k)
            if tm is not None:
                yield tm

    def known(self, t: Transformation, m: Match) -> engine.Ranked | None:
        """The ranking of a candidate, if it was ranked on this graph (or kept from before)."""
        return self._ranked.get(key_of(t, m))

    # --- equal layers ---------------------------------------------------------------------
    def _layer_hash(self, family: Family, index: int) -> str | None:
        """The structural hash of a layer of a family with two or more layers (None: no such layer)."""
        if self._layers is None:
            self._layers = layers(self.graph)
        ids = self._layers.get(family, {}).get(index)
        if ids is None:
            return None
        if (family, index) not in self._hashes:
            self._hashes[(family, index)] = layer_hash(self.graph, family, index, ids)
        return self._hashes[(family, index)]

    def class_key(self, t: Transformation, m: Match) -> tuple | None:
        """The candidate's class among equal layers (see the module docstring): None when its anchors
        do not all lie in one layer of a repeated family. Kept per candidate."""
        k = key_of(t, m)
        if k not in self._class_of:
            self._class_of[k] = self._class_key(t, m)
        return self._class_of[k]

    def _class_key(self, t: Transformation, m: Match) -> tuple | None:
        where = {layer_of(a) for a in m.anchors}
        if len(where) != 1 or None in where:
            return None
        family, index = next(iter(where))
        h = self._layer_hash(family, index)
        return None if h is None else (t.name, repr(t), tuple(family.rename(a, index, "§") for a in m.anchors), h)

    def check(self, t: Transformation, m: Match) -> engine.Ranked:
        """The candidate's check verdict, as a ranking whose Δ may be unknown (None): its ranking when it
        has one, its class's verdict (renamed to its layer), else its own check (kept)."""
        k = key_of(t, m)
        r = self._ranked.get(k) or self._checked.get(k)
        if r is not None:
            return r
        cls = self.class_key(t, m)
        r = self._member(cls, t, m, final=False)
        if r is None:
            res = t.check(self.graph, m)
            r = engine.Ranked(t, m, res.ok, res.reason, Estimate() if res.ok and not t.moves_bytes else None)
            if cls is not None:
                self._classes[cls] = (r, *layer_of(m.anchors[0]), None)
        if r.ok and r.delta is None:
            self._checked[k] = r
        else:                                   # a failed check or a known Δ: the ranking itself
            self._keep(k, r, m.anchors)
        return r

    def rank(self, t: Transformation, m: Match, predict: bool = True) -> engine.Ranked:
        """The candidate's ranking (``engine.rank_one``), computed once per index, and once per class of
        equal layers: a member of a ranked class takes its ranking, renamed to its layer."""
        if not predict:
            return self.check(t, m)
        k = key_of(t, m)
        r = self._ranked.get(k)
        if r is not None and (r.delta is not None or not r.ok):
            return r
        cls = self.class_key(t, m)
        r = self._member(cls, t, m, final=True)
        if r is not None:
            rep, family, index, rep_deps = self._classes[cls]
            read = rep.match.anchors if rep_deps is None else rep_deps        # None: a failed check's verdict
            deps = tuple(family.rename(i, index, layer_of(m.anchors[0])[1]) for i in read)
        else:
            checked = self._checked.get(k)
            final = checked is not None and (not checked.ok or checked.delta is not None)
            r = checked if final else engine.rank_one(self.graph, t, m)
            deps = self._deps(t, m)
            if cls is not None:
                self._classes[cls] = (r, *layer_of(m.anchors[0]), deps)
        self._keep(k, r, deps)
        return r

    def _keep(self, k: Key, r: engine.Ranked, deps: Iterable[str]) -> None:
        """Keep a ranking, to be dropped when one of the kernels it read changes."""
        for ident in deps:
            self._watch[ident] = self._watch.get(ident, frozenset()) | {k}
        self._ranked[k] = r

    def _member(self, cls: tuple | None, t: Transformation, m: Match, final: bool) -> engine.Ranked | None:
        """The ranking of ``m`` derived from the one its class holds (None: none held, or ``final`` and the
        class holds only a check whose Δ is still unknown)."""
        held = self._classes.get(cls) if cls is not None else None
        if held is None or final and held[3] is None and held[0].ok:
            return None
        rep, family, index, _ = held
        mine = layer_of(m.anchors[0])[1]
        return replace(rep, transformation=t, match=m, reason=family.rename(rep.reason, index, mine))

    def _deps(self, t: Transformation, m: Match) -> tuple[str, ...]:
        """The kernels a ranking read (its ``affected`` set), kept to drop the ranking when one changes."""
        try:
            return tuple(t.affected(self.graph, m)) + m.anchors
        except Exception:  # noqa: BLE001 - a failed match's affected set is its anchors
            return m.anchors
