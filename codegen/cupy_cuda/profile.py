"""GPU timings: CUDA events through ``cupyx.profiler.benchmark`` (needs a device).

``benchmark_step(model, feeds, n_repeat, n_warmup)`` times ``Model.step`` of an exported
CUDA package (or any callable) and returns ``codegen.timing.stats.Samples`` built from the
GPU times of ``cupyx.profiler.benchmark``, so CPU and GPU profiles report alike.
``device_reason()`` says why GPU timing cannot run here (no CuPy, no device).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from codegen.timing.stats import Samples


def device_reason() -> str | None:
    try:
        import cupy
    except ImportError as e:
        return f"cupy is not installed ({e})"
    try:
        if not cupy.is_available():
            return "no CUDA device is available"
    except Exception as e:  # noqa: BLE001 - any driver error means: no device
        return f"CUDA is not usable: {type(e).__name__}: {e}"
    return None


def benchmark(fn: Callable[..., Any], args: tuple = (), kwargs: Mapping[str, Any] | None = None,
              n_repeat: int = 20, n_warmup: int = 3) -> Samples:
    """GPU time of ``fn(*args, **kwargs)`` per call (CUDA events), as Samples."""
    from cupyx.profiler import benchmark as cupy_benchmark
    res = cupy_benchmark(fn, args, kwargs=dict(kwargs or {}), n_repeat=n_repeat, n_warmup=n_warmup)
    gpu = res.gpu_times[0] if res.gpu_times.ndim > 1 else res.gpu_times
    return Samples.of([float(t) * 1e9 for t in gpu])


def benchmark_step(model: Any, feeds: Mapping[str, Any], n_repeat: int = 20, n_warmup: int = 3) -> Samples:
    """GPU time of one training step of an exported CUDA package's ``Model``."""
    return benchmark(lambda: model.step(**feeds), (), None, n_repeat, n_warmup)
