"""Thread counts of the CPU backend: numba's kernels and the BLAS behind NumPy's matmul.

``pin(n)`` sets both (numba: ``set_num_threads``, at most ``NUMBA_NUM_THREADS``;
OpenBLAS: its ``*_set_num_threads`` entry point, found among the shared libraries
this process has loaded — the same thing threadpoolctl does, without the dependency).
``current()`` reports what is in effect, for every timing and benchmark figure.
Worker processes are pinned through the environment instead (``environment``), which
also covers OpenMP and MKL before they start.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

_BLAS_SET = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
             "openblas_set_num_threads")
_BLAS_GET = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
             "openblas_get_num_threads")


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    numba: int | None     # None: numba is not installed
    blas: int | None      # None: no OpenBLAS found in this process
    cpus: int

    def to_json(self) -> dict:
        return {"numba_threads": self.numba, "blas_threads": self.blas, "cpus": self.cpus}

    def __str__(self) -> str:
        return f"numba {self.numba or '-'} / BLAS {self.blas or '-'} threads on {self.cpus} CPUs"


def _openblas() -> list[ctypes.CDLL]:
    import numpy as np
    np.dot(np.ones(2), np.ones(2))  # make sure NumPy's BLAS is loaded
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def blas_threads() -> int | None:
    for lib in _openblas():
        for name in _BLAS_GET:
            fn = getattr(lib, name, None)
            if fn is not None:
                return int(fn())
    return None


def numba_threads() -> int | None:
    try:
        import numba
    except ImportError:
        return None
    return int(numba.get_num_threads())


def current() -> ThreadInfo:
    return ThreadInfo(numba_threads(), blas_threads(), os.cpu_count() or 1)


def pin(threads: int) -> ThreadInfo:
    """Use ``threads`` threads for numba kernels and for BLAS in this process."""
    threads = max(1, int(threads))
    try:
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass
    for lib in _openblas():
        for name in _BLAS_SET:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(threads)
                break
    return current()


def environment(threads: int) -> dict[str, str]:
    """Environment variables that pin a fresh process to ``threads`` threads."""
    n = str(max(1, int(threads)))
    return {"NUMBA_NUM_THREADS": n, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "DCSTUDIO_THREADS": n}


def default_threads() -> int:
    """``DCSTUDIO_THREADS`` if set, else 1 (FACTS.md: two threads were often slower here)."""
    try:
        return max(1, int(os.environ.get("DCSTUDIO_THREADS", "1")))
    except ValueError:
        return 1
