"""Training-graph generation: ONNX autodiff, losses and optimizers, exported as standard ONNX.

Data flow: ``forward.onnx`` -> ``support.check_supported`` -> ``exporter_repair``
-> ``parameters.choose_parameters``
-> ``forward.prepare_forward`` -> ``losses`` (seed gradients) -> ``plan.make_plan`` (what trains)
-> ``backward.backward`` (one rule per op from ``GRADIENTS``) -> ``optimizers.build_update``
-> ``training_graph`` assembles one ``ModelProto``.

- ``options.py``: ``TrainingOptions`` (frozen, JSON round trip), ``OptionError``
- ``training_graph.py``: ``build_training_graph``, ``write_training_graph`` (atomic)
- ``support.py``: ``check_supported``: unclaimed ops and If/Loop/Scan anywhere (subgraphs too) refused
- ``exporter_repair.py``: ``repair_dynamo_export``: parameters the dynamo optimizer merged or dropped
- ``parameters.py``: ``choose_parameters``: the model's parameters vs exporter constants (dynamo
  metadata, legacy names, use pattern), ties and folded broadcasts
- ``plan.py``: ``ParameterPlan`` (trained / kept constant and why, ``lines()``), ``make_plan``, ``apply_ties``
- ``forward.py``: opset upgrade, explicit masks/indices/statistics, BatchNorm mode, static types
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
