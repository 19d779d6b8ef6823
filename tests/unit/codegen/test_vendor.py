"""``codegen.export.vendor``: the reference kernels a package carries import nothing of dcstudio; a shared IR
module (Resize's interpolation matrices) is copied beside them and imported as a sibling."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from codegen.export.vendor import ALLOWED, SHARED, write_reference


def test_copied_kernels_import_only_numpy_the_standard_library_and_each_other(tmp_path):
    stems = write_reference(tmp_path / "_ref")
    assert {"resize", *SHARED} <= set(stems)
    for path in (tmp_path / "_ref").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in ALLOWED, f"{path.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in ALLOWED for a in node.names), path.name
    assert "from .interpolation import" in (tmp_path / "_ref" / "resize.py").read_text()


def test_the_copied_resize_kernel_runs_without_dcstudio(tmp_path):
    write_reference(tmp_path / "_ref")
    script = textwrap.dedent(f"""
        import sys
        for name in ("ir", "codegen", "transforms", "studio"):
            sys.modules[name] = None                  # importing any of them now fails
        sys.path.insert(0, {str(tmp_path)!r})
        import numpy as np
        from _ref import kernels
        from _ref.registry import OpContext, lookup
        x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
        y = lookup("", "Resize")([x, None, np.array([1, 1, 2, 2], np.float32)],
                                 {{"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                   "nearest_mode": "floor"}}, OpContext())[0]
        print(y[0, 0].tolist())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([[0.0, 0.0, 1.0, 1.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
                                      [3.0, 3.0, 4.0, 4.0, 5.0, 5.0], [3.0, 3.0, 4.0, 4.0, 5.0, 5.0]])
