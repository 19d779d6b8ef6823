"""BatchNorm running statistics as training state: ``running_statistics(fwd, em)``.

A training-mode ``BatchNormalization`` (``forward.prepare_forward`` sets the mode and names its
optional outputs) also outputs its updated running statistics. ONNX defines them as

    running_mean' = momentum · running_mean + (1 − momentum) · batch_mean
    running_var'  = momentum · running_var  + (1 − momentum) · batch_var        (biased: ÷ n)

PyTorch's ``train()`` keeps the *unbiased* batch variance (÷ (n − 1), n = values per channel) in
``running_var``; the legacy exporter writes its ``momentum`` as ``1 − torch momentum``. So the
training step reads each statistic as an input (its initializer stays as the default value) and
outputs ``<statistic>.new``:

- the mean is the node's own output (renamed);
- the variance is corrected to PyTorch's: ``(n · running_var' − momentum · running_var) / (n − 1)``,
  which equals ``momentum · running_var + (1 − momentum) · batch_var · n/(n − 1)``. Both terms of the
  difference are sums of non-negative parts, so it cancels nothing (about 2 u relative error).
  With n = 1 PyTorch refuses to train; the biased value (0) is kept.
- the node reads ``(momentum · running_var) / momentum`` (within 1 u of it), not the input itself:
  onnxruntime (1.31, default optimizations) runs BatchNormalization in place, writing its running
  variance into the buffer of the input it read, so a second reader of that input (the correction)
  saw the new value, and the input's default value (its initializer) changed after the first run.
  ``aliases`` maps the copy to the statistic (``deploy.eval_forward`` reads the statistic again).

A statistic read by several BatchNorm nodes, or by anything else, stays a constant (listed in
``skipped`` with the reason).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from onnx import ValueInfoProto, helper

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.forward import Forward


@dataclass(slots=True)
class RunningStats:
    """The statistics the step updates: names (inputs), their value infos, and what stayed constant."""

    names: list[str] = field(default_factory=list)
    inputs: list[ValueInfoProto] = field(default_factory=list)
    outputs: list[ValueInfoProto] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)     # the copy a BatchNorm reads -> its statistic


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def running_statistics(fwd: Forward, em: Emitter) -> RunningStats:
    """Make every training-mode BatchNorm's running statistics step state (module docstring)."""
    out = RunningStats()
    uses: dict[str, int] = {}
    for node in fwd.nodes:
        for i in node.input:
            uses[i] = uses.get(i, 0) + 1
    for node in list(fwd.nodes):
        if node.op_type != "BatchNormalization" or not _attr(node, "training_mode", 0) or len(node.output) < 3:
            continue
        mean, var = node.input[3], node.input[4]
        shared = [s for s in (mean, var) if s not in fwd.initializers or uses.get(s, 0) != 1]
        if shared:
            for s in (mean, var):
                out.skipped[s] = (f"read by {uses.get(s, 0)} nodes, not only BatchNorm '{node.name}'"
                                  if s in fwd.initializers else "not an initializer")
            continue
        x = node.input[0]
        shape = em.shape(x)
        n = prod(shape) // shape[1]
        momentum = float(_attr(node, "momentum", 0.9))
        em.scope = f"stats/{node.name or node.output[0]}"
        node.output[1] = em.claim(f"{mean}.new")
        new_var = em.claim(f"{var}.new")
        first = len(em.nodes)
        kept = em.mul(var, em.scalar(momentum, var))
        node.input[4] = em.div(kept, em.scalar(momentum, var)) if momentum else em.op("Identity", var)
        out.aliases[node.input[4]] = var
        at = fwd.nodes.index(node)
        fwd.nodes[at:at] = em.nodes[first:]          # before the node that reads them
        del em.nodes[first:]
        if n > 1:
            scaled = em.mul(node.output[2], em.scalar(float(n), var))
            em.op("Div", em.sub(scaled, kept), em.scalar(float(n - 1), var), outputs=[new_var])
        else:
            em.op("Identity", node.output[2], outputs=[new_var])
        for s in (mean, var):
            elem, dims = em.elem(s), list(em.shape(s))
            out.names.append(s)
            out.inputs.append(helper.make_tensor_value_info(s, elem, dims))
            out.outputs.append(helper.make_tensor_value_info(f"{s}.new", elem, dims))
    return out
