"""``dcstudio tune``: search for a better sequence of transformation passes than the hand recipe.

A *candidate* is a sequence of passes (``studio.session.recipe.Pass``: a transformation applied to a
fixpoint). Evaluating one opens the model in a fresh Session, runs the passes (with transfer
tuning when the model has repeated layers: ``tune_one_layer`` tunes the first of each family of
equal layers and repeats its steps on the others) and scores the result: the bytes the graph
moves (``objective="bytes"``), or the time the calibrated roofline predicts for it
(``objective="time"``: per kernel the larger of bytes / peak bandwidth and FLOPs / peak FLOP/s,
summed; the peaks are this machine's, ``codegen.timing.calibrate``).

The search is evolutionary with a beam: the population starts from the hand recipe (and the passes
of ``--from`` histories); each generation draws children from the best ``beam`` candidates by
mutation (insert, delete, replace, move or swap passes, or splice two parents) and evaluates the
new ones, deduplicated by their canonical key. Ties go to the shorter sequence, then to the key,
so the result depends only on the seed, the budget (a number of evaluations) and the results:
the same seed and database give the same history. ``minutes`` bounds the wall time instead
(then how far it gets depends on the machine).

Evaluations run as Dask tasks (``DaskEvaluator``: an embedded ``LocalCluster`` by default, any
scheduler by address) or in this process (``LocalEvaluator``); the driver keeps the order of
submission, writes every result to the ``ResultsDB`` as it arrives (a worker that dies loses
nothing already written; Dask reruns its task elsewhere) and reads earlier results from it
(warm start).
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Callable, Sequence

from ir.errors import StudioError
from studio.session.recipe import SUBSTATION, Pass
from studio.tune.database import ResultsDB
from studio.tune.evaluate import has_equal_layers, code_fingerprint
from studio.tune.evaluators import measurer
from studio.tune.kernels import context_of as kernel_context
from studio.tune.kernels import measure_kernels, price
from studio.tune.types import Candidate, Cutouts, ModelRef, Progress, Score, TuneResult

OBJECTIVES = ("bytes", "time")
BACKENDS = ("cpu", "cuda")

# What the search draws from: the recipe's passes and their parameter variants. Left out on purpose:
# mixed_precision (changes the numbers beyond fp32 tolerance), memory_reuse and recompute (they
# trade peak memory, not bytes moved).
POOL: tuple[Pass, ...] = (
    Pass("constant_folding"), Pass("reshape_elimination"), Pass("expand"), Pass("transpose_elimination"),
    Pass("map_fusion"), Pass("reduction_fusion"), Pass("optimizer_fusion"), Pass("gemm_epilogue_fusion"),
    Pass("horizontal_fusion"), Pass("layout_select", {"contraction_only": True}), Pass("layout_select"),
    Pass("select_impl"), Pass("conv_weight_grad"), Pass("view_alias"), Pass("broadcast_fusion"),
)
MAX_LENGTH = 24
CUTOUT_SLACK = 0.02
"""A candidate whose kernels' measured times sum to more than the recipe's by this fraction is not timed as a
whole step (its kernels already say it is slower)."""


# --------------------------------------------------------------------------- mutation

def mutate(rng: random.Random, parent: Candidate, other: Candidate | None = None) -> Candidate:
    """One random edit of ``parent`` (or a splice with ``other``)."""
    seq = list(parent.passes)
    moves = ["insert", "delete", "replace", "move", "swap"] + (["splice"] if other is not None else [])
    move = rng.choice(moves)
    if move == "insert" or not seq:
        seq.insert(rng.randint(0, len(seq)), rng.choice(POOL))
    elif move == "delete" and len(seq) > 1:
        del seq[rng.randrange(len(seq))]
    elif move == "replace":
        seq[rng.randrange(len(seq))] = rng.choice(POOL)
    elif move == "move" and len(seq) > 1:
        p = seq.pop(rng.randrange(len(seq)))
        seq.insert(rng.randint(0, len(seq)), p)
    elif move == "swap" and len(seq) > 1:
        i = rng.randrange(len(seq) - 1)
        seq[i], seq[i + 1] = seq[i + 1], seq[i]
    elif move == "splice":
        cut_a, cut_b = rng.randint(0, len(seq)), rng.randint(0, len(other.passes))
        seq = seq[:cut_a] + list(other.passes[cut_b:])
    return Candidate.of(seq[:MAX_LENGTH] or list(parent.passes))


def context_key(model_sha256: str, model: ModelRef, objective: str, transfer: bool, peaks,
                backend: str = "cpu") -> tuple[str, dict]:
    about = {"model_sha256": model_sha256, "bindings": list(model.bindings), "optimizer": model.optimizer,
             "scope": model.scope, "objective": objective, "transfer": transfer, "code": code_fingerprint()}
    if objective == "time":
        about.update(machine=peaks.fingerprint, threads=peaks.threads)
    if backend != "cpu":            # CPU contexts keep the keys they had before backends were a choice
        about.update(backend=backend)
    return hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()[:24], about


def _rank(item: tuple[Candidate, Score]) -> tuple:
    c, s = item
    return (s.value, len(c.passes), c.key)


def search(model: ModelRef, *, evaluator, db: ResultsDB | None = None, objective: str = "bytes",
           budget: int | None = 200, minutes: float | None = None, seed: int = 0,
           start: Sequence[Sequence[Pass]] = (SUBSTATION,), transfer: bool | None = None, beam: int = 8,
           batch: int = 8, peaks=None, on_progress: Callable[[Progress], None] | None = None,
           stop: Callable[[], bool] | None = None, measure: int = 0, reps: int = 10,
           threads: int | None = None, cutouts: int = 0, backend: str = "cpu") -> TuneResult:
    """The search described in the module docstring. ``budget``: evaluations (database hits count
    too, so a warm start walks the same path); ``minutes``: wall time; both: whichever ends first.
    ``measure``: that many finalists (the best after the hand recipe) are then timed against the
    hand recipe as exported CPU steps (``measure_pair``, as timing tasks of the evaluator), and
    ``TuneResult.chosen`` is the fastest measured, or the recipe when none beats it by more than
    half the spread of its paired ratios. ``cutouts`` (time objective): before that, the hand recipe and
    that many of the best candidates are priced by their kernels' measured times (``studio.tune.kernels``), and
    the finalists are the cheapest of them by that price instead of by the roofline, leaving out any
    priced above the recipe by more than ``CUTOUT_SLACK``. ``backend="cuda"``: the finalists are timed as
    exported CUDA steps on this machine's GPU instead (``studio.tune.gpu``; pass the GPU's ``peaks`` for
    the time objective); kernel cutouts time CPU kernels, so they are not used there."""
    if objective not in OBJECTIVES:
        raise StudioError(f"unknown objective '{objective}'; choose one of {', '.join(OBJECTIVES)}")
    if backend not in BACKENDS:
        raise StudioError(f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
    if objective == "time" and peaks is None:
        from codegen.numba_cpu.threads import default_threads
        from codegen.timing.calibrate import peaks as calibrated
        peaks = calibrated(default_threads())
    session = model.open()
    if transfer is None:
        transfer = model.scope is None and has_equal_layers(session)
    context, about = context_key(session.model_sha256, model, objective, transfer, peaks, backend)
    run = _Search(model, evaluator, db, objective, transfer, peaks, context, about, on_progress, stop)
    stopped = run.evolve(start, budget, minutes, random.Random(seed), beam, batch)
    res = run.result(stopped)
    finalists = [c for c, _ in res.table if c.key != res.baseline_candidate.key]
    if objective == "time" and cutouts and backend == "cpu" and not stopped:
        finalists = run.priced(res, finalists[:cutouts], reps, threads)
    if measure and not stopped:
        run.measure(res, finalists[:measure], backend, reps, threads)
    return res


class _Search:
    """One search's state: every candidate seen with its score (``seen``), the progress, and where results go."""

    def __init__(self, model: ModelRef, evaluator, db: ResultsDB | None, objective: str, transfer: bool, peaks,
                 context: str, about: dict, on_progress, stop) -> None:
        self.model, self.evaluator, self.db, self.objective = model, evaluator, db, objective
        self.transfer, self.peaks, self.context, self.about = transfer, peaks, context, about
        self.on_progress, self.stop = on_progress, stop
        self.seen: dict[str, tuple[Candidate, Score]] = {}
        self.prog = Progress()
        self.baseline_key = ""

    def stopping(self) -> bool:
        return bool(self.stop and self.stop())

    def evolve(self, start, budget: int | None, minutes: float | None, rng: random.Random, beam: int,
               batch: int) -> bool:
        """The starting candidates, then generations of children until the budget or the time is spent, the
        neighbourhood is exhausted or the caller stops; True when it was stopped (Ctrl-C or ``stop``)."""
        deadline = time.monotonic() + minutes * 60 if minutes else None
        seen = self.seen

        def spent() -> bool:
            return ((budget is not None and len(seen) >= budget)
                    or (deadline is not None and time.monotonic() >= deadline))

        initial = list({c.key: c for c in (Candidate.of(p) for p in start)}.values())
        self.baseline_key = initial[0].key
        try:
            self.run(initial)
            while not spent() and not self.stopping():
                self.prog.generation += 1
                ranked = sorted((v for v in seen.values() if v[1].ok), key=_rank)[:beam] or [seen[self.baseline_key]]
                room = batch if budget is None else min(batch, budget - len(seen))
                children = self.children(rng, ranked, room)
                if not children:
                    break                   # the neighbourhood is exhausted
                self.run(children)
        except KeyboardInterrupt:
            return True
        return self.stopping()

    def children(self, rng: random.Random, ranked: list, room: int) -> list[Candidate]:
        children: list[Candidate] = []
        for _ in range(room * 20):
            if len(children) >= room:
                break
            parent = rng.choice(ranked)[0]
            other = rng.choice(ranked)[0] if len(ranked) > 1 else None
            child = mutate(rng, parent, other)
            if child.key not in self.seen and child not in children:
                children.append(child)
        return children

    def run(self, cands: list[Candidate]) -> None:
        """Scores of ``cands``: from the database where it has them, else evaluated (and stored)."""
        todo = []
        for c in cands:
            hit = self.db.get(self.context, c.key) if self.db is not None else None
            if hit is not None:
                self.seen[c.key] = (c, hit)
                self.prog.reused += 1
                self.note_best(c, hit)
            else:
                todo.append(c)
        if todo:
            def got(i: int, score: Score) -> None:
                self.seen[todo[i].key] = (todo[i], score)
                self.prog.evaluated += 1
                self.prog.failed += not score.ok
                if self.db is not None:
                    self.db.put(self.context, todo[i].key, score, self.about)
                self.note_best(todo[i], score)
            self.evaluator(self.model, todo, self.objective, self.transfer, self.peaks, got)

    def note_best(self, c: Candidate, s: Score) -> None:
        prog = self.prog
        if s.ok and (prog.best is None or _rank((c, s)) < _rank((prog.best_candidate, prog.best))):
            prog.best, prog.best_candidate = s, c
        if self.on_progress is not None:
            self.on_progress(prog)

    def result(self, stopped: bool) -> TuneResult:
        table = sorted((v for v in self.seen.values() if v[1].ok), key=_rank)
        if not table:
            raise StudioError("no candidate could be evaluated; the first error: "
                              + next((s.error for _, s in self.seen.values() if s.error), "none"))
        best, score = table[0]
        baseline = self.seen[self.baseline_key]
        return TuneResult(best, score, baseline[1], self.prog, stopped, self.context, self.transfer, table,
                          baseline_candidate=baseline[0])

    def priced(self, res: TuneResult, finalists: list[Candidate], reps: int, threads: int | None) -> list[Candidate]:
        """The finalists by their kernels' price (``res.cutouts``), less those priced above the recipe by more
        than ``CUTOUT_SLACK``."""
        res.cutouts = _price_by_cutouts(self.model, [res.baseline_candidate] + finalists, self.evaluator,
                                        self.db, self.transfer, reps, threads, self.stop, self.on_progress,
                                        self.prog)
        price = {p.candidate: p.seconds for p in res.cutouts.prices}
        bar = price.get(self.baseline_key, float("inf")) * (1 + CUTOUT_SLACK)
        return sorted((c for c in finalists if price.get(c.key, bar) < bar), key=lambda c: (price[c.key], c.key))

    def measure(self, res: TuneResult, finalists: list[Candidate], backend: str, reps: int,
                threads: int | None) -> None:
        """Each finalist's exported step timed against the recipe's (``res.measured``)."""
        prog = self.prog
        prog.timing_total = len(finalists)
        for c in finalists:
            if self.stopping():
                break
            if self.on_progress is not None:
                self.on_progress(prog)
            hit = self.db.get_measured(self.context, c.key) if self.db is not None else None
            if hit is None:
                hit = self.evaluator.measure(measurer(backend), self.model, res.baseline_candidate, c,
                                             self.transfer, reps, threads)
                if self.db is not None:
                    self.db.put_measured(self.context, hit)
            res.measured.append(hit)
            prog.timing += 1
            if self.on_progress is not None:
                self.on_progress(prog)


def _price_by_cutouts(model: ModelRef, candidates: list[Candidate], evaluator, db: ResultsDB | None,
                      transfer: bool, reps: int, threads: int | None, stop, on_progress, prog: Progress) -> Cutouts:
    """Each candidate's kernels timed as cutouts (only structures not timed before), then priced."""
    context, about = kernel_context(threads)
    times = db.kernel_times(context) if db is not None else {}
    out = Cutouts()
    for c in candidates:
        if stop and stop():
            break
        keys, new = evaluator.measure(measure_kernels, model, c, transfer, frozenset(times), threads, reps)
        for t in new:
            times[t.key] = t
            if db is not None:
                db.put_kernel_time(context, t, about)
        reused = len(set(keys.values())) - len(new)
        found = price(c.key, keys, times, len(new), reused)
        prog.kernels_measured += len(new)
        prog.kernels_reused += reused
        if found is not None:
            out.prices.append(found)
        if on_progress is not None:
            on_progress(prog)
    return out


def history_passes(path: str | Path) -> list[Pass]:
    """The passes of a history file's pass steps, in order (``--from``); single-match steps are not
    part of a sequence of passes and are left out."""
    from transforms.history import load
    return [Pass(s.transformation, dict(s.params)) for s in load(path).steps
            if s.is_pass and s.scope is None and s.transformation in {p.transformation for p in POOL}]
