"""Benchmarks: never collected by a plain ``pytest``; run on demand with ``bash .ci/test tests/bench``."""
