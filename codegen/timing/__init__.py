"""Honest measurement: kernel timings out of process, calibrated peaks, roofline, traces.

Package map (data flow: ``Graph`` → ``profiler.profile_graph`` → worker process
(``worker``: compile with the ``instrument``ed step, warm up, time) → ``Profile`` of
``stats.KernelTiming`` → table / JSON / ``trace`` (Chrome trace for Perfetto)):

- ``stats.py``      Samples (median, min, max, CV) and KernelTiming (GB/s, % peak, roofline)
- ``calibrate.py``  this machine's triad bandwidth and GEMM FLOP/s, cached by fingerprint
- ``instrument.py`` the timed, guarded, skippable step the worker runs
- ``worker.py``     ``python -m codegen.timing.worker JOB``: one profiling process
- ``profiler.py``   the parent: timeouts, crash recovery, paired A/B ratios
- ``trace.py``      Chrome trace JSON
"""
