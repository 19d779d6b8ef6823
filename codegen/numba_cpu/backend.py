"""The CPU backend record: numba loop nests (``loopnest``), NumPy/BLAS library (``library``).

``CPU`` is what ``codegen.export.package`` writes a CPU package with; ``program(graph)`` is the
in-process shortcut (``build_program`` with the loop-nest renderer).
"""
from __future__ import annotations

from pathlib import Path

from codegen.numba_cpu import flush, library
from codegen.numba_cpu.kernel_cache import kernel_module
from codegen.numba_cpu.render import kernel_source
from codegen.program.backend import Backend, Render
from codegen.program.namespace import literal
from codegen.program.program import Program, build_program
from ir.graph import Graph

KERNELS_INIT = '''"""The numba kernels of model.py, one module per kernel (named after what it fuses and its hash).

Each is imported under the canonical name ``dcstudio_kernel_<name>`` — the name dcstudio's
kernel cache uses — so numba's cached machine code is valid wherever the file lives. Kernels that
flush subnormals import the intrinsics of ``ftz.py`` (beside ``_lib.py``) under a canonical name too.
"""
import importlib.util
import os
import sys

from .. import ftz as _ftz

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.modules.setdefault({ftz_module}, _ftz)   # the flush intrinsics, under the name kernels import them by


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


def kernels_init(names: list[str]) -> str:
    head = KERNELS_INIT.replace("{ftz_module}", literal(flush.MODULE))
    return head + "".join(f"{name} = _load({literal(name)})\n" for name in names)


def renderer(parallel: bool = False, fast: bool = True) -> Render:
    """Maps as numba loop nests (``parallel``: ``prange`` on large ones; ``fast``: fastmath forms)."""
    return lambda m, graph: kernel_source(m, graph, parallel=parallel, fast=fast)


CPU = Backend("cpu", "NumPy + numba", renderer, kernel_module, kernels_init, Path(library.__file__),
              kernels_may_alias=True, panels=True, library_parts=tuple(Path(library.__file__).with_name(f"{part}.py")
                                                          for part in ("convolution", "pooling", "cores", "ftz")))


def program(graph: Graph, *, parallel: bool = False, fast: bool = True, lowered: bool = False) -> Program:
    """The CPU program of ``graph`` (``build_program`` with numba loop nests)."""
    return build_program(graph, renderer(parallel, fast), lowered=lowered, kernels_may_alias=True, panels=True)
