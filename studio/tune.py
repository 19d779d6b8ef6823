"""``dcstudio tune``: search for a better sequence of transformation passes than the hand recipe.

A *candidate* is a sequence of passes (``studio.recipe.Pass``: a transformation applied to a
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
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ir.errors import StudioError
from studio.recipe import SUBSTATION, Pass, run_pass, run_recipe, tune_one_layer
from studio.tune_db import ResultsDB, Score
from studio.tune_kernels import Cutouts, measure_kernels, price
from studio.tune_kernels import context_of as kernel_context

OBJECTIVES = ("bytes", "time")
BACKENDS = ("cpu", "cuda")

# What the search draws from: the recipe's passes and their parameter variants. Left out on purpose:
# mixed_precision (changes the numbers beyond fp32 tolerance), memory_reuse and recompute (they
# trade peak memory, not bytes moved).
POOL: tuple[Pass, ...] = (
    Pass("constant_folding"), Pass("reshape_elimination"), Pass("expand"), Pass("transpose_elimination"),
    Pass("map_fusion"), Pass("reduction_fusion"), Pass("optimizer_fusion"), Pass("gemm_epilogue_fusion"),
    Pass("horizontal_fusion"), Pass("layout_select", {"contraction_only": True}), Pass("layout_select"),
    Pass("select_impl"), Pass("conv_weight_grad"), Pass("view_alias"),
)
MAX_LENGTH = 24
CUTOUT_SLACK = 0.02
"""A candidate whose kernels' measured times sum to more than the recipe's by this fraction is not timed as a
whole step (its kernels already say it is slower)."""


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
        from studio.session import Session
        return Session.open(self.path, bindings=dict(self.bindings) or None, optimizer=self.optimizer,
                            autosave=False)


def _has_equal_layers(session) -> bool:
    from transforms.layers import equal_group, layers
    return any(equal_group(session.graph, family) is not None for family in layers(session.graph))


def predicted_seconds(session, peaks) -> float:
    """The roofline time of the session's graph: per kernel max(bytes / bandwidth, FLOPs / FLOP/s)."""
    return sum(max(e.bytes / peaks.bandwidth, e.flops / peaks.flops) for e in session.ledger.kernels.values())


def applied(model: ModelRef, candidate: Candidate, transfer: bool):
    """A fresh session of ``model`` with ``candidate``'s passes run (inside the scope, or with
    transfer tuning)."""
    session = model.open()
    if model.scope is not None:
        for p in candidate.passes:
            run_pass(session, p, scope=model.scope)
    elif transfer:
        tune_one_layer(session, candidate.passes)
    else:
        run_recipe(session, candidate.passes)
    return session


def evaluate(model: ModelRef, candidate: Candidate, objective: str, transfer: bool, peaks=None) -> Score:
    """Run ``candidate`` on a fresh session of ``model`` and score it (any failure is the score's
    ``error``, never an exception: one bad sequence must not stop the search)."""
    t = time.perf_counter()
    try:
        session = applied(model, candidate, transfer)
        moved = session.metrics().bytes
        value = float(moved) if objective == "bytes" else predicted_seconds(session, peaks)
        from ir.serialize import graph_hash
        return Score(value, moved, session.cursor, graph_hash(session.graph), time.perf_counter() - t)
    except Exception as e:  # noqa: BLE001 - a failing candidate is a result
        return Score(float("inf"), 0, 0, "", time.perf_counter() - t, f"{type(e).__name__}: {e}"[:500])


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


# --------------------------------------------------------------------------- evaluators

class LocalEvaluator:
    """Evaluations in this process, in order (``workers=1``; also what tests use)."""

    name = "in this process"

    def __call__(self, model: ModelRef, candidates: Sequence[Candidate], objective: str, transfer: bool,
                 peaks, on_result: Callable[[int, Score], None]) -> None:
        for i, c in enumerate(candidates):
            on_result(i, evaluate(model, c, objective, transfer, peaks))

    def measure(self, fn, *args):
        return fn(*args)

    def close(self) -> None:
        pass


class DaskEvaluator:
    """Evaluations as Dask tasks: an embedded ``LocalCluster`` of ``workers`` processes (one thread
    each, every worker with a ``measure=1`` resource for timing tasks), or the scheduler at
    ``address``. Results come back as they finish; ``on_result`` gets each with its index."""

    def __init__(self, workers: int = 2, address: str | None = None) -> None:
        from distributed import Client, LocalCluster
        if address:
            self.client, self.cluster = Client(address, timeout="30s"), None
            self.name = f"Dask scheduler {address}"
        else:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=":0", resources={"measure": 1}, silence_logs=40)
            self.client = Client(self.cluster)
            self.name = f"embedded Dask LocalCluster, {workers} workers"

    def __call__(self, model: ModelRef, candidates: Sequence[Candidate], objective: str, transfer: bool,
                 peaks, on_result: Callable[[int, Score], None]) -> None:
        from distributed import as_completed
        futures = [self.client.submit(evaluate, model, c, objective, transfer, peaks, pure=False)
                   for c in candidates]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                try:
                    score = fut.result()
                except Exception as e:  # noqa: BLE001 - a task that failed on every worker Dask tried
                    score = Score(float("inf"), 0, 0, "", 0.0, f"the task failed on the cluster: {e}"[:500])
                on_result(index[fut.key], score)
        finally:
            for f in futures:
                f.cancel()

    def measure(self, fn, *args):
        """A timing task: on a worker holding the ``measure`` resource (one per machine), alone."""
        return self.client.submit(fn, *args, resources={"measure": 1}, pure=False).result()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


# --------------------------------------------------------------------------- measuring finalists

@dataclass(frozen=True)
class Measured:
    """A finalist's exported step against the hand recipe's, paired in one worker process
    (``codegen.timing.profiler.ab_ratio``; on a GPU ``studio.tune_gpu``): ``ratio`` = recipe median /
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


def measure_pair(model: ModelRef, baseline: Candidate, candidate: Candidate, transfer: bool, reps: int,
                 threads: int | None) -> Measured:
    """Both sequences' whole steps on the CPU backend, alternately, on recorded (deterministic) inputs."""
    from codegen.numpy_ref.feeds import feeds_for
    from codegen.timing.profiler import ab_ratio
    a = applied(model, baseline, transfer).graph
    b = applied(model, candidate, transfer).graph
    r = ab_ratio(a, b, feeds_for(a), reps=reps, warmup=2, threads=threads)
    used = int(r.threads.get("numba_threads") or r.threads.get("blas_threads") or threads or 0)
    return Measured(candidate.key, r.a.median_s * 1e3, r.b.median_s * 1e3, r.ratio, r.pair_spread, used)


def _measurer(backend: str):
    if backend == "cuda":
        from studio.tune_gpu import measure_pair_cuda
        return measure_pair_cuda
    return measure_pair


# --------------------------------------------------------------------------- search

def code_fingerprint() -> str:
    """dcstudio's version and a hash of the transformation code: results of other code are not reused."""
    h = hashlib.sha256(_version().encode())
    root = Path(__file__).resolve().parents[1]
    for p in sorted((root / "transforms").rglob("*.py")) + sorted((root / "ir").rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _version() -> str:
    try:
        return metadata.version("dcstudio")
    except metadata.PackageNotFoundError:
        return "source"


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
    headroom: object | None = None      # studio.headroom.Headroom of the recipe's step, where the caller measured it

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
    that many of the best candidates are priced by their kernels' measured times (``tune_kernels``), and
    the finalists are the cheapest of them by that price instead of by the roofline, leaving out any
    priced above the recipe by more than ``CUTOUT_SLACK``. ``backend="cuda"``: the finalists are timed as
    exported CUDA steps on this machine's GPU instead (``studio.tune_gpu``; pass the GPU's ``peaks`` for
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
        transfer = model.scope is None and _has_equal_layers(session)
    context, about = context_key(session.model_sha256, model, objective, transfer, peaks, backend)
    rng = random.Random(seed)
    seen: dict[str, tuple[Candidate, Score]] = {}
    prog = Progress()
    deadline = time.monotonic() + minutes * 60 if minutes else None
    stopped = False

    def spent() -> bool:
        return (budget is not None and len(seen) >= budget) or (deadline is not None and time.monotonic() >= deadline)

    def run(cands: list[Candidate]) -> None:
        todo = []
        for c in cands:
            hit = db.get(context, c.key) if db is not None else None
            if hit is not None:
                seen[c.key] = (c, hit)
                prog.reused += 1
                _note_best(c, hit)
            else:
                todo.append(c)
        if todo:
            def got(i: int, score: Score) -> None:
                seen[todo[i].key] = (todo[i], score)
                prog.evaluated += 1
                prog.failed += not score.ok
                if db is not None:
                    db.put(context, todo[i].key, score, about)
                _note_best(todo[i], score)
            evaluator(model, todo, objective, transfer, peaks, got)

    def _note_best(c: Candidate, s: Score) -> None:
        if s.ok and (prog.best is None or _rank((c, s)) < _rank((prog.best_candidate, prog.best))):
            prog.best, prog.best_candidate = s, c
        if on_progress is not None:
            on_progress(prog)

    initial = list({c.key: c for c in (Candidate.of(p) for p in start)}.values())
    baseline_key = initial[0].key
    try:
        run(initial)
        while not spent() and not (stop and stop()):
            prog.generation += 1
            ranked = sorted((v for v in seen.values() if v[1].ok), key=_rank)[:beam] or [seen[baseline_key]]
            room = batch if budget is None else min(batch, budget - len(seen))
            children: list[Candidate] = []
            for _ in range(room * 20):
                if len(children) >= room:
                    break
                parent = rng.choice(ranked)[0]
                other = rng.choice(ranked)[0] if len(ranked) > 1 else None
                child = mutate(rng, parent, other)
                if child.key not in seen and child not in children:
                    children.append(child)
            if not children:
                break                   # the neighbourhood is exhausted
            run(children)
    except KeyboardInterrupt:
        stopped = True
    stopped = stopped or bool(stop and stop())
    table = sorted((v for v in seen.values() if v[1].ok), key=_rank)
    if not table:
        raise StudioError("no candidate could be evaluated; the first error: "
                          + next((s.error for _, s in seen.values() if s.error), "none"))
    best, score = table[0]
    res = TuneResult(best, score, seen[baseline_key][1], prog, stopped, context, transfer, table,
                     baseline_candidate=seen[baseline_key][0])
    finalists = [c for c, _ in table if c.key != baseline_key]
    if objective == "time" and cutouts and backend == "cpu" and not stopped:
        res.cutouts = _price_by_cutouts(model, [res.baseline_candidate] + finalists[:cutouts], evaluator, db,
                                        transfer, reps, threads, stop, on_progress, prog)
        price = {p.candidate: p.seconds for p in res.cutouts.prices}
        bar = price.get(baseline_key, float("inf")) * (1 + CUTOUT_SLACK)
        finalists = sorted((c for c in finalists if price.get(c.key, bar) < bar), key=lambda c: (price[c.key], c.key))
    if measure and not stopped:
        finalists = finalists[:measure]
        prog.timing_total = len(finalists)
        for c in finalists:
            if stop and stop():
                break
            if on_progress is not None:
                on_progress(prog)
            hit = db.get_measured(context, c.key) if db is not None else None
            if hit is None:
                hit = evaluator.measure(_measurer(backend), model, res.baseline_candidate, c, transfer, reps,
                                        threads)
                if db is not None:
                    db.put_measured(context, hit)
            res.measured.append(hit)
            prog.timing += 1
            if on_progress is not None:
                on_progress(prog)
    return res


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
