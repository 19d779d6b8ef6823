"""Ctrl-C in an exported package's ``train`` (``codegen.export.package_cli._StopRequest``): the first SIGINT
only asks the loop to stop between steps, so it never lands inside a checkpoint's ``np.savez`` (which left
the ZIP half-closed and ended the run with a ValueError instead of a saved checkpoint, about 1 run in 40);
a second SIGINT interrupts at once, and the previous handler comes back afterwards."""
from __future__ import annotations

import os
import signal

import pytest

from codegen.export.package_cli import _StopRequest


def test_the_first_ctrl_c_asks_the_second_interrupts_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGINT)
    with _StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)        # delivered at the next bytecode: no KeyboardInterrupt
        for _ in range(1000):
            if stop.requested:
                break
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_nothing_is_installed():
    import threading
    seen = {}

    def run():
        with _StopRequest() as stop:
            seen["installed"] = stop._previous is not None
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == {"installed": False}
