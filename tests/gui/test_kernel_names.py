"""Kernels named from their lineage (``describe.kernel_title``): after the recipe on the bundled BERT layer the
fused kernels read "LayerNorm + residual", "GEMM + bias + GELU", "AdamW update"; an update of several
parameters reads "AdamW × N"; titles too long for a box are cut at their " + " joints, never mid-name."""
from __future__ import annotations

import pytest

from ir.memlet import Memlet
from ir.nodes import MapNode
from studio.gui.describe import fit_title, kernel_title, optimizer_title
from studio.session.recipe import run_recipe
from studio.session import Session


@pytest.fixture(scope="module")
def titles():
    s = Session.open("resources/examples/bert_layer_base_train.onnx", autosave=False)
    run_recipe(s)
    return [kernel_title(n) for n in s.graph.nodes.values()]


def test_fused_kernels_are_named_after_what_they_fuse(titles):
    for expected in ("LayerNorm + residual", "GEMM + bias + GELU", "AdamW update", "GEMM × 3", "softmax grad",
                     "LayerNorm grad", "GELU grad + sum + AdamW update"):
        assert any(t.startswith(expected) for t in titles), (expected, sorted(set(titles)))
    assert not [t for t in titles if "tasklet" in t or "::" in t]


def test_an_update_of_several_parameters_counts_them():
    outs = [f"p{k}{s}.new" for k in range(16) for s in ("", ".m", ".v")]
    node = MapNode("upd", [], [], outputs=[Memlet(n) for n in outs], label="Mul+Add")
    assert optimizer_title(node) == "AdamW × 16"
    node.outputs = [Memlet(n) for n in ("w.new", "w.momentum.new")]
    assert optimizer_title(node) == "SGD update"


def test_long_titles_are_cut_at_their_joints():
    fits = lambda text: len(text) <= 24      # noqa: E731 - a width in characters
    assert fit_title("LayerNorm + residual + 1 elementwise", fits) == "LayerNorm + residual + …"
    assert fit_title("GEMM + bias", fits) == "GEMM + bias"
    assert fit_title("AVeryLongLibraryOperationName", fits) is None       # the caller keeps its start
