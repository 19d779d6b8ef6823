"""The Resize reference kernel (nearest, linear and cubic; every coordinate transformation but
``tf_crop_and_resize``; scales or sizes, ``axes``, ``keep_aspect_ratio_policy``): one interpolation
matrix per resized axis (``ir.interpolation``, which the gradient rule shares)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ir.interpolation import apply, plan, unsupported

from .registry import Inputs, OpContext, kernel


@kernel("Resize")
def resize(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = inputs[0]
    variant = unsupported(attrs)
    if variant:
        raise NotImplementedError(f"{ctx.label}: Resize {variant} is not implemented (nearest, linear and cubic are)")
    scales, sizes = (inputs[k] if len(inputs) > k else None for k in (2, 3))
    return [apply(x, plan(x.shape, attrs, scales, sizes), attrs)]
