"""Training-graph generation: ONNX autodiff, losses and optimizers, exported as standard ONNX.

Data flow: ``forward.onnx`` -> ``forward.prepare_forward`` -> ``losses`` (seed gradients)
-> ``backward.backward`` (one rule per op from ``GRADIENTS``) -> ``optimizers.build_update``
-> ``training_graph`` assembles one ``ModelProto``.

- ``options.py``: ``TrainingOptions`` (frozen, JSON round trip), ``OptionError``
- ``training_graph.py``: ``build_training_graph``, ``write_training_graph`` (atomic)
- ``forward.py``: opset upgrade, explicit masks/indices/statistics, BatchNorm mode, static types
- ``constants.py``: ``ConstantValues``, constant inputs folded on demand
- ``emitter.py``: ``Emitter``, the node/constant/name builder every rule uses
- ``registry.py``: ``GRADIENTS``, ``@gradient``, ``GradRequest``, ``NoGradientError``
- ``rules/``: the gradient rules, one file per op family
- ``backward.py``: the reverse sweep
- ``losses.py``: cross-entropy, MSE, weighted sum (tests)
- ``optimizers.py``: SGD (momentum), AdamW, Lion
"""
from transforms.autodiff.options import OptionError, TrainingOptions
from transforms.autodiff.registry import GRADIENTS, NoGradientError, supported_ops
from transforms.autodiff.training_graph import build_training_graph, write_training_graph

__all__ = ["GRADIENTS", "NoGradientError", "OptionError", "TrainingOptions", "build_training_graph",
           "supported_ops", "write_training_graph"]
