"""The oracle's fp32 baseline: onnxruntime on the original proto, or the reference executor.

``baseline_outputs(graph, proto, feeds, notes)`` returns ``(outputs, name, ref32)``:
onnxruntime 1.x CPU (one intra-op thread, graph optimizations off, so the run is the model's
ops as written and repeatable) where it loads ``proto`` and produces every graph output;
otherwise the reference executor in fp32 on the untransformed ``graph`` (``ref32`` is that run,
else None). Why onnxruntime was left out is appended to ``notes`` (one short phrase).
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np

from codegen.numpy_ref.executor import run as run_reference
from ir.graph import Graph
from ir.nodes import OpNode

RANDOM_OPS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli",
                        "Multinomial"})
REFERENCE = "reference executor fp32"
ORT = "onnxruntime fp32"


def baseline_outputs(graph: Graph, proto, feeds: Mapping[str, np.ndarray], notes: list[str]):
    reason = None
    drawn = random_nodes(graph)
    if proto is None:
        reason = "no ONNX model to give onnxruntime"
    elif drawn:
        reason = (f"onnxruntime left out: the graph draws random numbers ({len(drawn)} node(s), e.g. "
                  f"{drawn[0].op_type} '{drawn[0].id}') that onnxruntime draws differently")
    else:
        got, reason = _onnxruntime(graph, proto, feeds)
        if got is not None:
            return got, ORT, None
    notes.append(reason)
    ref = run_reference(graph, feeds)
    return ref, REFERENCE, ref


def _onnxruntime(graph: Graph, proto, feeds):
    """(outputs, None) or (None, why onnxruntime was left out)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        sess = _session(ort, proto, opts)
    except Exception as e:  # noqa: BLE001 - any load failure means: use the reference executor
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"onnxruntime cannot load the model ({_short(first)})"
    names = {o.name for o in sess.get_outputs()}
    missing = [n for n in graph.outputs if n not in names]
    if missing:
        return None, f"onnxruntime's model lacks output '{missing[0]}'"
    ort_feeds = {}
    for i in sess.get_inputs():
        value = feeds.get(i.name, graph.values.get(i.name))
        if value is None:
            return None, f"no feed for onnxruntime's input '{i.name}'"
        ort_feeds[i.name] = np.asarray(value)
    try:
        values = sess.run(list(graph.outputs), ort_feeds)
    except Exception as e:  # noqa: BLE001
        return None, f"onnxruntime failed to run the model ({_short(str(e))})"
    return dict(zip(graph.outputs, values)), None


def _session(ort, proto, opts):
    """An InferenceSession of ``proto`` (a ModelProto, or the path of the model file itself); a model
    that only claims a newer IR version than onnxruntime reads (onnx writes its newest by default)
    is retried with the version onnxruntime names."""
    try:
        return _load(ort, proto, opts)
    except Exception as e:  # noqa: BLE001
        found = re.search(r"Unsupported model IR version: \d+, max supported IR version: (\d+)", str(e))
        if not found:
            raise
        if isinstance(proto, (str, os.PathLike)):
            from ir.onnx_load import read_model
            proto = read_model(proto)
        older = type(proto)()
        older.CopyFrom(proto)
        older.ir_version = int(found.group(1))
        return _load(ort, older, opts)


def _load(ort, proto, opts):
    """onnxruntime reads a file, never bytes: made from bytes, a 12-layer BERT-base step's session
    held the GIL for 1.0–2.4 s (the studio exporting it froze) and took 2.7 s; from a file it holds
    it for milliseconds and takes 1.1 s. A ModelProto is written to a private temporary file first
    (serializing 350 MB held the GIL for 1.7 s once: pass the model's own path where it has one)."""
    if isinstance(proto, (str, os.PathLike)):
        return ort.InferenceSession(str(proto), opts, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory(prefix="dcstudio-oracle-") as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"\S+\.(cc|h):\d+ [^()]*\([^()]*\) ", "", text)
    marker = "is not a registered function/op"      # the op's name is the word before it
    if (at := text.find(marker)) > 0:
        return text[text.rfind(" ", 0, at - 1) + 1:at + len(marker)]
    return text if len(text) <= limit else text[:limit - 1] + "…"


def random_nodes(graph: Graph) -> list[OpNode]:
    """Nodes that draw random numbers (onnxruntime and the reference executor draw differently)."""
    out = []
    for node in graph.nodes.values():
        if not isinstance(node, OpNode):
            continue
        if node.op_type in RANDOM_OPS or node.op_type == "Dropout" and _dropout_trains(graph, node):
            out.append(node)
    return out


def _dropout_trains(graph: Graph, node: OpNode) -> bool:
    if node.opset < 12:
        return False
    names = node.input_names()
    if len(names) < 3 or names[2] is None:
        return False
    value = graph.values.get(names[2])
    if value is not None and not bool(np.asarray(value).reshape(-1)[:1].any()):
        return False                                   # training_mode false: an identity
    ratio = graph.values.get(names[1]) if len(names) > 1 and names[1] is not None else np.float32(0.5)
    return ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0   # ratio 0 keeps every element
