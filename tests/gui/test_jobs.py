"""Workers give way to the GUI thread's bursts of work (``jobs.gui_busy``) at their token checks."""
from __future__ import annotations

import threading
import time

import pytest

from studio.gui.jobs import Cancelled, CancelToken, gui_busy


def _worker(token: CancelToken, start: threading.Event, call: str, out: list) -> threading.Thread:
    def run() -> None:
        start.wait(5)
        try:
            getattr(token, call)("the work")
            out.append(("passed", time.perf_counter()))
        except Cancelled as e:
            out.append((str(e), time.perf_counter()))
    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_worker_waits_at_its_check_until_the_burst_ends_and_the_burst_itself_never_waits():
    token, start, out = CancelToken(), threading.Event(), []
    t = _worker(token, start, "check", out)
    with gui_busy():
        start.set()
        time.sleep(0.3)
        t0 = time.perf_counter()
        token.check("the refresh")                  # the burst's own thread passes at once
        with gui_busy():                            # nested: still one burst
            token.check("the refresh")
        assert time.perf_counter() - t0 < 0.05
        assert out == []
        ended = time.perf_counter()
    t.join(5)
    assert out and out[0][0] == "passed" and out[0][1] >= ended


def test_a_cancel_during_the_burst_reaches_a_worker_waiting_to_commit():
    """The worker waits outside the token's lock, so the GUI thread's cancel does not block on it."""
    token, start, out = CancelToken(), threading.Event(), []
    t = _worker(token, start, "commit", out)
    with gui_busy():
        start.set()
        time.sleep(0.2)
        t0 = time.perf_counter()
        token.cancel()
        assert time.perf_counter() - t0 < 0.05
    t.join(5)
    assert out and out[0][0] == "the work was cancelled"
    with pytest.raises(Cancelled):
        token.check()


def test_background_work_waits_for_foreground_work_and_holds():
    """Ranking (``background``) waits at its checks while a comparison or a planned repeat (``foreground``)
    runs, and while a hold lasts; foreground work and unmarked workers never wait for foreground work."""
    from studio.gui.jobs import background, foreground, hold_workers
    token, out = CancelToken(), []
    fg_started, fg_release = threading.Event(), threading.Event()

    def fg() -> None:
        with foreground():
            fg_started.set()
            token.check("the comparison")                # foreground work does not wait for itself
            out.append(("foreground checked", time.perf_counter()))
            fg_release.wait(5)

    def bg() -> None:
        with background():
            token.check("the ranking")
            out.append(("background checked", time.perf_counter()))

    def plain() -> None:
        token.check("the layout")
        out.append(("plain checked", time.perf_counter()))
    f = threading.Thread(target=fg)
    f.start()
    fg_started.wait(5)
    workers = [threading.Thread(target=bg), threading.Thread(target=plain)]
    for t in workers:
        t.start()
    time.sleep(0.3)
    assert [name for name, _ in out] in (["foreground checked", "plain checked"],
                                         ["plain checked", "foreground checked"]), out
    released = time.perf_counter()
    fg_release.set()
    for t in (f, *workers):
        t.join(5)
    assert out[-1][0] == "background checked" and out[-1][1] >= released
    hold_workers(0.3)
    t0 = time.perf_counter()
    held = threading.Thread(target=plain)
    held.start()
    held.join(5)
    assert out[-1][1] - t0 >= 0.25, "a worker waits out the hold"
    t0 = time.perf_counter()
    token.check("the GUI thread")                        # the main thread is never held
    assert time.perf_counter() - t0 < 0.05


def test_pause_points_in_ir_loops_wait_while_workers_are_held():
    """``ir.pacing.paced`` (matching a whole graph, hashing a layer) gives way like a token check: the studio
    registered ``jobs``' pause, so a worker looping over ``paced`` items waits while a hold lasts."""
    from ir import pacing
    from studio.gui import jobs
    assert pacing._pause is jobs._give_way
    calls: list[int] = []
    saved = pacing._pause
    pacing.set_pause(lambda: calls.append(1))
    try:
        assert list(pacing.paced(range(40), every=16)) == list(range(40))
        assert len(calls) == 3                      # before items 0, 16 and 32
        pacing.set_pause(None)                      # headless: no pause registered, items pass unchanged
        assert list(pacing.paced("abc", every=1)) == ["a", "b", "c"]
    finally:
        pacing.set_pause(saved)
    done: list[float] = []
    t = threading.Thread(target=lambda: (list(pacing.paced(range(4), every=1)), done.append(time.perf_counter())))
    jobs.hold_workers(0.3)
    t0 = time.perf_counter()
    t.start()
    t.join(5)
    assert done and done[0] - t0 >= 0.25             # the worker waited at its first pause point
    jobs.release_workers()
