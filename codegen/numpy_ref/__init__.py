"""The NumPy reference executor (the living specification of the IR).

``executor.run(graph, feeds)`` runs ``OpNode``s through ``registry.NUMPY_KERNELS`` (one function per
(domain, op_type), filled by the family modules imported in ``kernels.py``) and ``MapNode``s through
``maps.run_map``.
"""
