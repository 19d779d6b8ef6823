"""The ONNX backend node test suite through import + the reference executor (one shared runner).

``load_node_model_tests()`` builds ~1,900 cases in memory (onnx 1.23 ships no
data on disk). A case is *in scope* when every node of its model is an op the
importer claims (``ir.claimed_ops``), it has no subgraphs or model-local
functions, and its inputs and outputs are tensors (not sequences or optionals). Outputs are compared as the ONNX backend runner does (rtol 1e-3,
atol 1e-7; exact for integers, NaN equal).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from onnx import AttributeProto, ModelProto, TensorProto, numpy_helper

from codegen.numpy_ref.executor import run
from ir.claimed_ops import is_claimed
from ir.onnx_import import import_proto


@dataclass(frozen=True)
class Outcome:
    name: str
    ok: bool
    detail: str = ""


@lru_cache(maxsize=1)
def load_cases() -> tuple:
    from onnx.backend.test.loader import load_node_model_tests
    return tuple(load_node_model_tests())


def _has_subgraph(model: ModelProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def in_scope(case) -> bool:
    m = case.model
    if not isinstance(m, ModelProto) or m.functions or _has_subgraph(m) or not case.data_sets:
        return False
    if any(not v.type.HasField("tensor_type") for v in list(m.graph.input) + list(m.graph.output)):
        return False  # sequence / optional values: the IR holds tensors only
    return all(is_claimed(n.domain, n.op_type) for n in m.graph.node)


def ops_of(case) -> set[str]:
    return {n.op_type for n in case.model.graph.node}


def _array(value) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def _equal(actual, expected) -> str:
    actual, expected = np.asarray(actual), _array(expected)
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype == object or expected.dtype.kind in "SUbiu?":
        return "" if actual.tolist() == expected.tolist() else "values differ"
    try:
        a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
    except (TypeError, ValueError):
        return "" if np.array_equal(actual.view(np.uint8), expected.view(np.uint8)) else "values differ"
    if not np.allclose(a64, e64, rtol=1e-3, atol=1e-7, equal_nan=True):
        return f"values differ (max abs {np.nanmax(np.abs(a64 - e64)):.3g})"
    return ""


def run_case(case) -> Outcome:
    try:
        graph = import_proto(case.model, name=case.name)
        for inputs, outputs in case.data_sets:
            feeds = {n: _array(v) for n, v in zip([n for n in graph.inputs if n not in graph.values], inputs)}
            got = run(graph, feeds)
            for name, want in zip(graph.outputs, outputs):
                problem = _equal(got[name], want)
                if problem:
                    return Outcome(case.name, False, f"{name}: {problem}")
    except Exception as e:  # noqa: BLE001 - a case fails, the suite goes on
        return Outcome(case.name, False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return Outcome(case.name, True)
