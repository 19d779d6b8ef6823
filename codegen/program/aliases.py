"""Containers that may share memory (views with their data, reference and extern outputs with their inputs),
as union-find groups: what buffer planning, shared buffers and the schedule all follow."""
from __future__ import annotations

from typing import Iterable

from ir.statements import StatementKind

ALIASING_KINDS = frozenset({StatementKind.VIEW, StatementKind.REFERENCE, StatementKind.EXTERN})


class Groups:
    """Union-find over container names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def alias_groups(statements: Iterable) -> Groups:
    """Containers that may share memory: a view with its data input (not its shape operand:
    reshapes sharing one shape tensor stay apart), a reference or extern node's outputs
    with all its inputs. ``statements``: the program's (``program.Statement``)."""
    groups = Groups()
    for st in statements:
        if st.kind in ALIASING_KINDS:
            sources = st.reads[:1] if st.kind == StatementKind.VIEW else st.reads
            for out in st.writes:
                for src in sources:
                    groups.union(out, src)
    return groups
