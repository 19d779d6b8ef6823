"""Golden snapshots: compare text with ``tests/golden/snapshots/<name>.txt``; ``--update-golden`` rewrites."""
from __future__ import annotations

import difflib
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def check_golden(name: str, text: str, update: bool) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if update or not path.exists():
        if not update:
            raise AssertionError(f"no snapshot {path}; run `bash .ci/test --update-golden` to create it")
        path.write_text(text)
        return
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "actual"))
        raise AssertionError(f"golden mismatch for {name} (update with --update-golden):\n{diff}")
