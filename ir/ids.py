"""Stable, deterministic ids derived from ONNX names.

``sanitize`` keeps letters, digits and ``_ . / : -``, replaces anything else
with ``_`` and never returns an empty string. ``IdAuthority`` de-duplicates by
appending ``~1``, ``~2``… in first-come order, so the same model always gives
the same ids (no counters shared across graphs, no time, no hash randomization).
"""
from __future__ import annotations

import re

_BAD = re.compile(r"[^0-9A-Za-z_./:\-]")


def sanitize(name: str, fallback: str = "node") -> str:
    """A readable id fragment for ``name``."""
    text = _BAD.sub("_", name.strip())
    return text or fallback


class IdAuthority:
    """Hands out unique ids within one graph."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self._taken: set[str] = set(taken or ())

    def claim(self, wanted: str) -> str:
        """``wanted`` sanitized, made unique with a ``~k`` suffix if needed."""
        base = sanitize(wanted)
        ident, k = base, 1
        while ident in self._taken:
            ident = f"{base}~{k}"
            k += 1
        self._taken.add(ident)
        return ident

    def release(self, ident: str) -> None:
        self._taken.discard(ident)

    def __contains__(self, ident: str) -> bool:
        return ident in self._taken
