"""The zoo's table in the terminal summary: per model, bytes before/after, bound, checks, seconds."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from tests.zoo.test_zoo import ROWS
    if not ROWS:
        return
    w = terminalreporter
    w.section("model zoo: recipe, replay --check and the exported module's --check vs the original model")
    for name, r in ROWS.items():
        if "bytes_before" not in r:
            w.write_line(f"{name:<20} training (worst error/tolerance): {r.get('training')}")
            continue
        before, after, bound = r["bytes_before"], r["bytes_after"], r["bound"]
        w.write_line(f"{name:<20} {r['steps']:>5} steps  {before / 1e6:9.2f} MB -> {after / 1e6:9.2f} MB "
                     f"({after / before - 1:+.1%}), bound {bound / 1e6:.2f} MB, "
                     f"{before / bound:.2f}x -> {after / bound:.2f}x the bound")
        if "note" in r:
            w.write_line(f"{'':<20} {r['note']}")
        w.write_line(f"{'':<20} replay: {r['replay_check']}")
        w.write_line(f"{'':<20} module: {r.get('module_check', 'not run')}")
        for optimizer, worst in r.get("training", {}).items():
            w.write_line(f"{'':<20} trains like PyTorch ({optimizer}, worst error/tolerance): {worst}")
        w.write_line(f"{'':<20} seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r["seconds"].items()))
