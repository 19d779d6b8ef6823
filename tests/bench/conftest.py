"""Fixtures of the benchmarks: the GUI tests' ``make_window`` and ``settings`` (``tests/gui/conftest.py``:
main windows with their settings in a temporary INI file, closed after the test), when PySide6 is
installed."""
from __future__ import annotations

import importlib.util

if importlib.util.find_spec("PySide6") is not None:
    from tests.gui.conftest import make_window, settings  # noqa: F401 - fixtures
