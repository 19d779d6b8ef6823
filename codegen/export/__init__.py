"""Exporting a graph as a standalone Python package, and the safe generated-code helpers.

Package map (data flow: ``Graph`` → ``prepare.lower_for_codegen`` → backend program →
``package.export_package`` writes DIR → ``python -m DIR --check``):

- ``namespace.py``  identifiers, literals and comments that no model name can escape
- ``prepare.py``    expand every expandable op before code generation
- ``package.py``    ``export_package``: model.py, kernels/, _lib.py, _ref/, weights.npz, check.npz,
                    ``__main__`` (``--check``, ``--time``); the ``Backend`` record (CPU here,
                    CUDA in ``codegen.cupy_cuda.backend``); comparison scales for checks
- ``vendor.py``     which NumPy reference kernel files a package may carry (``_ref/``)
"""
