"""Normalization expansions: LayerNorm (forward and grad), RMS norms, BatchNorm (inference and training).

LayerNormalization (default domain: ONNX opset 17 and ORT's opset-16 version;
com.microsoft) normalizes over the axes ``axis..rank-1``: one row per leading
index, statistics in row locals (in the ``stash_type`` dtype, float32 by
default), optional ``Mean``/``InvStdDev`` outputs written once per row.

LayerNormalizationGrad (com.microsoft; inputs dY, X, scale, mean, inv_std_dev)
is one map over the rows as well: the first sweep accumulates the row sums
Σg and Σg·x̂ (g = dY·scale, x̂ = (x − mean)·inv) into row locals *and* the
parameter gradients dscale[h] += dY·x̂, dbias[h] += dY straight into the
global outputs with wcr=sum (the reduction over rows is the wcr over the outer
params); the second sweep writes dX = inv·(g − Σg/H − x̂·Σg·x̂/H).

FLOPs per row of H normalized elements:

- LayerNormalization: Σx H (wcr) + mean 1; d = x − mean, Σd·d 3H; inv = 1/√(var/H + ε) 4;
  y = (x − mean)·inv·scale + bias 4H (3H without bias) ⇒ **8H + 5** (7H + 5)
- SimplifiedLayerNormalization / RMSNormalization: Σx·x 2H; inv 4; y = x·inv·scale 2H ⇒ 4H + 4
- LayerNormalizationGrad: x̂ 2H, g H, Σg H, Σg·x̂ 2H, dbias H, dscale 2H; means 2;
  dX 7H ⇒ 16H + 2
- BatchNormalization (inference), per element: (x − mean)/√(var + ε)·scale + bias ⇒ 6
- BatchNormalization (training), per element: Σx 1, Σ(x − mean)² 3, y 4 ⇒ 8, plus per channel
  mean, var, inv 5 and the running statistics 6
"""
from __future__ import annotations

from ir.lowering.builder import KernelBuilder, NotExpandable, Pointwise, add, div, mul, sub, un
from ir.lowering.registry import expansion
from ir.lowering.rows import Rows
from ir.memlet import Memlet
from ir.nodes import MapNode

MS = "com.microsoft"


def stash_dtype(k: KernelBuilder, x: str) -> str:
    """The statistics dtype: ``stash_type`` (float32 by default), float64 for float64 inputs."""
    if k.dtype(x) == "float64":
        return "float64"
    return "float64" if int(k.attr("stash_type", 1)) == 11 else "float32"


def norm_rows(k: KernelBuilder, x: str) -> Rows:
    """Rows over the normalized axes ``axis..rank-1`` of ``x``."""
    shape = k.shape(x)
    axis = int(k.attr("axis", -1))
    if not -len(shape) <= axis < len(shape):
        raise NotExpandable(f"unsupported attribute value axis={axis} for rank {len(shape)}")
    return Rows(k, shape, range(axis % len(shape), len(shape)))


def _inv_std(k: KernelBuilder, rows: Rows, acc: str, dt: str) -> str:
    """inv = 1/√(acc/H + ε), a row local."""
    rr = rows.reads()
    var = div(rr.local("acc", acc), k.c(rows.count, dt))
    return rows.let("inv", un("recip", un("sqrt", add(var, k.c(k.attr("epsilon", 1e-5), dt)))), rr, dt)


def _mean_and_inv(k: KernelBuilder, rows: Rows, dt: str) -> tuple[str, str]:
    total = rows.local("sum", dt)
    sw = rows.sweep("sum")
    r = sw.reads()
    sw.reduce("sum", r.load("x", 0), r, total, "sum")
    sw.close()
    rr = rows.reads()
    mean = rows.let("mean", div(rr.local("sum", total), k.c(rows.count, dt)), rr, dt)
    sq = rows.local("sq_sum", dt)
    sw = rows.sweep("var")
    r = sw.reads()
    d = sw.let("d", sub(r.load("x", 0), r.local("mean", mean)), r, dt)
    r = sw.reads()
    sw.reduce("sq_sum", mul(r.local("d", d), r.local("d", d)), r, sq, "sum")
    sw.close()
    return mean, _inv_std(k, rows, sq, dt)


@expansion("LayerNormalization")
@expansion("LayerNormalization", domain=MS)
def layer_norm(k: KernelBuilder, impl: str) -> MapNode:
    x = k.in_name(0)
    dt = stash_dtype(k, x)
    rows = norm_rows(k, x)
    mean, inv = _mean_and_inv(k, rows, dt)
    sw = rows.sweep("out")
    r = sw.reads()
    y = mul(mul(sub(r.load("x", 0), r.local("mean", mean)), r.local("inv", inv)), r.load("scale", 1))
    if k.in_name(2, required=False) is not None:
        y = add(y, r.load("bias", 2))
    sw.store(k.out_name(0), y, r)
    sw.close()
    for index, local, label in ((1, mean, "mean_out"), (2, inv, "inv_out")):
        rr = rows.reads()
        rows.store(k.out_name(index), rr.local("v", local), rr, label)
    return rows.kernel()


@expansion("SimplifiedLayerNormalization")
@expansion("SimplifiedLayerNormalization", domain=MS)
@expansion("RMSNormalization")
def rms_norm(k: KernelBuilder, impl: str) -> MapNode:
    x = k.in_name(0)
    dt = stash_dtype(k, x)
    rows = norm_rows(k, x)
    sq = rows.local("sq_sum", dt)
    sw = rows.sweep("sq_sum")
    r = sw.reads()
    sw.reduce("sq_sum", mul(r.load("x", 0), r.load("x", 0)), r, sq, "sum")
    sw.close()
    inv = _inv_std(k, rows, sq, dt)
    sw = rows.sweep("out")
    r = sw.reads()
    sw.store(k.out_name(0), mul(mul(r.load("x", 0), r.local("inv", inv)), r.load("scale", 1)), r)
    sw.close()
    if k.node.op_type == "SimplifiedLayerNormalization":
        rr = rows.reads()
        rows.store(k.out_name(1), rr.local("v", inv), rr, "inv_out")
    return rows.kernel()


def _grad_sums(k: KernelBuilder, rows: Rows, mean: str, inv: str, dt: str) -> tuple[str, str]:
    """Sweep 1: Σg and Σg·x̂ into row locals, dscale and dbias into the outputs (wcr=sum)."""
    sg, sgx = rows.local("sum_g", dt), rows.local("sum_gx", dt)
    sw = rows.sweep("sums")
    r = sw.reads()
    xh = sw.let("xhat", mul(sub(r.load("x", 1), r.local("mean", mean)), r.local("inv", inv)), r, dt)
    r = sw.reads()
    g = sw.let("g", mul(r.load("dy", 0), r.load("scale", 2)), r, dt)
    r = sw.reads()
    sw.reduce("sum_g", r.local("g", g), r, sg, "sum")
    r = sw.reads()
    sw.reduce("sum_gx", mul(r.local("g", g), r.local("xhat", xh)), r, sgx, "sum")
    dscale, dbias = k.out_name(1), k.out_name(2)
    if dbias is not None:
        r = sw.reads()
        sw.reduce_into("dbias", r.load("dy", 0), r, _wcr_at(k, dbias, rows, sw.index))
    if dscale is not None:
        r = sw.reads()
        sw.reduce_into("dscale", mul(r.load("dy", 0), r.local("xhat", xh)), r,
                       _wcr_at(k, dscale, rows, sw.index))
    sw.close()
    return sg, sgx


def _wcr_at(k: KernelBuilder, name: str, rows: Rows, index: list[str]) -> Memlet:
    """``name`` (a parameter gradient) broadcast onto the element, accumulated over rows."""
    return Memlet(name, k.bcast(name, rows.shape, index).subset, None, "sum")


@expansion("LayerNormalizationGrad", domain=MS)
def layer_norm_grad(k: KernelBuilder, impl: str) -> MapNode:
    dt = stash_dtype(k, k.in_name(1))
    rows = norm_rows(k, k.in_name(1))
    rr = rows.reads()
    mean = rows.let("mean", rr.read("v", rows.stat(k.in_name(3))), rr, dt)
    rr = rows.reads()
    inv = rows.let("inv", rr.read("v", rows.stat(k.in_name(4))), rr, dt)
    sg, sgx = _grad_sums(k, rows, mean, inv, dt)
    rr = rows.reads()
    mg = rows.let("mean_g", div(rr.local("s", sg), k.c(rows.count, dt)), rr, dt)
    rr = rows.reads()
    mgx = rows.let("mean_gx", div(rr.local("s", sgx), k.c(rows.count, dt)), rr, dt)
    sw = rows.sweep("dx")
    r = sw.reads()
    iv = r.local("inv", inv)
    xh = mul(mul(sub(r.load("x", 1), r.local("mean", mean)), iv), r.local("mean_gx", mgx))
    g = mul(r.load("dy", 0), r.load("scale", 2))
    sw.store(k.out_name(0), mul(iv, sub(sub(g, r.local("mean_g", mg)), xh)), r)
    sw.close()
    return rows.kernel()


@expansion("BatchNormalization", impls=("default", "batch_stats"))
def batch_norm(k: KernelBuilder, impl: str) -> MapNode:
    """Inference: y = (x − mean[c]) / √(var[c] + ε) · scale[c] + bias[c] (either implementation).
    Training: only with the ``batch_stats`` implementation (``batch_norm_train``); by default it
    stays a library call, so that histories recorded before that map existed replay unchanged."""
    training = k.attr("training_mode", 0) if k.node.opset >= 14 else \
        len([m for m in k.node.outputs if m is not None]) > 1
    x = k.in_name(0)
    if len(k.shape(x)) < 2:
        raise NotExpandable("BatchNormalization needs an input of rank >= 2")
    if training and impl != "batch_stats":
        raise NotExpandable("training-mode BatchNormalization stays a library call by default; the "
                            "'batch_stats' implementation lowers it to one map over the channels")
    if training:
        return batch_norm_train(k)
    pw = Pointwise(k)
    r = pw.reads()
    ch = [pw.names[1]]
    scale, bias, mean, var = (r.read(conn, k.at(k.in_name(j), ch)) for j, conn in
                              enumerate(("scale", "bias", "mean", "var"), start=1))
    norm = div(sub(r.load("x", 0), mean), un("sqrt", add(var, k.c(k.attr("epsilon", 1e-5)))))
    pw.store(0, add(mul(norm, scale), bias), r)
    return pw.kernel()


@expansion("BatchNormInternal", domain=MS, impls=("default", "batch_stats"))
def batch_norm_internal(k: KernelBuilder, impl: str) -> MapNode:
    """onnxruntime-training's forward BatchNorm (outputs Y, running mean, running var, saved mean, saved
    inverse standard deviation): ``batch_norm_train`` with the two saved statistics, under ``batch_stats``
    as the standard op."""
    if impl != "batch_stats" or not k.attr("training_mode", 1):
        raise NotExpandable("BatchNormInternal stays a library call by default; the 'batch_stats' "
                            "implementation lowers it to one map over the channels")
    return batch_norm_train(k, saved=True)


@expansion("BatchNormalizationGrad", domain=MS, impls=("default", "batch_stats"))
def batch_norm_grad(k: KernelBuilder, impl: str) -> MapNode:
    """(dY, X, scale, saved mean, saved inv std) -> (dX, dscale, dbias), one map over the channels: Σdy and
    Σdy·x̂ (x̂ = (x − mean)·inv, float64 like the reference) are dbias and dscale, then
    dX = scale·inv/M·(M·dy − dbias − x̂·dscale) (M elements per channel)."""
    if impl != "batch_stats":
        raise NotExpandable("BatchNormalizationGrad stays a library call by default; the 'batch_stats' "
                            "implementation lowers it to one map over the channels")
    dt, shape = "float64", k.shape(k.in_name(1))
    rows = Rows(k, shape, [a for a in range(len(shape)) if a != 1])
    c = [rows.names[0]]
    sums = [rows.local(name, dt) for name in ("sum_dy", "sum_dy_xhat")]
    sw = rows.sweep("sums")
    r = sw.reads()
    dy = r.load("dy", 0, as_dtype=dt)
    xhat = mul(sub(r.load("x", 1, as_dtype=dt), r.read("mean", k.at(k.in_name(3), c))),
               r.read("inv", k.at(k.in_name(4), c)))
    sw.reduce("sum_dy", dy, r, sums[0], "sum")
    sw.reduce("sum_dy_xhat", mul(dy, xhat), r, sums[1], "sum")
    sw.close()
    for out, total in ((2, sums[0]), (1, sums[1])):
        rr = rows.reads()
        rows.store(k.out_name(out), rr.local("s", total), rr, f"param_grad_{out}")
    sw = rows.sweep("dx")
    r = sw.reads()
    inv = r.read("inv", k.at(k.in_name(4), c))
    xhat = mul(sub(r.load("x", 1, as_dtype=dt), r.read("mean", k.at(k.in_name(3), c))), inv)
    m = k.c(rows.count, dt)
    inner = sub(sub(mul(r.load("dy", 0, as_dtype=dt), m), r.local("s", sums[0])), mul(xhat, r.local("t", sums[1])))
    sw.store(k.out_name(0), mul(div(mul(r.read("scale", k.at(k.in_name(2), c)), inv), m), inner), r)
    sw.close()
    return rows.kernel()


def batch_norm_train(k: KernelBuilder, saved: bool = False) -> MapNode:
    """Training-mode BatchNormalization (opset >= 14: outputs Y, running mean, running var) as one map
    over the channels: Σx, then Σ(x − mean)² (two passes, in float64 like the reference, so the
    float32 result is rounded once), y = (x − mean)·inv·scale + bias, and the running statistics
    ``running·momentum + batch·(1 − momentum)`` (the batch variance biased, as ONNX defines it);
    ``saved``: also the batch mean and inv (BatchNormInternal's outputs 3 and 4)."""
    if k.node.opset < 14 and not saved:
        raise NotExpandable("training-mode BatchNormalization before opset 14 (five outputs) stays a library call")
    x, dt = k.in_name(0), "float64"
    shape = k.shape(x)
    rows = Rows(k, shape, [a for a in range(len(shape)) if a != 1])
    c = [rows.names[0]]
    total, sq = rows.local("sum", dt), rows.local("sq_sum", dt)
    sw = rows.sweep("sum")
    r = sw.reads()
    sw.reduce("sum", r.load("x", 0, as_dtype=dt), r, total, "sum")
    sw.close()
    rr = rows.reads()
    mean = rows.let("mean", div(rr.local("s", total), k.c(rows.count, dt)), rr, dt)
    sw = rows.sweep("sq_sum")
    r = sw.reads()
    d = sub(r.load("x", 0, as_dtype=dt), r.local("mean", mean))
    sw.reduce("sq_sum", mul(d, d), r, sq, "sum")
    sw.close()
    rr = rows.reads()
    var = rows.let("var", div(rr.local("s", sq), k.c(rows.count, dt)), rr, dt)
    rr = rows.reads()
    inv = rows.let("inv", un("recip", un("sqrt", add(rr.local("v", var), k.c(k.attr("epsilon", 1e-5), dt)))), rr, dt)
    sw = rows.sweep("out")
    r = sw.reads()
    norm = mul(sub(r.load("x", 0, as_dtype=dt), r.local("mean", mean)), r.local("inv", inv))
    sw.store(k.out_name(0), add(mul(norm, r.read("scale", k.at(k.in_name(1), c))),
                                r.read("bias", k.at(k.in_name(2), c))), r)
    sw.close()
    mom = float(k.attr("momentum", 0.9))
    for out, running, batch in ((1, 3, mean), (2, 4, var)):
        rr = rows.reads()
        keep = mul(rr.read("running", k.at(k.in_name(running), c)), k.c(mom, dt))
        rows.store(k.out_name(out), add(keep, mul(rr.local("batch", batch), k.c(1.0 - mom, dt))), rr,
                   f"running_{out}")
    for out, value in ((3, mean), (4, inv)) if saved else ():
        if k.out_name(out):
            rr = rows.reads()
            rows.store(k.out_name(out), rr.local("v", value), rr, f"saved_{out}")
    return rows.kernel()


__all__ = ["batch_norm", "batch_norm_grad", "batch_norm_internal", "batch_norm_train", "layer_norm", "layer_norm_grad", "norm_rows", "rms_norm"]
