"""Training runs side by side, and the drift tolerance that compares them.

One run is N steps on a fixed sequence of batches, from the same initial weights:

- ``torch_run``: the PyTorch module trained by ``torch.optim`` (AdamW or SGD with momentum), in
  float32 (the baseline) or float64 (the truth);
- ``ort_run``: the generated training step run by onnxruntime, its new parameters, optimizer state
  and running statistics fed back each step (optimizer state from zeros);
- ``package_run``: an exported package's ``Model().train_step`` in a fresh process (its defaults:
  nothing but the batches is passed).
Each gives the per-step losses, the final parameters and BatchNorm running statistics under
their ONNX names (``param_map`` relates them to PyTorch's: the legacy exporter keeps names, the
dynamo exporter folds transposed weights into ``val_N``).

``drift(truth, baseline, run)`` derives the tolerance as the oracle does (``codegen.oracle``):
errors against the float64 truth, relative to the largest magnitude of their kind (loss; all
parameters; all statistics), and a run passes where its error is at most ``K`` times the fp32
baseline's own error (the worst so far, for the loss; the worst of the kind, for parameters),
or ``K`` u. Over steps both fp32 runs drift from the truth by rounding; a wrong gradient, a
stale statistic or a lost optimizer state drifts further. A failure names the first step (or the
output) past the tolerance.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import numpy_helper

from codegen.oracle import K
from transforms.autodiff.training_graph import plan_parameters

U32 = 2.0 ** -24


@dataclass
class Run:
    losses: np.ndarray
    params: dict[str, np.ndarray]
    stats: dict[str, np.ndarray] = field(default_factory=dict)
    predictions: np.ndarray | None = None


@dataclass(frozen=True)
class Batches:
    """``inputs[k]``: the forward's data inputs of step k (by ONNX name); ``labels[k]``."""

    names: tuple[str, ...]
    inputs: list[tuple[np.ndarray, ...]]
    labels: list[np.ndarray]

    def feeds(self, k: int) -> dict[str, np.ndarray]:
        return {**dict(zip(self.names, self.inputs[k])), "labels": self.labels[k]}


def make_batches(module, make_inputs, names, steps: int, loss: str, seed: int = 100) -> Batches:
    """``steps`` batches: ``make_inputs(generator)`` draws a step's inputs; labels from its logits' shape
    (found on a copy in eval mode: a forward in training mode would move the module's statistics)."""
    inputs, labels = [], []
    probe = copy.deepcopy(module).eval()
    for k in range(steps):
        args = make_inputs(torch.Generator().manual_seed(seed + k))
        with torch.no_grad():
            shape = probe(*args).shape
        g = torch.Generator().manual_seed(10_000 + seed + k)
        labels.append((torch.randint(0, shape[1], (shape[0],), generator=g) if loss == "cross_entropy"
                       else torch.randn(*shape, generator=g)).numpy())
        inputs.append(tuple(a.numpy() for a in args))
    return Batches(tuple(names), inputs, labels)


def param_map(forward: onnx.ModelProto, module, **options) -> dict[str, tuple[str, bool]]:
    """ONNX parameter name -> (PyTorch name, stored transposed?) for every trained parameter."""
    plan = plan_parameters(forward, loss="cross_entropy", optimizer="adamw", **options)
    torch_params = dict(module.named_parameters(remove_duplicate=False))
    inits = {t.name: numpy_helper.to_array(t) for t in forward.graph.initializer}
    out = {}
    for name in plan.trained:
        reason = plan.reasons[name]
        source = reason.split(": ", 1)[1] if reason.startswith("folded from") else name
        assert source in torch_params, f"trained {name} ({reason}) is no torch parameter"
        value = torch_params[source].detach().numpy()
        flipped = (name in inits and value.ndim == 2 and inits[name].shape == value.T.shape
                   and np.array_equal(inits[name], value.T) and not np.array_equal(inits[name], value))
        out[name] = (source, flipped)
    return out


def _optimizer(module, optimizer: str, lr: float):
    if optimizer == "adamw":
        return torch.optim.AdamW(module.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    return torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)


def torch_run(module, batches: Batches, optimizer: str, lr: float, names: dict[str, tuple[str, bool]],
              loss: str = "cross_entropy", dtype=torch.float32, masks=None, eval_inputs=None) -> Run:
    """``module`` (copied) trained by ``torch.optim``; ``masks(k)`` sets step k's dropout masks."""
    m = copy.deepcopy(module).to(dtype).train()
    opt = _optimizer(m, optimizer, lr)
    losses = []
    for k in range(len(batches.inputs)):
        if masks is not None:
            masks(m, k)
        args = [torch.from_numpy(a).to(dtype) if a.dtype.kind == "f" else torch.from_numpy(a)
                for a in batches.inputs[k]]
        out = m(*args)
        y = torch.from_numpy(batches.labels[k])
        value = F.cross_entropy(out, y) if loss == "cross_entropy" else F.mse_loss(out, y.to(dtype))
        opt.zero_grad()
        value.backward()
        opt.step()
        losses.append(value.item())
    params = dict(m.named_parameters(remove_duplicate=False))
    final = {n: (params[src].detach().numpy().T if flip else params[src].detach().numpy()).astype(np.float64)
             for n, (src, flip) in names.items()}
    stats = {n: b.numpy().astype(np.float64) for n, b in m.named_buffers() if n.endswith(("running_mean",
                                                                                          "running_var"))}
    predictions = None
    if eval_inputs is not None:
        with torch.no_grad():
            predictions = m.eval()(*[torch.from_numpy(a).to(dtype) if a.dtype.kind == "f" else torch.from_numpy(a)
                                     for a in eval_inputs]).numpy().astype(np.float64)
    return Run(np.asarray(losses), final, stats, predictions)


def ort_run(train: onnx.ModelProto, batches: Batches, extra=None) -> Run:
    """The generated step in onnxruntime, its state fed back (optimizer state from zeros)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(train.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    inits = {t.name: numpy_helper.to_array(t) for t in train.graph.initializer}
    options = json.loads({p.key: p.value for p in train.metadata_props}["dcstudio.training_options"])
    state, losses = {}, []
    for vi in train.graph.input:
        if f"{vi.name}.new" in outs:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            state[vi.name] = inits[vi.name] if vi.name in inits else np.zeros(shape, np.float32)
    stats = [o[:-4] for o in outs if o.endswith((".running_mean.new", ".running_var.new"))]
    for k in range(len(batches.inputs)):
        feeds = {**batches.feeds(k), **state, **(extra(k) if extra else {})}
        feeds["learning_rate"] = np.asarray(options["lr"], np.float32)
        if any(i.name == "step" for i in train.graph.input):
            feeds["step"] = np.asarray(k + 1, np.float32)
        res = dict(zip(outs, sess.run(None, feeds)))
        losses.append(float(res["loss"]))
        state = {n: res[f"{n}.new"] for n in state}
    params = {n: v.astype(np.float64) for n, v in state.items() if f"{n}_grad" in outs}
    return Run(np.asarray(losses), params, {n: state[n].astype(np.float64) for n in stats})


PACKAGE_RUN = """
import json, sys
import numpy as np
from {package} import Model
data = dict(np.load({batches!r}))
names = json.loads({names!r})
model = Model()
losses = []
for k in range(len(data["labels"])):
    feeds = {{n: data[n][k] for n in names}}
    feeds.update({{n: data["mask:" + n][k] for n in model.P.TRAINING["masks"] if "mask:" + n in data}})
    out = model.train_step(labels=data["labels"][k], **feeds)
    losses.append(float(out["loss"]))
model.save({state!r})
extra = {{}}
if "eval:" + names[0] in data:
    extra["predictions"] = next(iter(model.forward(**{{n: data["eval:" + n] for n in names}}).values()))
np.savez({result!r}, losses=np.asarray(losses), **extra)
"""


def package_run(pkg: Path, batches: Batches, masks: dict[str, np.ndarray] | None = None, eval_inputs=None,
                timeout: int = 900) -> Run:
    """``Model().train_step`` of the package ``pkg`` on ``batches``, in a fresh process (no torch)."""
    work = pkg.parent
    data = work / f"{pkg.name}-batches.npz"
    arrays = {n: np.stack([b[j] for b in batches.inputs]) for j, n in enumerate(batches.names)}
    arrays.update({f"mask:{n}": m for n, m in (masks or {}).items()})
    arrays.update({f"eval:{n}": a for n, a in zip(batches.names, eval_inputs or ())})
    np.savez(data, labels=np.stack(batches.labels), **arrays)
    state, result = work / f"{pkg.name}-state.npz", work / f"{pkg.name}-result.npz"
    script = textwrap.dedent(PACKAGE_RUN).format(package=pkg.name, batches=str(data), names=json.dumps(
        list(batches.names)), state=str(state), result=str(result))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with np.load(result) as r, np.load(state) as s:
        meta = json.loads(str(s["__meta__"]))
        values = {n: s[f"s{k}"].astype(np.float64) for k, n in enumerate(meta["names"])}
        losses, predictions = r["losses"], (r["predictions"].astype(np.float64) if "predictions" in r else None)
    stats = {n: v for n, v in values.items() if n.endswith(("running_mean", "running_var"))}
    return Run(losses, values, stats, predictions)


def _grouped(truth: dict, got: dict, names) -> dict[str, float]:
    scale = max((float(np.abs(truth[n]).max(initial=0.0)) for n in names), default=0.0) or 1.0
    return {n: float(np.abs(np.asarray(got[n], np.float64) - truth[n]).max(initial=0.0)) / scale for n in names}


def drift(truth: Run, baseline: Run, run: Run, label: str, k: float = K) -> list[str]:
    """Where ``run`` leaves the derived tolerance (module docstring): the first step of the loss,
    and each parameter, statistic and prediction; [] when it stays within."""
    problems = []
    scale = float(np.abs(truth.losses).max()) or 1.0
    base = np.maximum.accumulate(np.abs(baseline.losses - truth.losses) / scale)
    err = np.abs(run.losses - truth.losses) / scale
    tol = k * np.maximum(base, U32)
    bad = np.flatnonzero(~(err <= tol))
    if bad.size:
        s = int(bad[0])
        problems.append(f"{label}: loss leaves the tolerance at step {s + 1}: error {err[s]:.3g} > {tol[s]:.3g} "
                        f"({k:g} x PyTorch fp32's {base[s]:.3g}); losses {run.losses[s]:.7g} vs truth "
                        f"{truth.losses[s]:.7g}")
    kinds = [("parameter", truth.params, baseline.params, run.params), ("statistic", truth.stats, baseline.stats,
                                                                         run.stats)]
    for kind, want, fp32, got in kinds:
        names = sorted(want)
        missing = [n for n in names if n not in got]
        if missing:
            problems.append(f"{label}: {kind}s missing: {missing[:5]}")
            continue
        e_base, e_run = _grouped(want, fp32, names), _grouped(want, got, names)
        limit = k * max(max(e_base.values(), default=0.0), U32)
        problems += [f"{label}: {kind} {n} after {len(truth.losses)} steps: error {e_run[n]:.3g} > {limit:.3g} "
                     f"({k:g} x PyTorch fp32's worst {kind} error)" for n in names if not e_run[n] <= limit]
    if truth.predictions is not None and run.predictions is not None:
        scale = float(np.abs(truth.predictions).max()) or 1.0
        e_base = float(np.abs(baseline.predictions - truth.predictions).max()) / scale
        e_run = float(np.abs(run.predictions - truth.predictions).max()) / scale
        if not e_run <= k * max(e_base, U32):
            problems.append(f"{label}: eval predictions after training: error {e_run:.3g} > "
                            f"{k * max(e_base, U32):.3g}")
    return problems
