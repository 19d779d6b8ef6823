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
in the layout their readers walk (same bytes, unit-stride reads).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ir.errors import StudioError
from studio.session import Session
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

RECIPES: dict[str, tuple[Pass, ...]] = {"substation": SUBSTATION,
                                        "fuse": (Pass("expand"), Pass("map_fusion"))}


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
