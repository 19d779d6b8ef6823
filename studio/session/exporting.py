"""A model and its history as the commands and the window export them: the graph after replaying a
history (with the original model's oracle and inputs), the eval forward model, the written package, and
the bytes an exported program moves."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ir import dtypes
from ir.errors import StudioError
from ir.onnx_load import read_model


def inputs_for(graph, path: str | None, label: str = "--inputs") -> dict[str, np.ndarray]:
    """The deterministic feeds of ``graph``, with the arrays of inputs file ``path`` over them
    (``read_inputs``)."""
    return over_feeds(graph, read_inputs(graph, path, label) if path else {})


def over_feeds(graph, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The deterministic feeds of ``graph`` with those ``given`` arrays over them that it takes as inputs."""
    from codegen.numpy_ref.feeds import feeds_for
    return {**feeds_for(graph), **{k: v for k, v in given.items() if k in graph.inputs}}


def read_inputs(graph, path: str, label: str = "--inputs") -> dict[str, np.ndarray]:
    """The arrays of inputs file ``path`` (by input name): a user's weights and data, checked against the
    graph's inputs and their shapes, and converted to the input's dtype where that keeps their kind (float64
    data for a float32 input; not floats for int token ids). Errors name ``label`` and the file."""
    where = f"{label} {path}"
    try:
        with np.load(path, allow_pickle=False) as data:
            given = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise StudioError(f"{where}: cannot read ({type(e).__name__}: {e})") from None
    unknown = sorted(set(given) - set(graph.inputs))
    if unknown:
        raise StudioError(f"{where}: {unknown[:5]} are not inputs of the graph")
    wanted = {k: (graph.container(k).concrete_shape(graph.bindings), dtypes.to_numpy(graph.container(k).dtype))
              for k in given}
    wrong = [f"'{k}' has shape {v.shape}, the graph takes {wanted[k][0]}" for k, v in given.items()
             if v.shape != tuple(wanted[k][0])]
    wrong += [f"'{k}' is {v.dtype}, the graph takes {wanted[k][1]}" for k, v in given.items()
              if not np.can_cast(v.dtype, wanted[k][1], "same_kind")]
    if wrong:
        raise StudioError(f"{where}: {'; '.join(wrong[:3])}")
    return {k: v.astype(wanted[k][1], copy=False) for k, v in given.items()}


def load_with_history(model: str, history: str | None, bind: list[str], *, original: bool = False,
                      inputs: str | None = None):
    """The graph after replaying ``history`` (or as imported), and the history's steps; with
    ``original=True`` also ``(feeds, oracle)`` for the package's check: the feeds (``--inputs``
    ``inputs`` over the deterministic ones) and a function returning the ORIGINAL model's oracle on
    them, widened by the steps' stated tolerances, which runs during the replay (``Oracle.start``)."""
    from codegen.oracle import Oracle, stated_tolerance
    from studio.text import parse_bindings
    from studio.session.loading import load_graph, load_original
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
        feeds = inputs_for(graph, inputs)
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


def exported_traffic(graph, backend: str):
    """``codegen.program.traffic`` of ``graph``'s program for ``backend`` (no kernel is compiled)."""
    from codegen.export.package import backend_named
    from codegen.program.program import build_program
    from codegen.program.traffic import traffic
    chosen = backend_named(backend)
    prog = build_program(graph, chosen.renderer(False), kernels_may_alias=chosen.kernels_may_alias,
                         panels=chosen.panels)
    return traffic(prog, backend)
