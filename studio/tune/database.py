"""The results database of ``dcstudio tune``: an embedded SQLite file, append-mostly.

Table ``results``: one row per evaluated candidate, keyed by its *context* (what makes two evaluations comparable:
the model's sha256, bindings, optimizer file, objective, transfer mode, the fingerprint of the
transformation code, and for time objectives the machine fingerprint and thread count) and the
candidate's canonical key (its passes as JSON). Table ``measurements``: a finalist's exported step
timed against the hand recipe's (medians, their ratio, the spread of the paired ratios, threads),
under the same keys; a time objective's context holds the machine fingerprint and thread count. Table
``kernel_times`` (added in place: files without it gain it, schema 1 readers ignore it): one kernel
structure's median time, spread and load average (``studio.tune.kernels``), keyed by a context of machine
fingerprint, thread count, backend and code, and the kernel's structure key.
A second run with the same context reads its
earlier results instead of evaluating again (warm start); a changed machine or changed
transformation code is another context, so stale values are never reused.

Safe with several writers: WAL journal, a 30 s busy timeout, and every write is one transaction
(``INSERT OR REPLACE`` of one row), so a crash leaves either the whole row or none. The schema is
versioned (``meta.schema``); a file of another version is refused with a message, never rewritten.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from ir.errors import StudioError
from studio.tune.types import Score

SCHEMA = 1


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "dcstudio" / "tune.sqlite"


class ResultsDB:
    """``get``/``put`` of scores by (context, candidate key); ``count`` per context."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            found = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise StudioError(f"{self.path}: not a dcstudio tune database ({e}); pass another --db") from None
        if found != str(SCHEMA):
            raise StudioError(f"{self.path}: tune database schema {found}, this dcstudio reads schema {SCHEMA}; "
                              "pass another --db (the file is left as it is)")
        self._db.execute("""CREATE TABLE IF NOT EXISTS results (
            context TEXT NOT NULL, candidate TEXT NOT NULL, value REAL NOT NULL, bytes INTEGER NOT NULL,
            steps INTEGER NOT NULL, graph_hash TEXT NOT NULL, seconds REAL NOT NULL, error TEXT,
            about TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (context, candidate))""")
        self._db.execute("""CREATE TABLE IF NOT EXISTS kernel_times (
            context TEXT NOT NULL, kernel TEXT NOT NULL, median_s REAL NOT NULL, spread REAL NOT NULL,
            load REAL NOT NULL, label TEXT NOT NULL, about TEXT NOT NULL, created REAL NOT NULL,
            PRIMARY KEY (context, kernel))""")
        self._db.execute("""CREATE TABLE IF NOT EXISTS measurements (
            context TEXT NOT NULL, candidate TEXT NOT NULL, recipe_ms REAL NOT NULL, candidate_ms REAL NOT NULL,
            ratio REAL NOT NULL, spread REAL NOT NULL, threads INTEGER NOT NULL, created REAL NOT NULL,
            PRIMARY KEY (context, candidate))""")

    def get(self, context: str, candidate: str) -> Score | None:
        row = self._db.execute("SELECT value, bytes, steps, graph_hash, seconds, error FROM results "
                               "WHERE context = ? AND candidate = ?", (context, candidate)).fetchone()
        return Score(*row) if row else None

    def put(self, context: str, candidate: str, score: Score, about: dict) -> None:
        d = asdict(score)
        self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (context, candidate, d["value"], d["bytes"], d["steps"], d["graph_hash"], d["seconds"],
                          d["error"], json.dumps(about, sort_keys=True), time.time()))

    def get_measured(self, context: str, candidate: str):
        from studio.tune.types import Measured
        row = self._db.execute("SELECT recipe_ms, candidate_ms, ratio, spread, threads FROM measurements "
                               "WHERE context = ? AND candidate = ?", (context, candidate)).fetchone()
        if not row:
            return None
        failed = "it failed its check against the original model when it was measured" if row[2] == 0 else ""
        return Measured(candidate, *row, "", failed)

    def put_measured(self, context: str, m) -> None:
        self._db.execute("INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (context, m.key, m.recipe_ms, m.candidate_ms, m.ratio, m.spread, m.threads, time.time()))

    def kernel_times(self, context: str) -> dict:
        """Every kernel structure timed in ``context`` (``studio.tune.kernels.KernelTime`` by key)."""
        from studio.tune.types import KernelTime
        rows = self._db.execute("SELECT kernel, median_s, spread, load, label FROM kernel_times WHERE context = ?",
                                (context,)).fetchall()
        return {r[0]: KernelTime(*r) for r in rows}

    def put_kernel_time(self, context: str, t, about: dict) -> None:
        self._db.execute("INSERT OR REPLACE INTO kernel_times VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (context, t.key, t.median_s, t.spread, t.load, t.label, json.dumps(about, sort_keys=True),
                          time.time()))

    def count(self, context: str) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results WHERE context = ?", (context,)).fetchone()[0]

    def close(self) -> None:
        self._db.close()
