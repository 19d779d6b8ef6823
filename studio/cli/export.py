"""``dcstudio export MODEL [HISTORY] -o DIR --backend cpu|cuda``: a standalone package.

Imports the model (as the history's training options and bindings say), replays the
history headless, and writes the package ``DIR`` (``codegen.export.package`` for the CPU
backend, ``codegen.cupy_cuda.backend`` for CUDA). The stored check inputs are the
deterministic feeds of ``codegen.numpy_ref.feeds`` or the arrays of ``--inputs X.npz``
(keys = input names); their reference outputs are the ORIGINAL model's (``codegen.oracle``:
float64 truth, per-output tolerances), computed now. Prints what was written
and how to check it: ``cd PARENT && python -m NAME --check``.

Exit codes: 0 ok, 2 bad input (unreadable model or history, a step that does not replay,
a graph the backend cannot export — the message names the node).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from studio.session.exporting import eval_forward_of, load_with_history, unvalued_parameters, write_package


def cmd_export(args: argparse.Namespace) -> int:
    graph, steps, (feeds, oracle, proto) = load_with_history(args.model, args.history, args.bind, original=True,
                                                             inputs=args.inputs)
    res = write_package(graph, args.output, args.backend, feeds, steps, parallel=args.parallel, rtol=args.rtol,
                        oracle=oracle, history_file=args.history, workers=args.workers,
                        forward=eval_forward_of(graph, proto))
    out = Path(res.path).resolve()
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(res.statements.items()))
    print(f"exported {args.model} ({len(steps)} history steps) to {out} [{args.backend}]: "
          f"{res.kernels} generated kernels; statements: {kinds}")
    if res.traffic is not None:
        from studio.text import traffic_lines
        print(traffic_lines(res.traffic))
    unvalued = unvalued_parameters(graph, args.inputs)
    if unvalued:
        shown = ", ".join(unvalued[:3]) + (", …" if len(unvalued) > 3 else "")
        print(f"note: {len(unvalued)} parameters ({shown}) have no value in the model: it takes them as inputs "
              "without initializers, as onnxruntime-training artifacts do (ORT keeps them in its checkpoint). The "
              "package's defaults for them are the check's generated inputs, not your weights: export with "
              "--inputs WEIGHTS.npz (arrays by parameter name), or call Model().load_state_dict(...) before training")
    print(f"check it: cd {out.parent} && python -m {res.package} --check")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write the (optimized) training step as a standalone Python package")
    p.add_argument("model", help="the ONNX model")
    p.add_argument("history", nargs="?", default=None, help="a dcstudio-history JSON file to replay first")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="package directory to write (its name is the package name; replaced if it exists)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--inputs", metavar="X.npz", help="inputs for the stored check (default: deterministic feeds)")
    p.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=True,
                   help="CPU: run large kernels' outer loops on all threads (default; --no-parallel: each kernel on "
                        "one thread, which compiles about twice as fast the first time)")
    p.add_argument("--workers", type=int, default=2, metavar="N",
                   help="CPU: run up to N independent statements side by side (default 2; 1: strictly in order)")
    p.add_argument("--rtol", type=float, default=None,
                   help="override: one tolerance for every output of the package's --check instead of the derived "
                        "ones (K x onnxruntime's fp32 error against the original model's float64 truth)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N", help="bind a symbolic dimension")
    p.set_defaults(func=cmd_export)
