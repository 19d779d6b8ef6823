"""``dcstudio export … --backend cuda``: the program with CUDA kernels, for CuPy.

The package has the CPU package's layout and the same ``model.py`` (the program text
is backend-neutral, see ``codegen.program.module``), with:

- ``kernels/k_<what>_<sha>.py``: the CUDA C text of one kernel (``cuda_source``) and a
  launcher ``k_<what>_<sha>(arrays…, extents…)`` that compiles it once through
  ``cupy.RawKernel`` and launches it with the kernel's ``Launch`` record: its block shape,
  and the grid computed from the extents by a verbatim copy of ``launch.grid_blocks``
  (one thread per point, 256 per block; a block or warp per row; 32 columns per block);
- ``_lib.py``: a copy of ``codegen/cupy_cuda/library.py`` (cuBLAS contractions, device
  buffers, the host fallback for ops without a kernel).

It needs CuPy and a device to run; without one it can still be written and every
kernel compile-checked (``nvrtc``).
"""
from __future__ import annotations

import inspect
from pathlib import Path

from codegen.cupy_cuda.render import kernel_source
from codegen.cupy_cuda.launch import CudaKernel, grid_blocks
from codegen.program.backend import Backend
from codegen.program.namespace import literal

LAUNCHER = '''"""dcstudio CUDA kernel {name} (generated; content-addressed).

Launch: {kind}, block {block}, static shared memory {shared_bytes} bytes; grid from the extents.
"""
import cupy as cp

SOURCE = {source}
N_ARRAYS = {n_arrays}
N_THREAD_EXTENTS = {threads}
BLOCK = {block}
PER_BLOCK = {per_block}
SPLIT_LAST = {split_last}
_kernel = None


{grid_function}

def {name}(*args):
    """Launch with arrays (inputs, then outputs) and loop extents, as the CPU kernels are called."""
    global _kernel
    if _kernel is None:
        _kernel = cp.RawKernel(SOURCE, {name_literal}, options=("-std=c++17",))
    arrays = [a if a.flags.c_contiguous else cp.ascontiguousarray(a) for a in args[:N_ARRAYS]]
    extents = [int(n) for n in args[N_ARRAYS:]]
    blocks = grid_blocks(extents, N_THREAD_EXTENTS, PER_BLOCK, SPLIT_LAST)
    if blocks:
        _kernel((blocks,), BLOCK, (*arrays, *[cp.int64(n) for n in extents]), shared_mem=0)
'''


def _source_literal(text: str) -> str:
    """The CUDA text as a readable triple-quoted string when that is unambiguous, else escaped."""
    if '"""' not in text and "\\" not in text and text.isascii():
        return '"""\\\n' + text + '"""'
    return literal(text)


def kernel_module(ks: CudaKernel) -> str:
    how = ks.launch
    return LAUNCHER.format(name=ks.name, source=_source_literal(ks.source), n_arrays=len(ks.arrays),
                           threads=ks.threads, block=literal(tuple(how.block)), per_block=how.per_block,
                           split_last=how.split_last, kind=how.kind, shared_bytes=how.shared_bytes,
                           grid_function=inspect.getsource(grid_blocks), name_literal=literal(ks.name))


def kernels_init(names: list[str]) -> str:
    return ('"""The CUDA kernels of model.py, one module per kernel (named after what it fuses and its hash)."""\n'
            + "".join(f"from .{n} import {n}  # noqa: F401\n" for n in names))


CUDA = Backend("cuda", "CuPy", lambda parallel=False: kernel_source, kernel_module, kernels_init,
               Path(__file__).with_name("library.py"),
               library_parts=tuple(Path(__file__).with_name(f"{m}.py") for m in ("convolution", "cublas", "device_ops")))
