"""Thread counts of the CPU backend: numba's kernels and the BLAS behind NumPy's matmul.

``pin(n)`` sets both (numba: ``set_num_threads``, at most ``NUMBA_NUM_THREADS``; BLAS through
threadpoolctl). ``current()`` reports what is in effect, for every timing and benchmark figure.
``default_threads()`` is ``$DCSTUDIO_THREADS`` or the physical cores of this process's affinity
mask (``library.physical_cores``: the exported package uses the same rule). Worker processes
are pinned through the environment instead (``environment``), which also covers OpenMP and MKL
before they start, and makes idle OpenMP and OpenBLAS workers sleep soon (``library.calm_threads``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from codegen.numba_cpu.library import (BLAS_IDLE_TIMEOUT, OMP_SPIN, blas_threads, default_threads, physical_cores,
                                       set_threads, start_numba)

__all__ = ["ThreadInfo", "blas_threads", "current", "default_threads", "environment", "numba_threads",
           "physical_cores", "pin"]


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    numba: int | None     # None: numba is not installed
    blas: int | None      # None: no BLAS found in this process
    cpus: int             # physical cores this process may use

    def to_json(self) -> dict:
        return {"numba_threads": self.numba, "blas_threads": self.blas, "cpus": self.cpus}

    def __str__(self) -> str:
        return f"numba {self.numba or '-'} / BLAS {self.blas or '-'} threads on {self.cpus} cores"


def numba_threads() -> int | None:
    """numba's thread count for this thread; starts its threading layer as ``set_threads`` would."""
    n = start_numba()
    return None if n is None else int(n)


def current() -> ThreadInfo:
    return ThreadInfo(numba_threads(), blas_threads(), physical_cores())


def pin(threads: int) -> ThreadInfo:
    """Use ``threads`` threads for numba kernels and for BLAS in this process."""
    set_threads(max(1, int(threads)))
    return current()


def environment(threads: int) -> dict[str, str]:
    """Environment variables that pin a fresh process to ``threads`` threads."""
    n = str(max(1, int(threads)))
    env = {"NUMBA_NUM_THREADS": n, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
           "DCSTUDIO_THREADS": n}
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        env["GOMP_SPINCOUNT"] = str(OMP_SPIN)            # idle workers sleep soon (library.calm_threads)
    env["OPENBLAS_THREAD_TIMEOUT"] = os.environ.get("OPENBLAS_THREAD_TIMEOUT", str(BLAS_IDLE_TIMEOUT))
    return env
