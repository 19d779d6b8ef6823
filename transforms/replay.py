"""Replaying a history on a freshly imported graph, headless, step by step.

``replay(graph, history)`` re-applies every step (a single match, or a pass:
``transforms.passes``, whose application count and graph hash must match the
recording) with ``ir.verify_edit`` on what each one touched (a full ``ir.verify`` after the
last) and returns a ``StepReport`` per step (bytes, bound, ratio, FLOPs, peak
memory, graph hash, and whether ``expect.bytes_after`` held). The first step
that cannot be applied — unknown transformation, bad parameters, a stale anchor
(no such node) or a failed check — raises ``ReplayError`` naming the step number,
the transformation and the reason. The graph is left as it was after the last
good step. ``Checkpoints`` keeps clones every ~n/16 steps and ``first_failing`` bisects,
so a failing final check can name the first bad step (``dcstudio replay --check``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from ir.errors import StudioError
from ir.graph import Graph
from ir.memory import peak_bytes
from ir.movement import Ledger, lower_bound
from ir.serialize import HashCache, graph_hash
from ir.verify import verify
from transforms import engine
from transforms.base import Application, Match
from transforms.history import History, Step
from transforms.passes import run_pass
from transforms.transfer import apply_transfer
from transforms.registry import create


class ReplayError(StudioError):
    """A history step that cannot be replayed."""

    def __init__(self, step: int, transformation: str, reason: str, *, path: str | None = None) -> None:
        self.step = step
        self.transformation = transformation
        self.reason = reason
        super().__init__(f"step {step} ({transformation}): {reason}", path=path)


@dataclass(frozen=True)
class StepReport:
    step: int
    transformation: str
    anchors: tuple[str, ...]
    bytes: int
    bound: int
    ratio: float
    flops: int
    peak_bytes: int | None          # None between the first and last step unless every_peak
    graph_hash: str
    delta_bytes: int
    expected_bytes: int | None
    seconds: float

    @property
    def expectation_met(self) -> bool:
        return self.expected_bytes is None or self.expected_bytes == self.bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d["anchors"] = list(self.anchors)
        d["ratio"] = round(self.ratio, 6)
        d["seconds"] = round(self.seconds, 4)
        return d


def apply_step(graph: Graph, step: Step, number: int, *, path: str | None = None,
               backup: bool = True, earlier: Sequence[Step] = (), hashes: HashCache | None = None) -> Application:
    """Apply one history step; errors become ReplayError naming the step. ``backup=False`` when
    ``graph`` is a throw-away copy (the Session applies to a clone and keeps the original).
    ``earlier``: the steps before it (a transfer step repeats some of them); ``hashes``: digests to
    reuse for the graph hash a pass or transfer step checks (its touched nodes are forgotten first)."""
    if step.is_transfer:
        return _apply_transfer(graph, step, number, path, earlier, hashes)
    try:
        t = create(step.transformation, step.params)
    except StudioError as e:
        raise ReplayError(number, step.transformation, e.summary, path=path) from None
    if step.is_pass:
        return _apply_pass(graph, t, step, number, path, hashes)
    stale = [a for a in step.anchors if a not in graph.nodes]
    if stale:
        raise ReplayError(number, step.transformation,
                          f"stale anchor {', '.join(repr(s) for s in stale)}: no such node in the graph "
                          "(the model or an earlier step differs from when the history was recorded)", path=path)
    try:
        return engine.apply(graph, t, Match(t.name, step.anchors), number, backup=backup)
    except StudioError as e:
        raise ReplayError(number, step.transformation, e.summary, path=path) from None


def _hash_after(graph: Graph, app: Application, hashes: HashCache | None) -> str:
    if hashes is None:
        return graph_hash(graph)
    hashes.forget(app.created + app.changed + app.removed)
    return graph_hash(graph, hashes)


def _apply_transfer(graph: Graph, step: Step, number: int, path: str | None, earlier: Sequence[Step],
                    hashes: HashCache | None) -> Application:
    """A transfer step: its source steps again on each target layer; the count and graph must match."""
    try:
        app, count = apply_transfer(graph, step, earlier, number)
    except StudioError as e:
        raise ReplayError(number, step.transformation, e.summary, path=path) from None
    if count != step.applications:
        raise ReplayError(number, step.transformation,
                          f"the transfer applied {count} times, {step.applications} when the history was "
                          "recorded (the model or an earlier step differs)", path=path)
    if step.graph_hash is not None and _hash_after(graph, app, hashes) != step.graph_hash:
        raise ReplayError(number, step.transformation,
                          "the transfer produced a different graph than when the history was recorded", path=path)
    return app


def _apply_pass(graph: Graph, t, step: Step, number: int, path: str | None, hashes: HashCache | None) -> Application:
    """A pass step: the fixpoint again, which must reproduce the recorded count and graph."""
    try:
        res = run_pass(graph, t, number, limit=step.applications + 1, scope=step.scope)   # one more: it must stop there
    except StudioError as e:
        raise ReplayError(number, step.transformation, f"pass: {e.summary}", path=path) from None
    if res.applications != step.applications:
        raise ReplayError(number, step.transformation,
                          f"the pass applied {res.applications} times, {step.applications} when the history was "
                          "recorded (the model or an earlier step differs)", path=path)
    if step.graph_hash is not None and _hash_after(graph, res.application, hashes) != step.graph_hash:
        raise ReplayError(number, step.transformation,
                          "the pass produced a different graph than when the history was recorded (same number "
                          "of applications; a transformation changed since?)", path=path)
    return res.application


def initial_report(graph: Graph, ledger: Ledger, hashes: HashCache | None = None) -> StepReport:
    bound = lower_bound(graph)
    return StepReport(0, "(imported)", (), ledger.total.bytes, bound, ledger.total.bytes / bound if bound else 0.0,
                      ledger.total.flops, peak_bytes(graph), graph_hash(graph, hashes), 0, None, 0.0)


def replay(graph: Graph, history: History, *, on_step: Callable[[StepReport], None] | None = None,
           path: str | None = None, stop: Callable[[], bool] | None = None,
           every_peak: bool = True) -> list[StepReport]:
    """Re-apply ``history`` to ``graph`` in place; reports for step 0 (import) and every step.
    Costs stay linear in the graph per step only where they must: the graph hash reuses the
    digests of untouched nodes, only created/changed map bodies are re-verified, and no
    rollback copy is kept (a failing step raises, and the caller drops the graph). Peak
    memory is an O(graph) schedule: with ``every_peak=False`` it is computed for the import
    and the last step only (``peak_bytes`` is None in between)."""
    ledger = Ledger(graph)
    hashes = HashCache()
    reports = [initial_report(graph, ledger, hashes)]
    n = len(history.steps)
    for number, step in enumerate(history.steps, start=1):
        if stop is not None and stop():
            break
        t0 = time.perf_counter()
        app = apply_step(graph, step, number, path=path, backup=False, earlier=history.steps[:number - 1],
                         hashes=hashes)
        hashes.forget(app.created + app.changed + app.removed)
        delta = ledger.update(app.removed, app.changed, app.created)
        bound = lower_bound(graph)
        last = number == n or (stop is not None and stop())
        if last:
            try:
                verify(graph)
            except StudioError as e:
                raise ReplayError(number, step.transformation, f"the graph after it is invalid: {e.summary}",
                                  path=path) from None
        peak = peak_bytes(graph) if every_peak or last else None
        rep = StepReport(number, step.transformation, step.anchors, ledger.total.bytes, bound,
                         ledger.total.bytes / bound if bound else 0.0, ledger.total.flops, peak,
                         graph_hash(graph, hashes), delta.bytes, step.bytes_after, time.perf_counter() - t0)
        reports.append(rep)
        if on_step is not None:
            on_step(rep)
    return reports


class Checkpoints:
    """Clones of a replayed graph every ``stride`` steps (about n/16), so that the graph after any
    step can be rebuilt by re-applying at most ``stride - 1`` steps (bisection of a failing check).
    ``record(step, graph)`` from the replay's ``on_step``; clones share arrays, so they are cheap."""

    def __init__(self, graph: Graph, history: History, *, parts: int = 16) -> None:
        self.history = history
        self.stride = max(1, -(-len(history.steps) // parts))
        self.saved: dict[int, Graph] = {0: graph.clone()}

    def record(self, step: int, graph: Graph) -> None:
        if step % self.stride == 0:
            self.saved[step] = graph.clone()

    def graph_after(self, k: int) -> Graph:
        """A fresh graph as it was after step ``k`` (0 = as imported)."""
        start = max(s for s in self.saved if s <= k)
        graph = self.saved[start].clone()
        for number in range(start + 1, k + 1):
            apply_step(graph, self.history.steps[number - 1], number, backup=False,
                       earlier=self.history.steps[:number - 1])
        return graph


def first_failing(good: int, bad: int, fails: Callable[[int], bool]) -> int:
    """The smallest step in (``good``, ``bad``] for which ``fails`` holds, by bisection, given that
    it does not hold at ``good`` and holds at ``bad`` (a mismatch is assumed to persist)."""
    while bad - good > 1:
        mid = (good + bad) // 2
        if fails(mid):
            bad = mid
        else:
            good = mid
    return bad
