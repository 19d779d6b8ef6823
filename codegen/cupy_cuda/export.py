"""``dcstudio export … --backend cuda``: the program with CUDA kernels, for CuPy.

The package has the CPU package's layout and the same ``model.py`` (the program text
is backend-neutral, see ``codegen.numba_cpu.module``), with:

- ``kernels/k_<sha>.py``: the CUDA C text of one kernel (``cuda_source``) and a
  launcher ``k_<sha>(arrays…, extents…)`` that compiles it once through
  ``cupy.RawKernel`` and launches one thread per point of the map (256 per block);
- ``_lib.py``: a copy of ``codegen/cupy_cuda/library.py`` (cuBLAS contractions, device
  buffers, the host fallback for ops without a kernel).

It needs CuPy and a device to run; without one it can still be written and every
kernel compile-checked (``nvrtc``).
"""
from __future__ import annotations

from pathlib import Path

from codegen.cupy_cuda.cuda_source import BLOCK, kernel_source
from codegen.export.namespace import literal
from codegen.export.package import Backend, ExportResult
from codegen.export.package import export_package as _export
from codegen.numba_cpu.loopnest import KernelSource

LAUNCHER = '''"""dcstudio CUDA kernel {name} (generated; content-addressed)."""
import cupy as cp

SOURCE = {source}
N_ARRAYS = {n_arrays}
N_THREAD_EXTENTS = {threads}
BLOCK = {block}
_kernel = None


def {name}(*args):
    """Launch with arrays (inputs, then outputs) and loop extents, as the CPU kernels are called."""
    global _kernel
    if _kernel is None:
        _kernel = cp.RawKernel(SOURCE, {name_literal}, options=("-std=c++17",))
    arrays = [a if a.flags.c_contiguous else cp.ascontiguousarray(a) for a in args[:N_ARRAYS]]
    extents = [int(n) for n in args[N_ARRAYS:]]
    total = 1
    for n in extents[:N_THREAD_EXTENTS]:
        total *= n
    if total:
        _kernel(((total + BLOCK - 1) // BLOCK,), (BLOCK,), (*arrays, *[cp.int64(n) for n in extents]))
'''


def _source_literal(text: str) -> str:
    """The CUDA text as a readable triple-quoted string when that is unambiguous, else escaped."""
    if '"""' not in text and "\\" not in text and text.isascii():
        return '"""\\\n' + text + '"""'
    return literal(text)


def kernel_module(ks: KernelSource) -> str:
    return LAUNCHER.format(name=ks.name, source=_source_literal(ks.source), n_arrays=len(ks.arrays),
                           threads=ks.threads, block=BLOCK, name_literal=literal(ks.name))


def kernels_init(names: list[str]) -> str:
    return ('"""The CUDA kernels of model.py, one module per kernel (named by the hash of its text)."""\n'
            + "".join(f"from .{n} import {n}  # noqa: F401\n" for n in names))


CUDA = Backend("cuda", "CuPy", kernel_module, kernels_init, Path(__file__).with_name("library.py"),
               make_kernel=lambda m, graph: kernel_source(m, graph))


def export_package(graph, out_dir, **options) -> ExportResult:
    """``codegen.export.package.export_package`` with the CUDA backend."""
    return _export(graph, out_dir, backend=CUDA, **options)
