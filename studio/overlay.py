"""Per-kernel data from outside, and the studio's figures out: Model Explorer's node-data JSON.

``load_overlay(path, graph)`` reads a node-data file as Google's Model Explorer writes and reads
it: a *graph node data* object ``{"results": {KEY: {"value": NUMBER, ...}, ...}, "gradient"
| "thresholds": ...}``, or a *model node data* object mapping graph ids to such objects (the
one named like the graph is taken, else the first). A KEY is a kernel id, or the name of a
container a kernel writes (Model Explorer matches output tensor names too); keys that match
no kernel are listed in ``Overlay.unmatched``. The file is parsed as JSON only, never evaluated;
a malformed file, a result without a numeric ``value`` or a non-finite value is a
``StudioError`` naming the file and the key.

``save_overlay(path, graph, values, name)`` writes the studio's figures (bytes moved per kernel,
a profile's measured times) in the same format, written atomically, with a white-to-red
gradient, so Model Explorer can colour its own view of the model with them.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ir.errors import StudioError
from ir.graph import Graph

GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 0.5, "bgColor": "#fdae61"}, {"stop": 1, "bgColor": "#d7191c"}]


@dataclass(frozen=True)
class Overlay:
    name: str
    values: dict[str, float]                      # kernel id -> value
    unmatched: list[str] = field(default_factory=list)

    def describe(self) -> str:
        extra = f", {len(self.unmatched)} keys matched no kernel" if self.unmatched else ""
        return f"{self.name}: {len(self.values)} kernels{extra}"


def _fail(path: Path, what: str) -> StudioError:
    return StudioError(f"{path}: {what}; a node-data file is JSON: {{\"results\": {{\"<kernel id>\": "
                       "{\"value\": <number>}}}} (Model Explorer's format)")


def _results(doc, path: Path, graph: Graph) -> dict:
    if not isinstance(doc, dict):
        raise _fail(path, "the top level is not a JSON object")
    if "results" in doc:
        results = doc["results"]
    else:                                          # model node data: graph id -> graph node data
        graphs = {k: v for k, v in doc.items() if isinstance(v, dict) and "results" in v}
        if not graphs:
            raise _fail(path, "no 'results' object (nor graphs holding one)")
        results = (graphs.get(graph.name) or next(iter(graphs.values())))["results"]
    if not isinstance(results, dict):
        raise _fail(path, "'results' is not an object")
    return results


def load_overlay(path: str | os.PathLike, graph: Graph, name: str | None = None) -> Overlay:
    """The values of node-data file ``path`` per kernel of ``graph`` (see the module docstring)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise StudioError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, f"not valid JSON ({e})") from None
    results = _results(doc, path, graph)
    writer = {m.container: n.id for n in graph.nodes.values() for m in n.outputs if m is not None}
    values: dict[str, float] = {}
    unmatched = []
    for key, result in results.items():
        value = result.get("value") if isinstance(result, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _fail(path, f"the result for '{key}' has no finite numeric 'value'")
        kernel = key if key in graph.nodes else writer.get(key)
        if kernel is None:
            unmatched.append(key)
        else:
            values[kernel] = values.get(kernel, 0.0) + float(value)
    return Overlay(name or path.stem, values, unmatched)


def save_overlay(path: str | os.PathLike, graph: Graph, values: Mapping[str, float], name: str) -> Path:
    """Write ``values`` (kernel id -> number) as a graph node-data file (atomically); returns the path."""
    path = Path(path)
    doc = {"name": name, "results": {k: {"value": float(v)} for k, v in values.items() if k in graph.nodes},
           "gradient": GRADIENT}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
