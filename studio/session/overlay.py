"""Per-kernel data from outside, and the studio's figures out: Model Explorer's node-data JSON.

``load_overlay(path, graph)`` reads a node-data file as Google's Model Explorer writes and reads
it: a *graph node data* object ``{"results": {KEY: {"value": NUMBER, ...}, ...}, "gradient"
| "thresholds": ...}``, or a *model node data* object mapping graph ids to such objects (the
one named like the graph is taken, else the first). A KEY is a kernel id, or the name of a
container a kernel writes (Model Explorer matches output tensor names too); keys that match
no kernel are listed in ``Overlay.unmatched``. Given the session's lineage, keys of the opened graph
(the names a model file has, before any fusion) colour the kernels made from them, each with the sum
(or max) of its origins' values (``Overlay.aggregate``). The file is parsed as JSON only, never evaluated;
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
from typing import Callable, Iterable, Mapping

from ir.errors import StudioError
from ir.graph import Graph

GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 0.5, "bgColor": "#fdae61"}, {"stop": 1, "bgColor": "#d7191c"}]


AGGREGATES = {"sum": sum, "max": max}
Lineage = tuple[Graph, Callable[[str], Iterable[str]]]


@dataclass(frozen=True)
class Overlay:
    name: str
    values: dict[str, float]                      # kernel id -> value
    unmatched: list[str] = field(default_factory=list)
    aggregate: str = ""                           # how kernels made from several keyed ones combine them

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


def load_overlay(path: str | os.PathLike, graph: Graph, name: str | None = None, *,
                 lineage: Lineage | None = None, aggregate: str = "sum") -> Overlay:
    """The values of node-data file ``path`` per kernel of ``graph`` (see the module docstring)."""
    path = Path(path)
    return map_values(read_values(path, graph), graph, name or path.stem, lineage=lineage, aggregate=aggregate)


def read_values(path: Path, graph: Graph) -> dict[str, float]:
    """Key -> value of a node-data file (a kernel id or a tensor name: not matched yet)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise StudioError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, f"not valid JSON ({e})") from None
    out: dict[str, float] = {}
    for key, result in _results(doc, path, graph).items():
        value = result.get("value") if isinstance(result, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _fail(path, f"the result for '{key}' has no finite numeric 'value'")
        out[key] = float(value)
    return out


def _match(keyed: Mapping[str, float], graph: Graph) -> tuple[dict[str, float], list[str]]:
    """Values per kernel of ``graph`` (a key is a kernel id or a tensor a kernel writes), and the keys
    that match none."""
    writer = {m.container: n.id for n in graph.nodes.values() for m in n.outputs if m is not None}
    values: dict[str, float] = {}
    unmatched = []
    for key, value in keyed.items():
        kernel = key if key in graph.nodes else writer.get(key)
        if kernel is None:
            unmatched.append(key)
        else:
            values[kernel] = values.get(kernel, 0.0) + value
    return values, unmatched


def map_values(keyed: Mapping[str, float], graph: Graph, name: str, *, lineage: Lineage | None = None,
               aggregate: str = "sum") -> Overlay:
    """``keyed`` values per kernel of ``graph``. With ``lineage`` (the opened graph, and the origins of a
    kernel of ``graph`` in it), keys of the opened graph's kernels and tensors colour the kernels made from
    them: each takes the ``aggregate`` (sum or max) of its origins' values."""
    first, rest = _match(keyed, lineage[0]) if lineage is not None else ({}, list(keyed))
    values, unmatched = _match({k: keyed[k] for k in rest}, graph)     # keys of kernels made since (an export)
    if not first:
        return Overlay(name, values, unmatched)
    origins, combine = lineage[1], AGGREGATES[aggregate]
    made = False                                   # some kernel takes its value from kernels it was made from
    for kernel in graph.nodes:
        came_from = tuple(origins(kernel))
        found = [first[o] for o in came_from if o in first]
        if found:
            values[kernel] = combine([values[kernel], *found]) if kernel in values else combine(found)
            made = made or came_from != (kernel,)
    return Overlay(name, values, unmatched, aggregate if made else "")


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
