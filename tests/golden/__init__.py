"""Golden tests: text snapshots of printed IR and exported modules (``--update-golden`` rewrites them)."""
