"""How exporters pack a recurrent layer's weights, so that the unrolling (``ir.recurrent``) reads the pieces.

PyTorch keeps one weight per direction and projection, its gates in its own order; ONNX wants all directions
stacked and its own gate order. So the TorchScript exporter writes, for ``nn.GRU``'s ``weight_ih_l0``::

    W = Concat(Unsqueeze(Concat(Slice(w, H:2H), Slice(w, 0:H), Slice(w, 2H:3H)), [0]), <reverse direction>)

and ``B`` as ``Concat`` of the input and recurrent biases, each reordered the same way. Unrolled as written,
a training step would slice, concatenate, split and squeeze every weight in the forward pass, and pad,
concatenate and split their gradients in the backward (a quarter of a small GRU classifier's bytes after the
recipe). ``Packs`` recognises the packing instead:

- ``per_direction``: a value that stacks views along a new leading axis (``Unsqueeze(·, [0])`` or ``Reshape``
  to ``(1, *shape)``, concatenated on axis 0) gives its pieces;
- ``halves``: a ``Concat`` on axis 0 of two values of a given length gives both (the input and recurrent
  biases);
- ``gate_blocks``: a ``Concat`` on axis 0 of ``Slice``s of one tensor along axis 0, each one gate long and
  together a permutation of its gates, gives the tensor and the permutation: the GEMM then runs on the tensor
  itself and the unrolling takes its gates in that order.

``packers`` lists the outputs of every node recognised; ``without_unread`` drops those that nothing reads
once the layers read the pieces.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from onnx import GraphProto, NodeProto, TensorProto, helper

from ir.constant_values import ConstantValues

TypeOf = Callable[[str], "tuple[int, tuple | None] | None"]   # value name -> (ONNX elem type, shape)


class Packs:
    """The packing of ``graph``'s recurrent weights (module docstring)."""

    def __init__(self, graph: GraphProto, type_of: TypeOf, opset: int,
                 initializers: Mapping[str, TensorProto] | None = None) -> None:
        """``initializers``: the graph's, when they are kept outside it; only the small integer ones (bounds,
        axes) are read as constants, with ``Constant`` nodes and ``Shape`` arithmetic on static shapes (how
        the dynamo exporter writes Slice bounds)."""
        self.type_of = type_of
        inits = dict(initializers or {}) | {t.name: t for t in graph.initializer}
        small = {name: t for name, t in inits.items() if t.data_type == TensorProto.INT64 and len(t.dims) <= 1}
        self.constants = ConstantValues(graph, small, _Types(type_of), opset)
        self.producer = {n.output[0]: n for n in graph.node if n.output}
        self.packers: set[str] = set()

    def _attr(self, node: NodeProto, name: str):
        return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)

    def _ints_of(self, node: NodeProto, attr: str, k: int) -> list[int] | None:
        """Attribute ``attr`` (old opsets) or constant input ``k``, as integers; None if neither."""
        value = self._attr(node, attr)
        if value is None and len(node.input) > k and node.input[k]:
            value = self.constants.value(node.input[k])
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    def _length(self, name: str) -> int | None:
        t = self.type_of(name)
        shape = t[1] if t else None
        return int(shape[0]) if shape and isinstance(shape[0], (int, np.integer)) else None

    def _concat0(self, name: str) -> NodeProto | None:
        node = self.producer.get(name)
        if node is None or node.op_type != "Concat" or self._attr(node, "axis") != 0 or not node.input:
            return None
        return node

    def _view(self, name: str) -> str | None:
        """The input of an ``Unsqueeze(·, [0])`` or a ``Reshape`` to ``(1, *shape)`` producing ``name``."""
        node = self.producer.get(name)
        if node is None:
            return None
        if node.op_type == "Unsqueeze" and self._ints_of(node, "axes", 1) == [0]:
            return node.input[0]
        if node.op_type == "Reshape":
            src, out = self.type_of(node.input[0]), self.type_of(name)
            if src and out and src[1] is not None and out[1] is not None and tuple(out[1]) == (1, *src[1]):
                return node.input[0]
        return None

    def per_direction(self, name: str, dirs: int) -> list[str] | None:
        """The ``dirs`` pieces ``name`` stacks along a new leading axis, or None."""
        concat = self._concat0(name)
        parts = list(concat.input) if concat is not None else [name]
        pieces = [self._view(p) for p in parts]
        if len(pieces) != dirs or None in pieces:
            return None
        self.packers.update(parts + ([name] if concat is not None else []))
        return pieces

    def halves(self, name: str, length: int) -> list[str] | None:
        """The two values of ``length`` that a ``Concat`` on axis 0 joins into ``name``, or None."""
        concat = self._concat0(name)
        if concat is None or len(concat.input) != 2 or any(self._length(i) != length for i in concat.input):
            return None
        self.packers.add(name)
        return list(concat.input)

    def gate_blocks(self, name: str, block: int) -> tuple[str, tuple[int, ...]] | None:
        """``(tensor, order)`` when ``name`` is gate ``k`` = block ``order[k]`` of ``tensor`` along axis 0 for
        every gate (module docstring), else None."""
        concat = self._concat0(name)
        if concat is None:
            return None
        sources, order = set(), []
        for part in concat.input:
            node = self.producer.get(part)
            if node is None or node.op_type != "Slice":
                return None
            starts, ends = self._ints_of(node, "starts", 1), self._ints_of(node, "ends", 2)
            axes, steps = self._ints_of(node, "axes", 3) or [0], self._ints_of(node, "steps", 4) or [1]
            total = self._length(node.input[0])
            if starts is None or ends is None or axes != [0] or steps != [1] or total is None:
                return None
            start = starts[0] + total if starts[0] < 0 else starts[0]
            end = min(ends[0] + total if ends[0] < 0 else ends[0], total)
            if end - start != block or start % block:
                return None
            sources.add(node.input[0])
            order.append(start // block)
        if len(sources) != 1 or sorted(order) != list(range(len(order))):
            return None
        src = sources.pop()
        if self._length(src) != block * len(order):
            return None
        self.packers.update([name, *concat.input])
        return src, tuple(order)

    def without_unread(self, nodes: list[NodeProto], outputs: set[str]) -> list[NodeProto]:
        """``nodes`` without the packing nodes that nothing reads any more: dead code, which would still cost
        its bytes in the forward pass."""
        while True:
            read = outputs | {i for n in nodes for i in n.input}
            dead = {n.output[0] for n in nodes if n.output and n.output[0] in self.packers and n.output[0] not in read}
            if not dead:
                return nodes
            nodes = [n for n in nodes if not (n.output and n.output[0] in dead)]


class _Types:
    """``type_of`` as the mapping ``ConstantValues`` reads."""

    def __init__(self, type_of: TypeOf) -> None:
        self.get = type_of

    def __getitem__(self, name: str):
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found


__all__ = ["Packs"]
