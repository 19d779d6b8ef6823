"""Optimizer update graphs against NumPy references, torch.optim (SGD, AdamW) and the Lion
formula, over several steps with outputs fed back; and training an MLP lowers its loss."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import numpy_helper

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from tests.unit.transforms.autodiff.forward_models import mlp, mlp_batch
from tests.unit.transforms.autodiff.gradcheck import ort_run
from transforms.autodiff import build_training_graph
from transforms.autodiff.optimizers import state_names

PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
LR = 0.05


def _initial_feeds(model, opt: str, momentum: float = 0.9) -> dict[str, np.ndarray]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    feeds = dict(mlp_batch(dtype=inits[PARAMS[0]].dtype))
    for p in PARAMS:
        feeds[p] = inits[p].copy()
        for s in state_names(opt, momentum):
            feeds[f"{p}.{s}"] = np.zeros_like(feeds[p])
    feeds["learning_rate"] = np.asarray(LR, np.float32)
    return feeds


def _steps(runner, model, opt: str, n: int, **kw) -> list[dict[str, np.ndarray]]:
    """Run ``n`` steps, feeding new parameters and state back; return every step's outputs."""
    feeds = _initial_feeds(model, opt, kw.get("momentum", 0.9))
    history = []
    for step in range(1, n + 1):
        feeds["step"] = np.asarray(step, np.float32)
        wanted = {i.name for i in model.graph.input}
        out = runner(model, {k: v for k, v in feeds.items() if k in wanted})
        history.append({**out, **{f"in:{k}": v for k, v in feeds.items()}})
        for name in list(feeds):
            if f"{name}.new" in out:
                feeds[name] = out[f"{name}.new"]
    return history


def _executor(model, feeds):
    return run(import_proto(model), feeds)


def numpy_update(opt: str, p, g, state: dict, step: int, lr: float, wd: float, momentum: float, betas, eps):
    """The reference update rules (the formulas in transforms/autodiff/optimizers.py)."""
    if opt == "sgd":
        g = g + wd * p
        buf = momentum * state["momentum"] + g
        return p - lr * buf, {"momentum": buf}
    if opt == "adamw":
        b1, b2 = betas
        m = b1 * state["m"] + (1 - b1) * g
        v = b2 * state["v"] + (1 - b2) * g * g
        denom = np.sqrt(v) / np.sqrt(1 - b2 ** step) + eps
        return p * (1 - lr * wd) - lr / (1 - b1 ** step) * m / denom, {"m": m, "v": v}
    b1, b2 = betas
    u = np.sign(b1 * state["m"] + (1 - b1) * g)
    return p - lr * (u + wd * p), {"m": b2 * state["m"] + (1 - b2) * g}


OPTS = {"sgd": {"momentum": 0.9}, "adamw": {"betas": (0.8, 0.95), "eps": 1e-6}, "lion": {"betas": (0.9, 0.99)}}


@pytest.mark.parametrize("runner", [ort_run, _executor], ids=["onnxruntime", "executor"])
@pytest.mark.parametrize("opt", sorted(OPTS))
def test_update_matches_numpy_reference_over_three_steps(opt, runner):
    kw = {**OPTS[opt], "weight_decay": 0.1}
    model = build_training_graph(mlp(dtype=np.float64), optimizer=opt, **kw)
    lr = float(np.float32(LR))
    betas = kw.get("betas", (0.9, 0.999))
    for k, out in enumerate(_steps(runner, model, opt, 3, **kw), start=1):
        for p in PARAMS:
            state = {s: out[f"in:{p}.{s}"] for s in state_names(opt, 0.9)}
            want_p, want_state = numpy_update(opt, out[f"in:{p}"], out[f"{p}_grad"], state, k, lr, 0.1,
                                              kw.get("momentum", 0.9), betas, kw.get("eps", 1e-8))
            np.testing.assert_allclose(out[f"{p}.new"], want_p, rtol=1e-12, atol=1e-14, err_msg=f"{p} step {k}")
            for s, v in want_state.items():
                np.testing.assert_allclose(out[f"{p}.{s}.new"], v, rtol=1e-12, atol=1e-14)


def _torch_optimizer(opt: str, params, kw):
    if opt == "sgd":
        return torch.optim.SGD(params, lr=float(np.float32(LR)), momentum=kw["momentum"],
                               weight_decay=kw["weight_decay"])
    return torch.optim.AdamW(params, lr=float(np.float32(LR)), betas=kw["betas"], eps=kw["eps"],
                             weight_decay=kw["weight_decay"])


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_update_matches_torch_optim_over_three_steps(opt):
    """torch.optim steps with the graph's own gradients give the graph's new parameters."""
    kw = {**OPTS[opt], "weight_decay": 0.05}
    model = build_training_graph(mlp(dtype=np.float64), optimizer=opt, **kw)
    history = _steps(ort_run, model, opt, 3, **kw)
    params = [torch.tensor(history[0][f"in:{p}"].copy(), requires_grad=True) for p in PARAMS]
    optimizer = _torch_optimizer(opt, params, kw)
    for out in history:
        for t, p in zip(params, PARAMS):
            t.grad = torch.tensor(out[f"{p}_grad"])
        optimizer.step()
        for t, p in zip(params, PARAMS):
            np.testing.assert_allclose(out[f"{p}.new"], t.detach().numpy(), rtol=1e-10, atol=1e-13)
        if opt == "adamw":
            st = optimizer.state[params[0]]
            np.testing.assert_allclose(out["fc1.weight.m.new"], st["exp_avg"].numpy(), rtol=1e-10)
            np.testing.assert_allclose(out["fc1.weight.v.new"], st["exp_avg_sq"].numpy(), rtol=1e-10)


def test_sgd_without_momentum_has_no_state():
    model = build_training_graph(mlp(), optimizer="sgd", momentum=0.0)
    names = {i.name for i in model.graph.input}
    assert not any(n.endswith(".momentum") for n in names)
    assert "step" not in names and "learning_rate" in names


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_training_the_mlp_lowers_the_loss(opt):
    model = build_training_graph(mlp(), optimizer=opt, lr=LR, **OPTS[opt])
    history = _steps(ort_run, model, opt, 25, **OPTS[opt])
    losses = [float(h["loss"]) for h in history]
    assert losses[-1] < 0.7 * losses[0], losses
    # the executor agrees with onnxruntime on the first steps of the same run
    first = _steps(_executor, model, opt, 2, **OPTS[opt])
    np.testing.assert_allclose([float(h["loss"]) for h in first], losses[:2], rtol=1e-5)
