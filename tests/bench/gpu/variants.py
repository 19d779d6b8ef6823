"""Launch-shape variants of the BERT-base step's block-reduction kernels, timed on a lent GPU.

``lease.py --phases …,variants`` runs this after the sweep: every block-reduction kernel (rows, warp rows, columns) of the
BERT-base layer step after the recipe is printed again with one knob of ``row_cache``,
``split_blocks`` or ``reduction_pattern`` changed, compiled, launched on random inputs of its shapes and timed (CUDA
events over a captured graph, as the kernel table) against a same-run copy of the same bytes.
Knobs: the row cache off (``CACHE_STEPS = 0``), 1, 2 or 8 rows per summing block (default 4), a
warp per row up to 1,024 points (default 128), no split of long rows or of long columns, no
prefetch of the elements only a later nested map reads, and 32 or 8 lanes per warp row (1 or 4 rows
per warp). What the numbers say decides the defaults; nothing here changes them.
"""
from __future__ import annotations

import contextlib
import json
import types
from pathlib import Path

import numpy as np

VARIANTS = {                       # name: {(module, constant): value}
    "default": {},
    "no_cache": {("row_cache", "CACHE_STEPS"): 0},
    "sum_rows_1": {("row_cache", "ROWS_PER_SUMMING_BLOCK"): 1},
    "sum_rows_2": {("row_cache", "ROWS_PER_SUMMING_BLOCK"): 2},
    "sum_rows_8": {("row_cache", "ROWS_PER_SUMMING_BLOCK"): 8, ("row_cache", "MIN_SUMMING_BLOCKS"): 64},
    "warp_rows_1024": {("reduction_pattern", "WARP_ROW_MAX"): 1024},
    "warp_rows_1024_cached": {("reduction_pattern", "WARP_ROW_MAX"): 1024, ("row_cache", "CACHE_STEPS"): 32,
                              ("row_cache", "CACHE_REGISTERS"): 128},
    "no_split": {("split_blocks", "SPLIT_MIN"): 1 << 62},
    "no_column_split": {("split_blocks", "COLUMN_SPLIT_MIN"): 1 << 62},
    "no_prefetch": {("row_cache", "PREFETCH"): False},
    "row_lanes_32": {("reduction_pattern", "ROW_LANES"): 32},
    "row_lanes_8": {("reduction_pattern", "ROW_LANES"): 8},
}


@contextlib.contextmanager
def _patched(changes: dict):
    from codegen.cupy_cuda import reduction_pattern, row_cache, split_blocks
    mods = {"row_cache": row_cache, "split_blocks": split_blocks, "reduction_pattern": reduction_pattern}
    saved = {(m, c): getattr(mods[m], c) for m, c in changes}
    try:
        for (m, c), v in changes.items():
            setattr(mods[m], c, v)
        yield
    finally:
        for (m, c), v in saved.items():
            setattr(mods[m], c, v)


def _launcher(ks):
    from codegen.cupy_cuda.backend import kernel_module
    mod = types.ModuleType(ks.name)
    exec(compile(kernel_module(ks), ks.name, "exec"), mod.__dict__)   # our own generated text, not user data
    return getattr(mod, ks.name)


def _arrays(cp, ks, graph, rng):
    out = []
    for c in ks.arrays:
        shape = graph.container(c).concrete_shape(graph.bindings)
        dt = {"bfloat16": np.uint16}.get(ks.storage[c], np.dtype(ks.storage[c]))
        if np.dtype(dt).kind == "f":
            host = (rng.standard_normal(shape) * 0.5 + (1.0 if c not in ks.outputs else 0.0)).astype(dt)
        else:
            host = np.zeros(shape, dt)
        out.append(cp.asarray(host))
    return out


def run(cp, graph_time, graph, out: Path) -> list[dict]:
    """Every variant of every row kernel of ``graph`` (lowered for codegen): µs and % of copy."""
    from codegen.cupy_cuda.render import kernel_source
    from ir.nodes import MapNode
    rng = np.random.default_rng(0)
    rows = []
    maps = [m for m in graph.nodes.values() if isinstance(m, MapNode)]
    for m in maps:
        base = kernel_source(m, graph)
        if base.launch.kind not in ("rows", "warp_rows", "columns"):
            continue
        args = _arrays(cp, base, graph, rng)
        nbytes = sum(int(a.nbytes) for a in args)
        src = cp.empty(max(nbytes // 2, 4), cp.uint8)
        dst = cp.empty_like(src)
        copy = graph_time(cp, lambda: cp.copyto(dst, src))
        row = {"kernel": m.label or m.id, "bytes": nbytes, "copy_us": copy * 1e6}
        for name, changes in VARIANTS.items():
            try:
                with _patched(changes):
                    ks = kernel_source(m, graph)
                if name != "default" and ks.source == base.source:
                    continue                       # the knob does not touch this kernel
                if [graph.container(c).concrete_shape(graph.bindings) for c in ks.arrays] != \
                        [graph.container(c).concrete_shape(graph.bindings) for c in base.arrays]:
                    continue
                fn = _launcher(ks)
                t = graph_time(cp, lambda fn=fn, ks=ks: fn(*args, *ks.extents))
                row[name] = {"us": round(t * 1e6, 2), "of_copy": round(copy / t, 3), "kind": ks.launch.kind,
                             "block": list(ks.launch.block), "grid": ks.launch.grid}
            except Exception as exc:  # noqa: BLE001 - one variant's failure is a cell of the table
                row[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        rows.append(row)
    (out / "variants.json").write_text(json.dumps(rows, indent=1))
    return rows


def table(rows: list[dict]) -> str:
    names = list(VARIANTS)
    lines = ["kernel".ljust(48) + "  MB  " + " ".join(n[:13].rjust(13) for n in names)]
    for r in rows:
        cells = []
        for n in names:
            v = r.get(n)
            cells.append("-".rjust(13) if v is None else (v["error"][:13].rjust(13) if "error" in v
                         else f"{v['us']:6.1f}us {v['of_copy']:4.0%}".rjust(13)))
        lines.append(f"{r['kernel'][:48]:<48} {r['bytes'] / 1e6:5.1f} " + " ".join(cells))
    return "\n".join(lines)
