"""Text in and out of the studio: binding arguments, byte and count figures, traffic lines.

Shared by the commands (``studio.cli``) and the window (``studio.gui``); it imports nothing of either."""
from __future__ import annotations

from typing import Sequence

from ir.errors import StudioError


class UsageError(StudioError):
    """A bad command-line argument."""


def parse_bindings(items: Sequence[str]) -> dict[str, int]:
    """``["batch=8", "seq=128"]`` -> ``{"batch": 8, "seq": 128}``; bad items raise UsageError."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit() or int(value) <= 0:
            raise UsageError(f"--bind expects NAME=POSITIVE_INT, got {item!r}")
        out[name.strip()] = int(value)
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000.0
    return f"{n:.2f} GB"


def human_count(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000.0
    return f"{n:.2f}T"


def traffic_lines(moved, n: int = 3) -> str:
    """The two byte counts and the statements where they differ most."""
    lines = [moved.summary()]
    lines += [f"  {s.node_id}: {s.fused / 1e6:.1f} -> {s.exported / 1e6:.1f} MB ({s.why})"
              for s in moved.largest_differences(n)]
    return "\n".join(lines)
