"""The profiler (``codegen/timing``): statistics, roofline figures, calibration cache, Chrome trace,
paired A/B, and robustness — a kernel that raises, one that hangs and one that crashes are reported
(the worker is killed at the timeout) while every other kernel is still measured."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.numpy_ref.registry import NUMPY_KERNELS, kernel  # noqa: E402
from codegen.timing import calibrate  # noqa: E402
from codegen.timing.calibrate import Peaks  # noqa: E402
from codegen.timing.profiler import ProfileCancelled, ab_ratio, profile_graph  # noqa: E402
from codegen.timing.stats import KernelTiming, Samples  # noqa: E402
from codegen.timing.trace import chrome_trace  # noqa: E402
from ir import lowering  # noqa: E402
from ir.containers import Container, Role  # noqa: E402
from ir.graph import Graph  # noqa: E402
from ir.memlet import Memlet  # noqa: E402
from ir.nodes import OpNode  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from tests.unit.ir.onnx_models import mlp  # noqa: E402

FAULTS = "test.dcstudio.faults"
PLUGIN = __name__       # the worker imports this module, which registers the faulty kernels below


def _register_faults() -> None:
    if (FAULTS, "Raise") in NUMPY_KERNELS:
        return

    @kernel("Raise", domain=FAULTS)
    def _raise(inputs, attrs, ctx):
        raise RuntimeError("this kernel always fails")

    @kernel("Hang", domain=FAULTS)
    def _hang(inputs, attrs, ctx):
        while True:
            time.sleep(0.05)

    @kernel("Crash", domain=FAULTS)
    def _crash(inputs, attrs, ctx):
        os.abort()


_register_faults()


def _faulty_graph() -> Graph:
    """x -> Relu (map) -> r; x -> Raise -> a; x -> Hang -> h; x -> Crash -> c; r -> Neg (map) -> n."""
    g = Graph("faults")
    for name, role in (("x", Role.INPUT), ("r", Role.TRANSIENT), ("a", Role.OUTPUT), ("h", Role.OUTPUT),
                       ("c", Role.OUTPUT), ("n", Role.OUTPUT)):
        g.add_container(Container(name, (64, 64), "float32", role))
    g.inputs, g.outputs = ["x"], ["a", "h", "c", "n"]
    g.add_node(OpNode("relu", "Relu", [Memlet("x")], [Memlet("r")]))
    for op, out in (("Raise", "a"), ("Hang", "h"), ("Crash", "c")):
        g.add_node(OpNode(op.lower(), op, [Memlet("x")], [Memlet(out)], domain=FAULTS))
    g.add_node(OpNode("neg", "Neg", [Memlet("r")], [Memlet("n")]))
    for node_id in ("relu", "neg"):
        lowering.expand_node(g, node_id)
    return g


def test_samples_statistics():
    s = Samples.of([1_000_000, 3_000_000, 2_000_000, 2_000_000])
    assert (s.median_s, s.min_s, s.max_s, s.n) == (0.002, 0.001, 0.003, 4)
    assert s.cv == pytest.approx(np.std([1, 3, 2, 2]) / 2)
    assert Samples.of([]).n == 0


def test_roofline_figures():
    k = KernelTiming("k", "Add", "kernel", Samples.of([2_000_000]), bytes=40_000_000, flops=10_000_000,
                     peak_bw=25e9, peak_flops=100e9)
    assert k.gbps == pytest.approx(20.0) and k.pct_peak_bw == pytest.approx(80.0)
    assert k.gflops == pytest.approx(5.0)
    assert k.roofline_s == pytest.approx(40e6 / 25e9)          # bandwidth-bound: 1.6 ms
    assert k.efficiency == pytest.approx(1.6e-3 / 2e-3)
    assert not KernelTiming("f", "X", "reference", None, error="timeout").ok


def test_profiling_survives_raise_hang_and_crash():
    g = _faulty_graph()
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    prof = profile_graph(g, {"x": x}, reps=3, warmup=1, timeout=3.0, threads=1, plugins=[PLUGIN])
    by = prof.by_id()
    assert "RuntimeError: this kernel always fails" in by["raise"].error
    assert by["hang"].error.startswith("timeout after 3 s")
    assert by["crash"].error.startswith("crashed")
    for ok in ("relu/expanded", "neg/expanded"):
        assert by[ok].ok and by[ok].samples.n == 3 and by[ok].bytes == 2 * 64 * 64 * 4
    assert prof.workers == 3                     # the hang and the crash each cost one worker
    assert len(prof.failures) == 3 and prof.step.n == 3


@pytest.fixture(scope="module")
def small():
    g = import_proto(mlp(batch=64))
    x = np.random.default_rng(1).standard_normal((64, 4)).astype(np.float32)
    return g, {"x": x}


def test_profile_reports_every_kernel_with_figures_and_a_trace(small, tmp_path):
    g, feeds = small
    pk = Peaks(20e9, 50e9, 1, "test", 0.0)
    prof = profile_graph(g, feeds, reps=4, warmup=1, threads=1, peaks=pk)
    ids = [k.node_id for k in prof.kernels]
    assert ids == ["fc1", "act/expanded", "fc2"]
    assert all(k.ok and k.samples.n == 4 and k.bytes > 0 and k.peak_bw == 20e9 for k in prof.kernels)
    assert prof.threads["numba_threads"] == 1 and prof.threads["blas_threads"] in (1, None)
    # how each generated kernel's loops run comes with its timing (BLAS calls have no loops of ours)
    assert [k.extra["schedule"] for k in prof.kernels] == ["", "map order", ""]
    assert prof.to_json()["kernels"][1]["schedule"] == "map order"
    trace = chrome_trace(prof)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == ids and all(e["dur"] > 0 for e in events)
    assert events == sorted(events, key=lambda e: e["ts"])
    json.dumps(trace)
    only = profile_graph(g, feeds, kernels=["fc2"], reps=2, warmup=0, threads=1)
    assert [k.node_id for k in only.kernels] == ["fc2"]


def test_paired_ab_ratio(small):
    g, feeds = small
    fused = g.clone()
    lowering.expand_all(fused)
    ab = ab_ratio(g, fused, feeds, reps=5, warmup=1, threads=1)
    assert ab.a.n == ab.b.n == 5 and ab.ratio > 0 and ab.pair_spread >= 0


def test_calibration_is_cached_by_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setenv("DCSTUDIO_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibrate, "measure", lambda t: calls.append(t) or Peaks(1e10, 1e11, t, calibrate.fingerprint(t), 0))
    first = calibrate.peaks(1)
    again = calibrate.peaks(1)
    assert calls == [1] and first == again
    assert calibrate.peaks(1, force=True) and calls == [1, 1]
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert list(stored) == [calibrate.fingerprint(1)] != [calibrate.fingerprint(2)]


@pytest.mark.slow
def test_measured_peaks_are_plausible():
    p = calibrate.measure(1)
    assert 0.5e9 < p.bandwidth < 500e9 and 1e9 < p.flops < 10e12


def test_progress_is_reported_and_cancel_kills_the_worker():
    g = _faulty_graph()
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    seen: list[tuple[int, int]] = []
    t0 = time.monotonic()
    with pytest.raises(ProfileCancelled):
        # the Hang kernel would run for the 60 s timeout; cancel as soon as progress arrives
        profile_graph(g, {"x": x}, reps=3, warmup=1, timeout=60.0, threads=1, plugins=[PLUGIN],
                      on_progress=lambda done, total: seen.append((done, total)), cancel=lambda: bool(seen))
    assert time.monotonic() - t0 < 30
    assert seen and all(0 <= d <= t and t == 5 * 5 for d, t in seen)   # 5 statements x (1 + 1 + 3) steps


def test_progress_reaches_the_last_step(small):
    g, feeds = small
    seen: list[tuple[int, int]] = []
    profile_graph(g, feeds, reps=3, warmup=1, threads=1, on_progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][1] == 3 * 5 and max(d for d, _ in seen) >= 4 * 3   # reached the last timed step


def test_a_result_larger_than_a_pipe_buffer_comes_back(small):
    """The worker's result line outgrows a 64 KiB pipe (many kernels x reps): it must not block the worker
    until the parent kills it as hung (``failed outside any kernel: timeout``)."""
    g, feeds = small
    prof = profile_graph(g, feeds, reps=4000, warmup=0, timeout=10.0, threads=1)
    assert len(json.dumps([k.extra["samples_ns"] for k in prof.kernels])) > 1 << 16
    assert all(k.ok and k.samples.n == 4000 for k in prof.kernels) and prof.workers == 1


def test_a_selection_is_timed_as_a_cutout_on_recorded_inputs(small):
    """Profiling kernels=[...] compiles and times only the selection (a cutout graph fed what one
    reference step recorded): the other kernels are not in the result at all, and the cutout's
    outputs equal the full step's values of the same containers (the recorded inputs are the real ones)."""
    from codegen.numba_cpu.runner import CompiledGraph
    from codegen.numpy_ref.executor import run as reference
    from codegen.timing.cutout import cutout
    g, feeds = small
    prof = profile_graph(g, feeds, kernels=["fc2"], reps=3, warmup=1, threads=1)
    assert [k.node_id for k in prof.kernels] == ["fc2"], "only the selection is compiled"
    assert prof.kernels[0].samples.n == 3 and prof.step.n == 3

    sub, fed = cutout(g, ["fc2"], feeds)
    assert list(sub.nodes) == ["fc2"] and set(sub.inputs) == set(fed)
    assert all(c not in g.values for c in sub.inputs), "weights stay weights; intermediates are fed"
    full = reference(g, feeds, outputs=sub.outputs)
    mine = CompiledGraph(sub, threads=1).run(fed)
    for name in sub.outputs:
        np.testing.assert_allclose(mine[name], full[name], rtol=1e-5, atol=1e-6)


def test_a_stale_selection_names_the_kernel(small):
    from codegen.timing.cutout import cutout
    from ir.errors import GraphError
    g, feeds = small
    with pytest.raises(GraphError, match="'gone'.*select the kernels again"):
        cutout(g, ["fc2", "gone"], feeds)


def test_the_recording_run_reports_progress_and_stops_on_cancel(small):
    """The cutout's recording run (this process) reports its kernels and honours cancel before any worker starts."""
    g, feeds = small
    seen: list[tuple[int, int]] = []
    only = profile_graph(g, feeds, kernels=["fc2"], reps=1, warmup=0, threads=1,
                         on_record=lambda d, t: seen.append((d, t)))
    assert [k.node_id for k in only.kernels] == ["fc2"]
    assert seen == [(1, 2), (2, 2)], "fc1 and act run to record fc2's input; nothing after it"
    with pytest.raises(ProfileCancelled, match="recording"):
        profile_graph(g, feeds, kernels=["fc2"], reps=1, warmup=0, threads=1, cancel=lambda: True)


def test_a_recording_keeps_the_recorded_values_for_the_next_cutout_of_the_same_graph(small):
    """Issue 38: the values one cutout recorded feed the next cutout of the same graph version, so a second
    selection runs no upstream kernel; a recording of another graph, explicit feeds or no room to keep
    anything fall back to the recording run, and every path hands the cutout the same values."""
    from codegen.timing.cutout import Recording, cutout
    g = small[0]
    plain = {k: cutout(g, [k])[1] for k in ("fc2", "act", "fc1")}
    for rec in (Recording(g), Recording(g, budget=0)):
        runs: list[list[tuple[int, int]]] = []
        for kernel in ("fc2", "act", "fc2", "fc1"):
            runs.append([])
            sub, fed = cutout(g, [kernel], recording=rec, on_progress=lambda d, t: runs[-1].append((d, t)))
            assert set(fed) == set(plain[kernel]) == set(sub.inputs)
            assert all(np.array_equal(fed[c], plain[kernel][c]) for c in fed), kernel
        if rec.budget:
            assert runs == [[(1, 2), (2, 2)], [], [], []], "fc1 and act ran once, for the first cutout"
            assert rec.nbytes == sum(v.nbytes for v in rec.values.values()) > 0
        else:
            assert runs == [[(1, 2), (2, 2)], [(1, 1)], [(1, 2), (2, 2)], []] and not rec.values
    other = Recording(g.clone())
    seen: list[tuple[int, int]] = []
    cutout(g, ["fc2"], recording=other, on_progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)] and not other.values, "a recording of another graph version is not used"


def test_feeds_for_a_subset_are_deterministic_and_well_formed(small):
    from codegen.numpy_ref.feeds import feeds_for
    g = small[0]
    whole = feeds_for(g)
    for name in whole:
        part = feeds_for(g, names=[name])
        assert list(part) == [name] and part[name].shape == whole[name].shape
        assert part[name].dtype == whole[name].dtype and np.array_equal(part[name], feeds_for(g, names=[name])[name])
    assert feeds_for(g, names=[]) == {}
    assert all(np.array_equal(whole[k], v) for k, v in feeds_for(g).items()), "the whole set is reproducible"


def _function_lines(text: str, name: str) -> list[str]:
    """The lines of function ``name`` in module ``text`` that run a statement: its head comment and its
    buffer views (``B[slot]``)."""
    body = text[text.index(f"\ndef {name}("):]
    body = body[:body.find("\ndef ", 1) if "\ndef " in body[1:] else len(body)]
    return [line.strip() for line in body.splitlines() if line.strip().startswith("# ") or "B[" in line]


def test_the_timed_step_runs_the_steps_statements_in_its_order_on_its_buffers():
    """The instrumented step runs ``_step``'s statements in ``_step``'s order (the loss first, through
    ``_step_forward``) on the same slots of the module's pool. Planned on the program's own order, a slot
    was too small for one statement of the bundled example's optimized step and another slot missing:
    ``dcstudio profile`` reported two of its kernels FAILED (a reshape, an index error)."""
    from codegen.numba_cpu.backend import program
    from codegen.program.module import module_text
    from codegen.program.module_plan import plan_module
    from codegen.timing.instrument import timed_step
    from studio.session.exporting import load_with_history
    examples = Path(__file__).resolve().parents[3] / "resources" / "examples"
    graph, _ = load_with_history(str(examples / "bert_layer_base_train.onnx"),
                                 str(examples / "bert_layer_base_train.history.json"), [])
    prog = program(graph, parallel=True)
    plan = plan_module(prog)                       # as CompiledGraph gives both functions one plan
    text = module_text(prog, mode="inprocess", imports="", doc="d", plan=plan, extra=timed_step(prog, plan))
    step = _function_lines(text, "_step_forward") + _function_lines(text, "_step")
    assert len(step) > 2 * len(prog.statements) // 3
    assert _function_lines(text, "_step_timed") == step
