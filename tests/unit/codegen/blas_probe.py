"""Run a probe script in a fresh process whose BLAS starts on a given number of threads.

In CI's process an earlier test may have held BLAS to one thread, so a test of how the library
shares BLAS threads runs its probe in a process of its own. The probe prints one JSON object as its
last line, with ``before``: the BLAS threads it saw after its own set-up."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_blas_probe(script: str, threads: int, timeout: float) -> dict:
    """The probe's JSON result; skips the test where BLAS cannot start on ``threads`` threads."""
    pytest.importorskip("threadpoolctl", reason="threadpoolctl is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    got = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**env, "OPENBLAS_NUM_THREADS": str(threads)},
                         capture_output=True, text=True, timeout=timeout)
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads(got.stdout.strip().splitlines()[-1])
    if res["before"] != threads:
        pytest.skip(f"BLAS here runs on {res['before']} thread(s), not {threads}")
    return res
