"""``NodeTable`` keeps the order a plain list would, under random appends, insertions, renames, moves and
deletions, including the renumbering when insertions at one spot exhaust the floats between two labels."""
from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings, strategies as st

from ir.node_table import NodeTable

OPS = st.lists(st.tuples(st.sampled_from(["append", "insert", "rename", "move", "delete", "set"]),
                         st.integers(0, 10**6), st.integers(0, 10**6)), max_size=120)


def _check(table: NodeTable, ref: list[str], nodes: dict[str, int]) -> None:
    assert list(table) == ref and list(table.keys()) == ref
    assert table.values() == [nodes[k] for k in ref] and table.items() == [(k, nodes[k]) for k in ref]
    assert len(table) == len(ref) and all(table[k] == nodes[k] and k in table for k in ref)
    labels = [table.label(k) for k in ref]
    assert labels == sorted(labels) and len(set(labels)) == len(labels)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPS)
def test_every_change_keeps_the_order_of_a_list(ops):
    table, ref, nodes, fresh = NodeTable(), [], {}, iter(range(10**7))
    for op, a, b in ops:
        if op == "append" or not ref:
            key = f"n{next(fresh)}"
            table[key] = nodes[key] = a
            ref.append(key)
        elif op == "insert":
            key, before = f"n{next(fresh)}", ref[a % len(ref)]
            table.insert(key, a, before)
            nodes[key] = a
            ref.insert(ref.index(before), key)
        elif op == "rename":
            old, key = ref[a % len(ref)], f"n{next(fresh)}"
            table.rename(old, key, b)
            ref[ref.index(old)], nodes[key] = key, b
        elif op == "move" and len(ref) > 1:
            key, before = ref[a % len(ref)], ref[b % len(ref)]
            if key != before:
                table.move_before(key, before)
                ref.remove(key)
                ref.insert(ref.index(before), key)
        elif op == "delete":
            key = ref.pop(a % len(ref))
            assert table.pop(key) == nodes[key]
        elif op == "set":
            key = ref[a % len(ref)]
            table[key] = nodes[key] = b                  # an existing id keeps its place
        _check(table, ref, nodes)
    for other in (table.copy(), copy.deepcopy(table), pickle.loads(pickle.dumps(table))):
        _check(other, ref, nodes)


def test_insertions_at_one_spot_renumber_and_keep_the_order():
    table = NodeTable([("a", 0), ("z", 1)])
    ref = ["a", "z"]
    for k in range(200):                                 # each one halves the gap in front of "z"
        table.insert(f"m{k}", k, "z")
        ref.insert(len(ref) - 1, f"m{k}")
    assert list(table) == ref
    assert [table.label(k) for k in ref] == sorted(table.label(k) for k in ref)


def test_changes_name_what_is_wrong():
    table = NodeTable([("a", 0)])
    with pytest.raises(KeyError, match="already"):
        table.insert("a", 1, "a")
    with pytest.raises(KeyError, match="already"):
        table.rename("a", "a", 1)
    with pytest.raises(KeyError):
        table.pop("missing")
    assert table.pop("missing", None) is None
