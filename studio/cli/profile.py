"""``dcstudio profile MODEL [HISTORY] [--kernels ids] [--trace out.json]``: measured kernel times.

Imports the model, replays the history, and profiles the training step on the CPU
backend out of process (``codegen.timing.profiler``): every kernel timed over ``--reps``
repetitions after ``--warmup``; a kernel that raises, hangs (``--timeout``) or crashes is
reported and the others are still measured. Prints per kernel the median, CV, GB/s and
% of this machine's calibrated triad, GFLOP/s, the roofline efficiency and, for a generated
kernel, how its loops run (``KernelSource.schedule``: map order, columns innermost, cached rows…), then the
step's total and the thread counts. A view (an alias: no data moves at run time) gets no rate and no roof, and
the "above the calibrated roof" warning names only kernels that low peaks alone explain
(``codegen.timing.roofline``, as in the Timings dock). ``--json`` writes everything, ``--trace`` a Chrome
trace for Perfetto, ``--against HISTORY2`` adds the paired A/B ratio of the two steps. ``--inputs X.npz``
times on your own weights and data (arrays by input name) instead of the deterministic feeds.

Exit codes: 0 ok (also when some kernels failed: they are listed), 2 bad input.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ir.statements import StatementKind


def _table(profile, top: int | None) -> str:
    rows = sorted(profile.kernels, key=lambda k: -(k.samples.median_s if k.ok else float("inf")))
    rows = rows[:top] if top else rows
    idw = min(56, max([len(k.node_id) for k in rows] + [4]))
    head = (f"{'kernel':<{idw}}  {'kind':<9} {'median ms':>10} {'CV':>6} {'GB/s':>8} {'%triad':>7} "
            f"{'GFLOP/s':>8} {'eff':>6}  loops")
    lines = [head, "-" * len(head)]
    for k in rows:
        ident = k.node_id if len(k.node_id) <= idw else "…" + k.node_id[-(idw - 1):]
        if not k.ok:
            lines.append(f"{ident:<{idw}}  {k.kind:<9} FAILED: {k.error}")
            continue
        if k.kind == StatementKind.VIEW:       # an alias: no data moves at run time, no rate, no roof
            rates = f"{'–':>8} {'–':>7} {k.gflops:>8.2f} {'–':>6}"
        else:
            rates = f"{k.gbps:>8.2f} {k.pct_peak_bw:>6.1f}% {k.gflops:>8.2f} {k.efficiency:>6.2f}"
        lines.append(f"{ident:<{idw}}  {k.kind:<9} {k.samples.median_s * 1e3:>10.3f} {k.samples.cv:>6.1%} "
                     f"{rates}  {k.extra.get('schedule', '')}".rstrip())
    return "\n".join(lines)


def cmd_profile(args: argparse.Namespace) -> int:
    from codegen.numba_cpu.threads import default_threads
    from codegen.timing.calibrate import peaks
    from codegen.timing.profiler import ab_ratio, profile_graph
    from codegen.timing.roofline import over_roof
    from codegen.timing.trace import write_trace
    from studio.session.exporting import inputs_for, load_with_history
    graph, steps = load_with_history(args.model, args.history, args.bind)
    threads = args.threads or default_threads()
    feeds = inputs_for(graph, args.inputs)
    pk = peaks(threads, force=args.recalibrate)
    wanted = [k.strip() for k in args.kernels.split(",")] if args.kernels else None
    prof = profile_graph(graph, feeds, kernels=wanted, reps=args.reps, warmup=args.warmup, timeout=args.timeout,
                         threads=threads, peaks=pk)
    print(f"{args.model}: {len(steps)} history steps, {len(prof.kernels)} kernels profiled, {args.reps} reps "
          f"after {args.warmup} warm-up; threads: numba {prof.threads.get('numba_threads')}, "
          f"BLAS {prof.threads.get('blas_threads')}")
    print(f"peaks (calibrated, {threads} thread(s)): triad {pk.bandwidth / 1e9:.2f} GB/s, "
          f"GEMM {pk.flops / 1e9:.1f} GFLOP/s, {pk.describe()}")
    over = over_roof(prof.kernels, pk)
    if over:
        print(f"warning: {len(over)} kernel(s) above the calibrated roof (up to "
              f"{100 * max(k.efficiency for k in over):.0f} %): the peaks were measured low; rerun with --recalibrate "
              "while the machine is quiet")
    print(_table(prof, args.top))
    s = prof.step
    print(f"step: median {s.median_s * 1e3:.2f} ms (min {s.min_s * 1e3:.2f}, max {s.max_s * 1e3:.2f}, CV {s.cv:.1%})")
    for failure in prof.failures:
        print(f"failed: {failure}")
    doc = prof.to_json()
    if args.against:
        other, _ = load_with_history(args.model, args.against, args.bind)
        ab = ab_ratio(graph, other, feeds, reps=args.reps, warmup=args.warmup, threads=threads)
        print(f"A/B: {Path(args.history or args.model).name} / {Path(args.against).name} = {ab.ratio:.3f} "
              f"(median {ab.a.median_s * 1e3:.2f} ms vs {ab.b.median_s * 1e3:.2f} ms, pair spread {ab.pair_spread:.1%})")
        doc["ab"] = {"ratio": ab.ratio, "a_median_s": ab.a.median_s, "b_median_s": ab.b.median_s,
                     "pair_spread": ab.pair_spread}
    if args.trace:
        write_trace(prof, args.trace)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="time every kernel of the training step (CPU backend, out of process)")
    p.add_argument("model", help="the ONNX model")
    p.add_argument("history", nargs="?", default=None, help="a dcstudio-history JSON file to replay first")
    p.add_argument("--kernels", help="comma-separated kernel ids to report (default: all)")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace (Perfetto)")
    p.add_argument("--json", metavar="OUT.json", help="write all figures as JSON")
    p.add_argument("--against", metavar="HISTORY2", help="also report the paired A/B step ratio against this history")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one kernel may run before it is killed")
    p.add_argument("--threads", type=int, default=None,
                   help="numba and BLAS threads (default: $DCSTUDIO_THREADS, else the physical cores of the affinity mask)")
    p.add_argument("--top", type=int, default=None, metavar="N", help="only the N slowest kernels")
    p.add_argument("--recalibrate", action="store_true", help="measure the machine's peaks again")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N", help="bind a symbolic dimension")
    p.add_argument("--inputs", metavar="X.npz", help="your weights and data by input name (default: deterministic "
                   "feeds, whose parameters are only scaled like an initialized model's)")
    p.set_defaults(func=cmd_profile)
