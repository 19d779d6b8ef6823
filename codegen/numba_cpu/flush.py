"""Subnormals flushed to zero inside kernels that call the fastmath forms (FTZ and DAZ).

A float operation that makes or reads a subnormal costs a microcode assist on x86 (~100 cycles
per lane), and vectorized code runs both sides of every select: an attention softmax whose rows
lie mostly far below their max (BERT-base scores span ±250) ran 2× slower on them
(21.9 → 10.5 ms for 1.6M scores, measured here). Kernels that call ``fastmath`` forms set the
FTZ and DAZ bits of MXCSR on entry (``_ftz_on``, returning the old value) and restore them on
exit (``_ftz_off``), so only that kernel, on that thread, flushes: results below 1.18e-38 become
0, an absolute error ≤ 1.2e-38 (the bound ``fast_exp`` already states for them). NumPy, BLAS and
every other kernel keep IEEE subnormals.

The helpers are numba intrinsics (``llvm.x86.sse.stmxcsr``/``ldmxcsr``); ``SOURCE`` is copied
into kernel modules like the fastmath forms and decides when the module is imported whether the
machine is x86-64 (elsewhere they do nothing), so an exported package runs anywhere. They wrap
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

HELPERS = ("_ftz_on", "_ftz_off")

SOURCE = '''import platform as _platform

from llvmlite import ir as _ir
from numba import types as _types
from numba.extending import intrinsic as _intrinsic

_MXCSR_FTZ_DAZ = 0x8040 if _platform.machine().lower() in ("x86_64", "amd64") else 0


def _mxcsr(builder, name, slot):
    fnty = _ir.FunctionType(_ir.VoidType(), [_ir.PointerType(_ir.IntType(8))])
    fn = builder.module.declare_intrinsic("llvm.x86.sse." + name, fnty=fnty)
    builder.call(fn, [builder.bitcast(slot, _ir.PointerType(_ir.IntType(8)))])


@_intrinsic
def _ftz_on(typingctx):
    """Set MXCSR's flush-to-zero and denormals-are-zero bits; return the old MXCSR."""
    def codegen(context, builder, signature, args):
        i32 = _ir.IntType(32)
        if not _MXCSR_FTZ_DAZ:
            return _ir.Constant(i32, 0)
        slot = builder.alloca(i32)
        _mxcsr(builder, "stmxcsr", slot)
        old = builder.load(slot)
        builder.store(builder.or_(old, _ir.Constant(i32, _MXCSR_FTZ_DAZ)), slot)
        _mxcsr(builder, "ldmxcsr", slot)
        return old
    return _types.int32(), codegen


@_intrinsic
def _ftz_off(typingctx, old):
    """Restore MXCSR as ``_ftz_on`` found it."""
    def codegen(context, builder, signature, args):
        if _MXCSR_FTZ_DAZ:
            slot = builder.alloca(_ir.IntType(32))
            builder.store(args[0], slot)
            _mxcsr(builder, "ldmxcsr", slot)
        return context.get_dummy_value()
    return _types.void(_types.int32), codegen
'''


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


def source_of(name: str) -> str:
    """The helper text both intrinsics live in (emitted once for either name)."""
    if name not in HELPERS:
        raise KeyError(name)
    return SOURCE
