"""Compile-checking generated CUDA without a GPU: NVRTC through CuPy's low-level bindings.

FACTS.md "CuPy / CUDA without a GPU": ``RawModule``/``RawKernel`` need a device, but
``cupy.cuda.nvrtc.createProgram``/``compileProgram`` do not. NVRTC comes from the
``nvidia-cuda-nvrtc==13.0.*`` wheel (13.5 emits PTX that older ptxas rejects) and the
``cuda_fp16.h``/``cuda_bf16.h`` headers from ``nvidia-cuda-runtime`` (``nvidia/cu13/include``).

``compile_check(source, arch)`` compiles one kernel for ``sm_80``/``sm_90`` (about 30–90 ms)
and returns a ``CompileResult`` with the PTX size or the compiler log; ``available()`` says
whether NVRTC can be used here (and why not).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ARCHS = ("sm_80", "sm_90")


@dataclass(frozen=True)
class CompileResult:
    name: str
    arch: str
    ok: bool
    log: str
    ptx_bytes: int = 0


def include_dir() -> Path | None:
    """``nvidia/cu13/include`` of the nvidia-cuda-runtime wheel (None if not installed)."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13", "cuda_runtime"):
            inc = Path(root) / sub / "include"
            if (inc / "cuda_bf16.h").is_file():
                return inc
    return None


def available() -> str | None:
    """None when NVRTC compile checks can run, else the reason."""
    try:
        from cupy.cuda import nvrtc
    except ImportError as e:
        return f"cupy is not installed ({e}); install the cuda extra"
    if include_dir() is None:
        return "the CUDA headers are missing: install nvidia-cuda-runtime==13.0.* (dev extra)"
    try:
        nvrtc.getVersion()
    except Exception as e:  # noqa: BLE001 - any loader failure means: no NVRTC here
        return f"NVRTC cannot be loaded: {type(e).__name__}: {e} (install nvidia-cuda-nvrtc==13.0.*)"
    return None


def compile_check(source: str, name: str, arch: str = "sm_80") -> CompileResult:
    """Compile ``source`` to PTX for ``arch`` with NVRTC; never raises for compile errors."""
    from cupy.cuda import nvrtc
    options = [f"-arch={arch}", "-std=c++17", f"-I{include_dir()}"]
    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, options)
    except nvrtc.NVRTCError:
        return CompileResult(name, arch, False, nvrtc.getProgramLog(prog))
    finally:
        pass
    ptx = nvrtc.getPTX(prog)
    log = nvrtc.getProgramLog(prog)
    nvrtc.destroyProgram(prog)
    return CompileResult(name, arch, True, log, len(ptx))
