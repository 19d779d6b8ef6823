"""``training_table(graph)``: what a generated ``Model`` feeds itself between steps (``TRAINING``).

The table is data in the module text (``codegen.program.runtime`` reads it):

- ``lr``: the learning rate recorded in the step's training options (``ir.onnx_import.OPTIONS_KEY``),
  the default of the ``learning_rate`` input; None when nothing was recorded;
- ``learning_rate``, ``step``: the names of those inputs (optimizers and onnxruntime-training
  artifacts use these), or None;
- ``zeros``: optimizer-state inputs, zeros until the first step writes them;
- ``masks``: dropout mask inputs and their ratios (``FORWARD_KEY``'s ``dropout``);
- ``signature``: a digest of the inputs' names, dtypes and shapes (a checkpoint of another model is
  refused).
Metadata is read as JSON data; a value of the wrong kind is ignored, never evaluated.
"""
from __future__ import annotations

import hashlib
import json

from ir.containers import Role
from ir.graph import Graph
from ir.onnx_import import FORWARD_KEY, OPTIONS_KEY
from transforms.autodiff.optimizers import LEARNING_RATE, STEP


def _json(text: str | None) -> dict:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _ratio(entry) -> float | None:
    ratio = entry.get("ratio") if isinstance(entry, dict) else None
    return float(ratio) if isinstance(ratio, (int, float)) and 0 <= ratio < 1 else None


def training_table(graph: Graph) -> dict:
    """See the module docstring."""
    options, record = _json(graph.meta.get(OPTIONS_KEY)), _json(graph.meta.get(FORWARD_KEY))
    inputs = list(graph.inputs)
    lr = options.get("lr")
    dropout = record.get("dropout") if isinstance(record.get("dropout"), dict) else {}
    masks = {m: _ratio(d) for m, d in dropout.items() if m in inputs and _ratio(d) is not None}
    shapes = [(n, graph.containers[n].dtype, list(graph.containers[n].concrete_shape(graph.bindings)))
              for n in inputs]
    return {
        "lr": float(lr) if isinstance(lr, (int, float)) and LEARNING_RATE in inputs else None,
        "learning_rate": LEARNING_RATE if LEARNING_RATE in inputs else None,
        "step": STEP if STEP in inputs else None,
        "zeros": tuple(n for n in inputs if graph.containers[n].role is Role.OPTIMIZER_STATE),
        "masks": dict(sorted(masks.items())),
        "signature": hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16],
    }
