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
