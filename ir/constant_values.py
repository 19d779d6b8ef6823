"""Constant values of an ONNX graph, folded on demand.

Some gradient rules need a value, not just a name: the exponent of ``Pow``, the
axes of a reduction, a Dropout ratio, Slice bounds; the importer needs the shape
computations of legacy exports (``ir.shape_fold``). ``ConstantValues.value(name)``
returns it when it is fixed: a frozen (non-trainable) initializer, a ``Constant``
node, ``Shape``/``Size`` of a statically shaped value, or a small (<= 65,536
elements) result of a cheap op whose inputs are all constant. Foldability is decided
once in a forward pass; values are computed lazily, one node at a time, with
``onnx.reference`` (a pure NumPy interpreter; nothing is compiled or evaluated as code).
"""
from __future__ import annotations

from math import prod
from typing import Mapping

import numpy as np
from onnx import GraphProto, NodeProto, TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

from ir.onnx_attrs import attrs_from_onnx

FOLDABLE = frozenset({
    "Add", "Cast", "Ceil", "Concat", "ConstantOfShape", "Div", "Equal", "Expand", "Floor", "Gather",
    "Greater", "Identity", "Less", "Max", "Min", "Mul", "Neg", "Not", "Range", "Reshape", "Slice",
    "Sqrt", "Squeeze", "Sub", "Transpose", "Unsqueeze", "Where",
})
MAX_FOLD_ELEMS = 1 << 16


class ConstantValues:
    """See the module docstring. ``types`` maps value names to (elem type, shape or None)."""

    def __init__(self, graph: GraphProto, frozen: Mapping[str, TensorProto], types: Mapping[str, tuple],
                 opset: int) -> None:
        self._inits = frozen
        self._types = types
        self._opset = opset
        self._producer: dict[str, NodeProto] = {}
        self._cache: dict[str, np.ndarray] = {}
        known = set(frozen)
        for node in graph.node:
            if self._foldable(node, known):
                for out in node.output:
                    if out:
                        known.add(out)
                        self._producer[out] = node

    def _foldable(self, node: NodeProto, known: set[str]) -> bool:
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Constant":
            return True
        if node.op_type in ("Shape", "Size"):
            t = self._types.get(node.input[0])
            return t is not None and t[1] is not None
        if node.op_type not in FOLDABLE or not all(i in known for i in node.input if i):
            return False
        t = self._types.get(node.output[0])
        return t is not None and t[1] is not None and prod(t[1]) <= MAX_FOLD_ELEMS

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of ``name``, or None when it is not constant."""
        if name in self._cache:
            return self._cache[name]
        if name in self._inits:
            arr = numpy_helper.to_array(self._inits[name])
        elif name in self._producer:
            arr = self._evaluate(self._producer[name], name)
        else:
            return None
        self._cache[name] = arr
        return arr

    def _evaluate(self, node: NodeProto, name: str) -> np.ndarray:
        if node.op_type == "Constant":
            return constant_attr(node)
        if node.op_type in ("Shape", "Size"):
            shape = self._types[node.input[0]][1]
            if node.op_type == "Size":
                return np.asarray(prod(shape), dtype=np.int64)
            attrs = attrs_from_onnx(node)
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            return np.asarray(shape[start:end], dtype=np.int64)
        feeds = {i: self.value(i) for i in node.input if i}
        results = ReferenceEvaluator(node, opsets={"": self._opset}).run(None, feeds)
        for out, res in zip(node.output, results):
            self._cache[out] = np.asarray(res)
        return self._cache[name]


def constant_attr(node: NodeProto) -> np.ndarray:
    """The value of a ``Constant`` node (``value`` or ``value_float(s)``/``value_int(s)``)."""
    attrs = attrs_from_onnx(node)
    if "value" in attrs:
        return np.asarray(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise ValueError(f"unsupported Constant attributes {sorted(attrs)}")
