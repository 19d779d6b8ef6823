"""Real-window screenshots of the studio under Xvfb: ``python -m studio.gui.screenshots OUTDIR``.

Starts ``Xvfb`` on the first free display from ``:99`` (no xvfb-run), runs the window on
the xcb platform with the bundled example, and captures the whole X screen with
ImageMagick's ``import -window root`` at four moments:

- ``overview_fit.png``: the whole graph at Fit, its groups named by summary plates (kernels,
  bytes moved, share);
- ``main_heatmap.png``: the main window with the bytes heatmap (log scale) and legend;
- ``transformations_preview.png``: kernels selected, their matches ranked, the best
  one previewed (removed and changed kernels marked in the view, the diff in the pane);
- ``zoomed.png``: a close-up of the attention scope, labels and edges at full detail, each edge
  labelled with the dtype, shape and bytes it carries;
- ``profile_selection.png``: "Profile selection" on the attention scores' kernels: only they
  are timed (a cutout on recorded inputs), with their roofline;
- ``timings_roofline.png``: the Timings dock after a real profile of all 309 kernels of
  the bundled example (10 reps, about half a minute), the table sorted by median with
  the slowest kernel selected (highlighted on the roofline and in the view), and the
  measured-time heatmap with its "N of M kernels measured" legend;
- ``compare.png``: the Compare window after the bundled history (reshape elimination,
  expansion, fusions): the original graph beside the optimized one, merged (purple), added
  and changed kernels marked, a fused kernel hovered on the right with the originals it was
  made from highlighted on the left, and the before/after table per scope with the time of each
  side measured ("Time both sides");
- ``outline_layers.png``: a 4-layer BERT's training step (``resources/examples/bert_stack4_tiny.onnx``,
  the step generated on opening), stacked: each layer's plate holds its forward, grad and update,
  the root a grid at Fit, and the Outline dock listing the layers with their bytes and share;
- ``fused_kernels.png``: the same step after the substation recipe tuned one layer and repeated it on the
  equal ones, zoomed into a layer: fused kernels named from what they were made of ("GEMM + bias",
  "LayerNorm + residual"), one of them selected with its lineage in Properties.

Exit code 0 when all nine files were written.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SIZE = (1600, 1000)
SHOTS = ("overview_fit.png", "main_heatmap.png", "transformations_preview.png", "zoomed.png",
         "profile_selection.png", "timings_roofline.png", "compare.png", "outline_layers.png", "fused_kernels.png")


def _free_display() -> str:
    """The first display from :99 with no X server (other worktrees may be taking screenshots too)."""
    n = 99
    while Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists():
        n += 1
    return f":{n}"


DISPLAY = _free_display()


def _start_xvfb() -> subprocess.Popen:
    if shutil.which("Xvfb") is None or shutil.which("import") is None:
        raise SystemExit("screenshots need Xvfb and ImageMagick's import (bash .ci/setup-env gui installs them)")
    proc = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", f"{SIZE[0]}x{SIZE[1]}x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    if proc.poll() is not None:
        raise SystemExit(f"Xvfb {DISPLAY} did not start (is another server using it?)")
    return proc


def _wait(app, cond, timeout_s: float = 120.0) -> bool:
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)
    return cond()


def _settle(app, seconds: float = 0.8) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def _capture(path: Path) -> None:
    subprocess.run(["import", "-display", DISPLAY, "-window", "root", str(path)], check=True)
    print(f"wrote {path}")


def _shoot(out: Path) -> None:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from studio.gui.qt_main_window import QtMainWindow
    app = QApplication([sys.argv[0]])
    w = QtMainWindow(QSettings(str(out / ".screenshots.ini"), QSettings.Format.IniFormat), restore_policy="never",
                     autosave=False)
    w.setGeometry(0, 0, *SIZE)
    w.show()
    w.open_model()
    _wait(app, lambda: w.session is not None and w.view.placement is not None and w.view.placement.exact)
    w.view.fit()
    _settle(app)
    _capture(out / "overview_fit.png")
    w.set_heatmap("log")
    w.view.fit(readable=True)
    _settle(app)
    _capture(out / "main_heatmap.png")
    ids = [i for i in w.session.graph.nodes if i.startswith("/layer/attention/self/")]
    w.set_heatmap(None)
    w.view.select(ids)
    def ranked() -> list:
        head = w.transformations.tree.topLevelItem(0)
        rows = [r for j in range(head.childCount()) if (r := head.child(j).data(0, 0x0100)) is not None] if head else []
        return rows if rows and all(r.delta is not None for r in rows if r.ok) else []

    _wait(app, lambda: bool(ranked()))
    best = next(r for r in ranked() if r.ok)
    w.transformations.select_row(best)
    w.preview_current()
    _wait(app, lambda: w.view.placement.exact)
    _settle(app, 1.5)
    _capture(out / "transformations_preview.png")
    w.view.resetTransform()
    w.view.scale(1.0, 1.0)
    w.view.reveal("/layer/attention/self/Softmax")
    _wait(app, lambda: w.view.placement.exact)
    _settle(app)
    _capture(out / "zoomed.png")
    _shoot_selection(app, w, out)
    _shoot_timings(app, w, out)
    _shoot_compare(app, w, out)
    _shoot_layers(app, w, out)
    w.close()


def _profile_in_dock(app, w, action, what: str) -> None:
    """Clear the preview marks, raise the Timings dock and run its ``action`` (profile all or the
    selection) to the end; exits when it produced no report."""
    from PySide6.QtCore import Qt
    w.transformations.show_preview(None)
    w.view.clear_marks()
    w.timings.raise_()
    w.resizeDocks([w.timings], [420], Qt.Orientation.Vertical)
    action.trigger()
    _wait(app, lambda: not w.profiling.busy, timeout_s=900)
    if w.profiling.report is None:
        raise SystemExit(f"profiling {what} failed: {w.timings.status.text()}")


def _shoot_selection(app, w, out: Path) -> None:
    """Profile only the attention-score kernels (a cutout), then show them in the Timings dock."""
    ids = [i for i in w.session.graph.nodes if i.startswith("/layer/attention/self/") and
           any(k in i for k in ("MatMul", "Softmax", "Div", "Add"))][:8]
    w.view.select(ids)
    _profile_in_dock(app, w, w.actions_.profile_selection, "the selection")
    w.view.zoom_to(ids)
    _settle(app, 1.5)
    _capture(out / "profile_selection.png")


def _shoot_timings(app, w, out: Path) -> None:
    """Profile all kernels of the open model, then show the Timings dock and the time heatmap."""
    _profile_in_dock(app, w, w.actions_.profile_all, "all kernels")
    w.set_heat_metric("time")
    w.timings.table.selectRow(0)                 # the slowest kernel (sorted by median), highlighted
    w.view.fit(readable=True)
    _settle(app, 1.5)
    _capture(out / "timings_roofline.png")


def _shoot_compare(app, w, out: Path) -> None:
    """Replay the bundled history into the session, then compare the original with the result."""
    from importlib.resources import files
    history = files("resources") / "examples" / "bert_layer_base_train.history.json"
    before = w.session
    w.open_history(str(history))
    _wait(app, lambda: w.session is not before and w.session.cursor > 0, timeout_s=600)
    cmp = w.show_compare(0)
    cmp.setGeometry(0, 0, *SIZE)
    cmp.raise_()
    _wait(app, lambda: cmp.ready() and cmp.left.placement is not None and cmp.right.placement is not None
          and cmp.left.placement.exact and cmp.right.placement.exact)
    cmp.time_both()                               # measured time per scope, both sides
    _wait(app, lambda: not w.profiling.busy, timeout_s=900)
    cmp.raise_()
    cmp.left.fit(readable=True)
    s = w.session
    fused = max((i for i in s.graph.nodes if i in cmp.right.boxes), key=lambda i: len(s.origins(i)))
    cmp.right.reveal(fused)
    _settle(app, 0.5)
    cmp.right.hoveredKernel.emit(fused)           # what the pointer over it shows: its originals, left
    _settle(app, 1.5)
    _capture(out / "compare.png")


def _shoot_layers(app, w, out: Path) -> None:
    """A 4-layer step stacked by layer with the Outline; then tuned on one layer, repeated on the equal ones,
    and zoomed in on its fused kernels' names."""
    from studio.gui.describe import kernel_title
    from studio.gui.qt_main_window import EXAMPLE
    from studio.session.recipe import tune_one_layer
    from studio.session.core import Session
    model = EXAMPLE.with_name("bert_stack4_tiny.onnx")
    training = {"loss": "mse", "optimizer": "adamw"}
    w.set_heat_metric("bytes")
    w.set_heatmap(None)                           # the earlier shots' time heatmap: off
    w.set_session(Session.open(model, training=training, autosave=False))
    w.movement.raise_()
    w.outline.show()
    w.outline.raise_()
    _wait(app, lambda: w.outline.tree.topLevelItemCount() == 5 and w.view.placement is not None
          and w.view.placement.exact and w.view.task is None)
    w.view.fit()
    _settle(app, 1.0)
    _capture(out / "outline_layers.png")
    tuned = Session.open(model, training=training, autosave=False)
    tune_one_layer(tuned)
    w.set_session(tuned)
    g = tuned.graph
    fused = [i for i in g.nodes if "layer.2" in i and " + " in kernel_title(g.nodes[i])]
    if not fused:
        raise SystemExit("the tuned step has no fused kernel in layer 2 to show")
    best = max(fused, key=lambda i: len(tuned.origins(i)))
    w.view.reveal(best, zoom=True)
    _wait(app, lambda: w.view.placement.exact and w.view.task is None)
    w.view.select([best])
    w.properties.raise_()
    _settle(app, 1.0)
    _capture(out / "fused_kernels.png")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    xvfb = _start_xvfb()
    os.environ.update(DISPLAY=DISPLAY, QT_QPA_PLATFORM="xcb")
    try:
        _shoot(out)
    finally:
        xvfb.terminate()
        xvfb.wait(10)
    return 0 if all((out / n).exists() for n in SHOTS) else 1


if __name__ == "__main__":
    sys.exit(main())
