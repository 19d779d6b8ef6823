"""A GEMM with an epilogue run panel by panel, so the raw product stays in cache.

Unpanelled, a fused contraction writes its whole raw product (``<id>/@acc``) and the epilogue
kernel reads it back: 12.6 MB twice for BERT-base's MLP, which ``ir.movement`` counts as never
leaving the chip. With panels (a backend's ``Backend.panels``; the CPU's), the statement loops
over slices of one axis of the product::

    for lo in L.panels(3072, 1024):
        L.fused_matmul(x, w[lo:lo + 1024], trans_b=1, out=acc)   # one panel of the product
        K.k_…(acc, bias, y, …, lo, lo + 1, 8, 128, 1024, 0)            # its epilogue, while it is in cache

The cache model (the one "bytes as exported" counts with, ``codegen.program.traffic``):

- a product of at most ``PANEL_BYTES`` that the next kernel reads moves nothing. 4 MiB is an
  eighth of this machine's 32 MiB L3 and a quarter of a 16 MiB one: a panel is read back before
  the operands streamed meanwhile (a slice of each) can evict it. A product of one panel runs as
  before (one BLAS call, one kernel); a larger one is cut into the fewest panels that fit;
- each operand of the contraction that carries the cut axis is sliced (read once in all); the
  others are read again by every panel, from the last-level cache: an axis is taken only where
  each of them is at most ``REREAD_BYTES``, and the axis re-reading the fewest bytes wins;
- the epilogue kernel is the epilogue map with one more outer parameter ``q`` over
  ``[lo, lo + 1)`` and the cut parameter ``p`` over ``[0, w)``: every global container is indexed
  at ``p + q`` (as unsigned integers: numba's negative-index wraparound on a signed sum stops
  LLVM vectorizing, 4× slower measured here) where it was indexed at ``p`` and passed whole (its
  C layout kept), the product panel at ``p``. Both bounds of ``q`` are extent arguments, so one
  kernel serves every panel. It runs on one thread (its outer loop is ``q``, one iteration), also
  where the whole epilogue would have run ``prange``: measured on the BERT-base layer step at 2
  threads, 241.7 ms panelled against 238.3 ms whole, within the noise, and the bytes stay as counted.

Measured here (1 thread, BERT-base layer step): the panelled statements within ±1 % of the
unpanelled ones; 1 MiB panels (12 per MLP GEMM) cost OpenBLAS 4–10 % per GEMM in repacking.

Refused (the statement keeps the whole product): an epilogue that writes a container at an
index without the cut parameter (a reduction across panels), reads the product at other than
its own point, or whose operands are also the kernel's arrays; bfloat16 operands; an axis no
width of which divides it into at least two panels of at least ``MIN_WIDTH`` (rows or columns
of the GEMM; a batch axis may be cut one matrix at a time).
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen.numpy_ref.registry import canonical_domain
from codegen.program.kernel import KernelSource, UnsupportedMap
from ir import expr as E
from ir import fused_ops
from ir.containers import Container
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet

PANEL_BYTES = 4 << 20    # see the module docstring
REREAD_BYTES = 16 << 20
MIN_WIDTH = 16          # a GEMM dimension cut into panels keeps at least this many rows or columns
PANEL = "@panel"        # the binding the panel kernel's outer bounds are rendered from
Q = "@q"                # the panel kernel's outer parameter


@dataclass(frozen=True)
class Panels:
    """How one contraction runs in panels: the product's axis cut, the width, per operand the axis it slices."""

    axis: int
    width: int
    slices: tuple[int | None, ...]


def labels(node: OpNode, shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> tuple[list, list] | None:
    """Einsum-style labels of a contraction's operands and of its product (None: not one we slice).
    A label an operand broadcasts (size 1 against a larger product) is None."""
    dom, op, a = canonical_domain(node.domain), node.op_type, node.attrs
    if dom == "" and op == "Einsum":
        lhs, res = str(a["equation"]).replace(" ", "").split("->")
        ins = lhs.split(",")
        if len(ins) != 2 or "..." in lhs:
            return None
        return [[ch for ch in s] for s in ins], list(res)
    if len(shapes) < 2 or min(len(shapes[0]), len(shapes[1])) < 2 or a.get("transBatchA") or a.get("transBatchB"):
        return None
    r = len(out)
    outs = [f"b{i}" for i in range(r - 2)] + ["m", "n"]

    def matrix(shape, last_two, trans):
        batch = [outs[i + r - len(shape)] if shape[i] == out[i + r - len(shape)] else None
                 for i in range(len(shape) - 2)]
        return batch + (last_two[::-1] if trans else last_two)
    if dom == "" and op in ("MatMul", "Gemm") or dom == "com.microsoft" and op == "FusedMatMul":
        ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
        ops = [matrix(shapes[0], ["m", "k"], ta), matrix(shapes[1], ["k", "n"], tb)]
        if len(shapes) > 2:                                   # Gemm's C, broadcast to (M, N)
            c = shapes[2]
            ops.append([lab if size == out[k + 2 - len(c)] else None for k, (lab, size) in
                        enumerate(zip(["m", "n"][2 - len(c):], c))])
        return ops, outs
    return None


def choose(prog, node: OpNode, base: OpNode, acc: Container) -> Panels | None:
    """The axis and width of ``node``'s panels (see the module docstring), or None."""
    shape = acc.concrete_shape(prog.graph.bindings)
    total = acc.nbytes(prog.graph.bindings)
    if total <= PANEL_BYTES:
        return None
    operands = [m.container for m in node.inputs[:fused_ops.slots(node)] if m is not None]
    if len(operands) != len(base.inputs) or len(set(operands)) != len(operands):
        return None
    got = labels(base, [prog.shape(c) for c in operands], tuple(shape))
    if got is None:
        return None
    ops, outs = got
    best = None
    for d, n in enumerate(shape):
        batch = d < len(shape) - 2 and base.op_type != "Einsum"
        slices = tuple(lab.index(outs[d]) if outs[d] in lab else None for lab in ops)
        kept = [prog.nbytes(c) for c, s in zip(operands, slices) if s is None]
        if all(s is None for s in slices) or any(b > REREAD_BYTES for b in kept):
            continue
        per = total // n
        width = next((w for w in range(min(n // 2, PANEL_BYTES // per), 0, -1) if n % w == 0), 0)
        if width < (1 if batch else MIN_WIDTH):
            continue
        cost = sum(kept) * (n // width)
        if best is None or cost < best[0]:
            best = (cost, Panels(d, width, slices))
    return None if best is None else best[1]


def _acc_param(m: MapNode, temp: str, axis: int, n: int) -> str | None:
    """The top-level parameter indexing the product's ``axis`` wherever the epilogue reads it, or None
    (the product read at other points, or that parameter not a plain [0, n) range)."""
    subsets = {mem.subset for node, _ in m.walk() if isinstance(node, Tasklet)
               for mem in [*node.inputs.values(), node.output] if mem.container == temp}
    ranges = dict(m.params)
    if len(subsets) != 1:
        return None
    sub = next(iter(subsets))
    if sub is None or len(sub) <= axis or not all(isinstance(ix, E.Var) and ix.name in ranges for ix in sub):
        return None
    p = sub[axis].name
    r = ranges[p]
    if r.step != 1 or r.start != E.Const(0, "int64") or not isinstance(r.stop, E.Const) or int(r.stop.value) != n:
        return None
    return p


def panel_map(m: MapNode, temp: str, p: str, width: int) -> MapNode | None:
    """``m`` over one panel: outer ``q`` over [@panel, @panel + 1), ``p`` over [0, width), every global
    container but the product indexed at ``p + q`` (None where a write would cross panels)."""
    new = fused_ops.rename_containers(m, {})
    locals_ = {n for node, _ in new.walk() if isinstance(node, MapNode) for n in node.locals} | set(new.locals)
    shift = {p: E.Bin("add", E.Cast(E.Var(p), "uint64"), E.Cast(E.Var(Q), "uint64"))}   # unsigned: no wraparound

    def moved(mem: Memlet, written: bool) -> Memlet | None:
        if mem.container == temp or mem.container in locals_ or mem.subset is None:
            return mem if not written or mem.container in locals_ else None
        if written and E.Var(p) not in mem.subset:
            return None
        return Memlet(mem.container, tuple(E.substitute(ix, shift) if not isinstance(ix, Range) else ix
                                           for ix in mem.subset), mem.volume, mem.wcr)
    for node, _ in new.walk():
        if isinstance(node, MapNode):
            if any(p in E.free_vars(e) for _, r in node.params for e in (r.start, r.stop)):
                return None
            continue
        ins = {k: moved(mem, False) for k, mem in node.inputs.items()}
        out = moved(node.output, True)
        if out is None or any(v is None for v in ins.values()):
            return None
        node.inputs, node.output = ins, out
    start = E.Var(PANEL)
    params = [(name, Range(E.Const(0, "int64"), E.Const(width, "int64")) if name == p else r)
              for name, r in new.params]
    new.params = [(Q, Range(start, E.Bin("add", start, E.Const(1, "int64"))))] + params
    return new


def lines(prog, node: OpNode, base: OpNode, call: str, epi: MapNode, ks: KernelSource,
          temp: str) -> tuple[list[str], KernelSource, tuple] | None:
    """The panel loop of fused contraction ``node`` (``call``: its whole BLAS call into ``temp``;
    ``ks``: its whole epilogue kernel), its kernel and its calls, or None to keep the whole product.
    On success ``prog.temps[temp]`` becomes one panel."""
    acc = prog.temps[temp]
    plan = choose(prog, node, base, acc)
    if plan is None:
        return None
    operands = [m.container for m in node.inputs[:fused_ops.slots(node)] if m is not None]
    if set(operands) & set(ks.arrays) or any(prog.is_bits(c) for c in operands):
        return None
    shape = list(acc.concrete_shape(prog.graph.bindings))
    n = shape[plan.axis]
    p = _acc_param(epi, temp, plan.axis, n)
    pm = panel_map(epi, temp, p, plan.width) if p is not None else None
    if pm is None:
        return None
    shape[plan.axis] = plan.width
    panel = Container(temp, tuple(shape), acc.dtype)
    rendered = []
    for lo in (0, plan.width):
        view = fused_ops.overlay(prog.graph, panel)
        view.bindings = {**prog.graph.bindings, PANEL: lo}
        try:
            rendered.append(prog.make_kernel(pm, view))
        except UnsupportedMap:
            return None
    pk, other = rendered
    if pk.name != other.name or pk.parallel or len(pk.extents) != len(other.extents):
        return None
    extents = [_extent(a, b, plan.width) for a, b in zip(pk.extents, other.extents)]
    if any(e is None for e in extents):
        return None
    prog.temps[temp] = panel
    sliced = _sliced_call(prog, call, operands, plan)
    args = [prog.kernel_arg(c) for c in pk.arrays] + extents
    text = [f"for lo in L.panels({n}, {plan.width}):", f"    {sliced}",
            f"    K.{pk.name}({', '.join(args)})"]
    moved = tuple(dict.fromkeys([*operands, *(c for c in pk.arrays if c != temp)]))
    return text, pk, (("L.panels", moved),)


def _extent(a: int, b: int, width: int) -> str | None:
    """An extent argument as the loop prints it: a constant, or ``lo`` plus one (rendered at lo = 0 and width)."""
    if a == b:
        return str(a)
    if b - a != width:
        return None
    return "lo" if a == 0 else f"lo + {a}"


def _sliced_call(prog, call: str, operands: list[str], plan: Panels) -> str:
    """``call`` with each sliced operand replaced by its panel (``x[:, lo:lo + w]``)."""
    head, rest = call.split("(", 1)
    args = rest.rsplit(", out=", 1)
    parts = args[0].split(", ")
    for c, axis in zip(operands, plan.slices):
        if axis is None:
            continue
        var = prog.operand(c)
        at = parts.index(var)
        parts[at] = f"{var}[{', '.join([':'] * axis + [f'lo:lo + {plan.width}'])}]"
    return f"{head}({', '.join(parts)}, out={args[1]}"
