"""``dcstudio tune``: the search (``studio.tune.search``), its results database (``studio.tune.database``) and the CLI.

The model is the MLP AdamW training step of the fixtures (a recipe run takes ~20 ms), so a
search of a few dozen evaluations runs in seconds; the BERT-base figures are in the closing
notes and ``tests/bench``. Every search here runs for real: evaluations open the model, run the
passes and count bytes.
"""
from __future__ import annotations

import json
import random
import re
import sqlite3
import threading

import pytest

from ir.errors import StudioError
from studio.cli import main
from studio.session.recipe import SUBSTATION, Pass
from studio.tune.search import CUTOUT_SLACK, POOL, mutate, search
from studio.tune.types import Candidate, ModelRef
from studio.tune.evaluators import DaskEvaluator, LocalEvaluator
from studio.tune.database import SCHEMA, ResultsDB
from studio.tune.types import Score
from studio.tune.kernels import context_of


@pytest.fixture
def model(fixtures_dir) -> ModelRef:
    return ModelRef(str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"))


def test_search_beats_or_matches_the_recipe_and_is_deterministic(model, tmp_path):
    runs = [search(model, evaluator=LocalEvaluator(), budget=30, seed=7) for _ in range(2)]
    a, b = runs
    assert a.best.key == b.best.key and a.score == b.score
    assert a.score.value <= a.baseline.value            # the recipe is in the population: never worse
    assert a.progress.evaluated == 30 and a.progress.reused == 0
    assert [c.key for c, _ in a.table] == [c.key for c, _ in b.table]
    other = search(model, evaluator=LocalEvaluator(), budget=30, seed=8)
    assert [c.key for c, _ in other.table] != [c.key for c, _ in a.table]     # the seed matters


def test_warm_start_reads_every_result_and_returns_the_same_history(model, tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite")
    first = search(model, evaluator=LocalEvaluator(), db=db, budget=24, seed=3)
    assert db.count(first.context) == 24
    again = search(model, evaluator=LocalEvaluator(), db=db, budget=24, seed=3)
    assert again.progress.evaluated == 0 and again.progress.reused == 24     # nothing evaluated again
    assert again.best.key == first.best.key and again.score == first.score
    assert search(model, evaluator=LocalEvaluator(), db=db, budget=24, seed=3, objective="bytes",
                  transfer=True).context != first.context                    # another context, no reuse


def test_stop_keeps_the_best_found_so_far(model):
    calls = []
    res = search(model, evaluator=LocalEvaluator(), budget=500, seed=1,
                 stop=lambda: len(calls) > 2, on_progress=lambda p: calls.append(p.evaluated))
    assert res.stopped and res.progress.evaluated < 500
    assert res.score.ok and res.score.value <= res.baseline.value


def test_a_failing_candidate_is_a_result_not_a_crash(model, monkeypatch):
    import studio.tune.evaluate as tune
    real = tune.run_recipe

    def flaky(session, passes):
        if any(p.transformation == "select_impl" for p in passes):
            raise RuntimeError("boom")
        return real(session, passes)
    monkeypatch.setattr(tune, "run_recipe", flaky)
    res = search(model, evaluator=LocalEvaluator(), budget=40, seed=2)
    assert res.progress.failed > 0                                                # some did fail …
    assert all(s.ok and "select_impl" not in c.key for c, s in res.table)         # … and never rank
    assert res.score.ok


def test_mutations_stay_in_the_pool_and_bounded():
    rng = random.Random(0)
    c = Candidate.of(SUBSTATION)
    for _ in range(300):
        c = mutate(rng, c, Candidate.of(SUBSTATION))
        assert 1 <= len(c.passes) <= 24
        assert all(p in POOL for p in c.passes)
    assert Candidate.of([Pass("expand")]).key == '[["expand",{}]]'


def test_database_schema_and_bad_files(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite")
    s = Score(12.0, 12, 3, "abc", 0.1)
    db.put("ctx", "[]", s, {"why": "test"})
    assert db.get("ctx", "[]") == s and db.get("other", "[]") is None
    db.close()
    con = sqlite3.connect(tmp_path / "r.sqlite")
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    con.commit()
    con.close()
    with pytest.raises(StudioError, match="schema 99"):
        ResultsDB(tmp_path / "r.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StudioError, match="not a dcstudio tune database"):
        ResultsDB(tmp_path / "junk.sqlite")
    assert SCHEMA == 1


def test_database_takes_concurrent_writers(tmp_path):
    path = tmp_path / "r.sqlite"
    ResultsDB(path).close()
    errors = []

    def writer(k: int) -> None:
        try:
            db = ResultsDB(path)
            for i in range(50):
                db.put("ctx", f"[{k},{i}]", Score(float(i), i, 1, "h", 0.0), {})
            db.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and ResultsDB(path).count("ctx") == 200


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_result(model):
    ev = DaskEvaluator(workers=2)
    try:
        on_dask = search(model, evaluator=ev, budget=20, seed=5)
    finally:
        ev.close()
    here = search(model, evaluator=LocalEvaluator(), budget=20, seed=5)
    assert on_dask.best.key == here.best.key and on_dask.score.value == here.score.value
    assert [c.key for c, _ in on_dask.table] == [c.key for c, _ in here.table]


def test_cli_writes_a_history_that_replays_with_check(fixtures_dir, tmp_path, capsys):
    out, db = tmp_path / "tuned.json", tmp_path / "r.sqlite"
    code = main(["tune", str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"), "-o", str(out),
                 "--budget", "16", "--workers", "1", "--db", str(db), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "tune: done after 16 evaluations" in text and "all within tolerance" in text
    doc = json.loads(out.read_text())
    assert doc["steps"] and all("pass" in s for s in doc["steps"])
    code = main(["tune", str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"), "-o", str(out),
                 "--budget", "16", "--workers", "1", "--db", str(db), "--quiet", "--no-check"])
    assert code == 0 and "(16 from the database)" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_time_objective_reports_kernel_cutouts(fixtures_dir, tmp_path, capsys):
    """``--objective time --cutouts 2``: the line naming how many kernel structures were measured and the
    recipe's headroom; the same command again measures none of the kernels."""
    args = ["tune", str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"), "-o", str(tmp_path / "t.json"),
            "--objective", "time", "--budget", "6", "--measure", "1", "--cutouts", "2", "--reps", "3",
            "--workers", "1", "--db", str(tmp_path / "r.sqlite"), "--quiet", "--no-check"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert re.search(r"cutouts: [23] sequences priced by their kernels' measured times \([1-9]\d* kernel structures "
                     r"measured", first), first
    assert re.search(r"headroom: of the hand recipe, with its GEMM statements as they are, no history can make this "
                     r"step more than \d+\.\d{3}x faster.*no history at all gains more than \d+\.\d{3}x", first), first
    assert main(args) == 0
    assert re.search(r"\(0 kernel structures measured, [1-9]\d* from earlier measurements\)", capsys.readouterr().out)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert main(["tune", str(bad), "-o", str(tmp_path / "h.json"), "--workers", "1", "--no-db"]) == 2
    assert "bad.onnx" in capsys.readouterr().err
    assert not (tmp_path / "h.json").exists()


@pytest.mark.slow
def test_a_real_scheduler_survives_a_killed_worker(model, tmp_path):
    """``dask scheduler`` and two ``dask worker`` processes (``measure=1`` each) on localhost; one
    worker is killed mid-search: Dask reruns its tasks on the other, the search completes, and every
    result the driver received is in the database."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", ":0"], **quiet)]
    procs += [subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--nworkers", "1",
                                "--resources", "measure=1", "--no-dashboard"], **quiet) for _ in range(2)]
    ev = None
    try:
        ev = DaskEvaluator(address=address)
        ev.client.wait_for_workers(2, timeout=120)
        db = ResultsDB(tmp_path / "r.sqlite")
        killed = []

        def kill_one(p) -> None:
            if p.evaluated >= 6 and not killed:
                os.killpg(procs[1].pid, signal.SIGKILL)
                killed.append(p.evaluated)
        res = search(model, evaluator=ev, db=db, budget=40, seed=11, on_progress=kill_one)
        assert killed and procs[1].wait(timeout=30) != 0
        assert res.progress.evaluated == 40 and db.count(res.context) == 40
        assert res.score.ok and res.score.value <= res.baseline.value
        here = search(model, evaluator=LocalEvaluator(), budget=40, seed=11)
        assert res.best.key == here.best.key                  # the cluster changed nothing but where
    finally:
        if ev is not None:
            ev.close()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.slow
def test_time_objective_measures_finalists_and_keeps_them(model, tmp_path):
    """``objective="time"``: scored by the roofline, then the two best sequences' exported steps are
    timed against the recipe's (paired, out of process); a second run reads the measurements."""
    db = ResultsDB(tmp_path / "r.sqlite")
    res = search(model, evaluator=LocalEvaluator(), db=db, objective="time", budget=10, seed=4, measure=2, reps=3)
    assert len(res.measured) == 2
    for m in res.measured:
        assert m.recipe_ms > 0 and m.candidate_ms > 0 and m.threads >= 1
        assert m.ratio == pytest.approx(m.recipe_ms / m.candidate_ms, rel=1e-6)
    assert res.chosen.key in {c.key for c, _ in res.table}
    fastest = max(res.measured, key=lambda m: m.ratio)
    assert (res.chosen.key == fastest.key) == (fastest.ratio - 1 > fastest.spread / 2)
    again = search(model, evaluator=LocalEvaluator(), db=db, objective="time", budget=10, seed=4, measure=2, reps=3)
    assert again.measured == res.measured and again.progress.evaluated == 0


def test_kernel_structure_keys_name_what_runs_not_what_it_is_called(fixtures_dir):
    """Equal kernels under other names share a key; another shape is another key; views cost nothing."""
    import numpy as np
    from onnx import helper, numpy_helper

    from ir.onnx_import import import_proto
    from studio.tune.kernels import statement_keys
    from tests.unit.ir.onnx_models import model as onnx_model, vi
    from transforms.registry import create
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node("Relu", ["y"], ["b"], name="other"),
             helper.make_node("Relu", ["z"], ["c"], name="wider"),
             helper.make_node("Reshape", ["c", "flat"], ["d"], name="view")]
    g = import_proto(onnx_model(nodes, [vi("x", [4, 5]), vi("y", [4, 5]), vi("z", [4, 6])],
                                [vi("a", [4, 5]), vi("b", [4, 5]), vi("d", [24])],
                                [numpy_helper.from_array(np.array([24], np.int64), "flat")]))
    expand = create("expand")
    for m in list(expand.matches(g)):
        if expand.check(g, m).ok:
            expand.rewrite(g, m, 1)
    keys = statement_keys(g)
    ids = {k.split("/")[0]: k for k in keys}
    assert set(ids) == {"first", "other", "wider"}                       # the view is free: no key
    assert keys[ids["first"]] == keys[ids["other"]] != keys[ids["wider"]]


@pytest.mark.slow
def test_time_objective_prices_candidates_by_kernel_cutouts_and_remembers_them(model, tmp_path):
    """``cutouts``: the recipe and the best candidates priced by their kernels' measured times, each distinct
    kernel structure timed once; the finalists are the cheapest; a second run measures no kernel at all and
    chooses the same sequence."""
    db = ResultsDB(tmp_path / "r.sqlite")
    kw = dict(evaluator=LocalEvaluator(), db=db, objective="time", budget=10, seed=4, measure=1, reps=3, cutouts=3)
    res = search(model, **kw)
    priced = res.cutouts.prices
    assert priced and priced[0].candidate == res.baseline_candidate.key and len(priced) <= 4
    assert all(p.seconds > 0 and p.statements > 0 for p in priced)
    assert res.cutouts.measured == res.progress.kernels_measured > 0
    assert res.cutouts.measured + res.cutouts.reused == sum(p.measured + p.reused for p in priced)
    others = [p for p in priced if p.candidate != res.baseline_candidate.key]
    cheapest = min(others, key=lambda p: (p.seconds, p.candidate))
    timed = cheapest.seconds < priced[0].seconds * (1 + CUTOUT_SLACK)   # else its kernels already say it is slower
    assert [m.key for m in res.measured] == ([cheapest.candidate] if timed else [])
    if not timed:
        assert res.chosen.key == min(priced, key=lambda p: (p.seconds, p.candidate)).candidate
    assert len(db.kernel_times(context_of(None)[0])) == res.cutouts.measured
    again = search(model, **kw)
    assert again.progress.kernels_measured == 0
    assert again.progress.kernels_reused == res.cutouts.measured + res.cutouts.reused
    assert again.chosen.key == res.chosen.key
    assert [p.seconds for p in again.cutouts.prices] == [p.seconds for p in priced]
