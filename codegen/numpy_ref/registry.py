"""The table of NumPy reference kernels, one per (domain, op_type).

A kernel is a pure function ``fn(inputs, attrs, ctx) -> list[np.ndarray]``:

- ``inputs``: the op's inputs in ONNX order; a missing optional input is ``None``;
- ``attrs``: the node's attributes as plain Python values (``ir.onnx_attrs``);
- ``ctx``: an ``OpContext`` (opset of the op's domain, number of outputs wanted,
  the statically known output shapes/dtypes, and a node label for messages).

It returns at least ``ctx.n_outputs`` arrays (extra ones are ignored). Kernels
never mutate their inputs. Register with ``@kernel("Add", "Sub", domain="")``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

Inputs = Sequence["np.ndarray | None"]
KernelFn = Callable[[Inputs, dict[str, Any], "OpContext"], Sequence[np.ndarray]]

NUMPY_KERNELS: dict[tuple[str, str], KernelFn] = {}

DEFAULT_DOMAIN = ""
MS_DOMAIN = "com.microsoft"
STUDIO_DOMAIN = "ai.dcstudio"


def canonical_domain(domain: str) -> str:
    """'' and 'ai.onnx' are the same default domain."""
    return "" if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True, slots=True)
class OpContext:
    """What a kernel may know besides its inputs and attributes."""

    opset: int = 21
    n_outputs: int = 1
    output_shapes: tuple[tuple[int, ...] | None, ...] = ()
    output_dtypes: tuple[np.dtype | None, ...] = ()
    label: str = "<op>"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def kernel(*op_types: str, domain: str = DEFAULT_DOMAIN) -> Callable[[KernelFn], KernelFn]:
    """Register ``fn`` as the reference kernel of each op type in ``op_types``."""
    def deco(fn: KernelFn) -> KernelFn:
        for op_type in op_types:
            key = (canonical_domain(domain), op_type)
            if key in NUMPY_KERNELS:
                raise ValueError(f"duplicate NumPy kernel for {key}")
            NUMPY_KERNELS[key] = fn
        return fn
    return deco


def lookup(domain: str, op_type: str) -> KernelFn | None:
    """The kernel for an op, or None if there is none."""
    return NUMPY_KERNELS.get((canonical_domain(domain), op_type))
