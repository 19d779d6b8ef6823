"""Training-graph generation: ONNX autodiff, losses and optimizers, exported as standard ONNX.

Data flow: ``forward.onnx`` -> ``support.check_supported`` -> ``exporter_repair`` -> ``sharing.untie``
-> ``parameters.choose_parameters``
-> ``forward.prepare_forward`` -> ``dropout_masks`` -> ``losses`` (seed gradients) -> ``plan.make_plan``
-> ``backward.backward`` (one rule per op from ``GRADIENTS``) -> ``optimizers.build_update``
-> ``running_stats`` -> ``training_graph`` assembles one ``ModelProto`` (with ``deploy.forward_record``).

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
- ``running_stats.py``: BatchNorm running statistics as step inputs and outputs (PyTorch's update)
- ``dropout_masks.py``: a training Dropout's mask as a step input
- ``sharing.py``: parameters several modules read (report) and ``untie``
- ``deploy.py``: the step's forward record and its eval-mode cut (``eval_forward``)
- ``backward.py``: the reverse sweep
- ``losses.py``: cross-entropy, MSE, weighted sum (tests)
- ``optimizers.py``: SGD (momentum), AdamW, Lion
"""
from transforms.autodiff.options import OptionError, TrainingOptions
from transforms.autodiff.registry import GRADIENTS, NoGradientError, supported_ops
from transforms.autodiff.training_graph import build_training_graph, write_training_graph

__all__ = ["GRADIENTS", "NoGradientError", "OptionError", "TrainingOptions", "build_training_graph",
           "supported_ops", "write_training_graph"]
