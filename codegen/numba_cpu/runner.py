"""Running a graph on the CPU backend in this process.

``CompiledGraph(graph)`` builds the program (``program``), writes its kernels to the
kernel cache and its module to ``<cache>/programs/p_<sha>.py``, imports that module
(a real file, so tracebacks show generated lines) and makes its ``Model`` with the
graph's arrays as weights. ``run(feeds)`` is one call of ``Model.step``; the first call
compiles every kernel that numba's cache does not already hold. Nodes the program could not turn into code
(``Program.extern``) run through the reference executor's kernels, so every graph the reference runs, this runs.

``run(graph, feeds)`` is the one-shot form, with the same signature as the reference
executor's ``codegen.numpy_ref.executor.run``. ``threads`` pins numba and BLAS for the
whole process (default: leave them as they are, and report them in ``threads``); kernels
use ``prange`` (large ones: ``schedules.PARALLEL_MIN_ITERS``) unless ``parallel=False``, as the
exported package's do. Idle OpenMP and OpenBLAS workers spin for milliseconds by default and then
take the cores a kernel or GEMM after them needs (parallel kernels ran at half the single-thread
bandwidth here); ``library.calm_threads`` (through ``threads=``) makes them sleep soon; without
``threads=``, ``threads.current()`` starts numba with the short OpenMP spin only (stopping OpenBLAS's
workers could meet another thread's GEMM).
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from codegen.numba_cpu import kernel_cache
from codegen.numba_cpu import threads as thread_control
from codegen.numba_cpu.backend import program as cpu_program
from codegen.program.module import module_text
from codegen.program.module_plan import ModulePlan, plan_module
from codegen.program.namespace import literal
from codegen.program.program import Program
from codegen.numpy_ref.maps import run_map
from codegen.numpy_ref.executor import op_context
from codegen.numpy_ref.registry import lookup
from ir.errors import KernelError
from ir.graph import Graph
from ir.nodes import MapNode, OpNode


def _extern_callable(graph: Graph, node) -> Callable[..., tuple]:
    """A function ``(*inputs) -> (*outputs)`` running ``node`` in the reference executor."""
    reads = list(dict.fromkeys(m.container for m in node.inputs if m is not None))
    writes = [m.container for m in node.outputs if m is not None]

    def run_node(*arrays: np.ndarray) -> tuple:
        env = dict(graph.values)
        env.update(zip(reads, arrays))
        if isinstance(node, MapNode):
            res = run_map(node, env, graph.containers, graph.bindings)
            return tuple(res[c] for c in writes)
        return tuple(_run_op(graph, node, env))
    return run_node


def _run_op(graph: Graph, node: OpNode, env: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    fn = lookup(node.domain, node.op_type)
    if fn is None:
        raise KernelError(f"no kernel for {node.qualified_type}", node, graph)
    ctx = op_context(graph, node)
    ins = [env[m.container] if m is not None else None for m in node.inputs]
    res = fn(ins, node.attrs, ctx)
    return [np.asarray(v) for m, v in zip(node.outputs, res) if m is not None]


INPROCESS_IMPORTS = """import numpy as np

from codegen.numba_cpu import library as L
from codegen.numba_cpu.kernel_cache import table as _kernel_table
from codegen.numpy_ref import kernels as _ref_kernels  # noqa: F401  (fills the reference kernel table)
from codegen.numpy_ref.registry import OpContext, lookup as _lookup

K = _kernel_table({kernels})
EXTERN = {{}}  # filled by codegen.numba_cpu.runner: nodes that run in the reference executor
"""


def _import(path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class CompiledGraph:
    """A graph compiled for the CPU backend (see the module docstring)."""

    def __init__(self, graph: Graph, *, threads: int | None = None, parallel: bool = True,
                 fast: bool = True, lowered: bool = False,
                 extra: Callable[[Program, ModulePlan], str] | None = None) -> None:
        self.threads = thread_control.pin(threads) if threads else thread_control.current()
        self.program: Program = cpu_program(graph, parallel=parallel, fast=fast, lowered=lowered)
        for ks in self.program.kernels.values():
            kernel_cache.write(ks)
        imports = INPROCESS_IMPORTS.format(kernels=literal(tuple(sorted(self.program.kernels))))
        plan = plan_module(self.program)              # one plan: the module's step and ``extra`` (its timed twin)
        self.source = module_text(self.program, mode="inprocess", imports=imports,
                                  doc=f"dcstudio CPU program of {graph.name!a}", plan=plan,
                                  extra=extra(self.program, plan) if extra else "")
        sha = hashlib.sha256(self.source.encode()).hexdigest()[:20]
        self.path = kernel_cache.cache_dir() / "programs" / f"p_{sha}.py"
        if not self.path.is_file():
            kernel_cache.write_atomic(self.path, self.source)
        self.module = _import(self.path, f"dcstudio_program_{sha}")
        g = self.program.graph
        for k, (node, _reason) in self.program.extern.items():
            self.module.EXTERN[k] = _extern_callable(g, node)
        self.model = self.module.Model(weights=self.program.arrays, threads=0)   # pinned above, or as they are

    @property
    def graph(self) -> Graph:
        """The lowered graph the program was built from."""
        return self.program.graph

    def extern_nodes(self) -> list[tuple[str, str]]:
        """(node id, reason) of the nodes that run in the reference executor."""
        return [(node.id, reason) for node, reason in self.program.extern.values()]

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        res = self.model.step(**feeds)
        return res if outputs is None else {k: res[k] for k in outputs}

    @property
    def arena_bytes(self) -> int:
        """Bytes of the step's intermediate slots (the module's ``ARENA_BYTES``)."""
        return self.module.ARENA_BYTES

    def kernel_count(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for st in self.program.statements:
            kinds[st.kind] = kinds.get(st.kind, 0) + 1
        return kinds


def run(graph: Graph, feeds: Mapping[str, np.ndarray], *, outputs: Iterable[str] | None = None,
        **options: Any) -> dict[str, np.ndarray]:
    """Compile ``graph`` and run it once on ``feeds`` (like ``numpy_ref.executor.run``)."""
    return CompiledGraph(graph, **options).run(feeds, outputs)
