"""A top-level ``MapNode`` as one CUDA C kernel, printed from the same ``ir.expr`` trees.

``render.kernel_source(map, graph, storage=None)`` returns a ``CudaKernel`` (the CPU backend's
``KernelSource`` plus a ``launch.Launch``) whose ``source`` is CUDA C: ``extern "C" __global__
void k_<what>_<sha>(…)``. Row and column reductions (``reduction_pattern``) are printed as block
kernels by ``reductions``; everything else by ``points_kernel`` here:

- One thread per point of the map's own parameters (flattened, ``extents`` = their
  trip counts, then the stops of nested loops); nested maps are loops inside the
  thread, locals registers, statements run in body order — the same point-by-point
  semantics as the numba loop nest (``loopnest.check_loop_safe`` refuses the rest).
- Expressions print with ``c_expr.to_cuda``, each operation in its own type (``expf`` on float,
  ``exp`` on double); connector names map to loads, so half/bfloat16 storage loads through
  ``__half2float``/``__bfloat162float`` and stores through ``__float2half_rn``/
  ``__float2bfloat16_rn``: all arithmetic and every accumulation is float32.
- A wcr write whose index does not hold every thread parameter is shared between
  threads: ``atomicAdd`` for sum, a compare-and-swap loop for max/min/prod.
- ``storage="bfloat16"``/``"float16"`` is the low-precision variant: float32 global
  containers are stored in that type, except those written with a wcr (accumulators
  stay float32, as ``mixed_precision`` requires).

Every kernel starts with ``device_lib.PRELUDE`` and the helpers its expressions call (``device_lib.HELPER_SOURCES``).

Arrays are indexed with strides of their (C-contiguous) shapes, written into the
text, so the text is specific to the sizes; the hash-derived name makes it unique.
"""
from __future__ import annotations

import math
from typing import Callable

from codegen.cupy_cuda.c_expr import C_TYPES, index_to_cuda, to_cuda
from codegen.cupy_cuda.device_lib import HELPER_SOURCES, PRELUDE
from codegen.cupy_cuda.launch import POINTS_BLOCK, CudaKernel, Launch, launch
from codegen.cupy_cuda.reduction_pattern import WCR_OP
from codegen.program.expr_print import compute_dtype
from codegen.program.kernel import UnsupportedMap, kernel_name, output_init
from codegen.program.walk import Dialect, KernelWalk
from ir import dtypes
from ir import expr as E
from ir.graph import Graph
from ir.maps import param_counts
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet

LOAD = {"float16": "__half2float({})", "bfloat16": "__bfloat162float({})"}
STORE = {"float16": "__float2half_rn((float)({}))", "bfloat16": "__float2bfloat16_rn((float)({}))"}
BLOCK = POINTS_BLOCK


def c_literal(value, dt: str) -> str:
    """``value`` as a CUDA C constant of type ``dt`` (infinities through ``DCS_INF``)."""
    if dt == "bool":
        return "true" if value else "false"
    if dt in dtypes.FLOAT_TYPES:
        f = float(value)
        if f != f:
            raise UnsupportedMap(f"NaN constant of {dt}")
        if f in (float("inf"), float("-inf")):
            return "DCS_INF" if f > 0 else "-DCS_INF"
        return repr(f) + ("f" if dt != "float64" else "")
    if dt not in C_TYPES:
        raise UnsupportedMap(f"no CUDA C type for {dt}")
    n = int(value)
    text = f"({n + 1}LL - 1)" if n == -(1 << 63) else f"{n}LL"
    return f"({C_TYPES[dt]}){text}"


DIALECT = Dialect("  ", c_literal, lambda name, dt, init: f"{C_TYPES[dt]} {name} = {init};", close="}",
                  statement="{};")


class _Cuda(KernelWalk):
    """State of one CUDA kernel being printed (``program.walk.KernelWalk``)."""

    dialect = DIALECT

    def __init__(self, m: MapNode, graph: Graph, storage: str | None) -> None:
        super().__init__(m, graph)
        self.storage = storage
        self.owners: set[str] = {p for p, _ in m.params}   # params a write index must hold to be owned

    def local(self, loc: str, dtype: str, wcr: str | None) -> tuple[str, str]:
        """``t<k>`` in float32 for 16-bit floats (every accumulation is float32), else ``dtype``."""
        dt = compute_dtype(dtype)
        if dt not in C_TYPES:
            raise UnsupportedMap(f"local '{loc}' has dtype {dtype}")
        return f"t{len(self.locals)}", dt

    def dtype(self, container: str) -> str:
        """Storage dtype of a global container (the variant's type for float32 ones)."""
        dt = self.graph.container(container).dtype
        wcr = any(isinstance(n, Tasklet) and n.output.container == container and n.output.wcr
                  for n, _ in self.m.walk())
        if self.storage and dt == "float32" and not wcr:
            return self.storage
        if dt not in C_TYPES:
            raise UnsupportedMap(f"'{container}' has dtype {dt}, which CUDA kernels do not handle")
        return dt

    def index(self, e: E.Expr) -> str:
        return index_to_cuda(e, self.params)

    def loop_head(self, name: str, r: Range, parallel: bool) -> str:
        bindings = dict(self.graph.bindings)
        start = self.index(r.start) if E.free_vars(r.start) else str(int(E.evaluate(r.start, bindings)))
        return f"for (long long {name} = {start}; {name} < {self.bound(r.stop)}; {name} += {r.step}) {{"

    def tasklet(self, t: Tasklet) -> None:
        self.line(_store(self, t.output, _value(self, t)))

    def element(self, mem: Memlet) -> str:
        """``a3[flat index]`` of a point memlet of a global container."""
        shape = self.graph.container(mem.container).concrete_shape(self.graph.bindings)
        flat, stride = [], 1
        for ix, dim in reversed(list(zip(self.point_subset(mem), shape))):
            flat.append(f"({self.index(ix)}) * {stride}LL" if stride != 1 else f"({self.index(ix)})")
            stride *= dim
        return f"{self.arrays[mem.container]}[{' + '.join(reversed(flat)) or '0'}]"


def _signature(k: _Cuda, name: str) -> str:
    args = []
    for c, a in k.arrays.items():
        const = "" if c in k.written else "const "
        args.append(f"{const}{C_TYPES[k.dtype(c)]}* __restrict__ {a}")
    args += [f"long long n{i}" for i in range(len(k.extents))]
    return f'extern "C" __global__ void {name}({", ".join(args)})'


def _thread_params(k: _Cuda) -> None:
    """Top-level params from the flat thread index (last param fastest, like C order)."""
    counts = param_counts(k.m.params, k.graph.bindings)
    k.extents.extend(n for *_, n in counts)
    size = math.prod(n for *_, n in counts)
    if size < 2**31:
        # 32-bit index math with the extents as literals: division by a constant is a multiply and a
        # shift, where 64-bit division by a runtime extent is a software routine of ~70 instructions
        # per param (it made the 4-d softmax-gradient kernel run at 37 % of copy bandwidth on an H100)
        ix, tid, bound = "unsigned", "blockIdx.x * blockDim.x + threadIdx.x", f"{size}u"
        divisors = [f"{max(n, 1)}u" for *_, n in counts]
        position = "(long long)(rest % {})"
    else:
        ix, tid = "long long", "(long long)blockIdx.x * blockDim.x + threadIdx.x"
        bound = " * ".join(f"n{i}" for i in range(len(counts))) or "1"
        divisors = [f"n{i}" for i in range(len(counts))]
        position = "(rest % {})"
    k.line(f"const {ix} tid = {tid};")
    k.line(f"if (tid >= {bound}) return;")
    if counts:
        k.line(f"{ix} rest = tid;")
    for i in reversed(range(len(counts))):
        p, start, step, _ = counts[i]
        k.params[p] = f"p{i}"
        k.line(f"const long long p{i} = {start} + {position.format(divisors[i])} * {step}; rest /= {divisors[i]};")


def _value(k: _Cuda, t: Tasklet, held: Callable[[Memlet], str | None] = lambda mem: None) -> str:
    """The tasklet's expression in CUDA C: an input ``held`` names (a register) read from there, a local
    by its name, the rest loaded (``loaded``); each typed as the kernel computes with it."""
    names, types = {}, {}
    for conn, mem in t.inputs.items():
        register = held(mem)
        if register is None and mem.container in k.locals:
            names[conn], types[conn] = k.locals[mem.container]
        else:
            names[conn], types[conn] = register or loaded(k, mem), compute_dtype(k.dtype(mem.container))
    names.update(k.params)
    types.update(dict.fromkeys(k.params, "int64"))
    return to_cuda(t.expr, names, k.helpers, types)


def loaded(k: _Cuda, mem: Memlet) -> str:
    """The load of ``mem`` as the kernel computes with it (16-bit storage widened to float)."""
    text, dt = k.element(mem), k.dtype(mem.container)
    return LOAD[dt].format(text) if dt in LOAD else text


def _owned(k: _Cuda, out: Memlet) -> bool:
    """Every thread writes its own element: the index holds each owner parameter directly
    (the thread parameters; in block kernels also the parameters the block's threads split)."""
    direct = {ix.name for ix in (out.subset or ()) if isinstance(ix, E.Var)}
    return k.owners <= direct


def _store(k: _Cuda, out: Memlet, value: str) -> str:
    if out.container in k.locals:
        return k.accumulate(k.locals[out.container][0], out.wcr, f"({value})")
    dt = k.dtype(out.container)
    target = k.element(out)
    if out.wcr is None:
        return f"{target} = {STORE[dt].format(value) if dt in STORE else f'({value})'};"
    if _owned(k, out):
        return k.accumulate(target, out.wcr, f"({value})")
    if dt != "float32" and out.wcr != "sum":
        raise UnsupportedMap(f"shared {out.wcr} reduction into {dt} '{out.container}'")
    if out.wcr == "sum":
        return f"atomicAdd(&{target}, ({C_TYPES[dt]})({value}));"
    return f"dcs_cas<{WCR_OP[out.wcr]}>(&{target}, (float)({value}));"


def points_kernel(m: MapNode, graph: Graph, *, storage: str | None = None) -> CudaKernel:
    """One thread per point of ``m``'s own parameters; nested maps are loops in the thread."""
    k = _Cuda(m, graph, storage)
    k.collect()
    try:
        _thread_params(k)
        k.body(m)
    except (KeyError, ValueError) as e:
        if isinstance(e, UnsupportedMap):
            raise
        raise UnsupportedMap(f"cannot print for CUDA: {e}") from None
    return finish(k, "\n".join(k.lines), "", launch("points", (BLOCK, 1), BLOCK, k.extents, len(m.params)))


def finish(k: _Cuda, body: str, bounds: str, how: Launch, module_globals: str = "",
           threads: int | None = None) -> CudaKernel:
    """The kernel record: PRELUDE (+ the helpers its expressions call, + module-scope device variables) +
    signature + body, named after what it fuses and the hash of its text (``kernel_name``)."""
    sig = _signature(k, "KERNEL")
    if bounds:
        sig = sig.replace(" void KERNEL(", f" void {bounds} KERNEL(", 1)
    helpers = "".join(HELPER_SOURCES[h] for h in sorted(k.helpers))
    text = PRELUDE + "\n" + helpers + module_globals + sig + " {\n" + body + "\n}\n"
    name = kernel_name(k.m.label, text)
    text = text.replace(" KERNEL(", f" {name}(", 1).replace("KERNEL_", f"{name}_")   # module-scope names
    init = {c: output_init(k.m, c, k.graph) for c in k.written}
    dtypes = {c: k.dtype(c) for c in k.arrays}
    return CudaKernel(name, text, (), tuple(k.arrays), tuple(k.written), tuple(k.extents), False, init,
                      storage=dtypes, threads=len(k.m.params) if threads is None else threads, launch=how)
