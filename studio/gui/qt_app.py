"""Starting the studio: the QApplication, the main window, the model (and history) to open.

``python -m studio.gui.qt_app [MODEL] [--history H]`` is what ``dcstudio open`` runs.

``run`` returns the application's exit code. With ``exit_when_loaded`` the window
closes itself as soon as the model is open and its layout has settled (a smoke
test of ``dcstudio open`` without a user), exiting 1 if loading failed.
"""
from __future__ import annotations

import argparse
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from studio.gui.qt_main_window import QtMainWindow


def run(model: str | None = None, history: str | None = None, *, exit_when_loaded: bool = False) -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("dcstudio")
    app.setApplicationName("dcstudio")
    window = QtMainWindow(restore_policy="never" if exit_when_loaded else "ask", offer_training=not exit_when_loaded)
    window.show()
    task = window.open_model(model, history)
    if exit_when_loaded:
        status = {"code": 1}

        def settled() -> None:
            if window.session is not None:
                status["code"] = 0
                QTimer.singleShot(0, window.close)

        window.view.layoutSettled.connect(settled)
        task.failed.connect(lambda msg: (print(f"dcstudio: {msg}", file=sys.stderr), window.close()))
        app.exec()
        return status["code"]
    return app.exec()


def main(argv: list[str] | None = None) -> int:
    """``python -m studio.gui.qt_app MODEL [--history H]`` (what ``dcstudio open`` runs)."""
    p = argparse.ArgumentParser(prog="dcstudio open")
    p.add_argument("model", nargs="?")
    p.add_argument("--history")
    p.add_argument("--exit-when-loaded", action="store_true")
    args = p.parse_args(argv)
    return run(args.model, args.history, exit_when_loaded=args.exit_when_loaded)


if __name__ == "__main__":
    sys.exit(main())
