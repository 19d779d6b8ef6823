"""ONNX attribute conversion: AttributeProto -> plain Python values.

Scalars become int/float/str, repeated fields become lists, TENSOR attributes
become numpy arrays. GRAPH attributes (If/Loop/Scan bodies) are not supported
by the IR and raise ``UnsupportedAttribute``. Nothing here evaluates anything.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, numpy_helper


class UnsupportedAttribute(ValueError):
    """An attribute kind the IR cannot hold (subgraphs, sparse tensors, type protos)."""


def attr_value(attr: AttributeProto) -> Any:
    """Convert one ONNX attribute to a JSON-friendly Python value (arrays for tensors)."""
    kind = attr.type
    if kind == AttributeProto.INT:
        return int(attr.i)
    if kind == AttributeProto.FLOAT:
        return float(np.float32(attr.f))
    if kind == AttributeProto.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.INTS:
        return [int(v) for v in attr.ints]
    if kind == AttributeProto.FLOATS:
        return [float(np.float32(v)) for v in attr.floats]
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if kind == AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t).copy()
    if kind == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t).copy() for t in attr.tensors]
    raise UnsupportedAttribute(
        f"attribute '{attr.name}' has kind {AttributeProto.AttributeType.Name(kind)}, "
        "which the IR cannot represent (subgraphs and sparse tensors are unsupported)")


def attrs_from_onnx(node: NodeProto) -> dict[str, Any]:
    """All attributes of ``node`` as a dict name -> value (see ``attr_value``)."""
    return {a.name: attr_value(a) for a in node.attribute}
