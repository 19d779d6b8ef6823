"""The values a ``Session`` keeps per state and hands out (``studio.session``): the state after a number
of steps, a step planned off the GUI thread, the match index derived on first use, the figures."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ir.graph import Graph
from ir.movement import Ledger
from transforms.base import Application
from transforms.history import Step
from transforms.match_index import MatchIndex


@dataclass(frozen=True)
class State:
    """The graph and figures after a number of steps."""

    graph: Graph
    ledger: Ledger
    application: Application | None


class LazyIndex:
    """A state's ``MatchIndex`` still to derive from the one before (``MatchIndex.after``), on first use: by the
    ranking worker that asks for it, not on the GUI thread that records the step (55 ms of a transfer's
    commit at 12 layers). A chain longer than ``MAX_LAZY`` is not kept: that state builds its index afresh."""

    def __init__(self, base: "MatchIndex | LazyIndex", graph: Graph, app: Application) -> None:
        self.base, self.graph, self.app = base, graph, app
        self.index: MatchIndex | None = None
        self.lock = threading.Lock()

    @staticmethod
    def depth(index: "MatchIndex | LazyIndex") -> int:
        n = 0
        while isinstance(index, LazyIndex) and index.index is None:
            n, index = n + 1, index.base
        return n

    def get(self) -> MatchIndex:
        with self.lock:
            if self.index is None:
                base = self.base.get() if isinstance(self.base, LazyIndex) else self.base
                self.index, self.base = base.after(self.graph, self.app), None
            return self.index


MAX_LAZY = 8


@dataclass(frozen=True)
class Planned:
    """A step worked out without changing the session (``plan_apply``, ``plan_transfer``: a GUI worker
    thread plans, the GUI thread commits), recorded by ``commit`` only while the session is still at
    ``cursor`` steps with ``base`` as its graph."""

    step: Step
    graph: Graph
    app: Application
    base: Graph
    cursor: int
    tree: Any = None          # what a view derived for ``graph`` while planning (the GUI's scope tree)


@dataclass(frozen=True)
class Metrics:
    bytes: int
    bytes_read: int
    bytes_written: int
    bound: int
    flops: int
    kernels: int

    @property
    def ratio(self) -> float:
        return self.bytes / self.bound if self.bound else 0.0
