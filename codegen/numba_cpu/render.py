"""A top-level map as a numba kernel: the loop nest (``loopnest``) laid out by its schedule (``schedules``),
flushed, named after what it fuses and the hash of its text (the kernel cache's key), and described for
its callers."""
from __future__ import annotations

from codegen.numba_cpu import flush, schedules
from codegen.numba_cpu.fastmath import FORMS
from codegen.numba_cpu.loopnest import ZERO, Nest
from codegen.program.expr_print import UnsupportedExpr
from codegen.program.kernel import KernelSource, UnsupportedMap, kernel_name, output_init, storage_dtype
from ir.graph import Graph
from ir.nodes import MapNode


def kernel_source(m: MapNode, graph: Graph, *, parallel: bool = False, fast: bool = True) -> KernelSource:
    """The canonical loop-nest kernel of top-level map ``m`` (``UnsupportedMap`` if none)."""
    nest = Nest(m, graph, fast)
    nest.collect()
    nest.invariant_reads()
    schedule = schedules.plan(m, graph, set(nest.written), parallel)
    try:
        schedules.emit(nest, m, schedule)
    except UnsupportedExpr as e:
        raise UnsupportedMap(str(e)) from None
    # a schedule may run the prange loop inner, or not at all (a columns map whose sweeps stay serial)
    par = schedule.parallel and any("prange(" in line for line in nest.lines)
    forms = bool(nest.helpers & set(FORMS))
    if forms:                                     # fastmath forms: the opaque zero (see ZERO)
        nest.pre.insert(0, f"{ZERO} = np.float32({nest.extent(0)})")
    nest.lines, chunked = flush.chunks(nest.lines, forms)   # each prange iteration flushes itself
    flushes = forms and (not par or chunked)      # this thread only, or every chunk too (flush.py)
    if flushes:
        nest.helpers |= set(flush.HELPERS)
    args = list(nest.arrays.values()) + [f"n{k}" for k in range(len(nest.extents))]
    flags = "cache=True, nogil=True, error_model=\"numpy\", fastmath=_FM" + (
        ", parallel=True" if par else "")
    body = ["    " + line for line in nest.pre] + (flush.around_loops(nest.lines) if flushes else nest.lines)
    text = "\n".join([f"@njit({flags})", f"def kernel({', '.join(args)}):", *body, ""])
    name = kernel_name(m.label, text)
    text = text.replace("def kernel(", f"def {name}(", 1)
    init = {c: output_init(m, c, graph) for c in nest.written}
    arg_types = tuple((storage_dtype(graph.container(c).dtype), len(graph.container(c).shape)) for c in nest.arrays)
    return KernelSource(name, text, tuple(sorted(nest.helpers)), tuple(nest.arrays), tuple(nest.written),
                        tuple(nest.extents), par, init, arg_types=arg_types, schedule=schedule.describe(par))
