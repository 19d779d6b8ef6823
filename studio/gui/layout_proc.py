"""The layout child process: a JSON request on stdin, Graphviz ``dot`` per group, JSON on stdout.

Run as a script (``python layout_proc.py``) by ``studio.gui.layout``; standalone on
purpose: no project imports and no Qt, so it starts in about 0.1 s. ``dot`` holds the
GIL and can overflow the C stack on long-edged graphs (FACTS.md "Graph layout"), which
is why it runs here, in a thread with a large stack, and the parent kills it at its
timeout.

Request: ``{"pad": P, "title": T, "groups": [{"key", "items": [{"w", "h"} | {"group": key}],
"edges": [[i, j, kind, weight]]}]}``, groups listed children first, so an item
``{"group": key}`` takes the size of a layout made earlier in the same request (its
content plus ``P`` on three sides and ``T`` on top). Edge kinds: ``"n"`` normal, ``"b"``
backward (written reversed with ``dir=back``: the mirrored backward pass), ``"f"``
free (``constraint=false``: forward → backward saved activations).

Reply: ``{"layouts": {key: {"w", "h", "boxes": [[x, y, w, h]], "edges": [[[x, y], …]]}}}``
in points, y pointing down, boxes top-left, edge points running from the edge's
source to its destination (cubic B-spline control points).
"""
from __future__ import annotations

import json
import sys
import threading

STACK_BYTES = 512 * 1024 * 1024
BIG = 60             # items above which dot gets network-simplex and mincross limits


def _points(pos: str) -> list[list[float]]:
    start, end, pts = None, None, []
    for tok in pos.split():
        if tok.startswith("e,"):
            end = [float(v) for v in tok[2:].split(",")]
        elif tok.startswith("s,"):
            start = [float(v) for v in tok[2:].split(",")]
        else:
            pts.append([float(v) for v in tok.split(",")])
    if start is not None:
        pts = [start, start, start] + pts
    if end is not None:
        pts = pts + [end, end, end]
    return pts


def layout_one(sizes: list[tuple[float, float]], edges: list, big: bool) -> dict:
    """Lay out one group: ``sizes`` of its items, ``edges`` as in the module docstring."""
    if not sizes:
        return {"w": 0.0, "h": 0.0, "boxes": [], "edges": []}
    import pygraphviz as pgv
    a = pgv.AGraph(strict=False, directed=True)
    a.graph_attr.update(rankdir="TB", nodesep="0.25", ranksep="0.4", splines="spline", outputorder="edgesfirst")
    if big:
        a.graph_attr.update(nslimit="0.05", nslimit1="0.05", mclimit="0.1")
    a.node_attr.update(shape="box", fixedsize="true", label="")
    for i, (w, h) in enumerate(sizes):
        a.add_node(f"n{i}", width=f"{w / 72:.4f}", height=f"{h / 72:.4f}")
    for k, (i, j, kind, weight) in enumerate(edges):
        if kind == "b":
            a.add_edge(f"n{j}", f"n{i}", key=str(k), id=str(k), dir="back", weight=str(weight))
        elif kind == "f":
            a.add_edge(f"n{i}", f"n{j}", key=str(k), id=str(k), constraint="false")
        else:
            a.add_edge(f"n{i}", f"n{j}", key=str(k), id=str(k), weight=str(weight))
    a.layout(prog="dot")
    return _read_json0(json.loads(a.draw(format="json0")), edges)


def _read_json0(data: dict, edges: list) -> dict:
    x0, y0, x1, y1 = (float(v) for v in data["bb"].split(","))
    flip = lambda p: [round(p[0] - x0, 2), round(y1 - p[1], 2)]  # noqa: E731
    boxes: list = [None] * len(data.get("objects", []))
    for obj in data.get("objects", []):
        i = int(obj["name"][1:])
        w, h = float(obj["width"]) * 72, float(obj["height"]) * 72
        cx, cy = flip([float(v) for v in obj["pos"].split(",")])
        boxes[i] = [round(cx - w / 2, 2), round(cy - h / 2, 2), round(w, 2), round(h, 2)]
    paths: list = [[] for _ in edges]
    for e in data.get("edges", []):
        k = int(e["id"])
        pts = [flip(p) for p in _points(e.get("pos", ""))]
        paths[k] = pts[::-1] if edges[k][2] == "b" else pts
    return {"w": round(x1 - x0, 2), "h": round(y1 - y0, 2), "boxes": boxes, "edges": paths}


def layout_all(request: dict) -> dict:
    pad, title = float(request["pad"]), float(request["title"])
    out: dict = {}
    for g in request["groups"]:
        sizes = []
        for item in g["items"]:
            if "group" in item:
                inner = out[item["group"]]
                sizes.append((inner["w"] + 2 * pad, inner["h"] + title + pad))
            else:
                sizes.append((float(item["w"]), float(item["h"])))
        out[g["key"]] = layout_one(sizes, g["edges"], len(sizes) > BIG)
    return {"layouts": out}


def main() -> int:
    request = json.load(sys.stdin)
    result: dict = {}

    def work() -> None:
        try:
            result["reply"] = layout_all(request)
        except Exception as e:  # noqa: BLE001 - reported to the parent as one line
            result["error"] = f"{type(e).__name__}: {e}"

    threading.stack_size(STACK_BYTES)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "error" in result:
        sys.stderr.write(f"layout failed: {result['error']}\n")
        return 1
    json.dump(result["reply"], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
