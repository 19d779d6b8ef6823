"""Idle OpenBLAS and OpenMP workers sleep soon (``library.calm_threads``, from ``set_threads``), and a
statement ``L.parallel`` runs beside another gets its share of numba's threads. Each check runs in a
fresh process: both libraries read their settings when they start their workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
threadpoolctl = pytest.importorskip("threadpoolctl", reason="threadpoolctl is not installed")

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import ctypes, ctypes.util, json, os, sys, warnings
if sys.argv[1:] == ["openmp-first"]:          # as torch does: its own GNU OpenMP, loaded globally, first
    ctypes.CDLL(ctypes.util.find_library("gomp"), mode=ctypes.RTLD_GLOBAL)
from threadpoolctl import ThreadpoolController
from codegen.numba_cpu import library as L
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    info = L.set_threads(2)
blas = [c for c in ThreadpoolController().select(user_api="blas").lib_controllers if c.internal_api == "openblas"]
seen, blas_seen = [], []
L.parallel(*[lambda: (seen.append(__import__("numba").get_num_threads()), blas_seen.append(L.blas_threads()))
             for _ in range(2)])
import numba
print(json.dumps({"timeout": ctypes.CDLL(blas[0].filepath).openblas_thread_timeout() if blas else None,
                  "quiet": L.quiet_blas(), "gomp_env": os.environ.get("GOMP_SPINCOUNT"),
                  "layer": numba.threading_layer(), "in_tasks": seen, "after": numba.get_num_threads(),
                  "numba": info["numba"], "spinning": L.SPINNING[0], "warnings": [str(w.message) for w in caught],
                  "blas": info["blas"], "blas_in_tasks": blas_seen, "blas_after": L.blas_threads()}))
"""


def _probe(*args, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT",
                                                              "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT,
                         env={**clean, "NUMBA_NUM_THREADS": "2", **env}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _openblas() -> bool:
    import numpy as np
    np.dot(np.ones(2), np.ones(2))
    return any(c.internal_api == "openblas" for c in threadpoolctl.ThreadpoolController().select(user_api="blas")
               .lib_controllers)


def test_set_threads_puts_idle_openblas_workers_to_sleep_and_leaves_no_variable_behind():
    if not _openblas():
        pytest.skip("NumPy's BLAS here is not OpenBLAS: quiet_blas has nothing to do")
    got = _probe()
    from codegen.numba_cpu.library import BLAS_IDLE_TIMEOUT
    assert got["timeout"] == BLAS_IDLE_TIMEOUT and got["quiet"] is True
    assert got["gomp_env"] is None               # set only while numba's threading layer started


def test_a_timeout_the_user_set_is_kept():
    if not _openblas():
        pytest.skip("NumPy's BLAS here is not OpenBLAS: quiet_blas has nothing to do")
    got = _probe(OPENBLAS_THREAD_TIMEOUT="20")
    assert got["timeout"] == 20 and got["quiet"] is False


def test_parallel_tasks_share_numbas_threads_and_the_count_comes_back():
    got = _probe()
    assert got["numba"] == 2 and got["after"] == 2
    if got["layer"] == "workqueue":      # it cannot run prange loops from two threads: tasks run in order
        assert got["in_tasks"] == [2, 2]
    else:
        assert sorted(got["in_tasks"]) == [1, 1], got
        if got["blas"] == 2:             # and BLAS's threads too, restored once both have ended
            assert got["blas_in_tasks"] == [1, 1] and got["blas_after"] == 2, got


def test_worker_processes_start_with_short_spins():
    from codegen.numba_cpu.library import BLAS_IDLE_TIMEOUT, OMP_SPIN
    from codegen.numba_cpu.threads import environment
    env = environment(3)
    assert env["OPENBLAS_NUM_THREADS"] == "3" and env["NUMBA_NUM_THREADS"] == "3"
    if "OPENBLAS_THREAD_TIMEOUT" not in os.environ:
        assert env["OPENBLAS_THREAD_TIMEOUT"] == str(BLAS_IDLE_TIMEOUT)
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        assert env["GOMP_SPINCOUNT"] == str(OMP_SPIN)


def test_an_openmp_runtime_loaded_first_keeps_kernels_on_one_thread_and_says_how_to_fix_it():
    """numba's prange loops would run on that runtime, whose workers spin with the default it read as it
    loaded (measured: the BERT-base step at 2 threads took 350 ms against 260 ms)."""
    import ctypes.util
    if ctypes.util.find_library("gomp") is None:
        pytest.skip("no GNU OpenMP library on this machine to load first")
    alone = _probe()
    assert alone["spinning"] is None and alone["numba"] == 2 and alone["warnings"] == []
    got = _probe("openmp-first")
    assert got["spinning"] and got["numba"] == 1 and got["after"] == 1
    assert len(got["warnings"]) == 1 and "GOMP_SPINCOUNT" in got["warnings"][0]
    told = _probe("openmp-first", GOMP_SPINCOUNT="2000")      # what the warning says to do
    assert told["spinning"] is None and told["numba"] == 2 and told["warnings"] == []
