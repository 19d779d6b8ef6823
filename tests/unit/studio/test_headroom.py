"""``studio.tune.headroom``: the most any history could gain over a given one on this CPU, from a real profile
(the MLP AdamW training step of the fixtures, profiled out of process on 1 thread, with the paired steps
whose generated kernels are no-ops)."""
from __future__ import annotations

import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from studio.tune import headroom  # noqa: E402
from studio.session import Session  # noqa: E402
from transforms.horizontal_fusion import kind  # noqa: E402


@pytest.fixture(scope="module")
def measured(fixtures_dir):
    s = Session.open(str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"))
    return s.graph, headroom.measure(s.graph, threads=1, reps=3)


def test_gemms_and_the_rest_are_told_apart(measured):
    graph, h = measured
    gemms = [n for n in graph.nodes.values() if kind(n) == "gemm"]
    assert gemms and h.gemm_s > 0 and h.gemm_flops > 0 and h.other_s > 0
    assert 0 <= h.floor_s <= h.other_s and h.threads == 1 and h.peak_flops > 0 and h.peak_bandwidth > 0
    assert 0 <= h.glue_s < h.step_s
    assert h.saving_s == pytest.approx(h.other_s - h.floor_s + h.glue_s)
    assert h.at_peak >= h.bound >= 1.0
    assert h.bound == pytest.approx(h.step_s / (h.step_s - h.saving_s))
    assert 0 < h.kernels_off_s < h.full_s and h.loose == pytest.approx(h.full_s / h.kernels_off_s) and h.loose > 1
    text = h.text()
    assert f"{h.bound:.3f}x" in text and "1 thread(s)" in text
    assert "at their rooflines" in text and "between statements" in text
    assert f"no history at all gains more than {h.loose:.3f}x" in text


def test_a_profile_without_peaks_or_with_a_failed_kernel_is_refused(measured):
    from dataclasses import replace

    from codegen.timing.profiler import Profile
    graph, _ = measured
    prof = Profile([], None, {"numba_threads": 1})
    with pytest.raises(ValueError, match="no calibrated peaks"):
        headroom.of_profile(graph, prof)
    from codegen.timing.calibrate import Peaks
    from codegen.timing.stats import KernelTiming
    bad = KernelTiming("n", "label", "kernel", None, 0, 0, 1.0, 1.0, "timeout after 60 s")
    with pytest.raises(ValueError, match="'n' did not run.*timeout"):
        headroom.of_profile(graph, replace(prof, kernels=[bad], peaks=Peaks(1.0, 1.0, 1, "f", 0.0)))
