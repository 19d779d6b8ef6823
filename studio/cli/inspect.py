"""``dcstudio inspect MODEL [--bind k=v …] [--optimizer OPT] [--json] [--top N] [--exported BACKEND]``: import a
model and print the kernel table (id, op, bytes read/written, FLOPs, intensity), the totals, the compulsory
bound and the ratio; ``dcstudio ops``: the ops the importer claims, per domain."""
from __future__ import annotations

import argparse
import json
import sys

from studio.session.exporting import exported_traffic
from studio.text import human_bytes, human_count, parse_bindings, traffic_lines


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
        return 0
    print(_table(graph, rep, args.top))
    if moved is not None:
        print(traffic_lines(moved))
    return 0


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
    return 0


def add_parser(sub) -> None:
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
