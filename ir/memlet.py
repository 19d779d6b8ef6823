"""Memlets: the edges that carry data, with subsets, volume and write-conflict resolution.

A memlet names a ``container`` and a ``subset``: one entry per dimension, each
either a point index (an ``ir.expr`` tree over map parameters) or a ``Range``
[start, stop) with step. ``subset=None`` means the whole container. ``volume``
is the number of elements moved across the edge (``None``: the whole subset),
and ``wcr`` ('sum', 'max', 'min', 'prod') marks a reduction into the target.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Union

from ir import expr as E

WCR_KINDS = ("sum", "max", "min", "prod")


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
    wcr: str | None = None

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
            d["wcr"] = self.wcr
        return d

    @staticmethod
    def from_json(d: Mapping) -> "Memlet":
        subset = d.get("subset")
        wcr = d.get("wcr")
        if wcr is not None and wcr not in WCR_KINDS:
            raise ValueError(f"unknown wcr {wcr!r} on memlet of {d.get('container')!r}")
        return Memlet(str(d["container"]),
                      None if subset is None else tuple(index_from_json(i) for i in subset),
                      d.get("volume"), wcr)


def full(container: str) -> Memlet:
    """A memlet of a whole container."""
    return Memlet(container)
