"""The CUDA backend: maps as CUDA C kernels launched through CuPy, library ops on cuBLAS.

Package map (data flow: map → ``cuda_source`` (CUDA C from the ``ir.expr`` trees) →
``nvrtc`` compile check (no GPU needed) / ``export`` (a package whose kernels compile
with ``cupy.RawKernel`` at run time) → ``profile`` (CUDA-event timings on a device)):

- ``cuda_source.py`` a top-level map → one ``extern "C" __global__`` kernel (fp32, or the
                     bf16/fp16 storage variant computing in fp32); one thread per point, or
                     the block kernel of ``reductions``
- ``reduction_pattern.py`` which maps are row/column reductions and their launch shape (pure Python)
- ``reductions.py``  a row or column reduction → a block kernel (warp shuffles, shared memory)
- ``launch.py``      the launch record of a kernel (``CudaKernel``) and the grid formula
- ``nvrtc.py``       compile-check kernels with NVRTC for sm_80/sm_90 via CuPy's bindings
- ``library.py``     CuPy runtime (cuBLAS contractions, device buffers, host fallback);
                     copied into exported packages as ``_lib.py``
- ``export.py``      ``export_package`` with the CUDA backend (kernel launchers)
- ``profile.py``     ``cupyx.profiler.benchmark`` timings as ``codegen.timing`` Samples
- ``ab.py``          a child process timing two exported CUDA packages alternately (each checked
                     on the device first) and the device's copy/GEMM peaks (``tune --backend cuda``)

cupy is imported only inside functions here (``library.py`` is imported only by
generated packages), so importing this package does not import cupy.
"""
