"""``Emitter``: builds the new ONNX nodes of a training graph, with names, constants and shapes.

Rules, losses and optimizers call ``em.op("Mul", a, b)`` and get the output name back.
The emitter knows the static type of every forward value (``em.shape(x)``,
``em.elem(x)``), folds small constant inputs (``em.const_value(x)``), and owns one
namespace: every new node and value is named ``<scope>/<OpType>`` (``_1``, ``_2``…
when taken), so a forward name is never reused or changed. Constants become
initializers; small ones are shared. Helpers cover what most rules need: summing a
broadcast gradient back to an input's shape (``sum_to``), reductions with constant
axes, reshapes and zeros of a given shape.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from ir.errors import GraphError, ShapeError

ValueType = tuple[int, "tuple[int, ...] | None"]   # (ONNX element type, static shape or None)
FLOAT_ELEMS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16})


class Emitter:
    """Accumulates nodes and initializers; see the module docstring."""

    def __init__(self, opset: int, types: dict[str, ValueType], taken: Iterable[str],
                 const_lookup: Callable[[str], "np.ndarray | None"] | None = None) -> None:
        self.opset = opset
        self.types = types
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.scope = "grad"
        self._taken: set[str] = set(taken)
        self._counts: dict[str, int] = {}
        self._shared: dict[tuple, str] = {}
        self.const_lookup = const_lookup

    # ---- names and nodes -------------------------------------------------
    def fresh(self, base: str) -> str:
        """A name starting with ``base`` that no value or node uses yet."""
        k = self._counts.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._counts[base] = k + 1
        self._taken.add(name)
        return name

    def claim(self, name: str) -> str:
        """Reserve an exact name (graph outputs such as ``loss``); it must be free."""
        if name in self._taken:
            raise GraphError(f"the name '{name}' is already used in the forward model",
                             hint="Rename that value in the forward model: the training graph reserves it")
        self._taken.add(name)
        return name

    def op(self, op_type: str, *inputs: str | None, n_out: int = 1, outputs: Sequence[str] | None = None,
           **attrs: Any) -> Any:
        """Append one node; return its output name (a list of names when ``n_out > 1``)."""
        node_name = self.fresh(f"{self.scope}/{op_type}")
        if outputs is None:
            outputs = [node_name] if n_out == 1 else [self.fresh(f"{node_name}:{k}") for k in range(n_out)]
        ins = ["" if i is None else i for i in inputs]
        while ins and ins[-1] == "":
            ins.pop()
        self.nodes.append(helper.make_node(op_type, ins, list(outputs), name=node_name,
                                           **{k: v for k, v in attrs.items() if v is not None}))
        return outputs[0] if len(outputs) == 1 and n_out == 1 else list(outputs)

    # ---- types -----------------------------------------------------------
    def elem(self, name: str) -> int:
        t = self.types.get(name)
        if t is None:
            raise ShapeError(f"the type of value '{name}' is unknown", hint="Run shape inference or "
                             "re-export the model with shapes")
        return t[0]

    def shape(self, name: str) -> tuple[int, ...]:
        """The static shape of a forward value; a symbolic or unknown shape is an error."""
        t = self.types.get(name)
        if t is None or t[1] is None:
            raise ShapeError(f"value '{name}' has no static shape; training-graph generation needs "
                             "static shapes", hint="Export the model with fixed input sizes")
        return t[1]

    def rank(self, name: str) -> int:
        return len(self.shape(name))

    def np_dtype(self, name: str) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem(name)))

    def is_float(self, name: str) -> bool:
        t = self.types.get(name)
        return t is not None and t[0] in FLOAT_ELEMS

    def const_value(self, name: str | None) -> np.ndarray | None:
        """The value of a constant forward input (folded when small), else None."""
        if not name or self.const_lookup is None:
            return None
        return self.const_lookup(name)

    # ---- constants -------------------------------------------------------
    def const(self, value: Any, hint: str = "const") -> str:
        """An initializer holding ``value``; small values are shared by content."""
        arr = np.asarray(value)
        key = None
        if arr.size <= 64:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._shared:
                return self._shared[key]
        name = self.fresh(f"{self.scope}/{hint}" if "/" not in hint else hint)
        self.initializers.append(numpy_helper.from_array(np.array(arr, order="C"), name))
        if key is not None:
            self._shared[key] = name
        return name

    def ints(self, values: Iterable[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), "ints")

    def scalar(self, value: float, like: str) -> str:
        """A rank-0 constant of the element type of ``like``."""
        return self.const(np.asarray(value, dtype=self.np_dtype(like)), "scalar")

    def zeros(self, shape: Sequence[int], like: str) -> str:
        """Zeros of ``shape`` in the dtype of ``like`` (ConstantOfShape: nothing large is stored)."""
        fill = numpy_helper.from_array(np.zeros((1,), dtype=self.np_dtype(like)))
        return self.op("ConstantOfShape", self.ints(shape), value=fill)

    # ---- shape helpers ---------------------------------------------------
    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", x, self.ints(shape))

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        if list(perm) == list(range(len(perm))):
            return x
        return self.op("Transpose", x, perm=[int(p) for p in perm])

    def reduce_sum(self, x: str, axes: Sequence[int], keepdims: bool = True) -> str:
        if not axes:
            return x
        return self.op("ReduceSum", x, self.ints(sorted(axes)), keepdims=int(keepdims))

    def sum_to(self, g: str, src: Sequence[int], dst: Sequence[int]) -> str:
        """Sum a gradient of shape ``src`` back to the (broadcastable) shape ``dst``."""
        src, dst = tuple(src), tuple(dst)
        if src == dst:
            return g
        lead = len(src) - len(dst)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(dst) if d == 1 and src[lead + i] != 1]
        g = self.reduce_sum(g, axes, keepdims=True)
        kept = tuple(1 if i in axes else d for i, d in enumerate(src))
        return g if kept == dst else self.reshape(g, dst)

    def cast(self, x: str, to: int, src: int | None = None) -> str:
        return x if src == to else self.op("Cast", x, to=int(to))

    # ---- arithmetic shortcuts -------------------------------------------
    def add(self, a: str, b: str) -> str:
        return self.op("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.op("Sub", a, b)

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", a, b)

    def div(self, a: str, b: str) -> str:
        return self.op("Div", a, b)

    def neg(self, a: str) -> str:
        return self.op("Neg", a)
