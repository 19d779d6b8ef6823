"""One candidate evaluated: a fresh session of the model with the candidate's passes run, scored by bytes or by
the roofline's predicted time; and the fingerprint of the code that evaluated it (results of other code are not
reused)."""
from __future__ import annotations

import hashlib
import time
from importlib import metadata
from pathlib import Path

from studio.session.recipe import run_pass, run_recipe, tune_one_layer
from studio.tune.types import Candidate, ModelRef, Score


def has_equal_layers(session) -> bool:
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


def code_fingerprint() -> str:
    """dcstudio's version and a hash of the transformation code: results of other code are not reused."""
    h = hashlib.sha256(_version().encode())
    root = Path(__file__).resolve().parents[2]
    for p in sorted((root / "transforms").rglob("*.py")) + sorted((root / "ir").rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _version() -> str:
    try:
        return metadata.version("dcstudio")
    except metadata.PackageNotFoundError:
        return "source"
