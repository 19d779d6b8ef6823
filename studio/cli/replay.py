"""``dcstudio replay MODEL HISTORY``: replay a history headless, for CI.

``--check`` compares the replayed graph (reference executor, fp32) with the ORIGINAL
model through ``codegen.oracle`` (float64 truth, per-output tolerances derived from
onnxruntime's own fp32 error) and prints the oracle's one-line summary; when the final
check fails it bisects (checkpoints every ~n/16 steps) and names the first failing step,
its transformation and anchors. ``--check-each`` checks after every step.

Exit codes: 0 ok; 1 a numeric mismatch (``--check``/``--check-each``), a bytes
regression against ``--baseline``, or a step whose bytes exceed its recorded
``expect.bytes_after``; 2 bad input or a step that cannot be replayed (the
message names the step, the transformation and the reason). Reports are written
only when the replay ran (atomically). The model file is only ever read.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from codegen.oracle import Oracle, stated_tolerance
from ir.errors import StudioError
from studio.session.reports import dump_json, junit_xml, report_json, write_atomic
from studio.session.loading import load_original
from transforms.history import check_model, load
from transforms.passes import run_pass
from transforms.registry import create
from transforms.replay import Checkpoints, StepReport, first_failing, replay


def parse_tolerance(text: str) -> float:
    t = text.strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise StudioError(f"--tolerance expects a number or a percentage like 5%, got {text!r}") from None


def _baseline_bytes(path: str) -> int:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return int(doc["summary"]["bytes_after"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StudioError(f"baseline {path}: not a dcstudio replay report ({type(e).__name__}: {e})") from None


class _Progress:
    """A rich progress bar on stderr (nothing with --quiet)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.bar = None
        if not quiet and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            self.bar = Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), transient=True, console=Console(stderr=True))
            self.task = self.bar.add_task("replay", total=total, info="")

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def step(self, rep: StepReport) -> None:
        if self.bar:
            self.bar.update(self.task, advance=1, info=f"{rep.transformation}: {rep.bytes / 1e6:.1f} MB")


def cmd_replay(args: argparse.Namespace) -> int:
    from studio.text import parse_bindings
    hist = load(args.history)
    graph, proto = load_original(args.model, bindings={**hist.bindings, **parse_bindings(args.bind)},
                                 optimizer=args.optimizer, training=hist.training)
    check_model(hist, graph.meta["sha256"], Path(args.model).name, path=args.history)
    tolerance = parse_tolerance(args.tolerance)
    baseline = _baseline_bytes(args.baseline) if args.baseline else None
    pending = Oracle.start(graph, proto) if args.check or args.check_each else None   # runs during the replay
    oracle = _oracle(pending, hist, args) if args.check_each else None
    checkpoints = Checkpoints(graph, hist) if args.check and not args.check_each else None
    failures: dict[int, str] = {}
    checked = {}

    def on_step(rep: StepReport) -> None:
        progress.step(rep)
        if rep.expected_bytes is not None and rep.bytes > rep.expected_bytes:
            failures[rep.step] = (f"bytes regressed: {rep.bytes} > recorded {rep.expected_bytes}")
        if checkpoints is not None:
            checkpoints.record(rep.step, graph)
        if args.check_each:
            checked["last"] = oracle.run_and_check(graph)
            if not checked["last"].ok:
                failures[rep.step] = _mismatch_text(rep, checked["last"], "numeric mismatch")

    with _Progress(len(hist.steps), args.quiet) as progress:
        reports = replay(graph, hist, on_step=on_step, path=args.history, every_peak=bool(args.json or args.junit))
    if checkpoints is not None:
        oracle = _oracle(pending, hist, args)
        checked["last"] = oracle.run_and_check(graph)
        if not checked["last"].ok:
            _bisect(oracle, checkpoints, reports, checked["last"], failures)
    if baseline is not None and reports[-1].bytes > baseline * (1 + tolerance):
        failures[reports[-1].step] = (f"bytes {reports[-1].bytes} exceed the baseline {baseline} by more than "
                                      f"{tolerance:.1%}")
    moved = None
    if args.exported:
        from studio.session.exporting import exported_traffic
        moved = exported_traffic(graph, args.exported)
    _write_reports(args, reports, failures, moved)
    _print_summary(args, reports, failures, moved)
    if "last" in checked and not any("mismatch" in v for v in failures.values()):
        sys.stdout.write(f"check: {checked['last'].summary}\n")
    return 1 if failures else 0


def _bisect(oracle: Oracle, checkpoints: Checkpoints, reports: list[StepReport], final, failures) -> None:
    """Name the first step after which the check fails (bisection over the checkpoints)."""
    last = reports[-1].step
    failures[last] = "numeric mismatch: " + final.summary
    first = oracle.run_and_check(checkpoints.graph_after(0))
    if not first.ok:
        failures[0] = ("numeric mismatch before any step: the imported graph (reference executor) differs "
                       "from the original model: " + first.summary)
        return
    k = first_failing(0, last, lambda j: not oracle.run_and_check(checkpoints.graph_after(j)).ok)
    step = checkpoints.history.steps[k - 1]
    if step.is_pass:
        text = _bisect_pass(oracle, checkpoints, k, step)
    else:
        text = _mismatch_text(reports[k], oracle.run_and_check(checkpoints.graph_after(k)))
    failures[k] = failures[k] + "; " + text if k in failures else text


def _bisect_pass(oracle: Oracle, checkpoints: Checkpoints, k: int, step) -> str:
    """Within pass step ``k``: the first application after which the check fails."""
    base = checkpoints.graph_after(k - 1)
    t = create(step.transformation, step.params)

    def run(j: int):
        g, apps = base.clone(), []
        run_pass(g, t, k, limit=j, on_apply=apps.append, scope=step.scope)
        return g, apps

    j = first_failing(0, step.applications, lambda j: not oracle.run_and_check(run(j)[0]).ok)
    g, apps = run(j)
    worst = "; ".join(str(m) for m in oracle.run_and_check(g).mismatches[:3])
    return (f"first mismatch after step {k} ({step.transformation} pass, application {j} of {step.applications}, "
            f"at {', '.join(apps[-1].anchors)}): {worst}")


def _oracle(pending, hist, args) -> Oracle:
    """The original model's oracle (``pending``: ``Oracle.start``), widened by the history's stated
    tolerances (or ``--rtol``)."""
    oracle = pending.result().widened_to(stated_tolerance(hist.steps))
    return oracle.with_tolerance(args.rtol) if args.rtol is not None else oracle


def _mismatch_text(rep: StepReport, result, what: str = "first mismatch") -> str:
    anchors = ", ".join(rep.anchors) if rep.anchors else "no anchors"
    worst = "; ".join(str(m) for m in result.mismatches[:3])
    return f"{what} after step {rep.step} ({rep.transformation}, {anchors}): {worst}"


def _write_reports(args, reports, failures, moved=None) -> None:
    if args.json:
        doc = report_json(args.model, args.history, reports, failures)
        if moved is not None:
            doc["summary"]["exported"] = {"backend": moved.backend, "bytes_as_fused": moved.fused,
                                          "bytes_as_exported": moved.exported}
        write_atomic(args.json, dump_json(doc))
    if args.junit:
        write_atomic(args.junit, junit_xml(f"replay {Path(args.history).name}", reports, failures))


def _print_summary(args, reports: list[StepReport], failures: dict[int, str], moved=None) -> None:
    first, last = reports[0], reports[-1]
    out = sys.stdout
    if not args.quiet:
        for r in reports[1:]:
            mark = "FAIL" if r.step in failures else "ok"
            out.write(f"{r.step:>4}  {r.transformation:<22} {r.bytes / 1e6:>10.2f} MB  {r.delta_bytes / 1e6:>+9.2f} MB"
                      f"  ratio {r.ratio:6.2f}x  {mark}\n")
    red = 1 - last.bytes / first.bytes if first.bytes else 0.0
    out.write(f"replayed {len(reports) - 1} steps: {first.bytes / 1e6:.2f} MB -> {last.bytes / 1e6:.2f} MB "
              f"({-red:+.1%}), bound {last.bound / 1e6:.2f} MB, moved/bound {first.ratio:.2f}x -> "
              f"{last.ratio:.2f}x, graph {last.graph_hash[:12]}\n")
    if moved is not None:
        from studio.text import traffic_lines
        out.write(traffic_lines(moved) + "\n")
    for step, msg in sorted(failures.items()):
        sys.stderr.write(f"dcstudio: step {step}: {msg}\n")


def check_written(model, history, bind: list[str], optimizer: str | None) -> int:
    """``dcstudio replay MODEL HISTORY --check --quiet`` on a history another command just wrote: 0 when it
    passes, else 1 (an error is printed as ``dcstudio`` prints it)."""
    parser = argparse.ArgumentParser(prog="dcstudio")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["replay", str(model), str(history), "--check", "--quiet", *[f"--bind={b}" for b in bind],
                              *([f"--optimizer={optimizer}"] if optimizer else [])])
    try:
        return 0 if cmd_replay(args) == 0 else 1
    except StudioError as e:
        print(f"dcstudio: error: {e.summary}", file=sys.stderr)
        return 1


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="replay a history file headless (for CI)")
    p.add_argument("model", help="the ONNX model the history was recorded on")
    p.add_argument("history", help="a dcstudio-history JSON file")
    p.add_argument("--exported", choices=("cpu", "cuda"), default=None, metavar="BACKEND",
                   help="also print the bytes the exported program moves on BACKEND against the bytes as fused")
    p.add_argument("--check", action="store_true",
                   help="compare the replayed graph with the original model (codegen.oracle); on a mismatch, "
                        "bisect to the first failing step")
    p.add_argument("--check-each", action="store_true", help="compare with the original model after every step")
    p.add_argument("--rtol", type=float, default=None,
                   help="override: one tolerance (relative to each output's scale) for every output instead of "
                        "the derived ones (K x onnxruntime's fp32 error vs the float64 truth)")
    p.add_argument("--json", metavar="REPORT", help="write a per-step JSON report")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (one test case per step)")
    p.add_argument("--baseline", metavar="B.json", help="a previous --json report; fail when bytes regress")
    p.add_argument("--tolerance", default="0%", help="allowed regression against --baseline, e.g. 5%%")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N", help="bind a symbolic dimension")
    p.add_argument("--optimizer", help="ORT optimizer_model.onnx (default: beside MODEL)")
    p.add_argument("--quiet", action="store_true", help="no progress display, only the summary")
    p.set_defaults(func=cmd_replay)
