"""Layers: the repeated scopes of a model (``encoder/layer.0`` … ``encoder/layer.11``), and when two
of them are structurally equal, for transfer tuning (``transforms.transfer``).

Exporters name kernels by module path, and a stack of layers numbers one path component:
``/encoder/layer.3/attention/self/Softmax`` (or ``/layer.3/…``: the TorchScript exporter drops
scopes), its gradient ``grad//layer.3/…``, its parameters and their update
``encoder.layer.3.attention.self.query.weight``. A **family** is such a component numbered
PyTorch's way (``stem.<index>``: a ``ModuleList`` entry; ONNX's ``Add_1`` de-duplication suffix
is not one), known by its stem (``layer``, ``h``, ``blocks``; ``features.6`` where torchvision
numbers a block inside a stage, ``features.6.1``), and a **layer** (``layer.3``) is one index of a
family: the kernels whose id's first numbered component is that one, forward, backward and
optimizer update together. Kernels a transformation creates keep the layer (a
fused kernel's id derives from the first kernel it fuses).

Two layers are **equal** when their kernels, in graph order, are the same up to the layer index:
each kernel's serialized form (op, attributes, implementation, map bodies, memlets with their
subsets) and the shapes, dtypes and roles of the containers it touches, with the layer's index
replaced by a placeholder wherever it appears in a name, small constants by their values (an
exporter may keep one constant that every layer reads inside the first layer) except float ones the
layer owns (a block's BatchNorm statistics), and the containers of other layers (the previous
layer's output a layer reads) numbered in the order the layer first uses them. Equal layers
compute the same thing on the same shapes with the same wiring, so a step recorded in one applies
to the other with every id renamed (``rename``), and does the same there. A model whose exporter does not keep module
paths (the dynamo exporter's ``node_MatMul_12``) has no layers: nothing is transferred.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache

from ir.containers import Role
from ir.errors import StudioError
from ir.graph import Graph
from ir.pacing import paced
from ir.serialize import _array_digest, _node_to_json

_SMALL = 4096          # constants up to this many elements may compare by value (``_by_value``)
_NUMBERED = re.compile(r"(?:^|(?<=[/.]))(?P<stem>[A-Za-z_][A-Za-z_0-9]*)\.(?P<index>\d+)(?=[./_]|$)")


@dataclass(frozen=True, order=True)
class Family:
    stem: str

    def key(self, index: int) -> str:
        """The layer's name, as histories record it: ``layer.3``."""
        return f"{self.stem}.{index}"

    def rename(self, text: str, a: int, b: int | str) -> str:
        """``text`` with layer ``a``'s index replaced by ``b`` wherever it names the layer."""
        if f"{self.stem}.{a}" not in text:              # most container names: no regular expression run
            return text
        # group 1 and the index become a literal: its substitution runs in C (a callable, or a \g<1> template
        # in Python 3.11, runs Python per match)
        literal = f"{self.stem}.{b}".replace("\\", "\\\\")
        return _layer_pattern(self.stem, a).sub(literal, text)


@lru_cache(maxsize=1024)
def _layer_pattern(stem: str, index: int | str) -> re.Pattern:
    return re.compile(rf"(?:^|(?<=[/.\"]))({re.escape(stem)}\.){index}(?=[./_\"]|$)")   # \": in JSON text


@lru_cache(maxsize=1 << 16)
def layer_of(ident: str) -> tuple[Family, int] | None:
    """The family and index of the first numbered component of ``ident`` (None: in no layer).
    A component numbered twice (``features.4.1``: a ``Sequential`` of blocks inside a
    ``Sequential`` of stages, as torchvision's EfficientNet and Swin nest them), anywhere in the id,
    makes the stage the family (``features.4``) and the block its index (1): the blocks of a stage
    are what repeats. Cached: a pass limited to a layer asks for every kernel id on every sweep."""
    m = _NUMBERED.search(ident)
    if m is None:
        return None
    stem, index = m.group("stem"), m.group("index")
    nested = re.search(rf"(?:^|(?<=[/.])){re.escape(stem)}\.{index}\.(\d+)(?=[./_]|$)", ident)
    if nested is not None:
        return Family(f"{stem}.{index}"), int(nested.group(1))
    return Family(stem), int(index)


def parse_key(key: str) -> tuple[Family, int]:
    """The inverse of ``Family.key``."""
    m = re.fullmatch(r"(?P<stem>[A-Za-z_][A-Za-z_0-9]*(?:\.\d+)?)\.(?P<index>\d+)", key)
    if m is None:
        raise StudioError(f"'{key}' is not a layer name (like 'layer.3')")
    return Family(m.group("stem")), int(m.group("index"))


def layers(graph: Graph) -> dict[Family, dict[int, list[str]]]:
    """Every family with at least two layers: index -> its kernel ids in graph order."""
    found: dict[Family, dict[int, list[str]]] = {}
    for ident in graph.nodes:
        hit = layer_of(ident)
        if hit is not None:
            found.setdefault(hit[0], {}).setdefault(hit[1], []).append(ident)
    return {f: dict(sorted(v.items())) for f, v in sorted(found.items()) if len(v) > 1}


def members(graph: Graph, family: Family, index: int) -> list[str]:
    """The kernel ids of one layer, in graph order."""
    return [i for i in graph.nodes if layer_of(i) == (family, index)]


def layer_hash(graph: Graph, family: Family, index: int, ids: list[str] | None = None) -> str:
    """The structural hash of a layer (see the module docstring): equal hashes, equal layers. Each kernel's
    part is kept (``_piece``): after an apply only the kernels it made are serialized again."""
    h = hashlib.sha256()
    outside: dict[str, str] = {}          # containers of other layers or none: by order of first use
    for ident in paced(members(graph, family, index) if ids is None else ids):
        node = graph.nodes[ident]
        names = [m.container for m in node.inputs + node.outputs if m is not None]
        tokens = {}
        for name in dict.fromkeys(names):
            if graph.container(name).role is Role.CONSTANT and name in graph.values \
                    and _by_value(graph, name, family, index):                # a constant: by its value
                tokens[name] = "§const:" + _array_digest(graph.values[name])
            elif layer_of(name) != (family, index):
                tokens[name] = outside.setdefault(name, f"§outside{len(outside)}")
        h.update(_piece(graph, node, family, index, names, tokens).encode())
        h.update(b"\n")
    return h.hexdigest()


_PIECES: dict[tuple, tuple] = {}   # (kernel, layer, tokens, containers) -> (the kernel, its containers, its part)
_PIECES_MAX = 1 << 16


def _piece(graph: Graph, node, family: Family, index: int, names: list[str], tokens: dict[str, str]) -> str:
    """A kernel's part of its layer's hash. Nodes and containers are never changed in place (a graph
    version shares them with the versions before it, ``Graph.clone_sharing``), so the part is kept per
    node object, layer, tokens and container objects: the entry holds those objects, so no other object
    can take their ids while it is kept."""
    containers = tuple(graph.container(n) for n in dict.fromkeys(names))
    key = (id(node), family, index, tuple(tokens.items()), tuple(map(id, containers)))
    hit = _PIECES.get(key)
    if hit is not None:
        return hit[2]
    d = _node_to_json(node)
    d.pop("provenance", None)
    # the containers in the order of their names as the hash sees them (a previous block's output
    # sorts before or after the block's own names depending on its index)
    order = sorted(set(names), key=lambda n: tokens.get(n) or family.rename(n, index, "§"))
    d["containers"] = [graph.container(n).to_json() for n in order]
    text = json.dumps(d, sort_keys=True)
    for name, token in tokens.items():
        text = text.replace(json.dumps(name), json.dumps(token))
    piece = family.rename(text, index, "§")
    if len(_PIECES) >= _PIECES_MAX:
        _PIECES.clear()
    _PIECES[key] = (node, containers, piece)
    return piece


def _by_value(graph: Graph, name: str, family: Family, index: int) -> bool:
    """Whether a constant compares by its value rather than by its (renamed) name: small integer
    constants (shapes, axes, indices: structure), and small float constants unless they are this
    layer's own — named in it and read by no other kernel (a BatchNorm's per-channel statistics, which
    each block owns and which differ between equal blocks). A float constant every layer reads (an
    exporter may keep one inside the first layer) compares by value."""
    value = graph.values[name]
    if value.size > _SMALL:
        return False
    if value.dtype.kind in "iub" or layer_of(name) != (family, index):
        return True
    return any(layer_of(c.id) != (family, index) for c in graph.consumers(name))


def equal_layers(graph: Graph, family: Family, index: int) -> list[int]:
    """The other layers of ``family`` structurally equal to layer ``index`` (in index order)."""
    groups = layers(graph).get(family, {})
    if index not in groups:
        return []
    mine = layer_hash(graph, family, index, groups[index])
    return [k for k, ids in groups.items() if k != index and layer_hash(graph, family, k, ids) == mine]


def equal_group(graph: Graph, family: Family) -> tuple[int, list[int]] | None:
    """The largest set of equal layers of ``family``: (the first, the others), or None."""
    by_hash: dict[str, list[int]] = {}
    for k, ids in layers(graph).get(family, {}).items():
        by_hash.setdefault(layer_hash(graph, family, k, ids), []).append(k)
    best = max(by_hash.values(), key=len, default=[])
    return (best[0], best[1:]) if len(best) > 1 else None
