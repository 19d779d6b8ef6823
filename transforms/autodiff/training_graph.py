"""``build_training_graph`` and ``write_training_graph``: forward ONNX in, training step out.

forward model -> ``prepare_forward`` -> loss (seeds) -> ``backward`` (gradient rules)
-> optimizer update -> one standard-ONNX ``ModelProto``:

- inputs: data, ``labels``, parameters (the forward's trainable initializers, same
  names; their initial values stay as default values unless ``initial_values=False``),
  optimizer state (``<p>.m``, ``<p>.v``, ``<p>.momentum``), ``learning_rate``, ``step``
  (AdamW only);
- outputs: ``loss``, ``<p>.new``, ``<state>.new``, and ``<p>_grad`` when
  ``emit_gradients``;
- frozen initializers (e.g. BatchNorm running statistics) stay initializers; nodes
  that no output needs are dropped; the options are stored as JSON in the model's
  ``metadata_props`` (key ``dcstudio.training_options``).
``write_training_graph`` writes atomically: a temporary file in the target folder,
then ``os.replace``; on any error no file is left behind.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from onnx import ModelProto, NodeProto, helper

from ir.onnx_import import OPTIONS_KEY
from ir.onnx_load import read_model
from transforms.autodiff import rules as _rules  # noqa: F401  (fills GRADIENTS)
from transforms.autodiff.backward import backward, differentiable_paths
from transforms.autodiff.deploy import forward_record
from transforms.autodiff.dropout_masks import explicit_masks
from transforms.autodiff.emitter import Emitter
from transforms.autodiff.exporter_repair import repair_dynamo_export
from transforms.autodiff.forward import Forward, prepare_forward
from transforms.autodiff.losses import LossBuilder, LossGraph, loss_builder
from transforms.autodiff.optimizers import UpdateGraph, build_update
from transforms.autodiff.options import OptionError, TrainingOptions
from transforms.autodiff.parameters import choose_parameters
from transforms.autodiff.plan import ParameterPlan, apply_ties, make_plan
from transforms.autodiff.running_stats import RunningStats, running_statistics
from transforms.autodiff.sharing import shared_parameters, untie, untie_statistics
from transforms.autodiff.support import check_batchnorm_folding, check_recurrent_folding, check_supported

METADATA_KEY = OPTIONS_KEY


def build_training_graph(forward: ModelProto, **options: Any) -> ModelProto:
    """The training step of ``forward`` as a standard ONNX model (see ``TrainingOptions``)."""
    return build(forward, TrainingOptions(**options))


def plan_parameters(forward: ModelProto, **options: Any) -> ParameterPlan:
    """What ``build_training_graph(forward, **options)`` would train and keep constant (no backward pass)."""
    opts = TrainingOptions(**options)
    fwd, em, loss_graph = _prepared(forward, opts)
    return _trainable(fwd, opts, em, loss_graph.seeds)


def write_training_graph(forward_path: str | os.PathLike, out_path: str | os.PathLike, *,
                         on_plan: Callable[[ParameterPlan], None] | None = None, **options: Any) -> Path:
    """Read ``forward_path``, build the training graph and write it atomically to ``out_path``.

    ``on_plan`` receives the parameter plan (what is trained, what is kept constant) before the
    backward pass is built."""
    opts = TrainingOptions(**options)
    model = build(read_model(forward_path), opts, on_plan=on_plan)
    blob = model.SerializeToString()
    out = Path(out_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def build(forward: ModelProto, opts: TrainingOptions, loss: LossBuilder | None = None,
          loss_outputs: list[str] | None = None, on_plan: Callable[[ParameterPlan], None] | None = None
          ) -> ModelProto:
    """Build the training graph; ``loss``/``loss_outputs`` override the loss (tests)."""
    fwd, em, loss_graph = _prepared(forward, opts, loss, loss_outputs)
    plan = _trainable(fwd, opts, em, loss_graph.seeds)
    if on_plan is not None:
        on_plan(plan)
    params = plan.trained
    em.const_lookup = fwd.constants(set(params)).value
    grads = backward(em, fwd.nodes, params, loss_graph.seeds)
    for p in params:
        if grads[p] is None:
            em.scope = f"grad/{p}"
            grads[p] = em.zeros(em.shape(p), p)
    named = _name_gradients(em, params, grads) if opts.emit_gradients else grads
    update = build_update(em, opts, params, named) if opts.optimizer else UpdateGraph()
    stats = running_statistics(fwd, em) if opts.optimizer else RunningStats()
    return _assemble(fwd, opts, em, params, loss_graph, update, stats)


def _prepared(forward: ModelProto, opts: TrainingOptions, loss: LossBuilder | None = None,
              loss_outputs: list[str] | None = None) -> tuple[Forward, Emitter, LossGraph]:
    check_supported(forward)
    check_batchnorm_folding(forward, opts.batchnorm)
    check_recurrent_folding(forward)
    forward, repairs = repair_dynamo_export(forward)
    forward, untied = untie(forward, opts.untie)
    forward, separated = untie_statistics(forward)
    choice = choose_parameters(forward)
    choice.repairs = repairs + untied + separated
    fwd = prepare_forward(forward, opts)
    fwd.choice = choice
    apply_ties(fwd, choice.ties)
    fwd.masks = explicit_masks(fwd)
    fwd.data_inputs += fwd.masks.inputs
    em = Emitter(fwd.opset, fwd.types, _all_names(fwd))
    em.scope = "loss"
    loss_graph = (loss or loss_builder(opts.loss, opts.ignore_index))(em, loss_outputs or [fwd.prediction])
    return fwd, em, loss_graph


def _all_names(fwd: Forward) -> set[str]:
    names = set(fwd.initializers) | {vi.name for vi in fwd.model.graph.input}
    for node in fwd.nodes:
        names.update(node.output)
        names.add(node.name)
    return names


def _trainable(fwd: Forward, opts: TrainingOptions, em: Emitter, seeds: dict[str, str]) -> ParameterPlan:
    candidates = fwd.float_initializers()
    if isinstance(opts.trainable, tuple):
        missing = [n for n in opts.trainable if n not in candidates]
        if missing:
            raise OptionError(f"trainable names {missing} are not float initializers of the forward model "
                              f"(candidates: {', '.join(candidates[:20])}{', …' if len(candidates) > 20 else ''})")
    plan = make_plan(fwd, opts.trainable, lambda names: differentiable_paths(fwd.nodes, names, seeds, em)[1])
    plan.shared = shared_parameters(fwd.model.graph, plan.trained)
    plan.statistics_updated = bool(opts.optimizer) and opts.batchnorm == "train"
    if not plan.trained:
        raise OptionError("nothing to train: no parameter of the forward model reaches the loss through "
                          "differentiable ops (" + "; ".join(line.strip() for line in plan.lines()[3:]) + "). Name the "
                          "parameters with trainable, or check which output the loss is on")
    return plan


def _name_gradients(em: Emitter, params: list[str], grads: dict[str, str]) -> dict[str, str]:
    """Give each total gradient its output name ``<p>_grad`` (renaming when it is safe)."""
    producer: dict[str, tuple[NodeProto, int]] = {}
    uses: dict[str, int] = {}
    for node in em.nodes:
        for k, o in enumerate(node.output):
            producer[o] = (node, k)
        for i in node.input:
            uses[i] = uses.get(i, 0) + 1
    for g in grads.values():
        uses[g] = uses.get(g, 0) + 1
    named = {}
    for p in params:
        target = em.claim(f"{p}_grad")
        g = grads[p]
        if g in producer and uses.get(g, 0) == 1:
            node, k = producer[g]
            node.output[k] = target
        else:
            em.scope = f"grad/{p}"
            em.op("Identity", g, outputs=[target])
        named[p] = target
    return named


def _assemble(fwd: Forward, opts: TrainingOptions, em: Emitter, params: list[str], loss_graph: LossGraph,
              update: UpdateGraph, stats: RunningStats) -> ModelProto:
    param_vis = [helper.make_tensor_value_info(p, em.elem(p), list(em.shape(p))) for p in params]
    loss_vi = helper.make_tensor_value_info(loss_graph.loss, em.elem(fwd.prediction), [])
    outputs = [loss_vi] + update.outputs + stats.outputs
    if opts.emit_gradients:
        outputs += [helper.make_tensor_value_info(f"{p}_grad", em.elem(p), list(em.shape(p))) for p in params]
    trainable = set(params)
    inits = [t for n, t in fwd.initializers.items() if n not in trainable or opts.initial_values]
    nodes = _live_nodes(list(fwd.nodes) + em.nodes, {o.name for o in outputs})
    graph = helper.make_graph(nodes, f"{fwd.model.graph.name or 'model'}_training", fwd.data_inputs +
                              loss_graph.inputs + param_vis + update.inputs + stats.inputs, outputs)
    graph.initializer.extend(inits)
    graph.initializer.extend(em.initializers)
    opset = [helper.make_opsetid("", fwd.opset)]
    model = helper.make_model(graph, opset_imports=opset, producer_name="dcstudio",
                              ir_version=max(helper.find_min_ir_version_for(opset), 8))
    helper.set_model_props(model, {METADATA_KEY: json.dumps(opts.to_json(), sort_keys=True),
                                   **forward_record([fwd.prediction], stats.names, fwd.masks.dropout, stats.aliases)})
    return model


def _live_nodes(nodes: list[NodeProto], wanted: set[str]) -> list[NodeProto]:
    """The nodes some graph output depends on, in their original order."""
    live = set(wanted)
    keep = [False] * len(nodes)
    for k in range(len(nodes) - 1, -1, -1):
        if any(o in live for o in nodes[k].output):
            keep[k] = True
            live.update(i for i in nodes[k].input if i)
    return [n for n, kept in zip(nodes, keep) if kept]
