"""Kernel-body snapshots: every generated kernel's text, less its own name, held byte-identical.

A snapshot ``tests/golden/snapshots/kernels/<name>.txt`` has one line per distinct kernel body:
the sha256 of its text with its own name replaced by ``KERNEL``, then the name it has today.
Only the digests are compared, so renaming kernels leaves a snapshot valid while any change to a
body fails it, naming the kernels whose text is new (``--update-golden`` rewrites)."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from tests.golden.golden import SNAPSHOTS


def digest(name: str, text: str) -> str:
    return hashlib.sha256(text.replace(name, "KERNEL").encode()).hexdigest()[:24]


def snapshot_text(sources: Mapping[str, str]) -> str:
    rows = sorted({digest(name, text): name for name, text in sorted(sources.items())}.items())
    return "".join(f"{d} {name}\n" for d, name in rows)


def check_kernels(name: str, sources: Mapping[str, str], update: bool) -> None:
    """``sources``: kernel name → its text (a kernel module, or a kernel's source)."""
    path = SNAPSHOTS / "kernels" / f"{name}.txt"
    text = snapshot_text(sources)
    if update:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(f"no kernel snapshot {path}; run `bash .ci/test --update-golden` to create it")
    want = {line.split()[0]: line.split()[1] for line in path.read_text().splitlines()}
    have = {line.split()[0]: line.split()[1] for line in text.splitlines()}
    new = sorted(name for d, name in have.items() if d not in want)
    gone = sorted(name for d, name in want.items() if d not in have)
    assert not new and not gone, (f"kernel bodies of {name} changed (update with --update-golden): "
                                  f"{len(new)} new, e.g. {new[:5]}; {len(gone)} gone, e.g. {gone[:5]}")


def package_kernels(pkg: Path) -> dict[str, str]:
    """An exported package's kernel modules (``kernels/k_*.py``), by kernel name."""
    return {f.stem: f.read_text() for f in (pkg / "kernels").glob("k_*.py")}
