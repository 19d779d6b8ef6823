"""What every backend's renderer returns for a map, and the map analysis they share.

The contract: a backend is a ``render(map, graph) -> KernelSource`` (``backend.Backend``).
``KernelSource`` names the kernel (``kernel_name``: what it fuses, then the hash of its text),
holds its text and says how the program calls it: ``K.<name>(arrays…, extents…)`` with ``arrays``
the global containers in order of first access and ``outputs`` the ones it writes, each allocated
by the caller as ``init`` says. A backend adds its own fields in a subclass (CUDA:
``cupy_cuda.launch.CudaKernel``). A map a backend cannot render raises ``UnsupportedMap`` (the
program then keeps the reference executor for it, and an export refuses it naming the node).

The analysis half (backend-neutral, on the IR):

- ``kernel_locals``: the locals of a map and of its nested maps;
- ``check_loop_safe``: running the body point by point equals the reference's
  whole-space-per-statement order (no container read at one index and written at another);
- ``first_wcr``: per local, the wcr of its first write (the initial value rule);
- ``output_init``: ``empty`` when one plain write covers every element, the wcr identity
  when written with a wcr, else zeros;
- ``accumulator_dtype``: float32 sums accumulate in float64;
- ``storage_dtype``: 16-bit floats are stored and passed as their uint16 bits.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from ir import expr as E
from ir.dtypes import HALF_FLOATS
from ir.graph import Graph
from ir.memlet import Memlet, Wcr
from ir.nodes import MapNode, Tasklet


class UnsupportedMap(ValueError):
    """A map a backend cannot turn into a kernel (the message says why)."""


@dataclass(frozen=True)
class OutputInit:
    """How the caller allocates one output: ``empty``, ``zeros`` or ``full`` (``wcr`` identity)."""

    kind: str
    wcr: Wcr | None = None


@dataclass(frozen=True)
class KernelSource:
    """One rendered kernel and how to call it (see the module docstring)."""

    name: str
    source: str
    helpers: tuple[str, ...]
    arrays: tuple[str, ...]
    outputs: tuple[str, ...]
    extents: tuple[int, ...]
    parallel: bool
    init: dict[str, OutputInit] = field(default_factory=dict)
    arg_types: tuple[tuple[str, int], ...] = ()             # (stored dtype, rank) of each array argument
    schedule: str = ""                                      # how its loops run, in words (the profile shows it)


_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Neg", "Abs", "Reciprocal", "Cast", "Identity",
                         "Sum", "Max", "Min", "Where", "Equal", "Less", "Greater", "Not", "And", "Or"})
_SHORT = {"FusedMatMul": "Matmul", "MatMul": "Matmul", "LayerNormalization": "Layernorm",
          "BatchNormalization": "Batchnorm", "Normalization": "Norm"}   # replaced in this order
SLUG_OPS = 3
"""A kernel's name names at most this many of the ops it fuses."""
_WORD = 32   # characters of one op type in a name


def kernel_slug(label: str) -> str:
    """What a map fuses, as a name part: its distinct ops (a fused map's label lists them, e.g.
    ``Add+Add>LayerNormalization``), in order, those that are not plain arithmetic chosen first,
    snake-cased: ``add_layernorm``, ``layernorm_grad_reduce_sum``, ``mul_add_sqrt``; ``map`` if none.
    Only ASCII identifiers of the label are used, so nothing else from a model reaches a name."""
    ops = list(dict.fromkeys(re.sub(r"_\d+$", "", t)[:_WORD] for t in re.split(r"[+>]", label)
                             if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", t)))
    chosen = set(([op for op in ops if op not in _ARITHMETIC] + ops)[:SLUG_OPS])
    parts = [op for op in ops if op in chosen]
    words = []
    for op in parts:
        for long, short in _SHORT.items():
            op = op.replace(long, short)
        words.append(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower())
    return "_".join(words) or "map"


def kernel_name(label: str, text: str) -> str:
    """``k_<slug>_<sha>``: what the kernel fuses (``kernel_slug``), then the first 16 hex digits of the
    sha256 of ``text`` (the kernel with a placeholder name). The hash keeps the name a content
    address (the kernel caches key on it); the slug is for a reader."""
    return f"k_{kernel_slug(label)}_{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def kernel_locals(m: MapNode) -> set[str]:
    """Names of the locals of ``m`` and of every map nested in it."""
    return set(m.locals) | {n for node, _ in m.walk() if isinstance(node, MapNode) for n in node.locals}


def check_loop_safe(m: MapNode, written: set[str], local_names: set[str]) -> None:
    """Raise ``UnsupportedMap`` unless running the body point by point equals the reference:
    a container the map reads and writes is accessed at one index only, without a wcr, and a
    container written at several indices is written only by one kind of wcr."""
    seen: dict[str, list[tuple]] = {}
    for node, _ in m.walk():
        if not isinstance(node, Tasklet):
            continue
        for mem in node.inputs.values():
            if mem.container in written:
                seen.setdefault(mem.container, []).append((mem.subset, "read"))
        out = node.output
        if out.container in written and out.container not in local_names:
            seen.setdefault(out.container, []).append((out.subset, out.wcr or "write"))
    for name, items in seen.items():
        subsets, kinds = {s for s, _ in items}, {k for _, k in items}
        if "read" in kinds and (len(subsets) > 1 or kinds != {"read", "write"}):
            raise UnsupportedMap(f"the map reads '{name}', which it also writes, at another index or "
                                 "through a wcr")
        if len(subsets) > 1 and (len(kinds) > 1 or kinds == {"write"}):
            raise UnsupportedMap(f"the map writes '{name}' at several indices without one common wcr")


def first_wcr(m: MapNode) -> dict[str, Wcr | None]:
    """Per local of ``m``: the wcr of its first write (the reference's initial value rule)."""
    out: dict[str, Wcr | None] = {}
    for node, _ in m.walk():
        if isinstance(node, Tasklet) and node.output.container in m.locals:
            out.setdefault(node.output.container, Wcr.of(node.output.wcr))
    return out


def accumulator_dtype(wcr: str | None, dt: str) -> str:
    """The type a local is kept in: a float32 sum accumulates in float64 (a sequential float32
    sum over n terms is off by ~u·√n, 1e-5 relative on a 786k-element loss; the reference
    executor and onnxruntime sum far more accurately), everything else in its own type."""
    return "float64" if wcr == Wcr.SUM and dt == "float32" else dt


def storage_dtype(dt: str) -> str:
    """The dtype a kernel sees an array of ``dt`` as (16-bit floats: their uint16 bits)."""
    return "uint16" if dt in HALF_FLOATS else dt


def output_init(m: MapNode, container: str, graph: Graph) -> OutputInit:
    """How the caller allocates ``container``, an output of ``m`` (see the module docstring)."""
    writes = [(node.output, scopes) for node, scopes in m.walk()
              if isinstance(node, Tasklet) and node.output.container == container]
    wcrs = {w.wcr for w, _ in writes}
    if wcrs - {None}:
        return OutputInit("full", Wcr.of(next(iter(wcrs - {None}))))
    if len(writes) == 1 and _covers(writes[0][0], writes[0][1], graph):
        return OutputInit("empty")
    return OutputInit("zeros")


def _covers(out: Memlet, scopes: tuple, graph: Graph) -> bool:
    """One plain write at distinct full-range params of its scopes (or 0 on a unit dimension) writes
    every element."""
    shape = graph.container(out.container).concrete_shape(graph.bindings)
    if out.subset is None or len(out.subset) != len(shape):
        return not shape
    ranges = {p: r for s in scopes for p, r in s.params}
    used = set()
    for ix, dim in zip(out.subset, shape):
        if dim == 1 and _is_const(ix, 0, graph):      # the one index of a unit dimension (LayerNorm's saved_mean)
            continue
        if not isinstance(ix, E.Var) or ix.name not in ranges or ix.name in used:
            return False
        r = ranges[ix.name]
        if r.step != 1 or r.start != E.Const(0, "int64") or not _is_const(r.stop, dim, graph):
            return False
        used.add(ix.name)
    return True


def _is_const(e: E.Expr, value: int, graph: Graph) -> bool:
    try:
        return int(E.evaluate(e, dict(graph.bindings))) == value
    except (KeyError, TypeError, ValueError):
        return False
