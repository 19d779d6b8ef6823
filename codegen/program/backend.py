"""The one contract between the program and a backend: ``Backend``.

A backend renders each map as a kernel (``render(map, graph) -> KernelSource``; the program
calls ``K.<name>(arrays…, extents…)``) and says what an exported package of it holds: the
text of ``kernels/<name>.py`` and ``kernels/__init__.py``, and the library copied to
``_lib.py`` (the ``L`` of the program text: allocation, views, BLAS, the reference fallback) with
the modules it imports relatively (``library_parts``, copied under their own names).
The program text itself is the same for every backend (``module``).

The CPU backend is ``codegen.numba_cpu.backend.CPU``, the CUDA one
``codegen.cupy_cuda.backend.CUDA``; ``codegen.export.package.backend_named`` finds them by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from codegen.program.kernel import KernelSource
from ir.graph import Graph
from ir.nodes import MapNode

Render = Callable[[MapNode, Graph], KernelSource]


@dataclass(frozen=True)
class Backend:
    """What differs between backends (see the module docstring)."""

    name: str
    requires: str                                        # what a package needs, for its docstring
    renderer: Callable[[bool], Render]                   # parallel (CPU: prange on large maps) -> render
    kernel_module: Callable[[KernelSource], str]         # text of kernels/<name>.py
    kernels_init: Callable[[list[str]], str]             # text of kernels/__init__.py
    library: Path                                        # copied to _lib.py
    kernels_may_alias: bool = False                      # kernels stay right when an output aliases an input
    library_parts: tuple[Path, ...] = ()                 # modules the library imports relatively, copied beside it
    panels: bool = False                                 # GEMMs with epilogues run panel by panel (``L.panels``)
