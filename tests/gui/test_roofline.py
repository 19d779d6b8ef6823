"""Roofline geometry (``studio/gui/roofline.py``, no Qt): ridge, decade axes, roofs, placement, hover."""
from __future__ import annotations

import math

import pytest

from codegen.timing.stats import KernelTiming, Samples
from studio.gui import roofline as rf

BW, FL = 20e9, 100e9          # ridge at 5 FLOP/B


def _k(node_id, bytes_, flops, ms):
    return KernelTiming(node_id, "Op", "kernel", Samples.of([ms * 1e6]), bytes_, flops, BW, FL)


def test_ridge_and_attainable():
    assert rf.ridge(BW, FL) == pytest.approx(5.0)
    assert rf.attainable(1.0, BW, FL) == pytest.approx(20e9)        # below the ridge: bandwidth bound
    assert rf.attainable(50.0, BW, FL) == FL                         # above: compute bound
    assert rf.ridge(0.0, FL) == math.inf


def test_points_one_per_measured_kernel_and_clamped_without_flops():
    ks = [_k("a", 1000, 500, 1.0), _k("view", 80, 0, 0.001),
          KernelTiming("bad", "X", "reference", None, 10, 10, BW, FL, error="timeout")]
    pts = rf.points(ks)
    assert [p.node_id for p in pts] == ["a", "view"]                 # the failed one has no dot
    a, view = pts
    assert a.intensity == pytest.approx(0.5) and a.flops_s == pytest.approx(500 / 1e-3) and not a.clamped
    assert view.clamped and view.flops_s == 0.0


def test_axes_are_whole_decades_holding_points_ridge_and_roof():
    pts = rf.points([_k("a", 1000, 30, 1.0), _k("b", 100, 2000, 0.01)])      # I = 0.03 and 20
    ax = rf.axes(pts, BW, FL)
    for v in (ax.x_lo, ax.x_hi, ax.y_lo, ax.y_hi):
        assert math.log10(v) == pytest.approx(round(math.log10(v)))
    assert ax.x_lo <= 0.03 and ax.x_hi >= 20 and ax.x_lo <= 5 <= ax.x_hi
    assert ax.y_lo <= min(p.flops_s for p in pts) and ax.y_hi >= FL
    assert ax.x_hi / ax.x_lo >= 100 and ax.y_hi / ax.y_lo >= 1000  # never a degenerate plot
    empty = rf.axes([], 0.0, 0.0)
    assert empty.x_lo < empty.x_hi and empty.y_lo < empty.y_hi


def test_place_maps_log_axes_to_pixels_with_y_down():
    ax, r = rf.Axes(0.1, 100.0, 1e6, 1e12), rf.Rect(10, 20, 300, 600)
    assert rf.place(ax, r, 0.1, 1e6) == pytest.approx((10, 620))            # bottom-left
    assert rf.place(ax, r, 100.0, 1e12) == pytest.approx((310, 20))         # top-right
    assert rf.place(ax, r, math.sqrt(10), 1e9) == pytest.approx((10 + 150, 20 + 300))
    assert rf.place(ax, r, 0.0, 0.0) == pytest.approx((10, 620))            # clamped to the floor
    assert rf.place(ax, r, 1e6, 1e15) == pytest.approx((310, 20))           # clamped to the top


def test_roof_rises_to_the_ridge_then_stays_flat():
    ax = rf.Axes(0.01, 100.0, 1e6, 1e12)
    roof = rf.roof(ax, BW, FL)
    assert roof[0] == pytest.approx((0.01, BW * 0.01))
    assert roof[1] == pytest.approx((5.0, FL)) and roof[-1] == pytest.approx((100.0, FL))
    high_floor = rf.Axes(0.01, 100.0, 1e9, 1e12)                            # slope starts above the floor
    assert rf.roof(high_floor, BW, FL)[0] == pytest.approx((1e9 / BW, 1e9))
    left = rf.roof(rf.Axes(10.0, 1000.0, 1e6, 1e12), BW, FL)                  # ridge left of the axes
    assert left == [pytest.approx((10.0, FL)), pytest.approx((1000.0, FL))]
    right = rf.roof(rf.Axes(0.01, 1.0, 1e6, 1e12), BW, FL)                   # ridge right of the axes
    assert right[-1] == pytest.approx((1.0, BW)) and all(y < FL for _, y in right)
    assert rf.roof(ax, 0.0, FL) == []


def test_decades_and_nearest():
    assert rf.decades(0.01, 10.0) == pytest.approx([0.01, 0.1, 1.0, 10.0])
    placed = [(10.0, 10.0), (50.0, 50.0), (53.0, 50.0)]
    assert rf.nearest(placed, 52.5, 50.0) == 2
    assert rf.nearest(placed, 11.0, 12.0) == 0
    assert rf.nearest(placed, 200.0, 200.0) is None
