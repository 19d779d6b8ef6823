"""Roofline plot geometry: log-log axes, roofs, point placement, hover: no Qt here.

x is arithmetic intensity (FLOP per byte moved), y achieved FLOP/s. The roofs come from
the calibrated peaks: ``attainable(x) = min(peak_flops, peak_bw * x)``; they meet at the
ridge point ``x = peak_flops / peak_bw``. Axes span whole decades around the points and
the ridge (``axes``). A kernel without counted FLOPs or bytes has no place on log axes;
it is still drawn, *clamped* to the axis floor (``Point.clamped``), so every measured
kernel has a dot. ``place`` maps data to pixels in a plot rectangle (y grows downwards),
``roof`` gives the roof polyline clipped to the axes, ``nearest`` finds the dot under
the mouse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True, slots=True)
class Point:
    node_id: str
    label: str
    intensity: float         # FLOP / byte
    flops_s: float           # achieved FLOP/s
    clamped: bool = False    # drawn on the axis floor: no FLOPs (or no bytes) were counted


@dataclass(frozen=True, slots=True)
class Axes:
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float


@dataclass(frozen=True, slots=True)
class Rect:
    left: float
    top: float
    width: float
    height: float


def ridge(peak_bw: float, peak_flops: float) -> float:
    """The intensity (FLOP/B) at which the bandwidth roof meets the compute roof."""
    return peak_flops / peak_bw if peak_bw > 0 else math.inf


def attainable(x: float, peak_bw: float, peak_flops: float) -> float:
    return min(peak_flops, peak_bw * x)


def _decade_down(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v))


def _decade_up(v: float) -> float:
    return 10.0 ** math.ceil(math.log10(v))


def axes(points: Iterable[Point], peak_bw: float, peak_flops: float) -> Axes:
    """Whole decades holding the unclamped points, the ridge and the compute roof."""
    real = [p for p in points if not p.clamped]
    xs = [p.intensity for p in real]
    ys = [p.flops_s for p in real]
    if peak_bw > 0 and peak_flops > 0:
        xs.append(ridge(peak_bw, peak_flops))
        ys.append(peak_flops)
    xs = xs or [0.1, 10.0]
    ys = ys or [1e6, 1e9]
    x_lo, x_hi = _decade_down(min(xs)), _decade_up(max(xs))
    y_lo, y_hi = _decade_down(min(ys)), _decade_up(max(ys) * 1.0001)
    if x_hi <= x_lo:
        x_hi = x_lo * 10
    if y_hi <= y_lo:
        y_hi = y_lo * 10
    return Axes(min(x_lo, x_hi / 100), x_hi, min(y_lo, y_hi / 1000), y_hi)


def points(kernels) -> list[Point]:
    """One point per measured kernel (``KernelTiming`` with ``ok``); see ``Point.clamped``."""
    out = []
    for k in kernels:
        if not k.ok:
            continue
        t = k.samples.median_s
        if k.flops > 0 and k.bytes > 0 and t > 0:
            out.append(Point(k.node_id, k.label, k.flops / k.bytes, k.flops / t))
        else:
            out.append(Point(k.node_id, k.label, k.flops / k.bytes if k.bytes and k.flops else 0.0,
                             k.flops / t if t > 0 else 0.0, clamped=True))
    return out


def _frac(v: float, lo: float, hi: float) -> float:
    return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))


def place(ax: Axes, rect: Rect, x: float, y: float) -> tuple[float, float]:
    """Pixel position of data point (x, y); values outside the axes are clamped to its edges."""
    x = min(max(x, ax.x_lo), ax.x_hi) if x > 0 else ax.x_lo
    y = min(max(y, ax.y_lo), ax.y_hi) if y > 0 else ax.y_lo
    return (rect.left + rect.width * _frac(x, ax.x_lo, ax.x_hi),
            rect.top + rect.height * (1.0 - _frac(y, ax.y_lo, ax.y_hi)))


def roof(ax: Axes, peak_bw: float, peak_flops: float) -> list[tuple[float, float]]:
    """The roof in data coordinates, clipped to the axes: bandwidth slope, ridge, compute flat."""
    if peak_bw <= 0 or peak_flops <= 0:
        return []
    r = ridge(peak_bw, peak_flops)
    x0 = max(ax.x_lo, ax.y_lo / peak_bw)           # where the slope rises above the floor
    pts = [(x0, peak_bw * x0)] if x0 < min(r, ax.x_hi) else []
    if r <= ax.x_hi:
        xr = max(r, ax.x_lo)                         # a ridge left of the axes: only the flat roof
        pts.append((xr, peak_flops))
        if xr < ax.x_hi:
            pts.append((ax.x_hi, peak_flops))
    else:
        pts.append((ax.x_hi, peak_bw * ax.x_hi))
    return pts


def decades(lo: float, hi: float) -> list[float]:
    """Tick values: every power of ten from ``lo`` to ``hi``."""
    a, b = round(math.log10(lo)), round(math.log10(hi))
    return [10.0 ** e for e in range(a, b + 1)]


def nearest(placed: Sequence[tuple[float, float]], x: float, y: float, radius: float = 6.0) -> int | None:
    """Index of the placed point closest to (x, y) within ``radius`` pixels, or None."""
    best, best_d = None, radius * radius
    for k, (px, py) in enumerate(placed):
        d = (px - x) ** 2 + (py - y) ** 2
        if d <= best_d:
            best, best_d = k, d
    return best
