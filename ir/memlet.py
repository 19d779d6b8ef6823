"""Memlets: the edges that carry data, with subsets, volume and write-conflict resolution.

A memlet names a ``container`` and a ``subset``: one entry per dimension, each
either a point index (an ``ir.expr`` tree over map parameters) or a ``Range``
[start, stop) with step. ``subset=None`` means the whole container. ``volume``
is the number of elements moved across the edge (``None``: the whole subset),
and ``wcr`` (a ``Wcr``: sum, max, min, prod) marks a reduction into the target.

``Wcr`` is the one definition of a reduction kind: its ``identity`` (the value an
accumulator starts from, per dtype) and its ``combine`` (the NumPy ufunc that merges two
partial results). Every executor and backend reads them from here; a ``Wcr`` is a
``str`` (``Wcr.SUM == "sum"``), so serialized graphs and histories keep the plain names.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Mapping, Union

import numpy as np

from ir import expr as E


class Wcr(StrEnum):
    """A write-conflict resolution: how a write combines with the value already there."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"

    def identity(self, dtype) -> int | float | bool:
        """The value an accumulator of ``dtype`` starts from (x combined with it is x):
        0 / 1 for sum / prod; for max / min the smallest / largest value of the type
        (±inf for floats, the integer limits, False / True for bool)."""
        if self is Wcr.SUM:
            return 0
        if self is Wcr.PROD:
            return 1
        dt = np.dtype(dtype)
        if dt.kind == "f":
            return float("-inf") if self is Wcr.MAX else float("inf")
        if dt.kind == "b":
            return self is Wcr.MIN
        info = np.iinfo(dt)
        return int(info.min) if self is Wcr.MAX else int(info.max)

    @property
    def combine(self) -> np.ufunc:
        """The ufunc merging two partial results (NaN-propagating max/min, as onnxruntime)."""
        return _COMBINE[self]

    @staticmethod
    def of(value: "str | Wcr | None") -> "Wcr | None":
        """``value`` as a ``Wcr`` (None stays None); ValueError naming the kinds otherwise."""
        if value is None or isinstance(value, Wcr):
            return value
        try:
            return Wcr(value)
        except ValueError:
            raise ValueError(f"unknown wcr {value!r}; the kinds are {', '.join(WCR_KINDS)}") from None


_COMBINE = {Wcr.SUM: np.add, Wcr.MAX: np.maximum, Wcr.MIN: np.minimum, Wcr.PROD: np.multiply}
WCR_KINDS = tuple(k.value for k in Wcr)


@dataclass(frozen=True, slots=True)
class Range:
    """Half-open index range ``start:stop:step`` (start/stop are expressions)."""

    start: E.Expr
    stop: E.Expr
    step: int = 1

    @staticmethod
    def of(start: int | str, stop: int | str, step: int = 1) -> "Range":
        conv = lambda x: E.Var(x) if isinstance(x, str) else E.Const(int(x), "int64")  # noqa: E731
        return Range(conv(start), conv(stop), step)

    def to_text(self) -> str:
        text = f"{E.to_text(self.start)}:{E.to_text(self.stop)}"
        return text + (f":{self.step}" if self.step != 1 else "")

    def to_json(self) -> list:
        return [E.to_json(self.start), E.to_json(self.stop), self.step]

    @staticmethod
    def from_json(d: list) -> "Range":
        return Range(E.from_json(d[0]), E.from_json(d[1]), int(d[2]))


Index = Union[E.Expr, Range]


def index_to_text(ix: Index) -> str:
    return ix.to_text() if isinstance(ix, Range) else E.to_text(ix)


def index_to_json(ix: Index) -> dict:
    return {"range": ix.to_json()} if isinstance(ix, Range) else {"at": E.to_json(ix)}


def index_from_json(d: Mapping) -> Index:
    if "range" in d:
        return Range.from_json(d["range"])
    return E.from_json(d["at"])


@dataclass(frozen=True, slots=True)
class Memlet:
    """Data movement of (part of) one container."""

    container: str
    subset: tuple[Index, ...] | None = None
    volume: int | None = None
    wcr: Wcr | str | None = None     # a Wcr; a plain name compares and hashes equal to it

    def with_container(self, name: str) -> "Memlet":
        return replace(self, container=name)

    def to_text(self) -> str:
        sub = "" if self.subset is None else "[" + ", ".join(index_to_text(i) for i in self.subset) + "]"
        extra = f" (wcr={self.wcr})" if self.wcr else ""
        vol = f" vol={self.volume}" if self.volume is not None else ""
        return f"{self.container}{sub}{vol}{extra}"

    def to_json(self) -> dict:
        d: dict = {"container": self.container}
        if self.subset is not None:
            d["subset"] = [index_to_json(i) for i in self.subset]
        if self.volume is not None:
            d["volume"] = self.volume
        if self.wcr is not None:
            d["wcr"] = str(self.wcr)
        return d

    @staticmethod
    def from_json(d: Mapping) -> "Memlet":
        subset = d.get("subset")
        try:
            wcr = Wcr.of(d.get("wcr"))
        except ValueError as e:
            raise ValueError(f"{e} (memlet of {d.get('container')!r})") from None
        return Memlet(str(d["container"]),
                      None if subset is None else tuple(index_from_json(i) for i in subset),
                      d.get("volume"), wcr)


def full(container: str) -> Memlet:
    """A memlet of a whole container."""
    return Memlet(container)
