"""Exact JSON round trip of a graph, and its content hash.

``to_json(graph)`` gives plain JSON data (no pickling; arrays are base64 of
their little-endian bytes with dtype and shape); ``from_json`` rebuilds an equal
graph; ``graph_hash`` is the sha256 of the canonical JSON, so the same history
on the same model gives the same hash in any process.
"""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Mapping

import numpy as np

from ir import expr as E
from ir.containers import Container
from ir.errors import StudioError
from ir.graph import Graph
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet

FORMAT = "dcstudio-graph"
VERSION = 1


def array_to_json(arr: np.ndarray) -> dict:
    arr = np.asarray(arr)
    if arr.dtype == object:
        return {"dtype": "string", "shape": list(arr.shape), "items": [str(x) for x in arr.reshape(-1)]}
    data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape),
            "b64": base64.b64encode(data.tobytes()).decode("ascii")}


def array_from_json(d: Mapping) -> np.ndarray:
    if d["dtype"] == "string":
        return np.array(d["items"], dtype=object).reshape(d["shape"])
    dt = np.dtype(d["dtype"]).newbyteorder("<")
    raw = base64.b64decode(d["b64"].encode("ascii"), validate=True)
    return np.frombuffer(raw, dtype=dt).astype(np.dtype(d["dtype"])).reshape(d["shape"])


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"tensor": array_to_json(v)}
    if isinstance(v, list) and v and isinstance(v[0], np.ndarray):
        return {"tensors": [array_to_json(x) for x in v]}
    if isinstance(v, float) and not np.isfinite(v):
        return {"float": repr(v)}
    return v


def _attr_from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if "tensor" in v:
            return array_from_json(v["tensor"])
        if "tensors" in v:
            return [array_from_json(x) for x in v["tensors"]]
        if "float" in v:
            return float(v["float"])
    return v


def _memlets(ms) -> list:
    return [m.to_json() if m is not None else None for m in ms]


def _unmemlets(ms) -> list:
    return [Memlet.from_json(m) if m is not None else None for m in ms]


def _node_to_json(n) -> dict:
    base = {"id": n.id, "name": n.name}
    if n.provenance is not None:
        base["provenance"] = list(n.provenance)
    if isinstance(n, OpNode):
        base.update(kind="op", op_type=n.op_type, domain=n.domain, opset=n.opset, impl=n.impl,
                    attrs={k: _attr_to_json(v) for k, v in sorted(n.attrs.items())},
                    inputs=_memlets(n.inputs), outputs=_memlets(n.outputs))
    elif isinstance(n, MapNode):
        base.update(kind="map", label=n.label, params=[[p, r.to_json()] for p, r in n.params],
                    locals=[c.to_json() for c in n.locals.values()],
                    body=[_node_to_json(b) for b in n.body],
                    inputs=_memlets(n.inputs), outputs=_memlets(n.outputs))
    else:
        base.update(kind="tasklet", expr=E.to_json(n.expr),
                    inputs={k: m.to_json() for k, m in n.inputs.items()}, output=n.output.to_json())
    return base


def _node_from_json(d: Mapping):
    prov = tuple(d["provenance"]) if d.get("provenance") else None
    kind = d["kind"]
    if kind == "op":
        return OpNode(d["id"], d["op_type"], _unmemlets(d["inputs"]), _unmemlets(d["outputs"]),
                      domain=d["domain"], attrs={k: _attr_from_json(v) for k, v in d["attrs"].items()},
                      impl=d["impl"], opset=int(d["opset"]), name=d["name"], provenance=prov)
    if kind == "map":
        locs = [Container.from_json(c) for c in d["locals"]]
        return MapNode(d["id"], [(p, Range.from_json(r)) for p, r in d["params"]],
                       [_node_from_json(b) for b in d["body"]], locals={c.name: c for c in locs},
                       inputs=_unmemlets(d["inputs"]), outputs=_unmemlets(d["outputs"]),
                       label=d["label"], name=d["name"], provenance=prov)
    if kind == "tasklet":
        return Tasklet(d["id"], E.from_json(d["expr"]),
                       {k: Memlet.from_json(m) for k, m in d["inputs"].items()},
                       Memlet.from_json(d["output"]), name=d["name"], provenance=prov)
    raise ValueError(f"unknown node kind {kind!r}")


def to_json(graph: Graph, *, with_values: bool = True, with_nodes: bool = True, with_containers: bool = True,
            value_digest=None) -> dict:
    """Plain JSON data for ``graph`` (values as base64 unless ``with_values`` is False: then by
    sha256, through ``value_digest`` when given; ``with_nodes``/``with_containers=False`` leave
    those out, for ``graph_hash``, which digests them one by one)."""
    d = {"format": FORMAT, "version": VERSION, "name": graph.name,
         "access_ids": {name: graph.access_id(name) for name in graph.containers},
         "inputs": list(graph.inputs), "outputs": list(graph.outputs),
         "bindings": dict(sorted(graph.bindings.items())), "opsets": dict(sorted(graph.opsets.items())),
         "meta": dict(sorted(graph.meta.items()))}
    if with_containers:
        d["containers"] = [c.to_json() for c in graph.containers.values()]
    if with_nodes:
        d["nodes"] = [_node_to_json(n) for n in graph.nodes.values()]
    if with_values:
        d["values"] = {k: array_to_json(v) for k, v in graph.values.items()}
    else:
        digest = value_digest or _array_digest
        d["values_sha256"] = {k: digest(v) for k, v in graph.values.items()}
    return d


def from_json(d: Mapping) -> Graph:
    """Rebuild a graph from ``to_json`` data; malformed data raises StudioError."""
    if d.get("format") != FORMAT:
        raise StudioError(f"not a {FORMAT} document (format={d.get('format')!r})")
    if d.get("version") != VERSION:
        raise StudioError(f"{FORMAT} version {d.get('version')!r} is not supported (expected {VERSION})")
    try:
        g = Graph(d["name"])
        access = d.get("access_ids", {})
        for c in d["containers"]:
            cont = Container.from_json(c)
            g.containers[cont.name] = cont
            ident = access.get(cont.name) or g.ids.claim("data:" + cont.name)
            g.ids._taken.add(ident)
            g._access_ids[cont.name] = ident
        for nd in d["nodes"]:
            g.add_node(_node_from_json(nd))
        g.inputs, g.outputs = list(d["inputs"]), list(d["outputs"])
        g.bindings = {k: int(v) for k, v in d["bindings"].items()}
        g.opsets = {k: int(v) for k, v in d["opsets"].items()}
        g.meta = dict(d["meta"])
        g.values = {k: array_from_json(v) for k, v in d.get("values", {}).items()}
    except (KeyError, TypeError, ValueError) as e:
        raise StudioError(f"malformed {FORMAT} document: {type(e).__name__}: {e}") from None
    return g


def dumps(graph: Graph, **kw) -> str:
    return json.dumps(to_json(graph, **kw), sort_keys=True, separators=(",", ":"))


def loads(text: str) -> Graph:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise StudioError(f"not JSON: {e}") from None
    return from_json(data)


def graph_hash(graph: Graph, cache: "HashCache | None" = None) -> str:
    """sha256 over the canonical JSON of the graph's header (containers, access ids, inputs,
    outputs, bindings, opsets, meta, value digests) and of each node, in node order;
    independent of PYTHONHASHSEED and of where the model file lies: ``meta["source"]`` (its
    path) is left out, ``meta["sha256"]`` (its content) stays, so a history recorded on a model
    replays on the same file moved, renamed or in another checkout. With a ``HashCache`` the
    digests of nodes and values that did not change are reused (a replay forgets the ids each
    step touched): the same hash at a fraction of the cost on a 10k-node graph."""
    cache = cache if cache is not None else HashCache()
    header = to_json(graph, with_values=False, with_nodes=False, with_containers=False,
                     value_digest=cache.value_digest)
    header["meta"].pop("source", None)
    h = hashlib.sha256(json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    for c in graph.containers.values():
        h.update(cache.container_digest(c))
    for ident, node in graph.nodes.items():
        h.update(cache.node_digest(ident, node))
    return h.hexdigest()


class HashCache:
    """Digests of nodes (by id, until ``forget``; not kept with ``keep_nodes=False``, for a caller
    that hashes unrelated graphs, like a Session's states) and of value arrays and containers (by
    identity: they are never edited, so one cache serves every state of a session)."""

    def __init__(self, *, keep_nodes: bool = True) -> None:
        self.keep_nodes = keep_nodes
        self._nodes: dict[str, bytes] = {}
        self._values: dict[int, tuple[np.ndarray, str]] = {}
        self._containers: dict[int, tuple[Container, bytes]] = {}

    def forget(self, ids) -> None:
        for ident in ids:
            self._nodes.pop(ident, None)

    def node_digest(self, ident: str, node) -> bytes:
        d = self._nodes.get(ident)
        if d is None:
            text = json.dumps(_node_to_json(node), sort_keys=True, separators=(",", ":"))
            d = hashlib.sha256(text.encode("utf-8")).digest()
            if self.keep_nodes:
                self._nodes[ident] = d
        return d

    def container_digest(self, c: Container) -> bytes:
        hit = self._containers.get(id(c))
        if hit is None or hit[0] is not c:
            text = json.dumps(c.to_json(), sort_keys=True, separators=(",", ":"))
            hit = self._containers[id(c)] = (c, hashlib.sha256(text.encode("utf-8")).digest())
        return hit[1]

    def value_digest(self, arr: np.ndarray) -> str:
        hit = self._values.get(id(arr))
        if hit is None or hit[0] is not arr:
            hit = self._values[id(arr)] = (arr, _array_digest(arr))
        return hit[1]


def _array_digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
