"""The vocabulary of transformations: matches, check results, applications, the base class.

A transformation is a frozen dataclass whose fields are its parameters (they go
into history files as JSON). It has a registry ``name``, a ``level`` (1 operator,
2 fusion, 3 layout and constants, 4 global) and three methods:

- ``matches(graph, within)`` yields ``Match``es (``within``: node ids to look at);
- ``check(graph, match)`` returns ``OK`` or ``fail(reason, *node_ids)``;
- ``rewrite(graph, match, step)`` edits the graph and returns ``Touched``:
  the ids it created, removed and changed (all within ``affected``).

``transforms.engine`` wraps these with verification and the Δ-estimate; never
call ``rewrite`` directly.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator

from ir.graph import Graph
from ir.movement import Estimate


@dataclass(frozen=True, slots=True)
class Match:
    """Where a transformation applies: its anchor node ids (the history records them)."""

    transformation: str
    anchors: tuple[str, ...]
    label: str = ""

    def to_json(self) -> dict:
        return {"transformation": self.transformation, "anchors": list(self.anchors), "label": self.label}


@dataclass(frozen=True, slots=True)
class MatchResult:
    """``ok``, or the reason a match does not apply, naming the nodes involved."""

    ok: bool
    reason: str = ""
    nodes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


OK = MatchResult(True)


def fail(reason: str, *node_ids: str) -> MatchResult:
    """A failed check: ``reason`` should name the nodes (ids are attached for the GUI too)."""
    return MatchResult(False, reason, tuple(node_ids))


@dataclass(frozen=True, slots=True)
class Touched:
    """What a rewrite did, by node id."""

    created: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Application:
    """The record of one applied transformation (a history step plus its effect)."""

    transformation: str
    params: dict[str, Any]
    anchors: tuple[str, ...]
    created: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    delta: Estimate
    step: int
    extra: dict[str, Any] = field(default_factory=dict)
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Lineage: each created or changed kernel → the kernels (ids before this step) it was made from."""

    @property
    def bytes_saved(self) -> int:
        return -self.delta.bytes

    def to_json(self) -> dict:
        return {"transformation": self.transformation, "params": self.params, "anchors": list(self.anchors),
                "created": list(self.created), "removed": list(self.removed), "changed": list(self.changed),
                "delta": self.delta.to_json(), "step": self.step, "extra": self.extra}


class Transformation:
    """Base class; subclasses are ``@register``ed frozen dataclasses (see module docstring)."""

    name: ClassVar[str] = ""
    level: ClassVar[int] = 0
    tolerance: ClassVar[float] = 1e-4   # how far outputs may move (relative); lossy rewrites raise it
    moves_bytes: ClassVar[bool] = True     # False: no rewrite changes any kernel's figures (its Δ is zero)
    local_matches: ClassVar[bool] = True   # matches depend only on their anchors' neighbourhood
                                           # (``transforms.match_index``); False: re-match all after edits

    @classmethod
    def instances(cls) -> list["Transformation"]:
        """The parameter choices offered to users (default: the default parameters)."""
        return [cls()]

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        raise NotImplementedError

    def check(self, graph: Graph, match: Match) -> MatchResult:
        raise NotImplementedError

    def prepare(self, graph: Graph, match: Match) -> tuple[MatchResult, Any]:
        """``check``, plus what it computed that the rewrite can reuse (one plan per match: a
        planned fusion's built kernel); ``engine.apply`` hands it to ``rewrite_prepared``."""
        return self.check(graph, match), None

    def predict(self, graph: Graph, match: Match) -> Any:
        """The Δ-estimate of applying at ``match`` (a passed check assumed) computed without a rewrite, or
        None (default): ranking then applies the match to a sharing copy (``engine.trial``). A
        transformation that overrides it must predict exactly the trial's Δ (tested per transformation)."""
        return None

    def affected_prepared(self, graph: Graph, match: Match, prepared: Any) -> tuple[str, ...]:
        """``affected`` given what ``prepare`` returned on this same graph (default: ignores it)."""
        return self.affected(graph, match)

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, prepared: Any) -> Touched:
        """``rewrite`` given what ``prepare`` returned on this same graph (default: ignores it)."""
        return self.rewrite(graph, match, step)

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        """Node ids a rewrite may remove or change (default: the anchors)."""
        return match.anchors

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        raise NotImplementedError

    def figures(self, before: Graph, after: Graph) -> dict[str, Any]:
        """Extra figures for the Application (e.g. peak memory before/after); JSON data."""
        return {}

    def params(self) -> dict[str, Any]:
        """The parameters as JSON data (dataclass fields)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} if dataclasses.is_dataclass(self) else {}

    def match(self, *anchors: str, label: str = "") -> Match:
        return Match(self.name, tuple(anchors), label)


def scope(graph: Graph, within: Iterable[str] | None):
    """The compute nodes to look at: all, or those whose ids are in ``within``."""
    if within is None:
        return list(graph.nodes.values())
    wanted = set(within)
    return [n for n in graph.nodes.values() if n.id in wanted]
