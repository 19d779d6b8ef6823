"""The CPU backend: every map becomes a fused numba loop nest; library ops call BLAS/NumPy.

The program around the kernels is backend-neutral (``codegen.program``); this package renders
maps and runs the program on the CPU:

- ``backend.py``     ``CPU`` (the ``Backend`` record) and ``program(graph)``: ``build_program`` with loop nests
- ``render.py``      a top-level map → one canonical ``@njit`` kernel (``KernelSource``), named by its hash
- ``loopnest.py``    the loop nest's state and statements (locals, tasklets, wcr stores, hoisting)
- ``schedules.py``   loop orders that follow memory (default, tiled transposes, columns, rows)
- ``rowcache.py``    a row buffer for the value every sweep of a row recomputes (fused norms)
- ``exprs.py``       tasklet expressions as typed numba scalar code (float32 stays float32)
- ``fastmath.py``    vectorizable float32 exp/tanh/erf/GELU with tested error bounds
- ``halfbits.py``    float16/bfloat16 stored as uint16 bits, widened on load
- ``kernel_cache.py`` kernel modules, the content-addressed on-disk cache, parallel precompile
- ``library.py``     NumPy-only runtime (``L``): BLAS contractions, buffers, the reference fallback
- ``runner.py``      ``CompiledGraph``/``run``: compile and run a graph in this process
- ``threads.py``     numba and BLAS thread counts (threadpoolctl), the default from the affinity mask
- ``microbench.py``  the triad kernel the timing calibration uses

numba is imported only inside functions (and by the generated kernel modules), so
importing this package does not import numba.
"""
