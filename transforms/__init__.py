"""Transformations over the dcstudio IR: registry, matching, history and replay, one transformation per file, autodiff/."""
