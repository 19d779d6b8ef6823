"""Benchmark: whole models, not one layer (the scale issue). Run on demand:
``bash .ci/test tests/bench/test_bench_scale.py -s`` (about 15 minutes on 2 cores; the models are
built once into ``$DCSTUDIO_BENCH_CACHE``, see ``scale_models.py``).

- every command (``inspect``, ``recipe``, ``recipe --tune-one-layer`` and its replay, ``replay``,
  ``replay --check``, ``export``) on stacks of
  N = 1, 2, 4, 12 BERT-base-width layers (hidden 768, 12 heads, seq 128, batch 8, MSE + AdamW),
  each run as its own process, wall time and peak resident memory (``ru_maxrss`` of the child);
  the table is printed, and the bars checked at 12 layers: inspect ≤ 5 s; recipe ≤ 60 s and
  ≤ 2 GB; replay ≤ 30 s; replay --check ≤ 120 s and ≤ 8 GB; export ≤ 90 s; the recipe's history
  ≤ 100 steps; every command's 12-layer time ≤ 15× its 1-layer time (linear growth); the recipe tuned
  on one layer and transferred moves bytes within 1 % of the whole-graph recipe;
- the recipe on the model zoo's EfficientNet-B0 training step: ≤ 60 s, ≤ 3 GB;
- a Session on the 12-layer step: apply + recount + ranking of the matches around the rewrite
  p95 ≤ 100 ms, undo ≤ 20 ms;
- the studio on the 12-layer step (offscreen, a 10 ms QTimer measuring the event loop's gaps):
  the selection's matches are listed ≤ 1 s after an apply; replaying a 500-step history blocks
  the event loop ≤ 200 ms at a time.

Threads: the commands run with the defaults (numba and onnxruntime use every core).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.probe import Gaps
from tests.bench.scale_models import bert_stack, efficientnet_b0

pytestmark = pytest.mark.bench
ROOT = Path(__file__).resolve().parents[2]
LAYERS = (1, 2, 4, 12)
_RUN = ("import resource, subprocess, sys, time; t0 = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:]).returncode; dt = time.perf_counter() - t0; "
        "print(f'@@ {rc} {dt:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)")


def _timed(*args: str, cwd: Path | None = None) -> tuple[float, float, str]:
    """(seconds, peak GB, output) of ``dcstudio ARGS`` run as its own process."""
    cmd = [sys.executable, "-c", _RUN, sys.executable, "-m", "studio.cli", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next(x for x in p.stderr.splitlines() if x.startswith("@@ "))
    rc, dt, kb = line.split()[1:]
    assert rc == "0", f"dcstudio {' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return float(dt), int(kb) / 1e6, p.stdout


def _moved(out: str) -> float:
    """The MB moved after the recipe, from its summary line ('… 10151.82 MB -> 3099.68 MB …')."""
    return float(re.search(r"-> ([\d.]+) MB", out).group(1))


def _steps(history: Path) -> int:
    return len(json.loads(history.read_text())["steps"])


def test_commands_on_bert_stacks(tmp_path):
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    steps: dict[int, int] = {}
    moved, tuned_steps, tuned_moved = {}, {}, {}
    for n in LAYERS:
        model = bert_stack(n)
        hist = tmp_path / f"h{n}.json"
        r = rows[n] = {}
        r["inspect"] = _timed("inspect", str(model))[:2]
        dt, gb, out = _timed("recipe", str(model), "-o", str(hist), "--quiet")
        r["recipe"], steps[n], moved[n] = (dt, gb), _steps(hist), _moved(out)
        tuned = tmp_path / f"t{n}.json"
        dt, gb, out = _timed("recipe", str(model), "-o", str(tuned), "--tune-one-layer", "--quiet")
        r["recipe --tune-one-layer"], tuned_steps[n], tuned_moved[n] = (dt, gb), _steps(tuned), _moved(out)
        r["replay (tuned)"] = _timed("replay", str(model), str(tuned), "--quiet")[:2]
        r["replay"] = _timed("replay", str(model), str(hist), "--quiet")[:2]
        r["replay --check"] = _timed("replay", str(model), str(hist), "--check", "--quiet")[:2]
        r["export"] = _timed("export", str(model), str(hist), "-o", str(tmp_path / f"pkg{n}"))[:2]
    names = list(rows[1])
    print("\nBERT-base-width stacks (hidden 768, 12 heads, seq 128, batch 8, MSE + AdamW): seconds / peak GB")
    print(f"{'layers':>6} {'steps':>9} " + " ".join(f"{c:>24}" for c in names))
    for n in LAYERS:
        print(f"{n:>6} {steps[n]:>4}/{tuned_steps[n]:>4} " +
              " ".join(f"{rows[n][c][0]:>15.1f} / {rows[n][c][1]:>5.2f}" for c in names))
    print(f"{'12 / 1':>16} " + " ".join(f"{rows[12][c][0] / rows[1][c][0]:>23.1f}x" for c in names))
    for n in LAYERS:
        print(f"{n} layers: recipe {moved[n]:.2f} MB in {steps[n]} steps; tuned on one layer and transferred "
              f"{tuned_moved[n]:.2f} MB in {tuned_steps[n]} steps ({tuned_moved[n] / moved[n] - 1:+.2%})")
    top = rows[12]
    bars = {"inspect": (5, None), "recipe": (60, 2.0), "replay": (30, None), "replay --check": (120, 8.0),
            "export": (90, None)}
    missed = [f"{c}: {top[c][0]:.1f} s (bar {s} s)" for c, (s, _) in bars.items() if top[c][0] > s]
    missed += [f"{c}: {top[c][1]:.2f} GB (bar {gb} GB)" for c, (_, gb) in bars.items() if gb and top[c][1] > gb]
    missed += [f"{c}: 12 layers take {top[c][0] / rows[1][c][0]:.1f}x one layer (bar 15x)"
               for c in names if top[c][0] > 15 * rows[1][c][0]]
    missed += [f"the recipe's history has {steps[12]} steps (bar 100)"] if steps[12] > 100 else []
    missed += [f"the transferred recipe has {tuned_steps[12]} steps (bar 100)"] if tuned_steps[12] > 100 else []
    missed += [f"{n} layers: the transferred recipe moves {tuned_moved[n] / moved[n] - 1:+.2%} (bar ±1 %)"
               for n in LAYERS if abs(tuned_moved[n] / moved[n] - 1) > 0.01]
    assert not missed, "; ".join(missed)


def test_efficientnet_b0_recipe(tmp_path):
    model = efficientnet_b0()
    dt, gb, _ = _timed("recipe", str(model), "-o", str(tmp_path / "h.json"), "--quiet")
    print(f"\nEfficientNet-B0 training step recipe: {dt:.1f} s, {gb:.2f} GB, {_steps(tmp_path / 'h.json')} steps")
    assert dt <= 60 and gb <= 3.0


def _p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


@pytest.fixture(scope="module")
def expanded12():
    from studio.session import Session
    s = Session.open(bert_stack(12), autosave=False)
    s.apply_pass("expand")
    return s


def test_session_apply_rank_undo_on_12_layers(expanded12):
    from transforms.registry import create
    s = expanded12
    t0 = time.perf_counter()
    index = s.match_index()
    built = time.perf_counter() - t0
    mf = create("map_fusion")
    apply_ms, undo_ms, ranked = [], [], []
    for _ in range(40):
        m = next(m for t, m in index.candidates(s.graph.nodes) if t.name == "map_fusion" and mf.check(s.graph, m).ok)
        t0 = time.perf_counter()
        app = s.apply("map_fusion", m.anchors)
        s.metrics()
        groups = s.matches(selection=app.created + app.changed, whole=False)
        apply_ms.append((time.perf_counter() - t0) * 1e3)
        ranked.append(sum(len(v) for v in groups.values()))
        index = s.match_index()
    for _ in range(40):
        t0 = time.perf_counter()
        s.undo()
        undo_ms.append((time.perf_counter() - t0) * 1e3)
    print(f"\n12 layers, {len(s.graph.nodes)} kernels, {len(index)} candidates (index built in {built:.2f} s): "
          f"apply + recount + ranking the new kernels' matches (median {statistics.median(ranked)}) "
          f"p50 {statistics.median(apply_ms):.1f} ms, p95 {_p95(apply_ms):.1f} ms; undo max {max(undo_ms):.2f} ms")
    assert _p95(apply_ms) <= 100 and max(undo_ms) <= 20


@pytest.fixture
def window(make_window):
    w = make_window(autosave=False)
    w.resize(1500, 950)
    return w


def test_studio_on_12_layers(qtbot, window, tmp_path):
    from studio.session import Session
    from transforms.registry import create
    model = bert_stack(12)
    s = Session.open(model, autosave=False)
    expand = create("expand")
    for m in list(expand.matches(s.graph))[:500]:
        s.apply("expand", m.anchors)
    hist = tmp_path / "h500.json"
    s.save_history(hist)

    window.open_model(str(model))
    qtbot.waitUntil(lambda: window.session is not None and window.view.task is None, timeout=600_000)
    gaps = Gaps()
    replay_gap = {}
    show = window.set_session

    def set_session(session):                        # the replay ends here: its gaps so far, then the switch
        replay_gap["worst"] = gaps.worst
        gaps.reset()
        show(session)
    window.set_session = set_session
    t0 = time.perf_counter()
    task = window.open_history(str(hist))            # File → Open history…
    qtbot.waitUntil(lambda: window.session.cursor == 500, timeout=600_000)
    loaded = time.perf_counter() - t0
    qtbot.waitUntil(lambda: window.view.task is None, timeout=120_000)
    qtbot.wait(300)
    switch_gap = gaps.worst
    assert task is not None and window.stack.count() == 500

    session = window.session
    mf = create("map_fusion")
    m = next(m for t, m in session.match_index().candidates(session.graph.nodes)
             if t.name == "map_fusion" and mf.check(session.graph, m).ok)
    assert window.apply_step("map_fusion", m.anchors)
    app = session._states[session.cursor].application
    window.refresh()                                 # the view learns the new kernel, then it is selected
    qtbot.waitUntil(lambda: window.view.task is None, timeout=120_000)
    window.view.select(app.created + app.changed)
    assert set(window.view.selected_ids()) & set(app.created + app.changed)
    gaps.reset()
    t0 = time.perf_counter()
    window.ranker.schedule(0)

    def listed() -> bool:
        return any(r.match.anchors and set(r.match.anchors) & set(app.created + app.changed) and r.delta is not None
                   for r in window.transformations.rows())
    qtbot.waitUntil(listed, timeout=60_000)
    shown = time.perf_counter() - t0
    print(f"\n12 layers: replaying a 500-step history took {loaded:.1f} s; longest event-loop gap while it "
          f"replayed {replay_gap['worst'] * 1e3:.0f} ms, while the window switched to the new session (set_session, "
          f"refresh, first paint) {switch_gap * 1e3:.0f} ms; selection ranking shown {shown * 1e3:.0f} ms after "
          f"asking (gap {gaps.worst * 1e3:.0f} ms)")
    assert replay_gap["worst"] <= 0.2 and switch_gap <= 0.2 and shown <= 1.0


_START = r"""
import sys, time
t0 = time.perf_counter()
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv[:1])
from studio.gui.qt_main_window import QtMainWindow
w = QtMainWindow(restore_policy="never", autosave=False)
marks = {}
class First(QObject):
    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint and "window" not in marks:
            marks["window"] = time.perf_counter() - t0
        return False
first = First()
w.installEventFilter(first)
w.show()
w.open_model(sys.argv[1])
def poll():
    v = w.view
    if w.session is not None and v.placement is not None and "graph" not in marks:
        marks["graph"] = time.perf_counter() - t0
        marks["plates"] = len(v.plates())
        app.quit()
timer = QTimer()
timer.timeout.connect(poll)
timer.start(5)
QTimer.singleShot(120_000, app.quit)
app.exec()
print("@@", marks.get("window", -1), marks.get("graph", -1), marks.get("plates", 0))
"""


def test_studio_start(tmp_path):
    """Launch → window painted, and → the graph drawn (with its plates), as a user starts the studio:
    a fresh process each time (offscreen here; the Xvfb figure is within a few percent)."""
    import gc
    gc.collect()
    time.sleep(2.0)      # right after the studio benchmark freed its GBs the machine needs a moment (4.8 s, not 2.8)
    rows = []
    for name, model in (("bundled BERT-base layer", ROOT / "resources/examples/bert_layer_base_train.onnx"),
                        ("12 layers", bert_stack(12))):
        p = subprocess.run([sys.executable, "-c", _START, str(model)], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen",
                                "XDG_STATE_HOME": str(tmp_path)})
        line = next(x for x in p.stdout.splitlines() if x.startswith("@@ "))
        window, graph, plates = line.split()[1:]
        rows.append((name, float(window), float(graph), int(plates)))
    print()
    for name, window, graph, plates in rows:
        print(f"start ({name}): window painted {window:.2f} s after launch, graph drawn {graph:.2f} s "
              f"({plates} group plates readable at the first view)")
    assert all(window <= 1.5 for _n, window, _g, _p in rows)
    assert rows[1][2] <= 3.0 and rows[1][3] > 0
