"""Transformations over the dcstudio IR.

Package map (data flow: ``Graph`` + ``Match`` → ``engine.apply`` → ``Application`` →
``history.Step`` → JSON file → ``replay``):

- ``base.py``       Match, MatchResult/``fail``, Touched, Application, the Transformation base
- ``registry.py``   ``TRANSFORMATIONS`` (name → class), ``@register``, ``create(name, params)``
- ``engine.py``     ``apply`` (check → rewrite → verify, Δ-estimate), ``preview`` (diff on a clone),
                    ``ranked`` (matches by predicted bytes saved, with why-not reasons)
- ``scopes.py``     editing map scopes (copy/rename bodies, find accesses)
- ``fusion.py``     the fusion operations (point fusion, producer inlining, consumer absorption)
- ``kernel_slices.py`` trimming a map to the statements an output needs; ``phases.py`` forward vs backward
- ``views.py``, ``layouts.py``, ``contractions.py``  view/transposition algebra and GEMMs in index form
- ``rewiring.py``  pointing kernels at other containers; ``fold_rules.py`` NumPy folding of shape ops
- ``history.py``    the history value and its JSON file format; ``replay.py`` replays one
- ``<name>.py``     one transformation each (file stem = registry name), listed below
- ``autodiff/``     training-graph generation (gradient rules, losses, optimizers)

Levels: 1 operator (expand, select_impl), 2 fusion, 3 layout and constants, 4 global.
"""
from __future__ import annotations

import importlib

TRANSFORMATION_MODULES = sorted([
    "broadcast_fusion",
    "constant_folding",
    "conv_weight_grad",
    "expand",
    "gemm_epilogue_fusion",
    "horizontal_fusion",
    "layout_select",
    "map_fusion",
    "memory_reuse",
    "mixed_precision",
    "optimizer_fusion",
    "recompute",
    "reduction_fusion",
    "reshape_elimination",
    "select_impl",
    "transpose_elimination",
    "view_alias",
])

for _name in TRANSFORMATION_MODULES:
    importlib.import_module(f"transforms.{_name}")
