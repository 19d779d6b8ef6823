"""The CPU backend: every map becomes a fused numba loop nest; library ops call BLAS/NumPy.

Package map (data flow: ``Graph`` → ``export.prepare`` (expand what can be) → ``program``
(one statement per kernel) → ``module`` (Python text) → ``runner`` (import, run) or
``codegen.export.package`` (a standalone package)):

- ``loopnest.py``    a top-level map → one canonical ``@njit`` loop nest (``KernelSource``)
- ``schedules.py``   loop orders that follow memory (default, tiled transposes, columns, rows)
- ``rowcache.py``    a row buffer for the value every sweep of a row recomputes (fused norms)
- ``exprs.py``       tasklet expressions as typed numba scalar code (float32 stays float32)
- ``fastmath.py``    vectorizable float32 exp/tanh/erf/GELU with tested error bounds
- ``kernel_cache.py`` kernel modules, the content-addressed on-disk cache, parallel precompile
- ``program.py``     kernels in topological order as ``Statement``s (kernel, BLAS, view, reference)
- ``contractions.py`` BLAS calls, GEMMs with epilogue kernels, grouped GEMMs
- ``buffers.py``     static plan of reused intermediate buffers (no page faults after step 1)
- ``shared_buffers.py`` which of ``memory_reuse``'s recorded buffers (in place too) a program honours
- ``module.py``      a ``Program`` as module text: ``_step``, ``_forward``, ``Model``
- ``library.py``     NumPy-only runtime: BLAS contractions, buffers, the reference fallback
- ``runner.py``      ``CompiledGraph``/``run``: compile and run a graph in this process
- ``threads.py``     pin and report numba and BLAS thread counts
- ``microbench.py``  the triad kernel the timing calibration uses

numba is imported only inside functions (and by the generated kernel modules), so
importing this package does not import numba.
"""
