"""Heatmap scaling and colours (bytes moved, or measured time, per kernel): no Qt here.

``normalize`` maps values to [0, 1] by one of ``SCALES``:

- ``linear``: (v - min) / (max - min);
- ``log``: the same on log(1 + v), so a few huge GEMMs do not wash out the rest;
- ``rank``: the position in sorted order (ties share a rank), i.e. a quantile map.

``color`` is a light-yellow → dark-red ramp (``grey`` turns it grey for stale data);
``legend`` gives the value at each tick so the view can label its colour bar.
``box_values`` sums per-kernel values over each box's kernels, leaving out boxes with
no value at all (for measured time: boxes none of whose kernels were measured).
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Iterable, Mapping

SCALES = ("linear", "log", "rank")
RAMP = ((255, 255, 204), (254, 217, 118), (253, 141, 60), (227, 26, 28), (128, 0, 38))


def _forward(v: float, scale: str) -> float:
    return math.log1p(max(v, 0.0)) if scale == "log" else float(v)


def normalize(values: Mapping[str, float], scale: str = "log") -> dict[str, float]:
    """``key -> t`` in [0, 1] (see the module docstring); empty in, empty out."""
    if scale not in SCALES:
        raise ValueError(f"unknown heatmap scale {scale!r} (one of {', '.join(SCALES)})")
    if not values:
        return {}
    if scale == "rank":
        ordered = sorted(set(values.values()))
        top = max(1, len(ordered) - 1)
        return {k: bisect.bisect_left(ordered, v) / top for k, v in values.items()}
    lo = min(_forward(v, scale) for v in values.values())
    hi = max(_forward(v, scale) for v in values.values())
    span = hi - lo
    return {k: (_forward(v, scale) - lo) / span if span > 0 else 0.0 for k, v in values.items()}


def color(t: float) -> tuple[int, int, int]:
    """The ramp colour at ``t`` in [0, 1] (clamped)."""
    t = min(1.0, max(0.0, t)) * (len(RAMP) - 1)
    k = min(int(t), len(RAMP) - 2)
    f = t - k
    a, b = RAMP[k], RAMP[k + 1]
    return tuple(round(a[i] + (b[i] - a[i]) * f) for i in range(3))


def grey(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """The same lightness without the hue (stale figures)."""
    y = round(0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2])
    return (y, y, y)


def box_values(boxes: Iterable[str], members: Callable[[str], Iterable[str]],
               per_kernel: Mapping[str, float]) -> dict[str, float]:
    """``box -> sum of per_kernel over its kernels`` for boxes with at least one kernel in ``per_kernel``."""
    out = {}
    for box in boxes:
        vals = [per_kernel[i] for i in members(box) if i in per_kernel]
        if vals:
            out[box] = float(sum(vals))
    return out


def number_label(v: float) -> str:
    """A legend tick of node data: whole thousands with separators (155,900, not 1.559e+05), four
    significant digits below that, and powers of ten only beyond 10^15 or below 10^-3."""
    if 1e4 <= abs(v) < 1e15:
        return f"{v:,.0f}"
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    mantissa, exponent = f"{v:.3e}".split("e")
    return f"{float(mantissa):g}×10^{int(exponent)}"


def legend(values: Mapping[str, float], scale: str, ticks: int = 5) -> list[tuple[float, float]]:
    """``[(t, value)]`` at ``ticks`` evenly spaced positions of the colour bar."""
    if not values:
        return []
    vals = sorted(values.values())
    out = []
    for k in range(ticks):
        t = k / (ticks - 1)
        if scale == "rank":
            distinct = sorted(set(vals))
            v = distinct[round(t * (len(distinct) - 1))]
        elif scale == "log":
            lo, hi = math.log1p(max(vals[0], 0)), math.log1p(max(vals[-1], 0))
            v = math.expm1(lo + t * (hi - lo))
        else:
            v = vals[0] + t * (vals[-1] - vals[0])
        out.append((t, v))
    return out
