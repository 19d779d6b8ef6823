"""Execution and code generation.

- ``numpy_ref/``  the NumPy reference executor: ``executor.run`` (kernels in topological order),
  ``maps.run_map`` (vectorized map semantics), ``registry.NUMPY_KERNELS`` filled by the op-family
  files (``elementwise``, ``reduce``, ``linalg``, ``nn``, ``shape``, ``loss``, ``training``, ``optimizer``).
- ``oracle.py``   the one oracle of every check: the ORIGINAL model's float64 truth (reference executor
  on the widened graph, ``numpy_ref/widen.py``), an fp32 baseline (``oracle_baseline.py``: onnxruntime,
  else the reference executor) and per-output tolerances K × max(err(baseline), u); ``Oracle.check``
- ``program/``    backend-neutral: the program (one statement per kernel), its buffers, contractions,
  namespace and module text, and the ``Backend`` contract (``render(map, graph) -> KernelSource``)
- ``numba_cpu/``  the CPU backend: every map becomes a numba loop nest (vectorizable exp/tanh/erf with
  tested error bounds), library ops call NumPy/BLAS into planned buffers
- ``cupy_cuda/``  the CUDA backend: CUDA C from the same ``ir/expr`` trees, launched through CuPy,
  NVRTC compile checks (sm_80, sm_90; fp32 and bf16/fp16 storage) that need no GPU
- ``export/``     standalone packages (``dcstudio export``): readable ``model.py``, kernels, weights, ``--check``
- ``timing/``     calibrated peaks, out-of-process kernel timing with timeouts, roofline, Chrome traces
"""
