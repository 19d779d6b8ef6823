"""What ``dcstudio tune`` passes around: candidates, the model they run on, scores, kernel times and prices,
measured finalists, progress and the result. Every module of ``studio.tune.search`` takes its data from here."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from studio.session.recipe import Pass


@dataclass(frozen=True)
class Candidate:
    passes: tuple[Pass, ...]

    @property
    def key(self) -> str:
        """Canonical JSON of the passes (the database key and the tie-breaker)."""
        return json.dumps([[p.transformation, p.params] for p in self.passes], sort_keys=True,
                          separators=(",", ":"))

    @classmethod
    def of(cls, passes: Iterable[Pass]) -> "Candidate":
        return cls(tuple(Pass(p.transformation, dict(sorted(p.params.items()))) for p in passes))


@dataclass(frozen=True)
class ModelRef:
    """What a worker needs to open the model (picklable); ``scope``: the passes run inside that
    layer only (``transforms.layers``, e.g. ``layer.3``)."""
    path: str
    bindings: tuple[tuple[str, int], ...] = ()
    optimizer: str | None = None
    scope: str | None = None

    def open(self):
        from studio.session.core import Session
        return Session.open(self.path, bindings=dict(self.bindings) or None, optimizer=self.optimizer,
                            autosave=False)


@dataclass(frozen=True)
class Score:
    """What one evaluation found: the objective's value (bytes, or predicted seconds), the bytes
    moved, the recorded steps and the resulting graph's hash; ``error`` when the candidate failed."""
    value: float
    bytes: int
    steps: int
    graph_hash: str
    seconds: float = field(compare=False)        # how long it took: not part of what was found
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class KernelTime:
    """One kernel structure's measured time: median seconds, coefficient of variation, load average."""
    key: str
    median_s: float
    spread: float
    load: float
    label: str = ""


@dataclass
class CutoutPrice:
    """A candidate priced by its kernels: the sum of their medians, how many of its distinct kernel
    structures were measured for it, and how many came from earlier measurements."""
    candidate: str
    seconds: float
    measured: int
    reused: int
    statements: int = 0


@dataclass
class Cutouts:
    """What the cutout stage did in one search (``TuneResult.cutouts``)."""
    prices: list[CutoutPrice] = field(default_factory=list)

    @property
    def measured(self) -> int:
        return sum(p.measured for p in self.prices)

    @property
    def reused(self) -> int:
        return sum(p.reused for p in self.prices)


@dataclass(frozen=True)
class Measured:
    """A finalist's exported step against the hand recipe's, paired in one worker process
    (``codegen.timing.profiler.ab_ratio``; on a GPU ``studio.tune.gpu``): ``ratio`` = recipe median /
    finalist median (> 1: the finalist is faster; 0: it failed its check there, ``note`` says how);
    ``spread`` of the per-pair ratios; the CPU thread count used, or the GPU's name in ``device``."""
    key: str
    recipe_ms: float
    candidate_ms: float
    ratio: float
    spread: float
    threads: int
    device: str = ""
    note: str = ""


@dataclass
class Progress:
    evaluated: int = 0          # evaluations run in this search
    reused: int = 0             # results read from the database
    generation: int = 0
    failed: int = 0             # candidates whose passes raised (they never rank)
    best: Score | None = None
    best_candidate: Candidate | None = None
    kernels_measured: int = 0   # kernel structures timed in cutouts in this search
    kernels_reused: int = 0     # kernel structures whose time came from the database or an earlier cutout
    timing: int = 0             # finalists whose whole steps are timed so far (reported before each one too)
    timing_total: int = 0       # finalists to time


@dataclass
class TuneResult:
    best: Candidate
    score: Score
    baseline: Score
    progress: Progress
    stopped: bool
    context: str
    transfer: bool
    table: list[tuple[Candidate, Score]] = field(default_factory=list)
    baseline_candidate: Candidate | None = None
    measured: list[Measured] = field(default_factory=list)
    cutouts: Cutouts | None = None
    headroom: object | None = None      # tune.headroom.Headroom of the recipe's step, where the caller measured it

    @property
    def chosen(self) -> Candidate:
        """The best by the objective; with measured finalists, the fastest measured one, and the hand
        recipe when none of them beat it; with kernel cutouts and nothing measured, the cheapest priced."""
        if not self.measured and self.cutouts is not None and self.cutouts.prices:
            cheapest = min(self.cutouts.prices, key=lambda p: (p.seconds, p.candidate)).candidate
            return next((c for c, _ in self.table if c.key == cheapest), self.baseline_candidate)
        if not self.measured:
            return self.best
        fastest = max(self.measured, key=lambda m: (m.ratio, m.key))
        if fastest.ratio - 1.0 <= fastest.spread / 2:       # not clearly faster than the paired noise
            return self.baseline_candidate
        return next(c for c, _ in self.table if c.key == fastest.key)
