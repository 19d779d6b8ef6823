"""tests/fixtures: every file is listed in its README with the sha256 it has, and none is large."""
from __future__ import annotations

import hashlib
import re

from tests.conftest import FIXTURES

ROW = re.compile(r"^- `([^`]+)` (\d+) B, sha256 `([0-9a-f]{64})`$")
MAX_BYTES = 10 * 2**20


def _listed() -> dict[str, tuple[int, str]]:
    rows = {}
    for line in (FIXTURES / "README.md").read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), m.group(3))
    return rows


def test_every_fixture_file_is_listed_with_its_size_and_sha256():
    listed = _listed()
    present = {p.relative_to(FIXTURES).as_posix(): p for p in FIXTURES.rglob("*")
               if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts}
    assert sorted(present) == sorted(listed), "tests/fixtures/README.md and the files disagree"
    for rel, path in present.items():
        data = path.read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == listed[rel], rel
        assert len(data) <= MAX_BYTES, f"{rel} is over 10 MB: keep the repository small"
