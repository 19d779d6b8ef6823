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

import numpy as np

from ir.errors import StudioError
from ir.onnx_load import read_model


def _inputs(graph, path: str | None) -> dict[str, np.ndarray]:
    from codegen.numpy_ref.feeds import feeds_for
    feeds = feeds_for(graph)
    if path:
        try:
            with np.load(path, allow_pickle=False) as data:
                given = {k: data[k] for k in data.files}
        except (OSError, ValueError) as e:
            raise StudioError(f"--inputs {path}: cannot read ({type(e).__name__}: {e})") from None
        unknown = sorted(set(given) - set(graph.inputs))
        if unknown:
            raise StudioError(f"--inputs {path}: {unknown[:5]} are not inputs of the graph")
        feeds.update(given)
    return feeds


def load_with_history(model: str, history: str | None, bind: list[str], *, original: bool = False,
                      inputs: str | None = None):
    """The graph after replaying ``history`` (or as imported), and the history's steps; with
    ``original=True`` also ``(feeds, oracle)`` for the package's check: the feeds (``--inputs``
    ``inputs`` over the deterministic ones) and a function returning the ORIGINAL model's oracle on
    them, widened by the steps' stated tolerances, which runs during the replay (``Oracle.start``)."""
    from codegen.oracle import Oracle, stated_tolerance
    from studio.cli import parse_bindings
    from studio.session import load_graph, load_original
    from transforms.history import check_model, load
    from transforms.replay import replay
    hist = load(history) if history is not None else None
    bindings = {**(hist.bindings if hist else {}), **parse_bindings(bind)}
    training = hist.training if hist else None
    graph, proto = (load_original(model, bindings=bindings, training=training) if original else
                    (load_graph(model, bindings=bindings, training=training), None))
    if hist is not None:
        check_model(hist, graph.meta["sha256"], Path(model).name, path=history)
    steps = hist.steps if hist is not None else ()
    if original:
        feeds = _inputs(graph, inputs)
        pending = Oracle.start(graph, proto, feeds)
    if hist is not None:
        replay(graph, hist, path=history, every_peak=False)
    if not original:
        return graph, steps
    return graph, steps, (feeds, lambda: pending.result().widened_to(stated_tolerance(steps)), proto)


def unvalued_parameters(graph, inputs: str | None) -> list[str]:
    """The trained parameters that the model gives no value (graph inputs without an initializer, as in
    onnxruntime-training artifacts, whose values live in ORT's checkpoint) and ``--inputs`` did not either."""
    from ir.containers import Role
    given: set[str] = set()
    if inputs:
        with np.load(inputs, allow_pickle=False) as data:
            given = set(data.files)
    return [n for n in graph.inputs if graph.containers[n].role is Role.PARAMETER and n not in graph.values
            and n not in given]


def eval_forward_of(graph, proto):
    """The eval-mode forward model of a generated training step (``transforms.autodiff.deploy``), or
    None; ``proto`` is the original model or its path (read only when the graph has a forward part)."""
    from ir.onnx_import import FORWARD_KEY
    from transforms.autodiff.deploy import eval_forward
    if FORWARD_KEY not in graph.meta or proto is None:
        return None
    if not hasattr(proto, "graph"):
        proto = read_model(proto)
    return eval_forward(proto)


def write_package(graph, out_dir, backend: str, inputs, history, **options):
    """``export_package`` of ``backend`` (cpu or cuda) stamped with dcstudio's version; the CLI and
    ``Session.export`` both write packages through here."""
    from importlib.metadata import PackageNotFoundError, version

    from codegen.export.package import export_package
    if backend not in ("cpu", "cuda"):
        raise StudioError(f"unknown backend {backend!r}: choose cpu or cuda")
    try:
        ver = version("dcstudio")
    except PackageNotFoundError:
        ver = "unknown"
    return export_package(graph, out_dir, inputs=inputs, history=history, version=ver, backend=backend, **options)


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
        from studio.cli import traffic_lines
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
