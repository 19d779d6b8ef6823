"""Vectorized NumPy evaluation of map scopes (the reference semantics of ``MapNode``).

Every body statement runs over its whole iteration space at once: parameter
``p_k`` becomes an index array broadcast along axis ``k`` (``np.ogrid`` style),
memlet subsets gather with advanced indexing, and tasklet expressions evaluate
with broadcasting (``ir.expr.evaluate``). Statements run in body order, each
over all iterations of the enclosing maps — valid because map iterations are
independent (only ``wcr`` outputs combine them).

Write-conflict resolution: outputs written with ``wcr`` start at the identity
(0 for sum, -inf for max, …) when their map is entered; the reduction over
parameters that an output index does not depend on is a ``ufunc.reduce``, or
``ufunc.at`` for non-trivial index expressions; float sums and products accumulate in
float64 and round once into the output. Locals of a map are stored with one leading axis
per enclosing parameter.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ir import dtypes
from ir import expr as E
from ir.containers import Container
from ir.maps import range_bounds
from ir.memlet import Memlet, Range, Wcr
from ir.nodes import MapNode, Tasklet

class _Scope:
    """Parameters in scope (outer to inner) with their index values."""

    def __init__(self, names: list[str], values: list[np.ndarray]) -> None:
        self.names = names
        self.values = values

    def extended(self, params, bindings) -> "_Scope":
        names = self.names + [p for p, _ in params]
        vals = [np.arange(*range_bounds(r, bindings), dtype=np.intp) for _, r in params]
        return _Scope(names, self.values + vals)

    def index_arrays(self) -> dict[str, np.ndarray]:
        n = len(self.names)
        out = {}
        for k, (name, vals) in enumerate(zip(self.names, self.values)):
            shape = [1] * n
            shape[k] = len(vals)
            out[name] = vals.reshape(shape)
        return out

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.values)


class _Local:
    def __init__(self, array: np.ndarray, depth: int) -> None:
        self.array = array
        self.depth = depth      # number of enclosing params that index its leading axes


def run_map(m: MapNode, env: Mapping[str, np.ndarray], containers: Mapping[str, Container],
            bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Execute a top-level map; return its global outputs."""
    outputs: dict[str, np.ndarray] = {}
    for mem in m.outputs:
        c = containers[mem.container]
        dt = dtypes.to_numpy(c.dtype)
        arr = np.zeros(c.concrete_shape(bindings), dtype=dt)
        if mem.wcr:
            arr.fill(Wcr(mem.wcr).identity(dt))
        outputs[mem.container] = arr
    _run_scope(m, _Scope([], []), env, outputs, {}, bindings)
    return outputs


def _run_scope(m: MapNode, outer: _Scope, env, outputs, locals_, bindings) -> None:
    scope = outer.extended(m.params, bindings)
    locals_ = dict(locals_)
    first_wcr = _first_wcr(m)
    for name, c in m.locals.items():
        dt = dtypes.to_numpy(c.dtype)
        arr = np.zeros(scope.shape + c.concrete_shape(bindings), dtype=dt)
        if first_wcr.get(name):
            arr.fill(Wcr(first_wcr[name]).identity(dt))
        locals_[name] = _Local(arr, len(scope.names))
    for stmt in m.body:
        if isinstance(stmt, MapNode):
            _run_scope(stmt, scope, env, outputs, locals_, bindings)
        else:
            _run_tasklet(stmt, scope, env, outputs, locals_)


def _first_wcr(m: MapNode) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for node, _ in m.walk():
        if isinstance(node, Tasklet) and node.output.container in m.locals:
            out.setdefault(node.output.container, node.output.wcr)
    return out


def _target(name: str, env, outputs, locals_):
    if name in locals_:
        return locals_[name].array, locals_[name].depth
    if name in outputs:
        return outputs[name], 0
    return env[name], 0


def _index(mem: Memlet, depth: int, idx: dict[str, np.ndarray], scope: _Scope) -> tuple:
    lead = tuple(idx[n] for n in scope.names[:depth])
    if mem.subset is None:
        return lead
    points = []
    for ix in mem.subset:
        if isinstance(ix, Range):
            raise ValueError(f"range subset {ix.to_text()} inside a map body; use point indices")
        points.append(np.asarray(E.evaluate(ix, idx), dtype=np.intp))
    return lead + tuple(points)


def _run_tasklet(t: Tasklet, scope: _Scope, env, outputs, locals_) -> None:
    idx = scope.index_arrays()
    values = {}
    for conn, mem in t.inputs.items():
        arr, depth = _target(mem.container, env, outputs, locals_)
        key = _index(mem, depth, idx, scope)
        values[conn] = arr[key] if key else arr
    values.update(idx)
    val = np.asarray(E.evaluate(t.expr, values))
    arr, depth = _target(t.output.container, env, outputs, locals_)
    key = _index(t.output, depth, idx, scope)
    _store(arr, key, val, t.output, scope, depth)


def _store(arr: np.ndarray, key: tuple, val: np.ndarray, mem: Memlet, scope: _Scope, depth: int) -> None:
    full = scope.shape
    if not mem.wcr:
        if key and all(np.ndim(k) == 0 for k in key) and np.size(val) == 1:
            arr[key] = np.reshape(val, ())     # one element, from a map whose extents are all 1
        elif key:
            shape = np.broadcast_shapes(*(np.shape(k) for k in key), np.shape(val))
            arr[key] = np.broadcast_to(val, shape)
        else:
            arr[...] = val
        return
    ufunc = Wcr(mem.wcr).combine
    if mem.wcr in ("sum", "prod") and val.dtype.kind in "fV":
        val = val.astype(np.float64)          # accumulate in float64; the store rounds once
    used = _used_axes(mem, scope, depth)
    if used is not None:
        val = np.broadcast_to(val, full) if val.shape != full else val
        axes = tuple(k for k in range(len(full)) if k not in used)
        red = ufunc.reduce(val, axis=axes, keepdims=True) if axes else val
        if key:
            cur = arr[key]
            arr[key] = ufunc(cur, red.reshape(np.shape(cur)) if red.size == np.size(cur) else red)
        else:
            arr[...] = ufunc(arr, red.reshape(arr.shape) if red.size == arr.size else red)
        return
    shape = np.broadcast_shapes(*(np.shape(k) for k in key), full)
    bkey = tuple(np.broadcast_to(k, shape) for k in key)
    if mem.wcr == "sum" and arr.dtype.kind in "fV" and arr.dtype != np.float64:
        acc = np.zeros(arr.shape, np.float64)
        np.add.at(acc, bkey, np.broadcast_to(val, shape))
        arr[...] = arr.astype(np.float64) + acc
        return
    ufunc.at(arr, bkey, np.broadcast_to(val, shape))


def _used_axes(mem: Memlet, scope: _Scope, depth: int) -> set[int] | None:
    """Axes the output index depends on, when every index is a plain param or constant."""
    used = set(range(depth))
    for ix in mem.subset or ():
        if isinstance(ix, E.Var) and ix.name in scope.names:
            k = scope.names.index(ix.name)
            if k in used:
                return None
            used.add(k)
        elif not isinstance(ix, E.Const):
            return None
    return used
