"""The backend-neutral program: what every backend runs, and the one contract a backend meets.

Data flow: ``Graph`` → ``prepare.lower_for_codegen`` (expand what can be) → ``program.build_program``
(one ``Statement`` per kernel, maps rendered by the backend) → ``module.module_text`` (Python text,
the same for every backend: arrays only through ``L``, kernels as ``K.<name>(…)``) → a backend's
runner (in process) or ``codegen.export.package`` (a standalone package).

- ``backend.py``       ``Backend``: ``renderer(parallel) -> render(map, graph) -> KernelSource``, the
                       kernel module texts and the library a package carries
- ``kernel.py``        ``KernelSource``, ``OutputInit``, ``UnsupportedMap`` and the map analysis every
                       renderer shares (loop safety, first wcr, output initialization, storage dtypes)
- ``walk.py``         ``KernelWalk``: the state of a kernel being printed, every renderer's base
- ``expr_print.py``   ``ExprPrinter``: one walk of a tasklet expression, a backend gives templates
- ``program.py``       ``Program``/``Statement``/``build_program``: kernels, BLAS, views, constants,
                       reference and extern statements in topological order
- ``contractions.py``  BLAS calls, GEMMs with epilogue kernels, grouped GEMMs
- ``buffers.py``       static plan of reused intermediate buffers
- ``shared_buffers.py`` which of ``memory_reuse``'s recorded buffers (in place too) a program honours
- ``module.py``        a ``Program`` as module text: ``_step``, ``_forward``, ``Model``; a package's
                       eval program (``predict.py``)
- ``runtime.py``       ``Model``: the training object every module binds (defaults, step count,
                       dropout masks, state, checkpoints, ONNX out); copied into packages
- ``training.py``      ``TRAINING``: learning rate, step and mask inputs, zero optimizer state
- ``namespace.py``     identifiers, literals and comments no model name can escape
- ``prepare.py``       expand every expandable op before code generation

Nothing here imports a backend (``numba_cpu``, ``cupy_cuda``), ``export`` or ``timing``
(``tests/unit/test_layers.py``). Reduction kinds are ``ir.memlet.Wcr``.
"""
