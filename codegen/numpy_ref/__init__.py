"""The NumPy reference executor (the living specification of the IR).

``executor.run(graph, feeds)`` runs ``OpNode``s through ``registry.NUMPY_KERNELS`` (one function per
(domain, op_type), filled by the family modules imported in ``kernels.py``) and ``MapNode``s through
``maps.run_map``. Float reductions (Reduce*, normalization statistics and their gradients, Conv
and ConvGrad, wcr sums in maps) accumulate in float64 and round once to the container's dtype.
``widen.widened(graph)`` is the float64 copy ``codegen.oracle`` runs for its truth.
"""
