"""The flush-to-zero intrinsics generated kernels call (``flush``): one module, which an exported package
carries beside ``_lib.py`` as ``ftz.py``. Kernel modules import it under a name holding this file's hash
(``flush.MODULE``), so a change here gives every kernel that calls it a new text and numba's cache never
serves machine code built with an older helper. It imports only numba, llvmlite and the standard library.
"""
from __future__ import annotations

import platform as _platform

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
