"""The ops the importer claims, per domain ('' is the default ONNX domain).

An op is claimed only when the reference executor implements it and the ONNX
backend node test cases made only of claimed ops pass at >= 95 %
(tests/peer/test_node_suite.py). ``EXCLUDED_CASES`` lists every in-scope node
test case that is not run or does not pass, with its reason.
"""
from __future__ import annotations

CLAIMED_OPS: dict[str, frozenset[str]] = {
    "": frozenset(),
    "com.microsoft": frozenset(),
    "ai.dcstudio": frozenset({"AdamW", "SGD", "Lion"}),
}

EXCLUDED_CASES: dict[str, str] = {}


def is_claimed(domain: str, op_type: str) -> bool:
    dom = "" if domain in ("", "ai.onnx") else domain
    return op_type in CLAIMED_OPS.get(dom, frozenset())
