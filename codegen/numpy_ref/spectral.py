"""Window-function reference kernels: HannWindow, HammingWindow, BlackmanWindow.

``size`` is a scalar input; ``periodic=1`` (default) divides by N, else by N-1;
``output_datatype`` is an ONNX elem_type (default float32).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .elementwise import onnx_dtype
from .registry import Inputs, OpContext, kernel

WindowFn = Callable[[np.ndarray], np.ndarray]


def _window(inputs: Inputs, attrs: dict[str, Any], fn: WindowFn) -> list[np.ndarray]:
    n = int(np.asarray(inputs[0]).reshape(-1)[0])
    denom = n if attrs.get("periodic", 1) else n - 1
    phase = 2 * np.pi * np.arange(n, dtype=np.float64) / max(denom, 1)
    return [fn(phase).astype(onnx_dtype(attrs.get("output_datatype", 1)))]


@kernel("HannWindow")
def hann_window(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return _window(inputs, attrs, lambda t: 0.5 - 0.5 * np.cos(t))


@kernel("HammingWindow")
def hamming_window(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return _window(inputs, attrs, lambda t: 25 / 46 - (1 - 25 / 46) * np.cos(t))


@kernel("BlackmanWindow")
def blackman_window(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return _window(inputs, attrs, lambda t: 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t))
