"""Recipes: named sequences of transformation passes, each applied to a fixpoint.

A pass is a transformation (with parameters) applied to a fixpoint: sweeps over
its matches in graph order until none applies (``transforms.passes``). Each pass
is one ordinary, undoable, recorded step (history version 3: its application
count and resulting graph hash are recorded), so a recipe's result is a plain
history file that ``dcstudio replay`` reproduces exactly, in a handful of steps
instead of one per application. ``SUBSTATION`` is the
Substation-style recipe of the bundled example (*Data Movement Is All You
Need*): simplify views and constants, lower the ops into maps, fold transposes
into the contractions that read or write them, fuse elementwise chains, fuse
them into softmax and layernorm (forward and backward), fuse the Q/K/V
projections and GEMM epilogues, then fuse the optimizer update into the kernels
(maps or GEMMs) that produce the gradients, and finally store GEMM/Einsum outputs
in the layout their readers walk (same bytes, unit-stride reads). ``CNN`` runs
``conv_weight_grad`` first; ``pick`` chooses between them by graph content (``auto``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ir.errors import StudioError
from studio.session.core import Session
from transforms.registry import TRANSFORMATIONS, create


@dataclass(frozen=True)
class Pass:
    transformation: str
    params: dict[str, Any] = field(default_factory=dict)


SUBSTATION: tuple[Pass, ...] = (
    Pass("constant_folding"),          # Shape/Size of static tensors and shape arithmetic
    Pass("reshape_elimination"),       # views become re-indexed reads (0 bytes)
    Pass("expand"),                    # elementwise, softmax, layernorm, … into maps
    Pass("transpose_elimination"),     # transposes into GEMM/Einsum flags and letters before fusion hides them
    Pass("map_fusion"),                # elementwise chains (bias+dropout+residual, AdamW algebra)
    Pass("reduction_fusion"),          # scale+mask into softmax, bdrln into layernorm, and backward
    Pass("optimizer_fusion"),          # AdamW into the kernels producing the gradients
    Pass("gemm_epilogue_fusion"),      # bias / activation / update into GEMM outputs
    Pass("horizontal_fusion"),         # Q/K/V projections, sibling backward GEMMs
    Pass("transpose_elimination"),     # remaining transposes into GEMM flags / memlets
    Pass("map_fusion"),
    Pass("reduction_fusion"),
    Pass("layout_select", {"contraction_only": True}),   # GEMM/Einsum outputs in the layout their readers walk
)

CNN: tuple[Pass, ...] = (
    Pass("conv_weight_grad"),          # weight gradients as one op in W's layout, before expand hides the transposes
    Pass("expand", {"impl": "batch_stats"}),   # training-mode BatchNorm as one map, to fuse with its activation
) + SUBSTATION[:-1] + (
    Pass("broadcast_fusion"),          # BatchNorm gradients: dx as a second sweep of the per-channel sums' kernel
    SUBSTATION[-1],
)
"""Convolutional training graphs: Substation, after the weight gradients of convolutions become
``ConvWeightGrad`` ops (the transposed copies of X and dY go, and the optimizer update then reads
its gradient in W's layout instead of transposed) and training-mode BatchNormalizations become maps;
before the layouts, each BatchNorm gradient's dx runs inside the kernel of its per-channel sums
(``broadcast_fusion``: the elementwise dy and x̂ it stored for dx are computed again instead)."""

RECIPES: dict[str, tuple[Pass, ...]] = {"substation": SUBSTATION, "cnn": CNN,
                                        "fuse": (Pass("expand"), Pass("map_fusion"))}
AUTO = "auto"
"""The recipe name that picks by graph content (``pick``)."""


def pick(graph, name: str = AUTO) -> str:
    """``name``, or for ``auto``: ``cnn`` when the graph holds a Conv, else ``substation``."""
    if name != AUTO:
        return name
    has_conv = any(getattr(n, "op_type", None) == "Conv" and not getattr(n, "domain", "") for n in graph.nodes.values())
    return "cnn" if has_conv else "substation"


def pick_for_model(path: str, name: str = AUTO) -> str:
    """``pick`` from an ONNX file's node list (weights not loaded), for callers that hold no graph; a file
    that does not load gets ``substation`` (loading it for real then says what is wrong with it)."""
    import onnx
    if name != AUTO:
        return name
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:                      # noqa: BLE001 - reported by the caller's own load
        return "substation"
    return "cnn" if any(n.op_type == "Conv" and n.domain in ("", "ai.onnx") for n in model.graph.node) else "substation"


def run_pass(session: Session, p: Pass, on_step: Callable[[str, int], None] | None = None,
             stop: Callable[[], bool] | None = None, scope: str | None = None) -> int:
    """Apply ``p`` to a fixpoint as one recorded step (``Session.apply_pass``; ``scope``: inside
    that layer only); returns the number of applications (0: nothing applied, no step recorded)."""
    if stop and stop():
        return 0
    app = session.apply_pass(p.transformation, p.params, stop=stop, scope=scope)
    if app is None:
        return 0
    if on_step is not None:
        on_step(p.transformation, session.cursor)
    return session.steps[session.cursor - 1].applications or 0


def run_recipe(session: Session, passes: tuple[Pass, ...] = SUBSTATION, *,
               on_step: Callable[[str, int], None] | None = None,
               stop: Callable[[], bool] | None = None) -> dict[str, int]:
    """Run the passes in order; returns applications per transformation name."""
    counts: dict[str, int] = {}
    for p in passes:
        if p.transformation not in TRANSFORMATIONS:
            raise StudioError(f"recipe pass '{p.transformation}' is not a known transformation")
        counts[p.transformation] = counts.get(p.transformation, 0) + run_pass(session, p, on_step, stop)
    return counts


def tune_one_layer(session: Session, passes: tuple[Pass, ...] = SUBSTATION, *,
                   on_step: Callable[[str, int], None] | None = None,
                   stop: Callable[[], bool] | None = None) -> dict[str, int]:
    """Transfer tuning (``transforms.transfer``): for every family of layers (``transforms.layers``),
    run the passes inside the first of its largest set of structurally equal layers, then repeat
    those steps on the others as one transfer step; then run the passes on the whole graph for what lies
    between layers or outside them (embeddings, the loss, fusions across a layer boundary).
    Returns applications per transformation name (``transfer`` counts the repeated ones)."""
    from transforms.layers import equal_group, layers
    counts: dict[str, int] = {}
    for family in layers(session.graph):
        found = equal_group(session.graph, family)        # now: tuning a family may change another's
        if found is None:
            continue
        first, others = found
        layer, start = family.key(first), session.cursor
        for p in passes:
            n = run_pass(session, p, on_step, stop, scope=layer)
            counts[p.transformation] = counts.get(p.transformation, 0) + n
        if session.cursor > start and not (stop and stop()):
            app = session.transfer(layer, session.cursor - start, [family.key(k) for k in others])
            counts["transfer"] = counts.get("transfer", 0) + (session.steps[session.cursor - 1].applications or 0)
            if on_step is not None and app is not None:
                on_step("transfer", session.cursor)
    for k, n in run_recipe(session, passes, on_step=on_step, stop=stop).items():
        counts[k] = counts.get(k, 0) + n
    return counts
