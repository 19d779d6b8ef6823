"""Benchmark: the studio stays responsive on the 12-layer BERT-base-width training step (issue 13).
Run on demand: ``bash .ci/test tests/bench/test_bench_event_loop.py -s`` (about 4 minutes on 2 cores
once the model is built, see ``scale_models.py``; the export's numba kernels are cached after the
first run).

A 10 ms ``QTimer`` (``probe.Gaps``) measures the longest event-loop stall while a user opens the
model, loads a 100-step history, applies a fusion, undoes it, profiles a selection (a cutout of
four first-layer kernels and a last optimizer update) and exports the step as a CPU package
(with its ``--check`` left off: that runs in its own process). Each phase's stall must be ≤ 200 ms,
the figure at which a window reads as frozen; the phase's wall time is printed beside it.
Offscreen Qt, the default thread counts (numba and BLAS use every core).
"""
from __future__ import annotations

import time

import pytest

from studio.gui.overview import canvas_use
from tests.bench.probe import Gaps
from tests.bench.scale_models import bert_large_stack, bert_stack

pytestmark = pytest.mark.bench
STALL_S = 0.2


@pytest.fixture
def window(make_window):
    w = make_window(autosave=False)
    w.resize(1500, 950)
    return w


def _idle(window) -> bool:
    return window.view.task is None and not window.profiling.busy


def test_no_stall_on_12_layers(qtbot, window, tmp_path):
    from studio.gui.qt_export_dialog import QtExportDialog
    from studio.session import Session
    from transforms.registry import create
    model = bert_stack(12)
    hist = tmp_path / "h100.json"
    s = Session.open(model, autosave=False)
    expand = create("expand")
    for m in list(expand.matches(s.graph))[:100]:
        s.apply("expand", m.anchors)
    s.save_history(hist)
    del s

    rows: list[tuple[str, float, float, float]] = []
    gaps = Gaps()

    def phase(name, start, done, timeout_s=600):
        qtbot.wait(300)                                       # what came before has settled
        gaps.reset()
        t0 = time.perf_counter()
        start()
        qtbot.waitUntil(done, timeout=timeout_s * 1000)
        qtbot.wait(300)                                       # the paint and ranking the result triggers
        rows.append((name, time.perf_counter() - t0, gaps.worst, gaps.worst_at - t0))

    phase("open", lambda: window.open_model(str(model)), lambda: window.session is not None and _idle(window))
    opened = window.session
    phase("load a 100-step history", lambda: window.open_history(str(hist)),
          lambda: window.session is not opened and window.session.cursor == 100 and _idle(window))
    session = window.session
    mf = create("map_fusion")
    m = next(m for t, m in session.match_index().candidates(session.graph.nodes)
             if t.name == "map_fusion" and mf.check(session.graph, m).ok)
    phase("apply map_fusion", lambda: window.apply_step("map_fusion", m.anchors),
          lambda: session.cursor == 101 and _idle(window))
    phase("undo", window.stack.undo, lambda: session.cursor == 100 and _idle(window))
    order = window.session.graph.topo_order()
    chosen = [n.id for n in order if "layer.0/" in n.id and "MatMul" in n.id][:4] + [order[-1].id]
    for kernel in chosen:                              # opened, so the selection is those kernels, not their group
        window.view.reveal(kernel)
    qtbot.waitUntil(lambda: window.view.task is None, timeout=60_000)
    window.view.select(chosen)
    phase("profile a selection (5 kernels)", window.profiling.profile_selection,
          lambda: window.profiling.report is not None and _idle(window))
    assert {k.node_id.split("/expanded")[0] for k in window.profiling.report.kernels} >= set(chosen[:4])
    dialog = QtExportDialog(window, str(tmp_path))
    dialog.name.setText("bert12")
    dialog.run_check.setChecked(False)
    dialog.show()
    phase("export (CPU)", dialog.start, lambda: dialog.state == "done")
    assert dialog.result is not None, dialog.verdict.text()
    dialog.close()

    print("\n12 layers, the studio's event loop (longest stall while each runs):")
    for name, wall, worst, at in rows:
        print(f"  {name:34s} {wall:7.1f} s   stall {worst * 1e3:5.0f} ms (ending {at:.1f} s in)")
    assert all(worst <= STALL_S for _n, _w, worst, _a in rows), rows


def _whole_graph_ranked(window) -> bool:
    """The listing shows the current graph's Whole graph group, every applicable row with its Δ."""
    ranker = window.ranker
    rows = window.transformations.rows()
    return (ranker.task is None and ranker.shown is window.session.graph and len(rows) > 100
            and all(r.delta is not None for r in rows if r.ok))


@pytest.mark.parametrize("depth", [12, 24], ids=["bert12", "bert_large24"])
def test_whole_graph_ranking_at_open_and_after_an_apply(qtbot, window, depth):
    """The Transformations dock's whole-graph list (issue 38) on the 12-layer BERT-base-width step (ready ≤ 10 s
    after File → Open, ≤ 1 s after an apply) and on a 24-layer BERT-large-width step (drawn ≤ 5 s, list ready
    ≤ 20 s; its figures after an apply are printed, not held to the 12-layer bars: the view's scope tree and pass
    colouring are rebuilt over the whole graph on the GUI thread, about 0.2 s at 9,000 kernels); equal layers
    ranked once, listed "× N"; and the event loop's longest stall."""
    model, draw_s, ready_s = (bert_stack(12), 5, 10) if depth == 12 else (bert_large_stack(24), 5, 20)
    gaps = Gaps()
    t0 = time.perf_counter()
    window.open_model(str(model))                     # File → Open: imported and laid out off the GUI thread
    qtbot.waitUntil(lambda: window.session is not None and window.view.placement is not None, timeout=600_000)
    drawn = time.perf_counter() - t0
    qtbot.waitUntil(lambda: _whole_graph_ranked(window), timeout=600_000)
    session = window.session
    at_open, open_stall = time.perf_counter() - t0, gaps.worst
    rows = window.transformations.rows()
    classes = [r for r in rows if r.copies]
    single = next(r for r in rows if r.ok and not r.copies and r.bytes_saved > 0)
    qtbot.waitUntil(lambda: window.view.placement.exact and window.view.task is None, timeout=60_000)
    window.view.fit()
    port = window.view.viewport()
    used = canvas_use(window.view.placement, window.view.transform().m11(), port.width(), port.height())
    gaps.reset()
    t0 = time.perf_counter()
    assert window.apply(single)
    qtbot.waitUntil(lambda: _whole_graph_ranked(window), timeout=600_000)
    after, apply_stall = time.perf_counter() - t0, gaps.worst
    print(f"\n{depth} layers, {len(session.graph.nodes)} kernels, {len(session.match_index())} candidates listed as "
          f"{len(rows)} rows ({len(classes)} of them × N equal layers): drawn {drawn:.1f} s after open, whole-graph "
          f"ranking ready {at_open:.1f} s after open (stall {open_stall * 1e3:.0f} ms), {after:.2f} s after an apply "
          f"of {single.transformation.name} (stall {apply_stall * 1e3:.0f} ms); a Fit covers {100 * used:.0f} % "
          f"of the {port.width()}×{port.height()} canvas")
    assert drawn <= draw_s and at_open <= ready_s and open_stall <= STALL_S and used >= 0.6
    if depth == 12:                                   # the bars after an apply are for 12 layers
        assert after <= 1.0 and apply_stall <= STALL_S


def test_repeat_on_equal_layers_and_compare_do_not_stall(qtbot, window):
    """Issue 38, item 7: at 12 layers, Edit → Repeat on equal layers (after an expand inside one layer) and
    opening Compare keep the event loop's longest stall ≤ 100 ms; their work runs on workers."""
    from transforms.layers import Family, equal_group, layer_of
    window.open_model(str(bert_stack(12)))
    qtbot.waitUntil(lambda: window.session is not None and _idle(window), timeout=600_000)
    s = window.session
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    softmax = next(i for i in s.graph.nodes if layer_of(i) == (family, first) and s.graph.nodes[i].op_type == "Softmax")
    assert window.apply_step("expand", [softmax])
    qtbot.wait(1000)
    gaps, rows = Gaps(), []

    def phase(name, start, done):
        qtbot.wait(300)
        gaps.reset()
        t0 = time.perf_counter()
        start()
        qtbot.waitUntil(done, timeout=600_000)
        qtbot.wait(300)
        rows.append((name, time.perf_counter() - t0, gaps.worst))

    phase(f"repeat on {len(others)} equal layers", window.actions_.repeat_layers.trigger,
          lambda: s.cursor == 2 and window._transfer_task is None and _idle(window))
    assert s.steps[-1].is_transfer
    phase("open Compare", lambda: window.show_compare(0),
          lambda: window.compare_window is not None and window.compare_window.ready())
    print("\n12 layers, the event loop's longest stall:")
    for name, wall, worst in rows:
        print(f"  {name:34s} {wall:7.2f} s   stall {worst * 1e3:5.0f} ms")
    assert all(worst <= 0.1 for _n, _w, worst in rows), rows


def test_profiling_at_depth(qtbot, window):
    """Issue 38, item 4: Profile selection of four kernels in layer 0, 6 or 11 of the 12-layer step, each ≤ 2 s
    warm: the cutout's inputs come from values recorded once per graph version (the first selection of a layer
    records what it needs; the second round records nothing). The event loop's longest stall is printed."""
    window.open_model(str(bert_stack(12)))
    qtbot.waitUntil(lambda: window.session is not None and _idle(window), timeout=600_000)
    window.timings.reps.setValue(5)
    order = [n.id for n in window.session.graph.topo_order()]
    gaps, rows = Gaps(), []
    for round_ in ("cold", "warm"):
        for layer in (0, 6, 11):
            chosen = [i for i in order if f"layer.{layer}/" in i and "MatMul" in i][:4]
            for kernel in chosen:                      # opened, so the selection is those kernels, not their group
                window.view.reveal(kernel)
            qtbot.waitUntil(lambda: window.view.task is None, timeout=60_000)
            window.view.select(chosen)
            qtbot.wait(200)
            gaps.reset()
            t0 = time.perf_counter()
            window.profiling.profile_selection()
            qtbot.waitUntil(lambda: window.profiling.report is not None and not window.profiling.busy,
                            timeout=600_000)
            rows.append((round_, layer, time.perf_counter() - t0, gaps.worst))
            assert {k.node_id for k in window.profiling.report.kernels} == set(chosen)
    print("\n12 layers, Profile selection of 4 MatMul kernels (5 reps):")
    for round_, layer, wall, worst in rows:
        print(f"  {round_} layer {layer:2d}: {wall:5.2f} s   stall {worst * 1e3:4.0f} ms")
    assert all(wall <= 2.0 for round_, _l, wall, _w in rows if round_ == "warm"), rows
