"""The ``dcstudio`` command line.

Sub-commands (more arrive with the transformation, codegen and GUI issues):

- ``inspect MODEL [--bind k=v …] [--optimizer OPT] [--json] [--top N]``: import a
  model and print the kernel table (id, op, bytes read/written, FLOPs,
  intensity), the totals, the compulsory bound and the ratio;
- ``ops``: the ops the importer claims, per domain.

Exit codes: 0 ok, 1 numeric/regression failure, 2 bad input. Errors print one
line (file, node, what to do) without a traceback unless ``--debug``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from ir.errors import StudioError

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(StudioError):
    """A bad command-line argument."""


def parse_bindings(items: Sequence[str]) -> dict[str, int]:
    """``["batch=8", "seq=128"]`` -> ``{"batch": 8, "seq": 128}``; bad items raise UsageError."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit() or int(value) <= 0:
            raise UsageError(f"--bind expects NAME=POSITIVE_INT, got {item!r}")
        out[name.strip()] = int(value)
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000.0
    return f"{n:.2f} GB"


def human_count(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000.0
    return f"{n:.2f}T"


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ir import movement
    from ir.onnx_import import import_model
    graph = import_model(args.model, bindings=parse_bindings(args.bind), optimizer=args.optimizer)
    rep = movement.report(graph)
    moved = exported_traffic(graph, args.exported) if args.exported else None
    if args.json:
        doc = {"model": args.model, "graph": graph.name, "kind": graph.meta.get("kind"),
               "sha256": graph.meta.get("sha256"), "bindings": graph.bindings, **rep.to_json()}
        if moved is not None:
            doc["exported"] = {"backend": moved.backend, "bytes_as_fused": moved.fused,
                               "bytes_as_exported": moved.exported}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return EXIT_OK
    print(_table(graph, rep, args.top))
    if moved is not None:
        print(traffic_lines(moved))
    return EXIT_OK


def exported_traffic(graph, backend: str):
    """``codegen.program.traffic`` of ``graph``'s program for ``backend`` (no kernel is compiled)."""
    from codegen.export.package import backend_named
    from codegen.program.program import build_program
    from codegen.program.traffic import traffic
    chosen = backend_named(backend)
    prog = build_program(graph, chosen.renderer(False), kernels_may_alias=chosen.kernels_may_alias,
                         panels=chosen.panels)
    return traffic(prog, backend)


def traffic_lines(moved, n: int = 3) -> str:
    """The two byte counts and the statements where they differ most."""
    lines = [moved.summary()]
    lines += [f"  {s.node_id}: {s.fused / 1e6:.1f} -> {s.exported / 1e6:.1f} MB ({s.why})"
              for s in moved.largest_differences(n)]
    return "\n".join(lines)


def _table(graph, rep, top: int | None) -> str:
    rows = list(rep.kernels)
    if top:
        rows = sorted(rows, key=lambda k: -k.estimate.bytes)[:top]
    idw = min(60, max([len(k.node_id) for k in rows] + [2]))
    opw = min(28, max([len(k.label) for k in rows] + [2]))
    head = f"{'id':<{idw}}  {'op':<{opw}}  {'read':>11}  {'written':>11}  {'FLOPs':>9}  {'FLOP/B':>7}"
    lines = [f"{graph.name}: {len(rep.kernels)} kernels ({graph.meta.get('kind', '?')} graph)", head,
             "-" * len(head)]
    for k in rows:
        e = k.estimate
        ident = k.node_id if len(k.node_id) <= idw else "…" + k.node_id[-(idw - 1):]
        lines.append(f"{ident:<{idw}}  {k.label[:opw]:<{opw}}  {human_bytes(e.bytes_read):>11}  "
                     f"{human_bytes(e.bytes_written):>11}  {human_count(e.flops):>9}  {e.intensity:>7.2f}")
    t = rep.total
    lines += ["-" * len(head),
              f"total moved      {human_bytes(t.bytes):>11}  ({t.bytes} B: read {t.bytes_read}, written {t.bytes_written})",
              f"lower bound      {human_bytes(rep.bound_bytes):>11}  ({rep.bound_bytes} B: inputs, parameters, "
              "state read once; outputs written once)",
              f"moved / bound    {rep.ratio:>11.2f}x",
              f"FLOPs            {human_count(t.flops):>11}  (intensity {t.intensity:.2f} FLOP/B)",
              f"access volume    {human_count(t.accesses):>11} elements"]
    if top:
        lines.insert(3, f"(top {top} kernels by bytes moved)")
    if graph.meta.get("shape_values_folded"):
        lines.append(f"shape computations folded at import: {graph.meta['shape_values_folded']} values")
    if graph.meta.get("shapes_from_onnxruntime"):
        lines.append(f"shapes from an onnxruntime run: {graph.meta['shapes_from_onnxruntime']} values (inputs of "
                     "the declared shapes; a shape that depends on the data may differ for other inputs)")
    return "\n".join(lines)


def _cmd_ops(args: argparse.Namespace) -> int:
    from ir.claimed_ops import CLAIMED_OPS
    for domain, ops in sorted(CLAIMED_OPS.items()):
        print(f"{domain or 'ai.onnx (default)'} ({len(ops)}): {', '.join(sorted(ops))}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dcstudio", description="Data-centric optimization studio for "
                                "ONNX training graphs.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ins = sub.add_parser("inspect", help="print the kernel table, bytes moved and the lower bound")
    ins.add_argument("model", help="ONNX model (forward, ORT training artifact or joint graph)")
    ins.add_argument("--bind", action="append", default=[], metavar="NAME=N",
                     help="bind a symbolic dimension, e.g. --bind batch=8 (repeatable)")
    ins.add_argument("--optimizer", help="ORT optimizer_model.onnx (default: the one beside MODEL, if any)")
    ins.add_argument("--json", action="store_true", help="print the report as JSON")
    ins.add_argument("--top", type=int, default=None, metavar="N", help="only the N kernels moving most bytes")
    ins.add_argument("--exported", choices=("cpu", "cuda"), default=None, metavar="BACKEND",
                     help="also count the bytes the exported program moves on BACKEND (cpu or cuda) against the "
                          "bytes as fused")
    ins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    ins.set_defaults(func=_cmd_inspect)
    ops = sub.add_parser("ops", help="list the ops the importer supports")
    ops.set_defaults(func=_cmd_ops)
    from studio import export_cmd, open_cmd, profile_cmd, recipe_cmd, replay_cmd, train_graph_cmd, tune_cmd
    for command in (replay_cmd, open_cmd, recipe_cmd, train_graph_cmd, export_cmd, profile_cmd, tune_cmd):
        command.add_parser(sub)                   # in the order ``dcstudio --help`` lists them
    return p


def one_malloc_arena() -> bool:
    """Ask glibc's malloc for one arena shared by every thread (``mallopt(M_ARENA_MAX, 1)``), before
    any worker thread starts. By default each thread that allocates gets an arena of its own, and
    the large arrays a thread frees stay in its arena: ``replay --check`` of a 12-layer BERT step,
    whose oracle runs on a second thread, peaked at 7.7 GB with arenas per thread and 6.7 GB with one
    (as high as with no second thread), in the same time. False where the C library has no mallopt."""
    import ctypes
    try:
        return bool(ctypes.CDLL(None).mallopt(-8, 1))       # M_ARENA_MAX = -8 (malloc.h)
    except (OSError, AttributeError, TypeError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    one_malloc_arena()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except StudioError as e:
        if args.debug:
            raise
        print(f"dcstudio: error: {e.summary}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # the reader went away (`dcstudio inspect M | head`): no traceback, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13                                   # as a shell reports SIGPIPE
    except KeyboardInterrupt:
        print("dcstudio: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
