"""Exporting a graph as a standalone Python package.

Package map (data flow: ``Graph`` → ``codegen.program`` (program, module text) →
``package.export_package`` writes DIR → ``python -m DIR --check``):

- ``package.py``    ``export_package``: model.py, kernels/, _lib.py, _ref/, weights.npz, check.npz,
                    predict.py and forward.onnx (a generated step's eval forward), ``__main__`` (``--check``,
                    ``--time``, ``train``, ``export-onnx``), comparison scales for checks; the
                    backend picked by name (``backend_named``: ``codegen.numba_cpu.backend.CPU``,
                    ``codegen.cupy_cuda.backend.CUDA``)
- ``vendor.py``     which NumPy reference kernel files a package may carry (``_ref/``)
- ``package_cli.py``  the package's command line, copied in as ``_cli.py`` (NumPy only)
"""
