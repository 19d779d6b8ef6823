"""Execution and code generation.

- ``numpy_ref/``  the NumPy reference executor: ``executor.run`` (kernels in topological order),
  ``maps.run_map`` (vectorized map semantics), ``registry.NUMPY_KERNELS`` filled by the op-family
  files (``elementwise``, ``reduce``, ``linalg``, ``nn``, ``shape``, ``loss``, ``training``, ``optimizer``).
Later: ``numba_cpu/`` and ``cupy_cuda/`` backends, module export and timing.
"""
