"""Slicing map kernels: keep only the statements that compute the outputs still wanted.

Used by ``recompute`` (a clone computes only the rematerialized activation) and by any
rewrite that stops a kernel from writing a container:

- ``kernel_reads``: the containers any tasklet of a kernel reads;
- ``prefer_stored``: reads of a scalar local that the kernel also stores to a global ``G``
  become reads of ``G`` at the stored point (when ``G`` is still available), so the
  statements computing the local can go;
- ``drop_writes``: remove the tasklets writing globals outside ``keep``, then every
  statement whose local result nobody reads (to a fixpoint), empty nested maps, and
  unused locals;
- ``rename_reads``: point the memlets of a kernel (op or map) at renamed containers.

Callers run ``ir.maps.finalize`` on an edited map (and ``graph.rewire`` if it is in a graph).
"""
from __future__ import annotations

from typing import Callable, Mapping

from ir import expr as E
from ir.memlet import Memlet
from ir.nodes import MapNode, OpNode, Tasklet


def kernel_reads(m: MapNode) -> set[str]:
    """Containers (globals and locals) read by any tasklet of ``m``."""
    return {mem.container for t, _ in m.walk() if isinstance(t, Tasklet) for mem in t.inputs.values()}


def all_locals(m: MapNode) -> set[str]:
    names = set(m.locals)
    for node, _ in m.walk():
        if isinstance(node, MapNode):
            names.update(node.locals)
    return names


def _writers(m: MapNode) -> dict[str, list[Tasklet]]:
    out: dict[str, list[Tasklet]] = {}
    for t, _ in m.walk():
        if isinstance(t, Tasklet):
            out.setdefault(t.output.container, []).append(t)
    return out


def _stored_local(m: MapNode, s) -> tuple[str, str, tuple] | None:
    """(local, global, subset) if top-level statement ``s`` is ``G[point] = local``."""
    if not isinstance(s, Tasklet) or not isinstance(s.expr, E.Var) or len(s.inputs) != 1:
        return None
    (conn, src), = s.inputs.items()
    out = s.output
    if s.expr.name != conn or src.container not in m.locals or out.container in m.locals or out.wcr:
        return None
    if m.locals[src.container].shape != () or src.subset not in (None, ()) or out.subset is None:
        return None
    names = [ix.name if isinstance(ix, E.Var) else None for ix in out.subset]
    if None in names or len(set(names)) != len(names) or not set(names) <= set(m.param_names):
        return None
    return src.container, out.container, out.subset


def prefer_stored(m: MapNode, available: Callable[[str], bool]) -> list[str]:
    """Read stored copies instead of locals (see the module docstring); returns the locals."""
    writers = _writers(m)
    top = {id(s) for s in m.body}
    done = []
    for s in m.body:
        found = _stored_local(m, s)
        if found is None or not available(found[1]):
            continue
        local, glob, subset = found
        ws = writers.get(local, [])
        if len(ws) != 1 or id(ws[0]) not in top or ws[0].output.wcr is not None:
            continue
        for t, _ in m.walk():
            if isinstance(t, Tasklet) and t is not s:
                for conn, mem in list(t.inputs.items()):
                    if mem.container == local:
                        t.inputs[conn] = Memlet(glob, subset)
        done.append(local)
    return done


def _filter_body(body: list, keep: Callable[[Tasklet], bool]) -> tuple[list, bool]:
    out, changed = [], False
    for s in body:
        if isinstance(s, MapNode):
            s.body, inner = _filter_body(s.body, keep)
            changed |= inner
            if s.body:
                out.append(s)
            else:
                changed = True
        elif keep(s):
            out.append(s)
        else:
            changed = True
    return out, changed


def drop_writes(m: MapNode, keep: set[str]) -> None:
    """Remove writes of globals outside ``keep`` and every statement that becomes dead."""
    local_names = all_locals(m)
    changed = True
    while changed:
        read = kernel_reads(m)

        def live(t: Tasklet) -> bool:
            out = t.output.container
            return out in read if out in local_names else out in keep
        m.body, changed = _filter_body(m.body, live)
    used = kernel_reads(m) | set(_writers(m))
    for scope in [m] + [n for n, _ in m.walk() if isinstance(n, MapNode)]:
        scope.locals = {k: v for k, v in scope.locals.items() if k in used}


def _renamed(mem: Memlet | None, renames: Mapping[str, str]) -> Memlet | None:
    if mem is None or mem.container not in renames:
        return mem
    return mem.with_container(renames[mem.container])


def rename_reads(node: OpNode | MapNode, renames: Mapping[str, str], writes: bool = False) -> None:
    """Reads (and with ``writes`` also writes) of ``renames``' keys use the new names."""
    node.inputs = [_renamed(m, renames) for m in node.inputs]
    if writes:
        node.outputs = [_renamed(m, renames) for m in node.outputs]
    if isinstance(node, OpNode):
        return
    for t, _ in node.walk():
        if isinstance(t, Tasklet):
            t.inputs = {k: _renamed(m, renames) for k, m in t.inputs.items()}
            if writes:
                t.output = _renamed(t.output, renames)


__all__ = ["all_locals", "drop_writes", "kernel_reads", "prefer_stored", "rename_reads"]
