"""The layering contract of DESIGN §1 and STYLE "Dependency direction", checked on the source with ``ast``.

    ir  <-  transforms  <-  codegen  <-  studio  <-  studio/gui

A module may import its own layer and the layers below it, never one above (relative imports included).
Inside codegen (DESIGN "codegen/program/"): ``codegen/program/`` is backend-neutral and imports no backend,
no export and no timing; a backend (``numba_cpu/``, ``cupy_cuda/``) imports no other backend and nothing
from ``codegen/export/`` (export picks a backend by name, ``backend_named``).
PySide6/shiboken6 are imported only under ``studio/gui/``, numba only in codegen's numba backend
(``codegen/`` paths containing ``numba``), cupy/cupyx only under ``codegen/cupy_cuda/``. Those imports must
also be lazy: importing the core leaves them out of ``sys.modules`` (checked in a subprocess).
"""

import ast
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ir", "transforms", "codegen", "studio")
RANK = {"ir": 0, "transforms": 1, "codegen": 2, "studio": 3, "studio.gui": 4}

# Top-level third-party module -> (where it may be imported, as a test on the repo-relative path; the rule).
HEAVY: dict[str, tuple[Callable[[str], bool], str]] = {
    "PySide6": (lambda rel: rel.startswith("studio/gui/"), "only under studio/gui/"),
    "shiboken6": (lambda rel: rel.startswith("studio/gui/"), "only under studio/gui/"),
    "numba": (lambda rel: rel.startswith("codegen/") and "numba" in rel, "only in codegen's numba backend"),
    "cupy": (lambda rel: rel.startswith("codegen/cupy_cuda/"), "only under codegen/cupy_cuda/"),
    "cupyx": (lambda rel: rel.startswith("codegen/cupy_cuda/"), "only under codegen/cupy_cuda/"),
}


# Repo-relative folder -> modules it must not import (prefixes), and why.
INSIDE_CODEGEN: dict[str, tuple[tuple[str, ...], str]] = {
    "codegen/program/": (("codegen.numba_cpu", "codegen.cupy_cuda", "codegen.export", "codegen.timing"),
                         "codegen/program is backend-neutral"),
    "codegen/numba_cpu/": (("codegen.cupy_cuda", "codegen.export"),
                           "a backend imports no other backend and nothing from codegen/export"),
    "codegen/cupy_cuda/": (("codegen.numba_cpu", "codegen.export"),
                           "a backend imports no other backend and nothing from codegen/export"),
}


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to, or None for stdlib, third-party and ``resources``."""
    if module == "studio.gui" or module.startswith("studio.gui."):
        return "studio.gui"
    top = module.split(".")[0]
    return top if top in RANK else None


def module_name(rel: str) -> tuple[str, bool]:
    """``"ir/graph.py"`` -> ``("ir.graph", False)``; ``"ir/__init__.py"`` -> ``("ir", True)``."""
    parts = rel.removesuffix(".py").split("/")
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` statement reads from."""
    if node.level == 0:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts) - 1:
        return "<beyond the top-level package>"
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def imports_of(source: str, rel: str) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line, imported module, statement text)`` for every import in a file, lazy ones included.

    ``from pkg import name`` yields both ``pkg`` and ``pkg.name`` (``name`` may be a submodule such as
    ``studio.gui``). ``importlib.import_module("x")`` and ``__import__("x")`` with a literal name count too.
    """
    module, is_package = module_name(rel)
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, module, is_package)
            text = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            yield node.lineno, base, text
            for alias in node.names:
                if alias.name != "*" and not base.startswith("<"):
                    yield node.lineno, f"{base}.{alias.name}", text
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
                yield node.lineno, arg.value, ast.unparse(node)


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def violations(source: str, rel: str) -> list[str]:
    """Every broken layering rule in one file, as ``file:line: `statement`: what is wrong``."""
    here = layer_of(module_name(rel)[0])
    try:
        imports = list(imports_of(source, rel))
    except SyntaxError as e:
        return [f"{rel}:{e.lineno}: cannot parse: {e.msg}"]
    found: dict[tuple[int, str, str], str] = {}  # (line, statement, rule) -> message; one per statement and rule
    for line, target, text in imports:
        there = layer_of(target)
        if target.startswith("<"):
            found.setdefault((line, text, "layer"), f"`{text}` reaches {target}")
        elif here and there and RANK[there] > RANK[here]:
            found.setdefault((line, text, "layer"), f"`{text}` imports {target} (layer {there}), above {here}")
        for folder, (banned, why) in INSIDE_CODEGEN.items():
            if rel.startswith(folder) and any(target == b or target.startswith(b + ".") for b in banned):
                found.setdefault((line, text, folder), f"`{text}` imports {target}: {why}")
        top = target.split(".")[0]
        if top in HEAVY and not HEAVY[top][0](rel):
            found.setdefault((line, text, top), f"`{text}` imports {target}: {top} is allowed {HEAVY[top][1]}")
    return [f"{rel}:{key[0]}: {message}" for key, message in sorted(found.items())]


def source_files() -> list[str]:
    """Repo-relative paths of every ``.py`` under the four packages."""
    return sorted(p.relative_to(REPO_ROOT).as_posix() for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*.py"))


def all_violations() -> list[str]:
    return [v for rel in source_files() for v in violations((REPO_ROOT / rel).read_text(encoding="utf-8"), rel)]


def test_packages_exist():
    missing = [pkg for pkg in PACKAGES if not (REPO_ROOT / pkg / "__init__.py").is_file()]
    assert not missing, f"packages without __init__.py under {REPO_ROOT}: {missing}"


def test_import_direction_and_heavy_imports():
    found = all_violations()
    assert not found, (
        f"{len(found)} layering violation(s) (ir <- transforms <- codegen <- studio <- studio/gui):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("ir/graph.py", "from transforms import registry", "imports transforms (layer transforms), above ir"),
        ("ir/graph.py", "from ..transforms import registry", "reaches <beyond the top-level package>"),
        ("ir/graph.py", "import codegen.numpy_ref", "imports codegen.numpy_ref (layer codegen), above ir"),
        ("ir/__init__.py", "from .. import studio", "reaches <beyond the top-level package>"),
        ("transforms/fuse.py", "def f():\n    from codegen import export", "imports codegen (layer codegen)"),
        ("codegen/export.py", "from studio.session import Session", "imports studio.session (layer studio)"),
        ("studio/cli/dispatch.py", "from studio import gui", "imports studio.gui (layer studio.gui), above studio"),
        ("studio/__init__.py", "from . import gui", "imports studio.gui (layer studio.gui), above studio"),
        ("studio/history/io.py", "from ..gui.qt_main import Main", "imports studio.gui.qt_main (layer studio.gui)"),
        ("studio/session/core.py", "from PySide6.QtCore import QObject", "PySide6 is allowed only under studio/gui/"),
        ("studio/session/core.py", "import shiboken6", "shiboken6 is allowed only under studio/gui/"),
        ("ir/movement.py", "def f():\n    import numba", "numba is allowed only in codegen's numba backend"),
        ("codegen/numba_cpu/k.py", "import cupy", "cupy is allowed only under codegen/cupy_cuda/"),
        ("codegen/timing.py", "from cupyx.profiler import benchmark", "cupyx is allowed only under"),
        ("codegen/export.py", "importlib.import_module('PySide6.QtGui')", "PySide6 is allowed only under"),
        ("ir/x.py", "import ir.graph\nimport studio", "x.py:2: `import studio` imports studio (layer studio)"),
        ("codegen/program/program.py", "from codegen.numba_cpu.loopnest import kernel_source",
         "codegen/program is backend-neutral"),
        ("codegen/program/module.py", "def f():\n    from codegen.export import package", "backend-neutral"),
        ("codegen/cupy_cuda/cuda_source.py", "from codegen.numba_cpu.loopnest import first_wcr",
         "a backend imports no other backend"),
        ("codegen/numba_cpu/runner.py", "from ..cupy_cuda import launch", "a backend imports no other backend"),
        ("codegen/cupy_cuda/backend.py", "from codegen.export.package import Backend", "nothing from codegen/export"),
    ],
)
def test_checker_flags(rel, source, expected):
    found = violations(source, rel)
    assert any(expected in v for v in found), f"{rel}: {source!r} should be flagged with {expected!r}, got {found}"


@pytest.mark.parametrize(
    ("rel", "source"),
    [
        ("ir/graph.py", "import numpy as np\nfrom . import errors\nfrom .errors import GraphError\nimport onnx"),
        ("transforms/map_fusion.py", "from ir import graph\nfrom .registry import register"),
        ("codegen/export.py", "from transforms.history import History\nfrom ir.graph import Graph"),
        ("codegen/numba_cpu/kernels.py", "import numba\nfrom numba import njit"),
        ("codegen/cupy_cuda/nvrtc.py", "import cupy\nfrom cupy.cuda import nvrtc\nimport cupyx"),
        ("codegen/cupy_cuda/launch.py", "from codegen.program.kernel import KernelSource\nfrom ir.graph import Graph"),
        ("codegen/export/package.py", "def f():\n    from codegen.numba_cpu.backend import CPU"),
        ("codegen/program/program.py", "from codegen.numpy_ref.registry import lookup\nfrom . import kernel"),
        ("studio/cli/dispatch.py", "from studio.session import Session\nfrom codegen import export\nimport resources"),
        ("studio/gui/qt_view.py", "from PySide6.QtWidgets import QGraphicsView\nfrom ..session import Session"),
        ("studio/gui/commands.py", "import shiboken6\nfrom studio.gui import qt_view\nfrom . import qt_view"),
    ],
)
def test_checker_allows(rel, source):
    assert violations(source, rel) == []


HEAVY_MODULES = ("PySide6", "shiboken6", "numba", "cupy", "cupyx")

_PROBE = """
import importlib, json, sys
heavy = {heavy!r}
report = {{"errors": {{}}, "heavy": {{}}}}
for name in sys.argv[1:]:
    before = {{h for h in heavy if h in sys.modules}}
    try:
        importlib.import_module(name)
    except BaseException as e:
        report["errors"][name] = f"{{type(e).__name__}}: {{e}}"
        continue
    new = [h for h in heavy if h in sys.modules and h not in before]
    if new:
        report["heavy"][name] = new
print(json.dumps(report))
"""


def core_modules() -> list[str]:
    """Modules that must import without Qt, numba and cupy: all but studio/gui and the two backends."""
    names = []
    for rel in source_files():
        if rel.startswith(("studio/gui/", "codegen/cupy_cuda/")) or (rel.startswith("codegen/") and "numba" in rel):
            continue
        if rel.endswith("__main__.py"):
            continue
        names.append(module_name(rel)[0])
    return names


def probe_imports(modules: list[str], heavy: tuple[str, ...] = HEAVY_MODULES) -> dict:
    """Import ``modules`` in order in a fresh interpreter; report failures and which ``heavy`` each pulled in."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=heavy), *modules],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"import probe crashed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_packages_import_without_heavy_modules():
    report = probe_imports(list(PACKAGES))
    assert not report["errors"], f"packages fail to import: {report['errors']}"
    assert not report["heavy"], f"importing a package pulled in Qt/numba/cupy (make it lazy): {report['heavy']}"


def test_core_modules_import_without_heavy_modules():
    modules = core_modules()
    assert set(PACKAGES) <= set(modules)
    report = probe_imports(modules)
    assert not report["errors"], "core modules fail to import:\n" + "\n".join(
        f"  {m}: {e}" for m, e in report["errors"].items()
    )
    assert not report["heavy"], "importing these core modules pulled in Qt/numba/cupy (import them lazily):\n" + (
        "\n".join(f"  {m}: {', '.join(h)}" for m, h in report["heavy"].items())
    )


def test_probe_detects_heavy_imports():
    report = probe_imports(["csv", "email.parser", "no_such_module_xyz"], heavy=("email", "csv"))
    assert report["heavy"] == {"csv": ["csv"], "email.parser": ["email"]}, report
    assert list(report["errors"]) == ["no_such_module_xyz"], report
