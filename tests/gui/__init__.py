"""GUI tests (pytest-qt, offscreen): the studio window, its docks, layout, and the Qt-free parts of studio/gui."""
