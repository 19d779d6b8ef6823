"""Replay reports: JSON (one record per step) and JUnit XML (one test case per step).

Both are written atomically (temp file + rename), so a failed run never leaves
half a report behind.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Sequence
from xml.sax.saxutils import escape, quoteattr

from transforms.replay import StepReport


def write_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def report_json(model: str, history: str, reports: Sequence[StepReport], failures: dict[int, str]) -> dict:
    first, last = reports[0], reports[-1]
    return {"format": "dcstudio-replay-report", "version": 1, "model": model, "history": history,
            "steps": [dict(r.to_json(), failure=failures.get(r.step)) for r in reports],
            "summary": {"bytes_before": first.bytes, "bytes_after": last.bytes, "bound": last.bound,
                        "ratio": round(last.ratio, 6),
                        "reduction": round(1 - last.bytes / first.bytes, 6) if first.bytes else 0.0,
                        "flops": last.flops, "peak_bytes": last.peak_bytes, "graph_hash": last.graph_hash,
                        "failures": len(failures)}}


def junit_xml(suite: str, reports: Iterable[StepReport], failures: dict[int, str]) -> str:
    rows = [r for r in reports if r.step > 0]
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name={quoteattr(suite)} tests="{len(rows)}" failures="{len(failures)}">']
    for r in rows:
        name = quoteattr(f"step {r.step}: {r.transformation} {' '.join(r.anchors)}")
        lines.append(f'  <testcase classname="dcstudio.replay" name={name} time="{r.seconds:.4f}">')
        if r.step in failures:
            msg = failures[r.step]
            lines.append(f'    <failure message={quoteattr(msg)}>{escape(msg)}</failure>')
        lines.append(f'    <system-out>bytes={r.bytes} bound={r.bound} ratio={r.ratio:.4f} '
                     f'{"" if r.peak_bytes is None else f"peak={r.peak_bytes} "}hash={r.graph_hash}</system-out>')
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


def dump_json(doc: dict) -> str:
    return json.dumps(doc, indent=1) + "\n"
