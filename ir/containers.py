"""Containers: the named, typed, shaped tensors a graph reads and writes.

A container's ``role`` says what it is in a training step. Non-transient
containers live in global memory; a transient lives in global memory until a
fused kernel makes it local (then it costs no global traffic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Mapping

from ir import dtypes

Dim = int | str
Shape = tuple[Dim, ...]


class Role(Enum):
    """What a container is in a training step (see DESIGN §2)."""

    INPUT = "input"                      # data, labels, learning rate, step
    PARAMETER = "parameter"              # trainable weights (and their updated values)
    GRADIENT = "gradient"                # d loss / d parameter, when it is a graph output
    OPTIMIZER_STATE = "optimizer_state"  # moments, momentum buffers (old and new)
    STATISTIC = "statistic"              # BatchNorm running mean/variance (old and new): updated, not trained
    OUTPUT = "output"                    # loss and any other graph output
    CONSTANT = "constant"                # read-only initializers that are not trained
    TRANSIENT = "transient"              # intermediate values

    @property
    def is_global(self) -> bool:
        """Interface containers always live in global memory."""
        return self is not Role.TRANSIENT


@dataclass(frozen=True, slots=True)
class Container:
    """A tensor: ``name``, ``shape`` (ints or symbol names), ``dtype`` name and ``role``."""

    name: str
    shape: Shape
    dtype: str
    role: Role = Role.TRANSIENT

    @property
    def is_transient(self) -> bool:
        return self.role is Role.TRANSIENT

    @property
    def symbols(self) -> tuple[str, ...]:
        """Symbolic dimension names in this container's shape."""
        return tuple(d for d in self.shape if isinstance(d, str))

    def concrete_shape(self, bindings: Mapping[str, int] | None = None) -> tuple[int, ...]:
        """The shape with symbols replaced by ``bindings``; KeyError names a missing symbol."""
        out = []
        for d in self.shape:
            if isinstance(d, str):
                if not bindings or d not in bindings:
                    raise KeyError(d)
                out.append(int(bindings[d]))
            else:
                out.append(int(d))
        return tuple(out)

    def numel(self, bindings: Mapping[str, int] | None = None) -> int:
        return math.prod(self.concrete_shape(bindings))

    def nbytes(self, bindings: Mapping[str, int] | None = None) -> int:
        return self.numel(bindings) * dtypes.itemsize(self.dtype)

    def with_role(self, role: Role) -> "Container":
        return replace(self, role=role)

    def with_shape(self, shape: Shape) -> "Container":
        return replace(self, shape=tuple(shape))

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "role": self.role.value}

    @staticmethod
    def from_json(d: Mapping) -> "Container":
        return Container(d["name"], tuple(d["shape"]), d["dtype"], Role(d["role"]))
