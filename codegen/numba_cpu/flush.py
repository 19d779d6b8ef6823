"""Subnormals flushed to zero inside kernels that call the fastmath forms (FTZ and DAZ).

A float operation that makes or reads a subnormal costs a microcode assist on x86 (~100 cycles
per lane), and vectorized code runs both sides of every select: an attention softmax whose rows
lie mostly far below their max (BERT-base scores span ±250) ran 2× slower on them
(21.9 → 10.5 ms for 1.6M scores, measured here). Kernels that call ``fastmath`` forms set the
FTZ and DAZ bits of MXCSR on entry (``_ftz_on``, returning the old value) and restore them on
exit (``_ftz_off``), so only that kernel, on that thread, flushes: results below 1.18e-38 become
0, an absolute error ≤ 1.2e-38 (the bound ``fast_exp`` already states for them). NumPy, BLAS and
every other kernel keep IEEE subnormals.

The helpers are numba intrinsics (``llvm.x86.sse.stmxcsr``/``ldmxcsr``) in one module, ``ftz.py``,
which kernel modules import (``IMPORT``) and which decides when it is imported whether the machine
is x86-64 (elsewhere they do nothing), so an exported package runs anywhere. They wrap
the kernel's loops only (``around_loops``): buffer allocations before them may raise, and then
nothing was changed. A ``prange`` kernel does not flush: OpenMP workers would inherit the bits
for good, and chunks would round differently depending on the thread that ran them — unless every
``prange`` iteration sets and restores the bits itself (``chunks``: each iteration that runs a loop,
whichever schedule printed it, e.g. the row chunks of ``schedules._row_split``): then every chunk
flushes, on whichever thread, and no worker keeps the bits. An iteration of a single point does not
(the calls would stop it vectorizing). Without the flush the BERT-base GELU gradient split over 2 threads took
9.4 ms on its recorded inputs against 5.6 ms on random ones.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

HELPERS = ("_ftz_on", "_ftz_off")
FILE = Path(__file__).with_name("ftz.py")
"""The intrinsics' one module (``codegen/numba_cpu/ftz.py``; ``ftz.py`` in an exported package)."""
MODULE = "dcstudio_ftz_" + hashlib.sha256(FILE.read_bytes()).hexdigest()[:12]
"""The name kernel modules import the intrinsics under (registered by ``install``)."""
IMPORT = f"from {MODULE} import _ftz_off, _ftz_on"


def install() -> None:
    """Register dcstudio's ``ftz`` module as ``MODULE``, so cached kernel modules can import it."""
    if MODULE not in sys.modules:
        from codegen.numba_cpu import ftz
        sys.modules[MODULE] = ftz


def around_loops(lines: list[str]) -> list[str]:
    """The kernel body ``lines`` (indented one level) with the flush on before its first top-level
    loop and off after the last line."""
    first = next((k for k, line in enumerate(lines) if line.startswith("    for ")), 0)
    return lines[:first] + ["    mx = _ftz_on()"] + lines[first:] + ["    _ftz_off(mx)"]


def chunks(lines: list[str], forms: bool) -> tuple[list[str], bool]:
    """The kernel body ``lines`` with each ``prange`` iteration that runs a loop setting and restoring the
    flush bits itself, where the kernel calls fastmath forms (else unchanged); and whether any does."""
    if not forms:
        return lines, False
    out, ends = [], []                   # ends: (last line index of a prange body, its indent)
    for k, line in enumerate(lines):
        out.append(line)
        if " in prange(" in line and line.lstrip().startswith("for "):
            pad = len(line) - len(line.lstrip())
            last = k
            while last + 1 < len(lines) and len(lines[last + 1]) - len(lines[last + 1].lstrip()) > pad:
                last += 1
            if any(body.lstrip().startswith("for ") for body in lines[k + 1:last + 1]):
                inner = " " * (pad + 4)
                out.append(inner + "mxc = _ftz_on()")
                ends.append((last, inner))
        while ends and ends[-1][0] == k:
            out.append(ends.pop()[1] + "_ftz_off(mxc)")
    return out, len(out) > len(lines)
