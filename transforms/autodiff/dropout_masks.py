"""Training-mode Dropout with its mask as a step input: ``explicit_masks(fwd)``.

ONNX ``Dropout`` draws its mask inside the graph, from a seed attribute: every run draws the
same one (the reference executor), or another one than any other engine (onnxruntime), and
nothing outside can replay it. A training step instead takes each mask as a boolean input,
named as the node's mask output (``<y>.mask`` when the model left it out), and computes
PyTorch's inverted dropout from it::

    Dropout(x, ratio, training_mode=True) -> y
        =>  y = x · (Cast(mask) / (1 − ratio))          mask: input, bool, x's shape

which is ``torch.nn.functional.dropout`` given the mask it drew (``noise = bernoulli(1 − p) /
(1 − p); y = x · noise``). The caller draws the masks (the exported ``Model`` from its seeded
generator, fresh every step), onnxruntime runs the step deterministically, and a test can feed
PyTorch's masks. Only nodes whose ratio (> 0) and training flag (true) are constants change; a
Dropout out of training mode is the identity and stays as it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper, numpy_helper

from ir.constant_values import ConstantValues
from transforms.autodiff.forward import Forward


@dataclass(slots=True)
class Masks:
    """The mask inputs: value infos, and per mask its ratio, the dropped value and the result."""

    inputs: list[ValueInfoProto] = field(default_factory=list)
    dropout: dict[str, dict] = field(default_factory=dict)     # mask -> {"ratio", "x", "y", "node"}


def _training_ratio(node, consts: ConstantValues) -> float | None:
    """The ratio of a Dropout that trains with a constant ratio > 0, else None."""
    if len(node.input) < 3 or not node.input[2]:
        return None
    mode = consts.value(node.input[2])
    ratio = consts.value(node.input[1]) if len(node.input) > 1 and node.input[1] else np.float32(0.5)
    if mode is None or ratio is None or not bool(np.asarray(mode).reshape(-1)[0]):
        return None
    r = float(np.asarray(ratio).reshape(-1)[0])
    return r if 0.0 < r < 1.0 else None


def explicit_masks(fwd: Forward) -> Masks:
    """Rewrite every training Dropout of ``fwd`` as above (in place); return the mask inputs."""
    out = Masks()
    consts = ConstantValues(fwd.model.graph, fwd.initializers, fwd.types, fwd.opset)
    nodes = []
    for node in fwd.nodes:
        ratio = _training_ratio(node, consts) if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") else None
        if ratio is None:
            nodes.append(node)
            continue
        x, y, mask = node.input[0], node.output[0], node.output[1]
        elem, shape = fwd.types[x]
        base = node.name or y
        cast, noise, keep = f"{base}/mask_cast", f"{base}/mask_noise", f"{base}/keep"
        fwd.initializers[keep] = numpy_helper.from_array(
            np.asarray(1.0 - ratio, dtype=helper.tensor_dtype_to_np_dtype(elem)), keep)
        fwd.types.update({cast: (elem, shape), noise: (elem, shape), keep: (elem, ())})
        nodes += [helper.make_node("Cast", [mask], [cast], name=cast, to=elem),
                  helper.make_node("Div", [cast, keep], [noise], name=noise),
                  helper.make_node("Mul", [x, noise], [y], name=base)]
        out.inputs.append(helper.make_tensor_value_info(mask, TensorProto.BOOL, list(shape or ())))
        out.dropout[mask] = {"ratio": ratio, "x": x, "y": y, "node": node.name}
    if out.dropout:
        del fwd.model.graph.node[:]
        fwd.model.graph.node.extend(nodes)
        fwd.nodes = list(fwd.model.graph.node)
    return out
