"""``export_package``: a graph as a standalone Python package that needs only NumPy and numba.

Layout of ``DIR`` (its name is the package name, so ``cd parent && python -m DIR --check``)::

    DIR/__init__.py     Model, INPUTS, OUTPUTS
    DIR/__main__.py     --check (one step on stored inputs vs stored references), --time N
    DIR/model.py        the program: header, memory plan (ARENA_BYTES, SLOT_OF, SHARED_BUFFERS and a
                        comment block: the honoured memory_reuse buffers, the fallbacks and why),
                        one statement per kernel, Model (``numba_cpu.module``)
    DIR/kernels/        the numba loop-nest kernels, one module ``k_<sha>.py`` each (with the
                        fastmath helpers it calls), byte-identical to dcstudio's kernel cache
    DIR/_lib.py         BLAS calls and buffers (a copy of ``codegen/numba_cpu/library.py``)
    DIR/_ref/           NumPy reference kernels for the ops without a kernel (``vendor``)
    DIR/weights.npz     initializers, folded constants, default inputs (parameters, optimizer state)
    DIR/check.npz       inputs ``in_<k>``, the ORIGINAL model's outputs ``out_<k>`` (float64 truth,
                        k = position in INPUTS / OUTPUTS) with per-output comparison scales
                        ``scale_<k>`` and tolerances ``tol_<k>``, and ``about`` (what they are)

The header of ``model.py`` names the source model and its sha256, every history step and
the generator version. Reference outputs and tolerances come from ``codegen.oracle`` on the
original model (``export_package(oracle=…)``), so an export of a wrongly transformed graph
fails its own ``--check``. Nothing from the model reaches the code except
through ``codegen.export.namespace`` (identifiers, ASCII string literals, comments).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from codegen.export import vendor
from codegen.export.namespace import comment, literal
from codegen.numba_cpu import library
from codegen.numba_cpu.kernel_cache import kernel_module
from codegen.numba_cpu.module import module_text
from codegen.numba_cpu.loopnest import KernelSource
from codegen.numba_cpu.program import Program, build_program
from codegen.numpy_ref.registry import lookup
from codegen.oracle import Oracle, comparison_scales
from ir.containers import Role
from ir.errors import StudioError
from ir.graph import Graph

GENERATOR = "dcstudio codegen.export 1"


@dataclass(frozen=True)
class Backend:
    """What differs between backends in a package: kernels, their modules and the library."""

    name: str
    requires: str                                        # what the package needs, for its docstring
    kernel_module: Callable[[KernelSource], str]         # text of kernels/k_<sha>.py
    kernels_init: Callable[[list[str]], str]             # text of kernels/__init__.py
    library: Path                                        # copied to _lib.py
    make_kernel: Callable | None = None                  # map -> KernelSource (None: numba loop nest)


KERNELS_INIT = '''"""The numba kernels of model.py, one module per kernel (named by the hash of its text).

Each is imported under the canonical name ``dcstudio_kernel_<name>`` — the name dcstudio's
kernel cache uses — so numba's cached machine code is valid wherever the file lives.
"""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    module_name = "dcstudio_kernel_" + name
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, os.path.join(_HERE, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


'''


def cpu_kernels_init(names: list[str]) -> str:
    return KERNELS_INIT + "".join(f"{name} = _load({literal(name)})\n" for name in names)


CPU = Backend("cpu", "NumPy + numba", kernel_module, cpu_kernels_init, Path(library.__file__))


class ExportError(StudioError):
    """The graph cannot be exported (the message names the node and the reason)."""


@dataclass
class ExportResult:
    path: Path
    package: str
    kernels: int
    statements: dict[str, int]
    files: list[str] = field(default_factory=list)


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


def header(graph: Graph, history: Sequence | None, version: str) -> str:
    """``#`` lines: source model and hash, the history's steps, the generator."""
    lines = [f"# generated by {GENERATOR} (dcstudio {version}); do not edit",
             f"# source: {comment(Path(graph.meta.get('source', graph.name)).name)}",
             f"# source sha256: {comment(graph.meta.get('sha256', 'unknown'))}"]
    steps = list(history or ())
    lines.append(f"# history: {len(steps)} step{'s' if len(steps) != 1 else ''}")
    for k, step in enumerate(steps, start=1):
        params = comment(step.params, 60) if step.params else ""
        where = (f"pass ×{step.applications}" if getattr(step, "applications", None) is not None
                 else "@ " + comment(", ".join(step.anchors), 120))
        lines.append(f"#   {k}. {comment(step.transformation, 40)} {params} {where}")
    return "\n".join(lines) + "\n"


def _check_exportable(prog: Program, vendored: set[str]) -> None:
    problems = [f"'{node.id}': {reason}" for node, reason in prog.extern.values()]
    for st in prog.statements:
        if st.kind == "reference":
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


def check_data(graph: Graph, inputs: Mapping[str, np.ndarray], oracle: Oracle) -> dict[str, np.ndarray]:
    """``check.npz`` contents, by position: inputs ``in_k``; for each output the original model's
    truth ``out_k`` (float64), its comparison scale ``scale_k`` and tolerance ``tol_k`` (0: exact);
    ``about``: what the references are (the oracle's basis and notes)."""
    data = {f"in_{k}": np.asarray(inputs[n]) for k, n in enumerate(graph.inputs) if n in inputs}
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
                   version: str = "0", parallel: bool = False, rtol: float | None = None,
                   defaults: Sequence[str] | None = None, backend: Backend = CPU,
                   oracle: Oracle | None = None) -> ExportResult:
    """Write the package (see the module docstring). ``inputs`` feed the stored check; the
    inputs named in ``defaults`` (default: parameters and optimizer state) become the
    model's default values in ``weights.npz``. ``oracle`` is the ORIGINAL model's, built on
    ``inputs`` (``Oracle.of(original_graph, proto, inputs)``); without one the graph as given
    stands for the original. ``rtol`` replaces every derived tolerance (an override)."""
    out = Path(out_dir)
    name = package_name(out)
    check_replaceable(out)
    prog = build_program(graph, parallel=parallel, make_kernel=backend.make_kernel)
    tmp = out.with_name(f".{name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    vendored = set(vendor.write_reference(tmp / "_ref"))
    try:
        _check_exportable(prog, vendored)
        oracle = _oracle(graph, inputs, oracle, rtol)
        _write(prog, graph, tmp, inputs, history, version, oracle, defaults, backend)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    kinds: dict[str, int] = {}
    for st in prog.statements:
        kinds[st.kind] = kinds.get(st.kind, 0) + 1
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return ExportResult(out, name, len(prog.kernels), kinds, files)


def _oracle(graph: Graph, inputs, oracle: Oracle | None, rtol: float | None) -> Oracle:
    if oracle is None:
        oracle = Oracle.of(graph, None, inputs)
        oracle.notes.append("the exported graph stands for the original (no original model was given)")
    return oracle.with_tolerance(rtol) if rtol is not None else oracle


def _write_kernels(prog: Program, kdir: Path, backend: Backend) -> None:
    """``kernels/``: one module per kernel (CPU: byte-identical to dcstudio's kernel cache)."""
    kdir.mkdir()
    names = sorted(prog.kernels)
    for name in names:
        (kdir / f"{name}.py").write_text(backend.kernel_module(prog.kernels[name]), encoding="utf-8")
    (kdir / "__init__.py").write_text(backend.kernels_init(names), encoding="utf-8")


def _write(prog: Program, graph: Graph, tmp: Path, inputs, history, version: str, oracle: Oracle, defaults,
           backend: Backend) -> None:
    doc = (f"One training step of {graph.name!a}, generated by dcstudio: a standalone module "
           f"({backend.requires}).")
    chosen = defaults if defaults is not None else [
        n for n in graph.inputs if graph.containers[n].role in (Role.PARAMETER, Role.OPTIMIZER_STATE)]
    for n in chosen:
        if n in inputs:
            prog.arrays[prog.var(n)] = np.asarray(inputs[n])    # default inputs: Model.state
    (tmp / "model.py").write_text(module_text(prog, mode="export", doc=doc, header=header(graph, history, version)),
                                  encoding="utf-8")
    _write_kernels(prog, tmp / "kernels", backend)
    (tmp / "_lib.py").write_text(backend.library.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp / "__init__.py").write_text(f'"""{doc}"""\nfrom .model import INPUTS, OUTPUTS, Model  # noqa: F401\n',
                                     encoding="utf-8")
    check = check_data(graph, inputs, oracle)     # before writing anything else: it may refuse
    (tmp / "__main__.py").write_text(MAIN, encoding="utf-8")
    np.savez(tmp / "weights.npz", **prog.arrays)
    np.savez(tmp / "check.npz", **check)


MAIN = '''"""python -m <package> --check: one step on the stored inputs, compared with the ORIGINAL
model's outputs (float64, computed by dcstudio at export time) within per-output tolerances
derived from onnxruntime's own fp32 error. --time N also times N steps after one warm-up step."""
import argparse
import os
import sys
import time

import numpy as np

from .model import INPUTS, OUTPUTS, Model


def _inputs(data):
    return {name: data[f"in_{k}"] for k, name in enumerate(INPUTS) if f"in_{k}" in data}


def _error(got, ref, scale):
    if got.shape != ref.shape:
        return float("inf")
    diff = np.where((got == ref) | (np.isnan(got) & np.isnan(ref)), 0.0, np.abs(got - ref))
    return float("inf") if np.isnan(diff).any() else float(diff.max(initial=0.0)) / scale


def check(model, data, rtol=None):
    out = model.step(**_inputs(data))
    print(f"compared with {data['about']}")
    failures = 0
    for k, name in enumerate(OUTPUTS):
        ref = data[f"out_{k}"].astype(np.float64)
        got = out[name].get() if hasattr(out[name], "get") else out[name]   # a device array comes home
        got = np.asarray(got, np.float64)
        tol = float(data[f"tol_{k}"]) if rtol is None else rtol
        if float(data[f"tol_{k}"]) == 0.0:
            ok, text = got.shape == ref.shape and np.array_equal(got, ref), "exact"
        else:
            err = _error(got, ref, float(data[f"scale_{k}"]))
            ok, text = err <= tol, f"error {err:.3g} (tolerance {tol:.3g})"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name!a}: {text}")
    print(f"{len(OUTPUTS) - failures}/{len(OUTPUTS)} outputs match")
    return failures == 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare one step with the stored references")
    parser.add_argument("--rtol", type=float, default=None,
                        help="override: one tolerance for every output instead of the stored ones")
    parser.add_argument("--time", type=int, default=0, metavar="N", help="time N steps (after a warm-up step)")
    args = parser.parse_args(argv)
    with np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.npz")) as f:
        data = {key: f[key] for key in f.files}
    model = Model()
    ok = check(model, data, args.rtol) if args.check or not args.time else True
    if args.time:
        feeds = _inputs(data)
        model.step(**feeds)
        times = []
        for _ in range(args.time):
            t0 = time.perf_counter()
            model.step(**feeds)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"step: median {times[len(times) // 2] * 1e3:.2f} ms, min {times[0] * 1e3:.2f} ms over {args.time}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''
