"""``export_package``: a graph as a standalone Python package that needs only NumPy and numba.

Layout of ``DIR`` (its name is the package name, so ``cd parent && python -m DIR --check``)::

    DIR/__init__.py     Model, INPUTS, OUTPUTS
    DIR/__main__.py     python -m DIR: --check (one step on stored inputs vs stored references), --time N,
                        train --data BATCHES.npz --steps N, export-onnx OUT.onnx (``_cli.py``)
    DIR/_runtime.py     the Model class: training state, checkpoints, ONNX (``codegen/program/runtime.py``)
    DIR/_cli.py         the command line (``codegen/export/package_cli.py``)
    DIR/model.py        the program: header, memory plan (ARENA_BYTES, SLOT_OF, SHARED_BUFFERS and a
                        comment block: the honoured memory_reuse buffers, the fallbacks and why),
                        one statement per kernel, Model (``codegen.program.module``)
    DIR/kernels/        the numba loop-nest kernels, one module ``k_<what>_<sha>.py`` each (with the
                        fastmath helpers it calls), byte-identical to dcstudio's kernel cache
    DIR/_lib.py         BLAS calls and buffers (a copy of the backend's library, ``codegen/numba_cpu/library.py``)
    DIR/convolution.py  the library's parts, copied under their own names (CPU: the convolution kernels)
    DIR/_ref/           NumPy reference kernels for the ops without a kernel (``vendor``)
    DIR/weights.npz     initializers, folded constants, default inputs (parameters, running statistics)
    DIR/predict.py      a generated step's forward model in eval mode (``Model.forward``), with
                        predict_weights.npz (its constants) and forward.onnx (the model to deploy,
                        without the trained tensors: ``Model.export_onnx`` writes them in)
    DIR/check.npz       inputs ``in_<k>`` (but those weights.npz holds as defaults: the step takes them
                        from there), the ORIGINAL model's outputs ``out_<k>`` (float64 truth,
                        k = position in INPUTS / OUTPUTS) with per-output comparison scales
                        ``scale_<k>`` and tolerances ``tol_<k>``, and ``about`` (what they are)

The header of ``model.py`` names the source model and its sha256, the history (its file and
hash, how many steps of each transformation) and the generator version. Reference outputs and tolerances come from ``codegen.oracle`` on the
original model (``export_package(oracle=…)``), so an export of a wrongly transformed graph
fails its own ``--check``. Nothing from the model reaches the code except
through ``codegen.program.namespace`` (identifiers, ASCII string literals, comments).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

import numpy as np

from codegen.export import package_cli, vendor
from codegen.numpy_ref.registry import lookup
from codegen.oracle import Oracle, comparison_scales
from codegen.program import runtime
from codegen.program.backend import Backend
from codegen.program.module import module_text
from codegen.program.namespace import comment
from codegen.program.program import Program, build_program
from codegen.program.module_plan import plan_module
from codegen.program.schedule import Schedule, fork_join
from codegen.program.traffic import Traffic, traffic
from ir.containers import Role
from ir.errors import StudioError
from ir.graph import Graph
from ir.onnx_import import import_proto
from ir.statements import StatementKind
from transforms.autodiff.deploy import EvalForward

GENERATOR = "dcstudio codegen.export 1"


def backend_named(name: str) -> Backend:
    """The backend record of ``name`` (``cpu``, ``cuda``), imported only when asked for."""
    if name == "cpu":
        from codegen.numba_cpu.backend import CPU
        return CPU
    if name == "cuda":
        from codegen.cupy_cuda.backend import CUDA
        return CUDA
    raise ExportError(f"unknown backend {name!r}; choose cpu or cuda")


class ExportError(StudioError):
    """The graph cannot be exported (the message names the node and the reason)."""


@dataclass
class ExportResult:
    path: Path
    package: str
    kernels: int
    statements: dict[str, int]
    files: list[str] = field(default_factory=list)
    traffic: Traffic | None = None          # bytes as fused against bytes as exported


def package_name(out_dir: Path) -> str:
    name = out_dir.name
    if not name.isidentifier() or name.startswith("_"):
        raise ExportError(f"the output directory name {name!r} must be a Python identifier (it is the package "
                          "name: python -m <name> --check), e.g. bert_step")
    return name


def check_replaceable(out: Path) -> None:
    """Refuse to delete a folder that is not empty and not an earlier export (its model.py
    carries our generator line near the top): the user's files are never removed."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder; choose another output folder")
    if not any(out.iterdir()):
        return
    model = out / "model.py"
    try:
        head = model.read_text(encoding="utf-8").split("\n", 60)[:60]
    except (OSError, UnicodeDecodeError):
        head = []
    if not any(line.startswith(f"# generated by {GENERATOR}") for line in head):
        raise ExportError(f"{out} is not empty and is not an earlier dcstudio export; choose an empty or new "
                          "folder (nothing was written)")


def header(graph: Graph, history: Sequence | None, version: str, history_file: str | Path | None = None) -> str:
    """``#`` lines: source model and hash, the history summarized (its file and hash, steps per
    transformation in order of first use), the generator. The steps themselves are in the file:
    ``dcstudio replay`` prints them."""
    lines = [f"# generated by {GENERATOR} (dcstudio {version}); do not edit",
             f"# source: {comment(Path(graph.meta.get('source', graph.name)).name)}",
             f"# source sha256: {comment(graph.meta.get('sha256', 'unknown'))}"]
    steps = list(history or ())
    where = f"(steps sha256 {_steps_digest(steps)[:16]})"
    if history_file is not None:
        path = Path(history_file)
        file_digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "unreadable"
        where = f"from {comment(path.name, 60)} (file sha256 {file_digest}, {where[1:-1]})"
    lines.append(f"# history: {len(steps)} step{'s' if len(steps) != 1 else ''} {where}")
    counts: dict[str, list[int]] = {}
    for step in steps:
        c = counts.setdefault(str(step.transformation), [0, 0])
        c[0] += 1
        if getattr(step, "applications", None) is not None:
            c[1] += int(step.applications)
    parts = [f"{comment(name, 40)} x{n}" + (f" ({applied} applications)" if applied else "")
             for name, (n, applied) in counts.items()]
    if parts:
        lines.append("#   " + ", ".join(parts))
    return "\n".join(lines) + "\n"


def _steps_digest(steps: Sequence) -> str:
    """sha256 of the steps' JSON (what replay reads), so two exports of one history compare equal."""
    data = [step.to_json() if hasattr(step, "to_json") else
            {"transformation": step.transformation, "params": step.params, "anchors": list(step.anchors)}
            for step in steps]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _check_exportable(prog: Program, vendored: set[str]) -> None:
    problems = [f"'{node.id}': {reason}" for node, reason in prog.extern.values()]
    for st in prog.statements:
        if st.kind == StatementKind.REFERENCE:
            node = prog.graph.nodes[st.node_id]
            fn = lookup(node.domain, node.op_type)
            if vendor.module_of_kernel(fn) not in vendored:
                problems.append(f"'{node.id}': the reference kernel of {node.qualified_type} needs dcstudio "
                                f"({vendor.module_of_kernel(fn)}.py imports the IR)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ExportError(f"{len(problems)} node(s) cannot run without dcstudio: {shown}")


def mismatches(graph: Graph, want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], rtol: float) -> list[str]:
    """Outputs whose max error exceeds ``rtol`` × their ``comparison_scales`` (names + error)."""
    scales = comparison_scales(graph, want)
    bad = []
    for n, ref in want.items():
        val = got.get(n)
        if val is None or np.shape(val) != np.shape(ref):
            bad.append(f"{n}: missing or shape {np.shape(val)} != {np.shape(ref)}")
            continue
        err = float(np.abs(np.asarray(val, np.float64) - np.asarray(ref, np.float64)).max(initial=0.0)) / scales[n]
        if not err <= rtol:
            bad.append(f"{n}: relative error {err:.3g} > {rtol:g}")
    return bad


def check_data(graph: Graph, inputs: Mapping[str, np.ndarray], oracle: Oracle,
               defaults: Collection[str] = ()) -> dict[str, np.ndarray]:
    """``check.npz`` contents, by position: inputs ``in_k`` but the ``defaults`` (the same arrays are the
    package's default inputs in ``weights.npz``, which the step uses for an input not given: a
    12-layer BERT step's parameters and optimizer state are 0.7 GB); for each output the original model's
    truth ``out_k`` (float64), its comparison scale ``scale_k`` and tolerance ``tol_k`` (0: exact);
    ``about``: what the references are (the oracle's basis and notes)."""
    data = {f"in_{k}": np.asarray(inputs[n]) for k, n in enumerate(graph.inputs) if n in inputs and n not in defaults}
    for k, n in enumerate(graph.outputs):
        if n in oracle.truth:
            data[f"out_{k}"], scale, tol = oracle.truth[n], oracle.scales[n], oracle.tolerances[n]
        elif n in oracle.exact:
            data[f"out_{k}"], scale, tol = oracle.exact[n], 1.0, 0.0
        else:
            raise ExportError(f"output '{n}' is not an output of the original model, so the package's --check "
                              "has nothing to compare it with; export a graph with the original's outputs")
        data[f"scale_{k}"] = np.asarray(scale, np.float64)
        data[f"tol_{k}"] = np.asarray(tol, np.float64)
    notes = "; ".join(oracle.notes)
    data["about"] = np.asarray(f"the original model's outputs ({oracle.basis}{'; ' + notes if notes else ''})")
    return data


def export_package(graph: Graph, out_dir: str | Path, *, inputs: Mapping[str, np.ndarray], history: Sequence = (),
                   version: str = "0", parallel: bool = True, rtol: float | None = None,
                   defaults: Sequence[str] | None = None, backend: Backend | str = "cpu",
                   oracle: Oracle | Callable[[], Oracle] | None = None, history_file: str | Path | None = None,
                   workers: int = 2, forward: EvalForward | None = None) -> ExportResult:
    """Write the package (see the module docstring). ``inputs`` feed the stored check; the
    inputs named in ``defaults`` (default: parameters and BatchNorm running statistics) become the
    model's default values in ``weights.npz`` (optimizer state starts at zeros: ``Model``).
    ``forward``: the eval-mode forward model of a generated step (``transforms.autodiff.deploy``),
    compiled as ``predict.py`` for ``Model.forward`` and written as ``forward.onnx``. ``oracle`` is the ORIGINAL model's, built on
    ``inputs`` (``Oracle.of(original_graph, proto, inputs)``), or a function that returns it, called
    once the kernels are written (``Oracle.start(…).result``: it may run meanwhile); without one the graph as given
    stands for the original. ``rtol`` replaces every derived tolerance (an override). ``workers``:
    the CPU step runs independent statements side by side on that many threads
    (``codegen.program.schedule``; 1: strictly in order)."""
    backend = backend_named(backend) if isinstance(backend, str) else backend
    out = Path(out_dir)
    name = package_name(out)
    check_replaceable(out)
    prog = build_program(graph, backend.renderer(parallel), kernels_may_alias=backend.kernels_may_alias,
                         panels=backend.panels)
    schedule = fork_join(prog, workers) if backend.name == "cpu" and workers > 1 else None
    predict = None
    if forward is not None:
        predict = (build_program(import_proto(forward.program, name=f"{graph.name}-forward"),
                                 backend.renderer(parallel), kernels_may_alias=backend.kernels_may_alias,
                                 panels=backend.panels), forward)
    tmp = out.with_name(f".{name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    vendored = set(vendor.write_reference(tmp / "_ref"))
    try:
        for p in [prog] + ([predict[0]] if predict else []):
            _check_exportable(p, vendored)
        moved = _write(prog, schedule, graph, tmp, inputs, (history, history_file), version,
                       lambda: _oracle(graph, inputs, oracle, rtol), defaults, backend, predict)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    kinds: dict[str, int] = {}
    for st in prog.statements:
        kinds[st.kind] = kinds.get(st.kind, 0) + 1
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return ExportResult(out, name, len(prog.kernels), kinds, files, moved)


def _oracle(graph: Graph, inputs, oracle, rtol: float | None) -> Oracle:
    if callable(oracle):
        oracle = oracle()
    if oracle is None:
        oracle = Oracle.of(graph, None, inputs)
        oracle.notes.append("the exported graph stands for the original (no original model was given)")
    return oracle.with_tolerance(rtol) if rtol is not None else oracle


def _write_kernels(progs: list[Program], kdir: Path, backend: Backend) -> None:
    """``kernels/``: one module per kernel of the programs (CPU: byte-identical to dcstudio's kernel cache)."""
    kdir.mkdir()
    kernels = {name: source for prog in progs for name, source in prog.kernels.items()}
    for name in sorted(kernels):
        (kdir / f"{name}.py").write_text(backend.kernel_module(kernels[name]), encoding="utf-8")
    (kdir / "__init__.py").write_text(backend.kernels_init(sorted(kernels)), encoding="utf-8")


def _write_predict(prog: Program, forward: EvalForward, tmp: Path, name: str) -> None:
    """``predict.py`` (the eval program ``Model.forward`` runs), its constants and ``forward.onnx``."""
    doc = f"The forward model of {name} in eval mode, generated by dcstudio (Model.forward runs it)."
    (tmp / "predict.py").write_text(module_text(prog, mode="predict", doc=doc), encoding="utf-8")
    np.savez(tmp / "predict_weights.npz", **prog.arrays)
    (tmp / "forward.onnx").write_bytes(forward.deploy.SerializeToString())


def _write(prog: Program, schedule: Schedule | None, graph: Graph, tmp: Path, inputs, history, version: str, oracle: Callable[[], Oracle],
           defaults, backend: Backend, predict: tuple[Program, EvalForward] | None) -> Traffic:
    name = ascii(graph.name).replace('"', "'").replace("\\", "/")     # nothing that could end a docstring
    doc = f"One training step of {name}, generated by dcstudio: a standalone module ({backend.requires})."
    chosen = defaults if defaults is not None else [
        n for n in graph.inputs if graph.containers[n].role in (Role.PARAMETER, Role.STATISTIC)]
    chosen = [n for n in chosen if n in inputs]
    for n in chosen:
        prog.arrays[prog.var(n)] = np.asarray(inputs[n])    # default inputs: Model.state
    moved = traffic(prog, backend.name)
    head = header(graph, history[0], version, history[1]) + f"# {moved.summary()}\n"
    text = module_text(prog, mode="export", doc=doc, header=head, predict=bool(predict),
                       plan=plan_module(prog, schedule))      # planned whole, then printed
    (tmp / "model.py").write_text(text, encoding="utf-8")
    if predict:
        _write_predict(*predict, tmp, name)
    _write_kernels([prog] + ([predict[0]] if predict else []), tmp / "kernels", backend)
    (tmp / "_lib.py").write_text(backend.library.read_text(encoding="utf-8"), encoding="utf-8")
    for source, target in ((runtime.__file__, "_runtime.py"), (package_cli.__file__, "_cli.py")):
        (tmp / target).write_text(Path(source).read_text(encoding="utf-8"), encoding="utf-8")
    for part in backend.library_parts:
        (tmp / part.name).write_text(part.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp / "__init__.py").write_text(f'"""{doc}"""\nfrom .model import INPUTS, OUTPUTS, Model  # noqa: F401\n',
                                     encoding="utf-8")
    check = check_data(graph, inputs, oracle(), set(chosen))     # before writing anything else: it may refuse
    (tmp / "__main__.py").write_text(MAIN, encoding="utf-8")
    np.savez(tmp / "weights.npz", **prog.arrays)
    np.savez(tmp / "check.npz", **check)
    return moved


MAIN = '''"""python -m <package>: --check, --time N, train, export-onnx (the command line is _cli.py)."""
import sys

from ._cli import main
from .model import Model

if __name__ == "__main__":
    sys.exit(main(Model, __package__))
'''
