"""The data-centric IR of dcstudio.

Package map (data flow: ONNX file → ``onnx_load`` → ``ort_training`` → ``shape_infer``
→ ``onnx_import`` → ``Graph`` → ``lowering`` / ``movement`` / ``printer`` / ``serialize``):

- ``containers.py``  Container (name, shape, dtype, role) and Role
- ``dtypes.py``      dtype names, ONNX codes, sizes
- ``expr.py``        tasklet expression trees: evaluation, printers (NumPy, Python, CUDA), FLOP counts
- ``memlet.py``      Memlet and Range (subsets, volume, wcr)
- ``nodes.py``       AccessNode, OpNode (library node), MapNode (map scope), Tasklet
- ``graph.py``       Graph: containers, compute nodes, use-def, topological order, clone
- ``maps.py``        map memlet propagation (footprints, volumes, trip counts)
- ``lowering/``      progressive lowering: OpNode → one MapNode of tasklets
- ``movement.py``    Estimate, per-kernel bytes/accesses/FLOPs, compulsory lower bound
- ``fused_ops.py``   library nodes made by fusions: contractions with an epilogue, grouped contractions
- ``onnx_*.py``, ``ort_training.py``, ``shape_infer.py``  ONNX import
- ``constant_values.py``, ``shape_fold.py``  constant values of an ONNX graph; shape subgraphs folded at import
- ``claimed_ops.py`` the ops the importer claims
- ``ids.py``         deterministic ids from ONNX names
- ``serialize.py``   exact JSON round trip and graph hash
- ``pacing.py``      pause points in long loops on worker threads (the studio's GUI paints meanwhile)
- ``printer.py``     readable text form; ``verify.py`` structural checks; ``errors.py`` the error tree

Glossary (one word per concept): *container* (a tensor), *access node* (a read/write point of a
container), *library node* (an ``OpNode``: an ONNX op with an ``impl``), *map scope* (a parallel
``MapNode``), *tasklet* (a scalar expression), *memlet* (an edge carrying data), *graph* (one dataflow
state), *kernel* (a top-level library node or map: one launch), *transformation*, *application*, *history*.
"""
