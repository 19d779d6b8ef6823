"""ONNX ``Resize`` as one matrix per resized axis, shared by the reference kernel and the gradient rule.

Resize (modes nearest, linear and cubic) is linear in its input and separable: along an axis of
input length ``I`` and output length ``O``, ``Y = M·X`` with an ``O×I`` matrix ``M`` that
depends only on the sizes, the scale and the attributes. ``M`` follows the ONNX definition (the
``onnx.reference`` implementation): output index ``o`` maps to the input coordinate ``x`` by the
coordinate transformation, the neighbours of ``x`` are taken from the input padded with its edge
values (so ``x`` beyond the ends reads the end values), and weighed by the mode's coefficients
(nearest: one neighbour by ``nearest_mode``; linear: two; cubic: four, ``cubic_coeff_a``, and
``exclude_outside`` dropping neighbours past the ends and renormalizing).

Not expressed: ``antialias`` (a wider filter when down-sampling) and ``tf_crop_and_resize`` (a
region of interest); ``unsupported(attrs)`` names them.
"""
from __future__ import annotations

import functools
import math

import numpy as np

_NEAREST = {   # (round down at a fraction of exactly one half?, rule): which of the two neighbours
    "round_prefer_floor": lambda r: r > 0.5,
    "round_prefer_ceil": lambda r: r >= 0.5,
    "floor": lambda r: False,
    "ceil": lambda r: True,
}
TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric")


def unsupported(attrs: dict) -> str:
    """The variant of a Resize with ``attrs`` this module cannot express, or ''."""
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode {mode}"
    if ctm not in TRANSFORMS:
        return f"coordinate_transformation_mode {ctm}"
    if attrs.get("antialias", 0):
        return "antialias 1"
    if mode == "nearest" and attrs.get("nearest_mode", "round_prefer_floor") not in _NEAREST:
        return f"nearest_mode {attrs['nearest_mode']}"
    return ""


def plan(shape: tuple[int, ...], attrs: dict, scales=None, sizes=None) -> list[tuple[int, int, int, float]]:
    """``(axis, I, O, scale)`` for every axis of ``shape`` that Resize changes (``scales``/``sizes``: the
    inputs' values over ``attrs['axes']``; None or empty when absent)."""
    rank = len(shape)
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    if scales is not None and len(scales):
        factor = dict(zip(axes, (float(s) for s in scales)))
        steps = [(a, n, int(math.floor(n * factor.get(a, 1.0))), factor.get(a, 1.0)) for a, n in enumerate(shape)]
    else:
        wanted = dict(zip(axes, (int(s) for s in sizes)))
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            steps = [(a, n, wanted.get(a, n), wanted.get(a, n) / n) for a, n in enumerate(shape)]
        else:
            scale = (min if policy == "not_larger" else max)(wanted[a] / shape[a] for a in axes)
            steps = [(a, n, int(np.round(scale * n)) if a in wanted else n, scale if a in wanted else 1.0)
                     for a, n in enumerate(shape)]
    return [(a, n_in, n_out, scale) for a, n_in, n_out, scale in steps if n_in != n_out or scale != 1.0]


def source_coordinate(o: int, n_in: int, n_out: int, scale: float, ctm: str) -> float:
    """The input coordinate sampled for output index ``o`` (ONNX's coordinate transformations)."""
    width = scale * n_in               # the output length before flooring, as ONNX's reference uses it
    if ctm == "align_corners":
        return 0.0 if width == 1 else o * (n_in - 1) / (width - 1)
    if ctm == "asymmetric":
        return o / scale
    if ctm == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else 0.0
    if ctm == "half_pixel_symmetric":
        return n_in / 2 * (1 - n_out / width) + (o + 0.5) / scale - 0.5
    return (o + 0.5) / scale - 0.5


def _cubic(r: float, a: float) -> list[float]:
    def near(t):
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t):
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return [far(r + 1), near(r), near(1 - r), far(2 - r)]


def matrix(n_in: int, n_out: int, scale: float, attrs: dict) -> np.ndarray:
    """``M`` (``n_out × n_in``, float64, read-only) of one axis (module docstring). Made once per sizes and
    attributes: a package's reference kernel asks for it every step."""
    return _matrix(n_in, n_out, scale, attrs.get("mode", "nearest"),
                   attrs.get("coordinate_transformation_mode", "half_pixel"),
                   attrs.get("nearest_mode", "round_prefer_floor"), float(attrs.get("cubic_coeff_a", -0.75)),
                   bool(attrs.get("exclude_outside", 0)))


@functools.lru_cache(maxsize=256)
def _matrix(n_in: int, n_out: int, scale: float, mode: str, ctm: str, nearest_mode: str, cubic_a: float,
            exclude_outside: bool) -> np.ndarray:
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = source_coordinate(o, n_in, n_out, scale, ctm)
        low = math.floor(x)
        r = 1.0 if x == low else x - low          # in (0, 1]: the neighbour on the left is preferred
        if mode == "cubic":
            idx, coef = [low - 1, low, low + 1, low + 2], _cubic(r, cubic_a)
            if x == low:
                idx = [i - 1 for i in idx]
            if exclude_outside:
                coef = [c if 0 <= i < n_in else 0.0 for i, c in zip(idx, coef)]
                coef = [c / sum(coef) for c in coef]
        else:
            idx = [low, low + 1] if x != low else [low - 1, low]
            if mode == "linear":
                coef = [1 - r, r]
            else:
                right = x == low or _NEAREST[nearest_mode](r)
                coef = [0.0, 1.0] if right else [1.0, 0.0]
        for i, c in zip(idx, coef):
            m[o, min(max(i, 0), n_in - 1)] += c
    m.flags.writeable = False
    return m


def apply(x: np.ndarray, steps: list[tuple[int, int, int, float]], attrs: dict) -> np.ndarray:
    """``x`` resized along every axis of ``steps`` (``plan``)."""
    out = x.astype(np.float64)
    for axis, n_in, n_out, scale in steps:
        out = np.moveaxis(np.tensordot(matrix(n_in, n_out, scale, attrs), out, axes=([1], [axis])), 0, axis)
    return out.astype(x.dtype)
