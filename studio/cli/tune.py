"""``dcstudio tune MODEL -o HISTORY``: search for a better pass sequence than the hand recipe.

Prints progress with the best so far (a rich progress bar on a terminal, a line per generation in
logs); Ctrl-C stops the search and still writes the best history found. The history is written
atomically and then replayed against the original model (``replay --check``) unless ``--no-check``.
Exit 0 when the written history checks out, 1 when its check fails, 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def cmd_tune(args: argparse.Namespace) -> int:
    from studio.session.recipe import RECIPES, pick_for_model
    from studio.text import parse_bindings
    from studio.tune.database import ResultsDB, default_path
    from studio.tune.evaluate import applied
    from studio.tune.search import history_passes
    from studio.tune.types import ModelRef

    model = ModelRef(str(args.model), tuple(sorted(parse_bindings(args.bind).items())), args.optimizer)
    starts = [RECIPES[pick_for_model(args.model)]] + [history_passes(h) for h in args.start]
    db = None if args.no_db else ResultsDB(args.db or default_path())
    timed = args.objective == "time" or args.backend == "cuda"
    measure = args.measure if args.measure is not None else 3 if timed else 0
    problem = _cuda_problem(args, measure) if args.backend == "cuda" else None
    if problem:
        print(f"error: tune --backend cuda: {problem}", file=sys.stderr)
        if db is not None:
            db.close()
        return 2
    res = _search(args, model, starts, db, measure)
    if res is None:
        return 2
    chosen = res.chosen
    session = applied(model, chosen, res.transfer)
    session.save_history(args.output)
    _print_result(args, res)
    if args.backend == "cpu" and measure > 0 and not res.stopped:
        _print_headroom(model, res, args)
    print(f"wrote {args.output} ({session.cursor} steps, {session.metrics().bytes / 1e6:.2f} MB moved)")
    if args.no_check:
        return 0
    from studio.cli.replay import check_written
    return check_written(args.model, args.output, args.bind, args.optimizer)


def _progress(args: argparse.Namespace):
    """``(bar, on_progress)``: a rich bar with the best so far on a terminal (None elsewhere: logs get a line
    per generation)."""
    shown = {"generation": -1}
    t0 = time.monotonic()
    bar = task = None
    if sys.stderr.isatty() and not args.quiet:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        bar = Progress(TextColumn("tune"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                       TimeElapsedColumn(), transient=True, console=Console(stderr=True))
        task = bar.add_task("tune", total=args.budget, info="")

    def on_progress(p) -> None:
        if args.quiet or p.best is None:
            return
        best = f"best {_fmt(p.best.value, args.objective)} ({len(p.best_candidate.passes)} passes)"
        if bar is not None:
            bar.update(task, completed=p.evaluated + p.reused, info=f"{best}, generation {p.generation}")
        elif p.generation != shown["generation"]:
            sys.stderr.write(f"generation {p.generation:3d}  evaluated {p.evaluated:4d}  from the database "
                             f"{p.reused:4d}  {best}  {time.monotonic() - t0:6.1f} s\n")
        shown["generation"] = p.generation
    return bar, on_progress


def _search(args: argparse.Namespace, model, starts, db, measure: int):
    """The search on the chosen evaluator (closed after it, with the database); None when the GPU is not
    ready (the error printed)."""
    from studio.tune.evaluators import DaskEvaluator, LocalEvaluator
    from studio.tune.search import search
    bar, on_progress = _progress(args)
    cutouts = args.cutouts if args.cutouts is not None else 2 * measure if args.backend == "cpu" else 0
    evaluator = LocalEvaluator() if args.workers == 1 and not args.scheduler else \
        DaskEvaluator(args.workers, args.scheduler)
    try:
        peaks = None
        if args.backend == "cuda":
            from ir.errors import StudioError
            from studio.tune.gpu import ready
            try:                            # where the steps will be timed: a worker holding `measure`
                peaks = evaluator.measure(ready, args.objective)
            except StudioError as e:
                print(f"error: tune --backend cuda ({evaluator.name}): {e}; leave --backend out to time "
                      "them on the CPU", file=sys.stderr)
                return None
            if peaks is not None and not args.quiet:
                print(f"tune: the roofline's GPU peaks: {peaks.bandwidth / 1e9:.0f} GB/s copy, "
                      f"{peaks.flops / 1e12:.1f} TFLOP/s float32 GEMM ({peaks.fingerprint})", file=sys.stderr)
        if not args.quiet:
            print(f"tune: {args.objective}, budget {args.budget or '-'} evaluations"
                  f"{f', {args.minutes:g} min' if args.minutes else ''}, seed {args.seed}, on {evaluator.name}"
                  f"{f'; results in {db.path}' if db else ''}", file=sys.stderr)
        if bar is not None:
            bar.start()
        return search(model, evaluator=evaluator, db=db, objective=args.objective, budget=args.budget,
                      minutes=args.minutes, seed=args.seed, start=starts, beam=args.beam, batch=args.batch,
                      on_progress=on_progress, reps=args.reps, threads=args.threads,
                      measure=measure, cutouts=cutouts, backend=args.backend, peaks=peaks)
    finally:
        if bar is not None:
            bar.stop()
        evaluator.close()
        if db is not None:
            db.close()


def _print_result(args: argparse.Namespace, res) -> None:
    """The search's figures: evaluations, best against the recipe, cutout prices and measured finalists."""
    chosen = res.chosen
    base, best = res.baseline, res.score
    gain = f"{best.value / base.value - 1:+.1%}" if base.ok and base.value else "n/a"
    print(f"tune: {'stopped (Ctrl-C)' if res.stopped else 'done'} after {res.progress.evaluated} evaluations "
          f"({res.progress.reused} from the database), {res.progress.generation} generations; "
          f"best {_fmt(best.value, args.objective)} against the hand recipe's {_fmt(base.value, args.objective)} "
          f"({gain}); {len(res.best.passes)} passes: {', '.join(p.transformation for p in res.best.passes)}")
    if res.cutouts is not None and res.cutouts.prices:
        recipe = next((p for p in res.cutouts.prices if p.candidate == res.baseline_candidate.key), None)
        cheapest = min(res.cutouts.prices, key=lambda p: (p.seconds, p.candidate))
        others = [f"{p.seconds * 1e3:.1f}" for p in res.cutouts.prices if p is not recipe and p is not cheapest]
        print(f"cutouts: {len(res.cutouts.prices)} sequences priced by their kernels' measured times "
              f"({res.cutouts.measured} kernel structures measured, {res.cutouts.reused} from earlier measurements); "
              f"the recipe's kernels {recipe.seconds * 1e3 if recipe else float('nan'):.1f} ms, the cheapest "
              f"{cheapest.seconds * 1e3:.1f} ms" + (f"; the others {', '.join(others)} ms" if others else ""))
        if not res.measured and chosen.key == res.baseline_candidate.key:
            print("cutouts: no sequence's kernels are cheaper than the recipe's; writing the recipe")
    for m in res.measured:
        where = f"{m.threads} threads" if args.backend == "cpu" else f"on the GPU{f' ({m.device})' if m.device else ''}"
        if m.note:
            print(f"measured: a finalist was left out ({where}): {m.note}")
            continue
        print(f"measured: exported step {m.candidate_ms:.{3 if m.recipe_ms < 10 else 1}f} ms against the recipe's "
              f"{m.recipe_ms:.{3 if m.recipe_ms < 10 else 1}f} ms ({m.ratio:.3f}x, paired spread {m.spread:.1%}, "
              f"{where})" + ("  <- chosen" if m.key == chosen.key else ""))
    if res.measured and chosen.key == res.baseline_candidate.key:
        print("measured: no finalist beat the hand recipe's exported step by more than the noise; writing the recipe")


def _print_headroom(model, res, args: argparse.Namespace) -> None:
    """The most any history could gain over the hand recipe here (``studio.tune.headroom``), measured on its step."""
    from studio.tune.headroom import of_recipe
    try:
        res.headroom = of_recipe(model, res, args.threads, args.reps)
    except (RuntimeError, ValueError) as e:
        print(f"headroom: not measured ({e})")
        return
    print(f"headroom: of the hand recipe, {res.headroom.text()}")


def _cuda_problem(args: argparse.Namespace, measure: int) -> str | None:
    """Why the other options do not fit ``--backend cuda`` (checked before the device and the search)."""
    if args.cutouts:
        return ("--cutouts times CPU kernels; with --backend cuda the finalists are timed as whole CUDA steps "
                "(leave --cutouts out)")
    if measure < 1:
        return "--measure 0 times nothing on the GPU; give --measure K (K finalists) or leave --backend out"
    return None


def _fmt(value: float, objective: str) -> str:
    return f"{value / 1e6:.2f} MB" if objective == "bytes" else f"{value * 1e3:.3f} ms (roofline)"


def _budget(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("the budget is a number of evaluations, at least 1")
    return n


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="search for a better transformation sequence than the hand recipe",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model")
    p.add_argument("-o", "--output", required=True, help="history file to write (the best sequence found)")
    p.add_argument("--objective", choices=("bytes", "time"), default="bytes",
                   help="bytes moved (default), or the time the calibrated roofline predicts")
    p.add_argument("--budget", type=_budget, default=200, help="evaluations (default 200)")
    p.add_argument("--minutes", type=float, default=None, help="stop after this wall time (as well)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="start", action="append", default=[], metavar="H0.json",
                   help="also start from the passes of this history (repeatable)")
    p.add_argument("--db", type=Path, default=None,
                   help="results database (default: ~/.local/share/dcstudio/tune.sqlite)")
    p.add_argument("--no-db", action="store_true", help="keep no results database")
    p.add_argument("--workers", type=int, default=2, help="Dask LocalCluster workers (1: in this process)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786", help="run on this Dask scheduler")
    p.add_argument("--beam", type=int, default=8, help="parents kept per generation")
    p.add_argument("--batch", type=int, default=8, help="children evaluated per generation")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N")
    p.add_argument("--optimizer", help="ORT optimizer_model.onnx (default: beside MODEL)")
    p.add_argument("--measure", type=int, default=None, metavar="K",
                   help="time the K best sequences' exported steps against the recipe's and write the fastest "
                        "(default 3 with --objective time or --backend cuda, else 0)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                   help="where --measure times the steps: cpu (default), or cuda: CUDA packages on this machine's "
                        "GPU, each checked there against the original model first; with --objective time the "
                        "roofline then uses the GPU's measured peaks")
    p.add_argument("--cutouts", type=int, default=None, metavar="K",
                   help="with --objective time: price the recipe and the K best sequences by their kernels' times, "
                        "each distinct kernel measured once as a cutout on recorded inputs and kept in the database; "
                        "the finalists are the cheapest (default 2 x --measure)")
    p.add_argument("--reps", type=int, default=10, help="paired steps per measurement (default 10)")
    p.add_argument("--threads", type=int, default=None, help="threads of the measured steps (default: all cores)")
    p.add_argument("--no-check", action="store_true", help="do not replay the result against the original model")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_tune)
