"""The reference kernels an exported package carries (``<package>/_ref/``).

Ops without a kernel of their own (convolution, pooling, losses, gathers, …) run
through the NumPy reference kernels, so an exported package needs them without
importing dcstudio. The kernel family files of ``codegen/numpy_ref`` import only NumPy,
the standard library and each other, so they are copied verbatim. Which files qualify is
decided on their source (``ast``): a file whose absolute imports leave ``ALLOWED`` (for
instance one that needs the IR to run an epilogue map) is left out, with every file that
imports it; the ops it registers are then not available to an export, which says so.
``SHARED`` IR modules import only NumPy and the standard library too (Resize's interpolation
matrices, which the gradient rules also build; the float64 erf, which tasklets also evaluate): they
are copied beside the families, and an import of one (``from ir.interpolation import …``) becomes a
sibling import.
"""
from __future__ import annotations

import ast
from pathlib import Path

import codegen.numpy_ref as _numpy_ref
import ir.interpolation
import ir.special

ALLOWED = frozenset({"__future__", "numpy", "math", "typing", "dataclasses", "itertools", "functools",
                     "ml_dtypes", "collections", "operator", "cmath"})
SKIP = frozenset({"__init__", "executor", "maps", "feeds", "kernels"})
"""Not kernel families: the executor and its helpers (they import the IR), and ``kernels.py``
(regenerated: it must import only the copied families)."""

REF_DIR = Path(_numpy_ref.__file__).parent
SHARED = {"interpolation": Path(ir.interpolation.__file__), "special": Path(ir.special.__file__)}
"""Module stem -> path of each IR module the kernels import."""


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(absolute top-level modules, sibling modules) imported anywhere in ``path``."""
    absolute, siblings = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            absolute.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").startswith("ir.") and node.module[3:] in SHARED:
                siblings.add(node.module[3:])
            elif node.level == 0:
                absolute.add((node.module or "").split(".")[0])
            elif node.level == 1 and node.module:
                siblings.add(node.module.split(".")[0])
            elif node.level == 1:
                siblings.update(a.name for a in node.names)
            else:
                absolute.add("<outside the package>")
    return absolute, siblings


def families() -> dict[str, Path]:
    """Module stem -> path of every reference file an export may copy."""
    candidates = {p.stem: p for p in sorted(REF_DIR.glob("*.py")) if p.stem not in SKIP} | SHARED
    deps = {stem: _imports(path) for stem, path in candidates.items()}
    ok = {stem for stem, (absolute, _) in deps.items() if absolute <= ALLOWED}
    changed = True
    while changed:
        changed = False
        for stem in sorted(ok):
            if not deps[stem][1] <= ok:
                ok.discard(stem)
                changed = True
    return {stem: candidates[stem] for stem in sorted(ok)}


def write_reference(target: Path) -> list[str]:
    """Copy the qualifying files into ``target`` (a package dir); returns the module stems."""
    target.mkdir(parents=True, exist_ok=True)
    chosen = families()
    for stem, path in chosen.items():
        text = path.read_text(encoding="utf-8")
        for shared in SHARED:
            text = text.replace(f"from ir.{shared} import", f"from .{shared} import")
        (target / f"{stem}.py").write_text(text, encoding="utf-8")
    kernel_families = [s for s in chosen if s not in ("registry", "contraction", *SHARED)]
    (target / "__init__.py").write_text('"""NumPy reference kernels, copied from dcstudio\'s codegen/numpy_ref '
                                         '(ops without a kernel of their own run here)."""\n', encoding="utf-8")
    body = "".join(f"from . import {s}  # noqa: F401\n" for s in kernel_families)
    (target / "kernels.py").write_text('"""Imports every copied kernel family, which fills registry.NUMPY_KERNELS."""\n'
                                       + body, encoding="utf-8")
    return list(chosen)


def module_of_kernel(fn) -> str:
    """The family stem a reference kernel function is defined in."""
    return getattr(fn, "__module__", "").rsplit(".", 1)[-1]
