"""The semantic tables live once, in ``ir``; this test fails when one is spelled out again.

A table is *spelled out* by a literal collection (tuple, list, set, frozenset, dict keys or values) of
string constants that are all members of the table, with at least ``least`` of them; a comparison of a
``.kind`` attribute with a bare statement-kind string counts too. A collection that mixes other strings in
(a list of cheap ops that includes the view ops) is another table and passes. Domains (``""``,
``"com.microsoft"``) inside (domain, op) pairs are looked through."""
from __future__ import annotations

import ast
from pathlib import Path

from ir import dtypes, fused_ops, memory
from ir.statements import StatementKind

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ir", "transforms", "codegen", "studio")
DOMAINS = {"", "com.microsoft", "ai.dcstudio"}
SELF_CONTAINED = {   # files copied into every exported package (``codegen.export.package``): they import nothing of ir
    "codegen/program/runtime.py", "codegen/export/package_cli.py", "codegen/numba_cpu/library.py",
    "codegen/numba_cpu/convolution.py", "codegen/numba_cpu/pooling.py", "codegen/numba_cpu/cores.py",
    "codegen/cupy_cuda/library.py", "codegen/cupy_cuda/convolution.py", "codegen/cupy_cuda/device_ops.py",
}

TABLES = {   # name: (members, least, the file that owns it)
    "VIEW_OPS": (memory.VIEW_OPS, 3, "ir/memory.py"),
    "CONTRACTIONS": ({op for _, op in fused_ops.CONTRACTIONS}, 3, "ir/fused_ops.py"),
    "NUMERIC_TYPES": (set(dtypes.NUMERIC_TYPES), 5, "ir/dtypes.py"),
    "FLOAT_TYPES": (dtypes.FLOAT_TYPES, 3, "ir/dtypes.py"),
    "WIDE_TYPES": (set(dtypes.WIDE_TYPES), 4, "ir/dtypes.py"),
    "NUMPY_NAMES": (set(dtypes.NUMPY_NAMES.values()), 2, "ir/dtypes.py"),
    "StatementKind": ({k.value for k in StatementKind}, 2, "ir/statements.py"),
}


def _strings(node: ast.AST) -> list[str] | None:
    """The string constants of a literal collection (looking into (domain, op) pairs), None if it holds
    anything else."""
    out = []
    for elt in node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else ():
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            out.append(elt.value)
        elif isinstance(elt, ast.Tuple) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                for e in elt.elts):
            out += [e.value for e in elt.elts if e.value not in DOMAINS]
        else:
            return None
    return out


def _collections(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            yield node.lineno, _strings(node)
        elif isinstance(node, ast.Dict):
            for part in (node.keys, node.values):
                if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in part):
                    yield node.lineno, [e.value for e in part]


def _kind_comparisons(tree: ast.AST):
    kinds = TABLES["StatementKind"][0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
            for right in node.comparators:
                if isinstance(right, ast.Constant) and right.value in kinds:
                    yield node.lineno, right.value


def spelled_out(rel: str, source: str) -> list[str]:
    """Where ``source`` (the file ``rel``) spells out a table another file owns."""
    tree = ast.parse(source)
    found = []
    for line, strings in _collections(tree):
        for name, (members, least, owner) in TABLES.items():
            if rel != owner and strings and len(set(strings)) >= least and set(strings) <= members:
                found.append(f"{rel}:{line}: {name} spelled out ({sorted(set(strings))})")
    if rel != TABLES["StatementKind"][2]:
        found += [f"{rel}:{line}: a bare statement kind {kind!r} (use ir.statements.StatementKind)"
                  for line, kind in _kind_comparisons(tree)]
    return found


def test_no_table_is_spelled_out_twice():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in SELF_CONTAINED:
                continue
            found += spelled_out(rel, path.read_text(encoding="utf-8"))
    assert not found, "tables spelled out again (import them from ir):\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_copy():
    """It can fail: a retyped VIEW_OPS, contraction pairs, dtype names, and a bare kind comparison."""
    cases = {
        'VIEW = ("Reshape", "Squeeze", "Unsqueeze")': "VIEW_OPS",
        'OPS = (("", "MatMul"), ("", "Gemm"), ("com.microsoft", "FusedMatMul"))': "CONTRACTIONS",
        'NP = {"float32": "np.float32", "int64": "np.int64"}': "NUMPY_NAMES",
        'FLOATS = frozenset({"float16", "float32", "float64"})': "FLOAT_TYPES",
        'x = st.kind == "view"': "bare statement kind",
    }
    for source, name in cases.items():
        found = spelled_out("codegen/x.py", source)
        assert found and name in found[0], (source, found)
    assert not spelled_out("codegen/x.py", 'CHEAP = ("Reshape", "Squeeze", "Unsqueeze", "Concat")')
    assert not spelled_out("ir/memory.py", 'VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze"})')
