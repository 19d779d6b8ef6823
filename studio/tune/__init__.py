"""``dcstudio tune``: the search (``search``), where evaluations run (``evaluate``, ``evaluators``), the
results database, kernel cutouts, GPU timing and headroom; their data classes live in ``types``."""
