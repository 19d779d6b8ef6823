"""The headless session: one model, its transformation history, undo/redo and live figures.

A ``Session`` owns the graph, the history and the per-kernel figures (an
incrementally updated ``Ledger``). Every applied step keeps the state after it,
so undo, redo and ``revert_to(k)`` are pointer moves (no recomputation); applying
after an undo drops the redo tail. Observers are plain callables
``fn(event, payload)`` with events ``opened``, ``applied``, ``undone``, ``redone``,
``reverted`` and ``autosave-failed`` (payload: the message). After every change the
history is autosaved (atomically) into the user's state directory
(``$XDG_STATE_HOME/dcstudio/autosave``, never beside the model: a checkout stays clean and
read-only folders work), so a crash loses nothing; ``Session.autosave_for(model)`` finds it
and ``restore`` replays it.
``validate()`` compares the current graph with the original model (``codegen.oracle``,
built once per session). No Qt here: the GUI's QUndoCommands call these methods.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ir.errors import StudioError
from ir.graph import Graph
from ir.memory import peak_bytes
from ir.movement import Ledger, lower_bound
from ir.onnx_import import FORWARD_KEY
from ir.serialize import HashCache, graph_hash
from studio.session.loading import load_graph, original_model
from studio.session.states import MAX_LAZY, LazyIndex, Metrics, Planned, State
from transforms import engine
from transforms.base import Application, Match
from transforms.history import TRANSFER, History, HistoryError, Step, check_model, load, save
from transforms.layers import equal_layers, layer_of, parse_key
from transforms.match_index import MatchIndex
from transforms.registry import TRANSFORMATIONS, create
from transforms.passes import run_pass
from transforms.replay import ReplayError, apply_step
from transforms.transfer import apply_transfer, check_source

Observer = Callable[[str, Any], None]
KEPT_INDEXES = 32       # match indexes kept for the newest states (each holds every candidate)


def _default_threads() -> int:
    from codegen.numba_cpu.threads import default_threads
    return default_threads()


def state_dir() -> Path:
    """dcstudio's folder in the user's state directory (XDG: ``$XDG_STATE_HOME``, else ``~/.local/state``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dcstudio"


class Session:
    """See the module docstring."""

    def __init__(self, graph: Graph, *, model_path: str | None = None, autosave: bool = True) -> None:
        self.model_path = model_path
        self.model_name = Path(model_path).name if model_path else graph.name
        self.model_sha256 = graph.meta.get("sha256", "")
        self.bindings = dict(graph.bindings)
        self.training: dict | None = None
        self._states: list[State] = [State(graph, Ledger(graph), None)]
        self._indexes: list[MatchIndex | LazyIndex | None] = [None]     # per state, built on first use
        self._steps: list[Step] = []
        self._cursor = 0
        self._observers: list[Observer] = []
        self.autosave_enabled = autosave and model_path is not None
        self._hashes = HashCache(keep_nodes=False)    # value and container digests, shared by the states
        self._original_hash: str | None = None
        self._oracle = None           # the original model's oracle, built on the first validate()
        self._recording = None        # the last profiled graph version's recorded values (profile)

    @property
    def original_hash(self) -> str:
        """The opened graph's hash, computed when first asked (it digests every weight: 0.5 s of
        opening a 12-layer model went to it, before the window could draw anything)."""
        if self._original_hash is None:
            self._original_hash = graph_hash(self._states[0].graph, self._hashes)
        return self._original_hash

    # --- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, model_path: str | os.PathLike, *, bindings: Mapping[str, int] | None = None,
             optimizer: str | None = None, training: Mapping[str, Any] | None = None,
             autosave: bool = True) -> "Session":
        """Open a model; with ``training`` options a forward model is opened as its training step."""
        graph = load_graph(model_path, bindings=bindings, optimizer=optimizer, training=training)
        session = cls(graph, model_path=str(model_path), autosave=autosave)
        session.training = dict(training) if training else None
        return session

    # --- state ------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self._states[self._cursor].graph

    @property
    def ledger(self) -> Ledger:
        return self._states[self._cursor].ledger

    def ledger_at(self, k: int) -> Ledger:
        """The figures of ``graph_at(k)`` (kept with every state: nothing to count again)."""
        self.graph_at(k)                              # the same error for a step that does not exist
        return self._states[k].ledger

    @property
    def cursor(self) -> int:
        """Number of steps currently applied."""
        return self._cursor

    @property
    def steps(self) -> list[Step]:
        """All recorded steps (applied ones first; those after ``cursor`` can be redone)."""
        return list(self._steps)

    def history(self) -> History:
        """The applied steps as a History value."""
        return History(self.model_sha256, self.model_name, tuple(self._steps[: self._cursor]),
                       self.bindings, self.training)

    def can_undo(self) -> bool:
        return self._cursor > 0

    def can_redo(self) -> bool:
        return self._cursor < len(self._steps)

    # --- observers --------------------------------------------------------------------
    def subscribe(self, fn: Observer) -> Callable[[], None]:
        self._observers.append(fn)
        return lambda: self._observers.remove(fn)

    def _emit(self, event: str, payload: Any = None) -> None:
        for fn in list(self._observers):
            fn(event, payload)

    # --- figures ----------------------------------------------------------------------
    def metrics(self) -> Metrics:
        t = self.ledger.total
        return Metrics(t.bytes, t.bytes_read, t.bytes_written, lower_bound(self.graph), t.flops,
                       len(self.graph.nodes))

    def peak_bytes(self, graph: Graph | None = None) -> int:
        """Peak memory of the current graph (or of ``graph``; safe on a worker thread)."""
        return peak_bytes(self.graph if graph is None else graph)

    def trend(self) -> list[int]:
        """Bytes moved after 0, 1, … ``cursor`` steps (for the trend plot)."""
        return [s.ledger.total.bytes for s in self._states[: self._cursor + 1]]

    # --- matches ----------------------------------------------------------------------
    def match_index(self, graph: Graph | None = None) -> MatchIndex:
        """The ``MatchIndex`` of the current state (or of the state whose graph is ``graph``):
        built on first use (a walk of the whole graph), then derived after each apply from the
        one before by re-matching the rewrite's neighbourhood only. Safe to call from a worker
        thread on a graph it captured."""
        graph = self.graph if graph is None else graph
        k = next((i for i in range(len(self._states) - 1, -1, -1) if self._states[i].graph is graph), None)
        if k is None:
            return MatchIndex(graph)
        index = self._indexes[k]
        if isinstance(index, LazyIndex):
            index = self._indexes[k] = index.get()
        elif index is None:
            index = self._indexes[k] = MatchIndex(graph)
        return index

    def candidates(self, within: Iterable[str] | None = None, names: Iterable[str] | None = None,
                   graph: Graph | None = None):
        """(transformation instance, match) pairs in scope (of ``graph``, default the current one)."""
        wanted = set(names) if names is not None else set(TRANSFORMATIONS)
        for t, m in self.match_index(graph).candidates(within):
            if t.name in wanted:
                yield t, m

    def matches(self, selection: Iterable[str] | None = None, viewport: Iterable[str] | None = None,
                whole: bool = True, predict: bool = True, graph: Graph | None = None) -> dict[str, list[engine.Ranked]]:
        """Ranked matches grouped as 'Selection', 'Viewport' and 'Whole graph' (each once).

        ``graph`` defaults to the current graph. A state's graph is never changed after its
        step (apply works on a copy), so a worker thread may rank ``session.graph`` as it
        was when the work started without copying it. Rankings are kept in the state's match
        index: asking again, or after an apply elsewhere, ranks only what is new."""
        index = self.match_index(graph)
        groups: dict[str, list[engine.Ranked]] = {}
        seen: set[tuple] = set()
        for label, ids in (("Selection", selection), ("Viewport", viewport), ("Whole graph", None)):
            if ids is None and label != "Whole graph" or label == "Whole graph" and not whole:
                continue
            fresh = [(t, m) for t, m in index.candidates(ids) if (t.name, repr(t), m.anchors) not in seen]
            seen.update((t.name, repr(t), m.anchors) for t, m in fresh)
            groups[label] = sorted((index.rank(t, m, predict) for t, m in fresh), key=engine.rank_key)
        return groups

    # --- editing ----------------------------------------------------------------------
    def apply(self, name: str, anchors: Iterable[str], params: Mapping[str, Any] | None = None) -> Application:
        """Apply a transformation at ``anchors``; undoable. Raises StudioError when it does not apply,
        worded for someone who picked the match (a kernel that is gone, the check's reason)."""
        return self.commit(self.plan_apply(name, anchors, params))

    def plan_apply(self, name: str, anchors: Iterable[str], params: Mapping[str, Any] | None = None) -> Planned:
        """``apply`` worked out without changing the session (see ``Planned``)."""
        step = Step(name, dict(params or {}), tuple(anchors))
        gone = [a for a in step.anchors if a not in self.graph.nodes]
        if gone:
            raise StudioError(f"{name} cannot be applied: {', '.join(repr(a) for a in gone)} is no longer in the "
                              "graph (an earlier step fused, expanded or removed it); re-rank the matches and "
                              "pick again")
        try:
            return self._plan_step(step)
        except ReplayError as e:
            raise StudioError(f"{name} cannot be applied: {e.reason}") from None

    def commit(self, planned: Planned) -> Application:
        """Record a planned step; undoable. Raises StudioError when the session moved on since it was planned."""
        if self._cursor != planned.cursor or self.graph is not planned.base:
            raise StudioError(f"{planned.step.transformation} was worked out on step {planned.cursor}, and the "
                              f"session has changed since (now at step {self._cursor}); do it again")
        return self._record(planned.step, planned.graph, planned.app)

    def apply_pass(self, name: str, params: Mapping[str, Any] | None = None,
                   stop: Callable[[], bool] | None = None, scope: str | None = None) -> Application | None:
        """Apply a transformation at every match, to a fixpoint (``transforms.passes``), as one
        undoable step; None (and no step) when it applies nowhere. ``scope``: only inside that
        layer (``transforms.layers``, e.g. ``encoder/layer.0``)."""
        t = create(name, dict(params or {}))
        if scope is not None:
            parse_key(scope)
        graph = self.graph.clone()
        res = run_pass(graph, t, self._cursor + 1, stop=stop, scope=scope)
        if not res.applications:
            return None
        step = Step(name, t.params(), (), None, res.applications, graph_hash(graph, self._hashes), scope)
        return self._record(step, graph, res.application)

    def layer_run(self) -> tuple[str, int] | None:
        """(layer, k): the last ``k`` applied steps all lie inside ``layer`` (single matches anchored
        there, passes limited to it), the longest such run; None when the last step does not."""
        found: tuple[str, int] | None = None
        for k in range(1, self._cursor + 1):
            step = self._steps[self._cursor - k]
            layer = step.scope if step.is_pass else _anchor_layer(step)
            if layer is None or found is not None and layer != found[0]:
                break
            found = (layer, k)
        return found

    def equal_layers(self, layer: str, steps: int = 0) -> list[str]:
        """The layers structurally equal to ``layer`` as it was ``steps`` steps ago (before the steps
        a transfer of the last ``steps`` steps would repeat)."""
        family, index = parse_key(layer)
        return [family.key(k) for k in equal_layers(self.graph_at(self._cursor - steps), family, index)]

    def transfer(self, layer: str, steps: int, to: Iterable[str] | None = None) -> Application:
        """Repeat the last ``steps`` steps, which must all lie inside ``layer``, on every layer equal
        to it (or on ``to``) as one undoable transfer step (``transforms.transfer``)."""
        return self.commit(self.plan_transfer(layer, steps, to))

    def plan_transfer(self, layer: str, steps: int, to: Iterable[str] | None = None, *,
                      after: Planned | None = None) -> Planned:
        """``transfer`` worked out without changing the session (see ``Planned``); ``after``: a step planned
        from the current state that the transfer follows (its steps end with that one)."""
        cursor = self._cursor + (after is not None)
        earlier = self._steps[: self._cursor] + ([after.step] if after is not None else [])
        if not 0 < steps <= cursor:
            raise StudioError(f"cannot repeat the last {steps} steps: {cursor} steps are applied")
        check_source(earlier[cursor - steps:], layer)
        equal = self.equal_layers(layer, steps - (after is not None))     # as it was before those steps
        targets = list(to) if to is not None else equal
        unequal = [x for x in targets if x not in equal]
        if unequal or not targets:
            raise StudioError(f"no layer equal to {layer} to repeat its steps on" if not targets else
                              f"{', '.join(unequal)} {'is' if len(unequal) == 1 else 'are'} not structurally equal "
                              f"to {layer} (the equal ones: {', '.join(equal) or 'none'})")
        step = Step(TRANSFER, {"layer": layer, "steps": steps, "to": targets}, (), None, 0)
        base = after.graph if after is not None else self.graph
        graph = base.clone()
        app, count = apply_transfer(graph, step, earlier, cursor + 1)
        step = replace(step, applications=count, graph_hash=graph_hash(graph, self._hashes))
        return Planned(step, graph, app, base, cursor)

    def apply_step(self, step: Step) -> Application:
        """Apply a history step (a single match or a pass); undoable."""
        return self._apply_step(step)

    def _apply_step(self, step: Step) -> Application:
        return self.commit(self._plan_step(step))

    def _plan_step(self, step: Step) -> Planned:
        """A history step (a single match or a pass) applied to a copy of the current graph."""
        graph = self._work_copy(step, self.graph)
        app = apply_step(graph, step, self._cursor + 1, backup=False, earlier=self._steps[: self._cursor],
                         hashes=self._hashes)
        return Planned(step, graph, app, self.graph, self._cursor)

    def _record(self, step: Step, graph: Graph, app: Application) -> Application:
        ledger = self.ledger.copy()
        ledger.graph = graph
        ledger.update(app.removed, app.changed, app.created)
        step = replace(step, bytes_after=ledger.total.bytes)
        index = self._indexes[self._cursor]
        del self._states[self._cursor + 1:]
        del self._indexes[self._cursor + 1:]
        del self._steps[self._cursor:]
        self._states.append(State(graph, ledger, app))
        self._indexes.append(LazyIndex(index, graph, app) if index is not None and LazyIndex.depth(index) < MAX_LAZY
                             else None)
        if len(self._indexes) > KEPT_INDEXES:     # older states rebuild theirs if revisited
            self._indexes[-KEPT_INDEXES - 1] = None
        self._steps.append(step)
        self._cursor += 1
        self._autosave()
        self._emit("applied", app)
        return app

    @staticmethod
    def _work_copy(step: Step, graph: Graph) -> Graph:
        """The copy of ``graph`` a step is applied to: one that shares the nodes the step cannot touch
        (``Graph.clone_sharing`` over the transformation's ``affected`` set), or a full copy
        when that set cannot be known (an unknown transformation or a stale anchor: the
        apply then fails with its own message)."""
        if step.is_pass or step.is_transfer:
            return graph.clone()
        try:
            t = create(step.transformation, step.params)
            affected = t.affected(graph, Match(t.name, step.anchors))
        except Exception:  # noqa: BLE001 - apply_step reports the problem with its step number
            return graph.clone()
        return graph.clone_sharing(affected)

    def undo(self) -> None:
        if not self.can_undo():
            raise StudioError("nothing to undo")
        self._cursor -= 1
        self._autosave()
        self._emit("undone", self._cursor)

    def redo(self) -> Application:
        if not self.can_redo():
            raise StudioError("nothing to redo")
        self._cursor += 1
        self._autosave()
        app = self._states[self._cursor].application
        self._emit("redone", app)
        return app

    def revert_to(self, k: int) -> None:
        """Go to the state after ``k`` steps (0 = the imported graph); later steps stay redoable."""
        if not 0 <= k <= len(self._steps):
            raise StudioError(f"no step {k} (the history has {len(self._steps)} steps)")
        self._cursor = k
        self._autosave()
        self._emit("reverted", k)

    def graph_at(self, k: int) -> Graph:
        """The graph after ``k`` recorded steps (0 = as opened); k may exceed ``cursor`` up to
        the redo tail. For comparing the current graph with the original or any step."""
        if not 0 <= k < len(self._states):
            raise StudioError(f"there is no step {k}: the session has steps 0..{len(self._states) - 1}")
        return self._states[k].graph

    def application_at(self, k: int) -> Application | None:
        """What step ``k`` (1-based) did: its ``Application`` (None for step 0)."""
        self.graph_at(k)                               # the same range check
        return self._states[k].application

    def origins(self, ident: str, k: int | None = None, since: int = 0) -> tuple[str, ...]:
        """Lineage: the kernels of ``graph_at(since)`` (the opened graph by default) that kernel
        ``ident`` of ``graph_at(k)`` (the current graph) was made from, in their graph order;
        ``(ident,)`` for a kernel no step touched. Walks the steps' ``Application.parents`` back."""
        k = self._cursor if k is None else k
        if not 0 <= since <= k < len(self._states):
            raise StudioError(f"there is no step {k} after step {since}: the session has steps "
                              f"0..{len(self._states) - 1}")
        frontier = (ident,)
        for j in range(k, since, -1):
            app = self._states[j].application
            if app is not None and app.parents:
                frontier = tuple(dict.fromkeys(p for x in frontier for p in app.parents.get(x, (x,))))
        if len(frontier) == 1:
            return frontier
        wanted = set(frontier)
        pos = {x: i for i, x in enumerate(self._states[since].graph.nodes) if x in wanted}
        return tuple(sorted(pos, key=pos.__getitem__))

    def follow(self, ids: Iterable[str], frm: int, to: int | None = None) -> list[str]:
        """Kernels ``ids`` of ``graph_at(frm)`` as kernels of ``graph_at(to)`` (the current graph by default),
        through the steps' lineage: forward, a kernel a step removed becomes the kernels it made them into;
        back (undo), a kernel a step made becomes the kernels it was made from; untouched ones stay. In the
        order of ``ids``, without repeats, only kernels of the target graph."""
        to = self._cursor if to is None else to
        out = list(dict.fromkeys(ids))
        for j in range(frm + 1, to + 1) if to > frm else range(frm, to, -1):
            app = self._states[j].application
            if app is None or not app.parents:
                continue
            if to > frm:
                made: dict[str, list[str]] = {}
                for new, parents in app.parents.items():
                    for p in parents:
                        made.setdefault(p, []).append(new)
                gone = set(app.removed)
                out = [y for x in out for y in (made.get(x, []) if x in gone else [x, *made.get(x, [])])]
            else:
                out = [y for x in out for y in app.parents.get(x, (x,))]
            out = list(dict.fromkeys(out))
        graph = self._states[to].graph
        return [x for x in out if x in graph.nodes]

    # --- measuring and exporting ------------------------------------------------------
    def profile(self, kernels: Iterable[str] | None = None, *, reps: int = 10, warmup: int = 2,
                timeout: float = 60.0, threads: int | None = None, feeds: Mapping[str, Any] | None = None,
                on_progress: Callable[[int, int], None] | None = None, cancel: Callable[[], bool] | None = None,
                graph: Graph | None = None, on_record: Callable[[int, int], None] | None = None):
        """Measured kernel times of the current graph's step (or of ``graph``, e.g. the one a
        worker captured when it started) on the CPU backend, out of process
        (``codegen.timing.profiler.profile_graph``); ``kernels`` times only those, as a cutout.
        ``cancel()`` returning true stops it (``ProfileCancelled``); ``on_record`` reports the
        cutout's recording run. A cutout's recorded values are kept for the next cutout of the same graph
        version (``codegen.timing.cutout.Recording``: profiling deep in a big step records once)."""
        from codegen.numpy_ref.feeds import feeds_for
        from codegen.timing.calibrate import peaks
        from codegen.timing.cutout import Recording
        from codegen.timing.profiler import profile_graph
        graph = self.graph if graph is None else graph
        wanted = list(kernels) if kernels is not None else None
        feeds = dict(feeds) if feeds is not None else None if wanted is not None else feeds_for(graph)
        recording = self._recording
        if wanted is not None and feeds is None and (recording is None or recording.graph is not graph):
            recording = self._recording = Recording(graph)
        return profile_graph(graph, feeds, kernels=wanted, reps=reps, warmup=warmup, timeout=timeout,
                             threads=threads, peaks=peaks(threads or _default_threads()),
                             on_progress=on_progress, cancel=cancel, on_record=on_record, recording=recording)

    def ab(self, before: int | Graph, after: int | Graph | None = None, *, reps: int = 10, warmup: int = 2,
           threads: int | None = None, cancel: Callable[[], bool] | None = None,
           feeds: Mapping[str, Any] | None = None):
        """Paired A/B of whole steps: the graph after ``before`` steps against the one after
        ``after`` (default: the current graph); either may be given as the graph itself (a
        worker passes the graphs it captured). ratio > 1 means ``after`` is faster. Both run on
        ``feeds`` (default: the deterministic ones)."""
        from codegen.numpy_ref.feeds import feeds_for
        from codegen.timing.profiler import ab_ratio
        a = before if isinstance(before, Graph) else self.graph_at(before)
        b = self.graph if after is None else after if isinstance(after, Graph) else self.graph_at(after)
        return ab_ratio(a, b, dict(feeds) if feeds is not None else feeds_for(a), reps=reps, warmup=warmup,
                        threads=threads, cancel=cancel)

    def export(self, out_dir: str | os.PathLike, backend: str = "cpu", *,
               inputs: Mapping[str, Any] | None = None, parallel: bool = True, oracle=None):
        """Write the current graph as a standalone package (``dcstudio export``); returns the
        ``ExportResult``. Check it with ``python -m <package> --check`` in its parent folder.
        ``oracle``: the original model's, when the caller already holds it (another session of the
        same model made it on the same deterministic feeds: ``oracle()``)."""
        from codegen.numpy_ref.feeds import feeds_for
        from codegen.oracle import stated_tolerance
        from studio.session.exporting import eval_forward_of, write_package
        feeds = feeds_for(self.graph)
        feeds.update(inputs or {})
        steps = self._steps[: self._cursor]
        if oracle is None:
            oracle = self.oracle() if not inputs else self._new_oracle(feeds)
        original = self._original_model() if FORWARD_KEY in self.graph.meta else None
        return write_package(self.graph, out_dir, backend, feeds, steps, parallel=parallel,
                             oracle=oracle.widened_to(stated_tolerance(steps)),
                             forward=eval_forward_of(self.graph, original))

    # --- checking against the original model ------------------------------------------
    def oracle(self):
        """The ``codegen.oracle.Oracle`` of the original model on deterministic feeds (built once:
        a float64 run, onnxruntime or an fp32 reference run)."""
        if self._oracle is None:
            from codegen.numpy_ref.feeds import feeds_for
            self._oracle = self._new_oracle(feeds_for(self.graph_at(0)))
        return self._oracle

    def _new_oracle(self, feeds):
        from codegen.oracle import Oracle
        return Oracle.of(self.graph_at(0), self._original_model(), feeds)

    def _original_model(self):
        """``original_model`` of the session's model (None when opened from a graph)."""
        return None if self.model_path is None else original_model(self.model_path, self.training)

    def validate(self, graph: Graph | None = None):
        """Compare the current graph (or ``graph``) run by the reference executor with the original
        model: a ``codegen.oracle.CheckResult`` (ok, one-line summary, mismatches). Headless."""
        from codegen.oracle import stated_tolerance
        steps = self._steps[: self._cursor]
        oracle = self.oracle().widened_to(stated_tolerance(steps))
        return oracle.run_and_check(self.graph if graph is None else graph)

    # --- history files ----------------------------------------------------------------
    def save_history(self, path: str | os.PathLike) -> None:
        save(self.history(), path)

    def load_history(self, path: str | os.PathLike, on_step: Callable[[int, int], None] | None = None) -> int:
        """Replay a history file onto the current graph as undoable steps; returns steps applied.
        On a failing step the steps before it stay applied and the error names the step."""
        hist = load(path)
        check_model(hist, self.model_sha256, self.model_name, path=str(path))
        if hist.bindings and hist.bindings != self.bindings:
            raise HistoryError(f"it binds {hist.bindings}, the session {self.bindings}", path=str(path))
        for k, step in enumerate(hist.steps, start=1):
            try:
                self._apply_step(replace(step, bytes_after=None))
            except StudioError as e:
                raise HistoryError(f"step {k} ({step.transformation}): {e.summary}", path=str(path)) from None
            if on_step is not None:
                on_step(k, len(hist.steps))
        return len(hist.steps)

    # --- autosave ---------------------------------------------------------------------
    @staticmethod
    def autosave_for(model_path: str | os.PathLike) -> Path:
        """Where the autosave of ``model_path`` lives: ``state_dir()/autosave/<file name>-<digest of
        its absolute path>.json``. The history inside records the model's sha256, so an autosave
        of a model file since replaced is refused by name when restored, never replayed onto it."""
        import hashlib
        p = Path(model_path).resolve()
        key = hashlib.sha256(str(p).encode()).hexdigest()[:16]
        return state_dir() / "autosave" / f"{p.name}-{key}.json"

    def _autosave(self) -> None:
        """Save the history to ``autosave_for``. A state directory that cannot be written turns
        autosave off for this session, once, with an ``autosave-failed`` event naming the folder
        (the step itself stands: the user can still save the history where they choose)."""
        if not self.autosave_enabled:
            return
        target = self.autosave_for(self.model_path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            save(self.history(), target)
        except OSError as e:
            self.autosave_enabled = False
            self._emit("autosave-failed", f"autosave is off for this session: cannot write {target.parent} "
                                          f"({e.strerror or e}); save the history with File → Save history, "
                                          "or set XDG_STATE_HOME to a writable folder")

    def discard_autosave(self) -> None:
        if self.model_path:
            self.autosave_for(self.model_path).unlink(missing_ok=True)

    def restore(self, path: str | os.PathLike | None = None) -> int:
        """Replay the autosave (or ``path``) into this session; returns the number of steps."""
        source = Path(path) if path else self.autosave_for(self.model_path)
        return self.load_history(source)


def _anchor_layer(step: Step) -> str | None:
    """The layer every anchor of a single-match step lies in (None: none, or several)."""
    if step.is_transfer or step.is_pass or not step.anchors:
        return None
    found = {layer_of(a) for a in step.anchors}
    if len(found) != 1 or None in found:
        return None
    family, index = found.pop()
    return family.key(index)
