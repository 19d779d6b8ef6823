"""The NumPy reference executor: the living specification of the IR.

``run(graph, feeds)`` executes every kernel in topological order — ``OpNode``s
through ``NUMPY_KERNELS``, ``MapNode``s through ``maps.run_map`` — and returns
the graph outputs. Initializer values come from ``graph.values``; ``feeds``
supply the graph inputs (and may override initializers). Intermediates are
freed after their last use. A failing kernel raises ``KernelError`` naming the
node ("While executing …"), chained to the original exception.
"""
from __future__ import annotations

from collections import ChainMap
from typing import Callable, Iterable, Mapping

import numpy as np

from codegen.numpy_ref import kernels as _kernels  # noqa: F401  (fills NUMPY_KERNELS)
from codegen.numpy_ref.maps import run_map
from codegen.numpy_ref.registry import OpContext, lookup
from ir import dtypes
from ir.errors import GraphError, KernelError, ShapeError, StudioError, UnsupportedOpError
from ir.graph import Graph
from ir.nodes import MapNode, OpNode


Perturb = Callable[[object, dict[str, np.ndarray]], dict[str, np.ndarray]]


def run(graph: Graph, feeds: Mapping[str, np.ndarray], *, outputs: Iterable[str] | None = None,
        check_shapes: bool = True, perturb: Perturb | None = None,
        only: set[str] | None = None, on_kernel: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Execute ``graph`` on ``feeds``; return the requested outputs (default: graph outputs).
    ``only`` (kernel ids: e.g. ``graph.ancestors`` of the outputs' producers, a cutout's recording
    run) runs just those kernels; graph inputs none of them reads need no feed;
    ``on_kernel(done, total)`` is called after each kernel (progress; it may raise to stop).
    ``perturb(node, inputs)`` may return replacement values for some of a kernel's inputs, seen by
    that kernel only (``codegen.oracle_sim`` simulates an fp32 implementation's rounding with it)."""
    wanted = list(outputs) if outputs is not None else list(graph.outputs)
    order = graph.topo_order()
    required = None
    if only is not None:                           # unfed inputs nobody needs are no error
        order = [n for n in order if n.id in only]
        required = {m.container for n in order for m in n.inputs if m is not None} | set(wanted)
    env = _initial_env(graph, feeds, required)
    last_use = _last_uses(order, set(wanted))
    for step, node in enumerate(order):
        view = env
        if perturb is not None:
            over = perturb(node, {m.container: env[m.container] for m in node.inputs
                                  if m is not None and m.container in env})
            view = ChainMap(over, env) if over else env
        results = _run_node(graph, node, view)
        if check_shapes:
            _check_results(graph, node, results)
        env.update(results)
        for name in last_use.get(step, ()):
            env.pop(name, None)
        if on_kernel is not None:
            on_kernel(step + 1, len(order))
    missing = [n for n in wanted if n not in env]
    if missing:
        raise GraphError(f"outputs {missing} were not produced", None, graph)
    return {n: env[n] for n in wanted}


def _initial_env(graph: Graph, feeds: Mapping[str, np.ndarray],
                 required: set[str] | None = None) -> dict[str, np.ndarray]:
    env: dict[str, np.ndarray] = dict(graph.values)
    for name in graph.inputs:
        if name in feeds or (required is not None and name not in required):
            continue
        if name not in env:
            raise GraphError(f"graph input '{name}' was not fed", None, graph,
                             hint="Pass a value for every graph input")
    for name, value in feeds.items():
        if name not in graph.containers:
            raise GraphError(f"fed value '{name}' is not a container of the graph", None, graph)
        c = graph.containers[name]
        arr = np.asarray(value)
        want = c.concrete_shape(graph.bindings) if not c.symbols or all(
            s in graph.bindings for s in c.symbols) else None
        if want is not None and tuple(arr.shape) != want:
            raise ShapeError(f"input '{name}' has shape {tuple(arr.shape)}, expected {want}", None, graph)
        env[name] = arr
    return env


def _last_uses(order, keep: set[str]) -> dict[int, list[str]]:
    last: dict[str, int] = {}
    for step, node in enumerate(order):
        for m in node.inputs:
            if m is not None:
                last[m.container] = step
    out: dict[int, list[str]] = {}
    for name, step in last.items():
        if name not in keep:
            out.setdefault(step, []).append(name)
    return out


def _run_node(graph: Graph, node, env) -> dict[str, np.ndarray]:
    try:
        if isinstance(node, MapNode):
            return run_map(node, env, graph.containers, graph.bindings)
        return _run_op(graph, node, env)
    except StudioError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised with the node named
        err = KernelError(f"While executing {node.id}: {type(e).__name__}: {e}", node, graph)
        raise err from e


def op_context(graph: Graph, node: OpNode) -> OpContext:
    """What a kernel may know of ``node``: opset, output shapes/dtypes from the IR, its ``impl``."""
    shapes, dts = [], []
    for m in node.outputs:
        c = graph.containers.get(m.container) if m is not None else None
        try:
            shapes.append(c.concrete_shape(graph.bindings) if c else None)
        except KeyError:
            shapes.append(None)
        dts.append(dtypes.to_numpy(c.dtype) if c else None)
    return OpContext(opset=node.opset, n_outputs=len(node.outputs), output_shapes=tuple(shapes),
                     output_dtypes=tuple(dts), label=node.id,
                     extra={"impl": node.impl} if node.impl != "default" else {})


def _run_op(graph: Graph, node: OpNode, env) -> dict[str, np.ndarray]:
    fn = lookup(node.domain, node.op_type)
    if fn is None:
        raise UnsupportedOpError(node.op_type, node, graph, domain=node.domain)
    ins = [env[m.container] if m is not None else None for m in node.inputs]
    ctx = op_context(graph, node)
    res = fn(ins, node.attrs, ctx)
    out = {}
    for m, val, dt in zip(node.outputs, res, ctx.output_dtypes):
        if m is not None:
            arr = np.asarray(val)
            if dt is not None and arr.dtype != dt and arr.dtype.kind in "fV" and dt.kind in "fV":
                arr = arr.astype(dt)  # e.g. a bf16 operand must not make a float32 result bf16
            out[m.container] = arr
    return out


def _check_results(graph: Graph, node, results: dict[str, np.ndarray]) -> None:
    for name, val in results.items():
        c = graph.containers.get(name)
        if c is None or c.symbols and not all(s in graph.bindings for s in c.symbols):
            continue
        want = c.concrete_shape(graph.bindings)
        if tuple(val.shape) != want:
            raise ShapeError(f"produced '{name}' with shape {tuple(val.shape)}, but the IR says {want}",
                             node, graph, hint="The op's shape rule and its kernel disagree; report this")
