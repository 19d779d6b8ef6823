"""Crash detection: a marker file says "a studio has this model open" (no Qt here).

``claim(model)`` writes the marker beside the model's autosave in the user's state directory
(``Session.autosave_for`` with the suffix ``.lock``; never beside the model) with this
process's id, host and start time; ``release(model)`` removes it on a clean close. Several
windows of one process may hold the same model: the marker is reference-counted in-process
and removed with the last release, and a process never removes a marker another process wrote.

``crashed(model)`` is true when a marker is left that no running studio owns: its process is
gone, or the id was reused by a younger process (its start time differs), or the marker is
unreadable. Only then does the GUI offer to restore the autosave. A marker written on
another host cannot be checked from here; it counts as crashed (the user is asked).
``Hold`` is what one window keeps: the model it shows, claimed, and released when it
shows another or closes.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from studio.session.core import Session

_held: dict[Path, int] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Owner:
    """Who wrote a marker: process id, host and the process's start time (None when unknown)."""

    pid: int
    host: str
    started: int | None

    def to_json(self) -> dict:
        return {"pid": self.pid, "host": self.host, "started": self.started}


def marker_for(model_path: str | os.PathLike) -> Path:
    """The marker of ``model_path``: the autosave's path with the suffix ``.lock``."""
    return Session.autosave_for(model_path).with_suffix(".lock")


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()         # the command name may contain spaces and ')'
    try:
        return int(fields[19])                         # field 22 of stat(5); fields[0] is field 3
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0: checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                              # it exists, owned by another user
        return True
    except OSError:
        return False
    return True


def this_process() -> Owner:
    return Owner(os.getpid(), socket.gethostname(), process_start(os.getpid()))


def read_owner(marker: Path) -> Owner | None:
    """The marker's owner; None when there is no marker; raises ValueError when it is unreadable."""
    try:
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"unreadable session marker {marker}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        raise ValueError(f"session marker {marker} has no process id")
    started = doc.get("started")
    return Owner(doc["pid"], str(doc.get("host", "")), started if isinstance(started, int) else None)


def owner_running(owner: Owner) -> bool:
    """Whether the process that wrote a marker still runs (see the module docstring)."""
    if owner.host != socket.gethostname() or not pid_alive(owner.pid):
        return False
    if owner.started is None:
        return True
    now = process_start(owner.pid)
    return now is None or now == owner.started


def crashed(model_path: str | os.PathLike) -> bool:
    """True when the model's marker was left by a studio that did not close cleanly."""
    try:
        owner = read_owner(marker_for(model_path))
    except ValueError:
        return True
    return owner is not None and not owner_running(owner)


def _write(marker: Path, owner: Owner) -> None:
    marker.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{marker.name}.", suffix=".tmp", dir=marker.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(owner.to_json(), fh)
        os.replace(tmp, marker)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def claim(model_path: str | os.PathLike) -> Path:
    """Mark ``model_path`` as open in this process (written atomically); returns the marker."""
    marker = marker_for(model_path)
    with _lock:
        _write(marker, this_process())
        _held[marker] = _held.get(marker, 0) + 1
    return marker


def release(model_path: str | os.PathLike) -> None:
    """Undo one ``claim``; the last one removes the marker if this process wrote it."""
    marker = marker_for(model_path)
    with _lock:
        count = _held.get(marker, 0) - 1
        if count > 0:
            _held[marker] = count
            return
        _held.pop(marker, None)
        try:
            owner = read_owner(marker)
        except ValueError:
            owner = None
        if owner is not None and owner.pid == os.getpid() and owner.host == socket.gethostname():
            marker.unlink(missing_ok=True)


class Hold:
    """The model one window shows (see the module docstring)."""

    def __init__(self) -> None:
        self.model_path: str | None = None

    def set(self, model_path: str | os.PathLike | None) -> None:
        """Release the held model and claim ``model_path`` (None: hold nothing). A marker that
        cannot be written only means a crash will not be detected."""
        if self.model_path is not None:
            release(self.model_path)
            self.model_path = None
        if model_path is not None:
            try:
                claim(model_path)
            except OSError:
                return
            self.model_path = str(model_path)
