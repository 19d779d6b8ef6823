"""Opening a model: the imported graph, or the training step generated from a forward model, and the model
onnxruntime checks it against."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ir.graph import Graph
from ir.onnx_import import import_model
from ir.onnx_load import read_model


def load_graph(model_path: str | os.PathLike, *, bindings: Mapping[str, int] | None = None,
               optimizer: str | None = None, training: Mapping[str, Any] | None = None) -> Graph:
    """Import ``model_path``; with ``training`` options, import the training step generated from it
    (``transforms.autodiff``). The graph's sha256 is always the file's, so histories match it."""
    if not training:
        return import_model(model_path, bindings=bindings, optimizer=optimizer)
    return load_original(model_path, bindings=bindings, optimizer=optimizer, training=training)[0]


def load_original(model_path: str | os.PathLike, *, bindings: Mapping[str, int] | None = None,
                  optimizer: str | None = None, training: Mapping[str, Any] | None = None):
    """``(graph, model)``: the imported graph (as ``load_graph``) and the ONNX model it came from for
    ``codegen.oracle`` (``original_model``)."""
    if not training:
        return import_model(model_path, bindings=bindings, optimizer=optimizer), original_model(model_path)
    from ir.onnx_import import import_proto
    from ir.onnx_load import file_sha256
    from transforms.autodiff import build_training_graph
    proto = build_training_graph(read_model(model_path), **dict(training))
    graph = import_proto(proto, path=str(model_path), bindings=bindings, name=Path(model_path).stem + "-train")
    graph.meta.update(source=str(model_path), sha256=file_sha256(model_path), training="generated")
    return graph, proto


def original_model(model_path: str | os.PathLike, training: Mapping[str, Any] | None = None):
    """The model onnxruntime checks against: the file's own path (onnxruntime reads it itself, no
    350 MB parse and re-serialization; the import already vetted its external data), or the
    standard-ONNX training step generated from it."""
    if not training:
        return model_path
    from transforms.autodiff import build_training_graph
    return build_training_graph(read_model(model_path), **dict(training))
