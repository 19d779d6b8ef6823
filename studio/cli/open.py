"""``dcstudio open [MODEL] [--history H]``: the desktop studio (PySide6, the ``gui`` extra).

Without a model it opens the bundled BERT-layer training example. Without a
display (``DISPLAY``/``WAYLAND_DISPLAY`` unset and ``QT_QPA_PLATFORM`` not
``offscreen``) it says so and how to replay a history headless instead, and exits
2; likewise when PySide6 is not installed. The window runs as ``python -m
studio.gui.qt_app`` in a child process: ``studio`` never imports ``studio.gui``
(the layering of DESIGN §1), and the exit code is the window's. The window ends with the launcher:
SIGTERM, SIGINT and SIGHUP sent to ``dcstudio open`` are passed on to the window, and on Linux the
window also gets SIGTERM when the launcher dies without passing anything on (SIGKILL).
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "resources" / "examples" / "bert_layer_base_train.onnx"
NO_DISPLAY = ("dcstudio open needs a display: neither DISPLAY nor WAYLAND_DISPLAY is set.\n"
              "To replay a history headless instead, run:\n"
              "    dcstudio replay MODEL HISTORY [--check]\n"
              "(To run the window without a screen, e.g. in tests, set QT_QPA_PLATFORM=offscreen.)")


def has_display(env=os.environ) -> bool:
    if env.get("QT_QPA_PLATFORM", "").split(":")[0] == "offscreen":
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def cmd_open(args: argparse.Namespace) -> int:
    if not has_display():
        print(NO_DISPLAY, file=sys.stderr)
        return 2
    if importlib.util.find_spec("PySide6") is None:
        print("dcstudio open needs PySide6 (the gui extra): bash .ci/setup-env gui\n"
              "To replay a history headless instead, run: dcstudio replay MODEL HISTORY", file=sys.stderr)
        return 2
    for label, path in (("model", args.model), ("history", args.history)):
        if path and not Path(path).is_file():
            print(f"dcstudio: error: {label} {path}: file not found", file=sys.stderr)
            return 2
    argv = [sys.executable, "-m", "studio.gui.qt_app", args.model or str(EXAMPLE)]
    argv += ["--history", args.history] if args.history else []
    argv += ["--exit-when-loaded"] if args.exit_when_loaded else []
    return run_window(argv)


FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_window(argv: list[str]) -> int:
    """Run the window's process; pass the launcher's termination signals on to it; its exit code."""
    child = subprocess.Popen(argv, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    previous = {sig: signal.signal(sig, lambda signum, _frame: child.send_signal(signum)) for sig in FORWARDED}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In the window's process before it starts: SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def add_parser(sub) -> None:
    p = sub.add_parser("open", help="open the desktop studio (needs a display and the gui extra)")
    p.add_argument("model", nargs="?", help="ONNX model (default: the bundled BERT-layer training example)")
    p.add_argument("--history", metavar="H", help="a history file to replay after opening")
    p.add_argument("--exit-when-loaded", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_open)
