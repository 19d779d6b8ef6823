"""Imports every NumPy reference kernel family so that ``NUMPY_KERNELS`` is filled.

``import codegen.numpy_ref.kernels`` registers elementwise, reduce, linalg, nn,
shape, loss, training and optimizer kernels in ``codegen.numpy_ref.registry.NUMPY_KERNELS``.
"""
from __future__ import annotations

from . import (elementwise, linalg, loss, nn, optimizer, quantize, reduce, resize, shape,  # noqa: F401
               spectral, training)
from . import fused  # noqa: F401  (ai.dcstudio fused library nodes, made by transformations)

__all__ = ["elementwise", "linalg", "loss", "nn", "optimizer", "quantize", "reduce", "resize", "shape",
           "spectral", "training"]
