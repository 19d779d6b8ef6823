"""How far a calibration can be trusted: other processes' load while it ran, and its spread."""
from __future__ import annotations

import json

from codegen.timing import calibrate
from codegen.timing.calibrate import Peaks, other_load, spread


def test_load_is_the_other_processes_share_of_all_cpu_time():
    hz = __import__("os").sysconf("SC_CLK_TCK")
    before, after = (1000, 10_000), (1000 + 300, 10_000 + 1000)     # 300 busy ticks of 1000
    assert other_load(before, after, own_s=100 / hz) == 0.2         # 100 of them were ours
    assert other_load(before, after, own_s=10.0) == 0.0             # clamped: never negative
    assert other_load(None, after, 0.0) == 0.0 and other_load(after, after, 0.0) == 0.0


def test_spread_is_the_median_over_the_best():
    assert spread([1.0]) == 0.0
    assert abs(spread([1.0, 1.2, 1.1]) - 0.1) < 1e-12
    assert abs(spread([2.0, 1.0, 1.5, 4.0]) - 1.0) < 1e-12            # upper median 2.0 over 1.0


def test_a_cache_written_before_load_and_spread_still_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "_path", lambda: tmp_path / "calibration.json")
    key = calibrate.fingerprint(1)
    (tmp_path / "calibration.json").write_text(json.dumps({key: {
        "bandwidth": 1e10, "flops": 1e11, "threads": 1, "fingerprint": key, "measured_at": 1.0, "unknown": 3}}))
    p = calibrate.peaks(1)
    assert p == Peaks(1e10, 1e11, 1, key, 1.0) and p.load == 0.0 and p.spread == 0.0
    assert "0 % load" in p.describe()


def test_the_cache_roof_is_a_vectorized_triad_resident_in_l2():
    """The cache-resident triad (issue 38: AdamW kernels plotted at up to 341 % of the DRAM roof with no
    cache roof): each thread's data fits half its L2, so it runs well above the DRAM triad measured in the same
    run (a first try that checked negative indices in its inner loop ran unvectorized at 12 GB/s)."""
    from codegen.numba_cpu import microbench
    moved, resident = microbench.cache_triad_seconds(calibrate.l2_bytes() // 2, 1, reps=5)
    dram = microbench.triad_seconds(1 << 24, 3)
    cache_bw, dram_bw = moved / min(resident), 3 * 4 * (1 << 24) / min(dram)
    assert cache_bw > 2 * dram_bw, (cache_bw, dram_bw)
    assert calibrate.l2_bytes() >= 64 << 10 and calibrate.cache_bytes() >= calibrate.l2_bytes()
