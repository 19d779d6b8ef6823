"""Would stacking the BERT-base layer's Q/K/V GEMMs pay on this GPU? Measured before anyone builds it.

``lease.py --phases …,stacking`` runs this on a lent GPU. Issue 14 asks ``tune --objective time`` for a
history 1.05x faster than the hand recipe on the bundled example. The step is GEMM-bound on both
machines: on an H100 (stop 32) about 1.7 ms of the 1.91 ms graph step ran in cuBLAS, at about half
the float32 peak the same GPU reached on a 4096³ GEMM. The recipe runs the three projections of
a layer input, and the three weight gradients of them, as separate calls (a grouped GEMM runs its
members in order): each 1024×768×768, whose 768×1024 or 768×768 product gives the GPU few tiles.
A stacked form makes each family one GEMM with three times the tiles:

- ``qkv_forward``: X (1024×768) times Wq, Wk, Wv (768×768 each, stored [out, in], read transposed),
  as three calls; stacked, X times one (2304×768) weight, once with the weights copied into the
  stacked buffer in the step and once without (the optimizer updating a stacked buffer in place);
- ``qkv_weight_grad``: dWi = dYiᵀ X (three 768×1024×768 calls); stacked, [dYq dYk dYv]ᵀ X, once
  with the output gradients copied into a stacked buffer and once written there by their producers;
- ``reference``: the step's other GEMMs as the recipe runs them (the FFN and the attention output
  projection, forward and backward), for scale.

``run(xp, timer, matmul)`` takes the array module (CuPy there, NumPy here), a timer (``lease._graph_time``
there: seconds per call inside a captured CUDA graph) and the GEMM to call (there the CUDA library's
``matmul``, cuBLAS through ctypes, as exported steps call it: CuPy's own matmul refuses to run while a
stream captures; here ``numpy.matmul``); it checks that each stacked form computes
what the separate calls compute (``check``) and returns one row per form: microseconds, and the
saving against the separate calls. Nothing here changes dcstudio; the numbers decide whether a
stacking transformation is worth building.
"""
from __future__ import annotations

TOKENS, HIDDEN, FFN = 1024, 768, 3072


def _operands(xp, seed: int = 0) -> dict:
    rng = xp.random.default_rng(seed)
    f = xp.float32

    def rnd(*shape):
        return (rng.standard_normal(shape, dtype=f) * 0.05).astype(f)
    ws = [rnd(HIDDEN, HIDDEN) for _ in range(3)]
    dys = [rnd(TOKENS, HIDDEN) for _ in range(3)]
    return {"x": rnd(TOKENS, HIDDEN), "ws": ws, "w_stacked": xp.concatenate(ws, axis=0),
            "ys": [xp.empty((TOKENS, HIDDEN), f) for _ in range(3)], "y_stacked": xp.empty((TOKENS, 3 * HIDDEN), f),
            "dys": dys, "dy_stacked": xp.concatenate(dys, axis=1),
            "dws": [xp.empty((HIDDEN, HIDDEN), f) for _ in range(3)], "dw_stacked": xp.empty((3 * HIDDEN, HIDDEN), f),
            "h": rnd(TOKENS, FFN), "w1": rnd(FFN, HIDDEN), "w2": rnd(HIDDEN, FFN),
            "y_ffn": xp.empty((TOKENS, FFN), f), "y_out": xp.empty((TOKENS, HIDDEN), f),
            "dw1": xp.empty((FFN, HIDDEN), f), "dw2": xp.empty((HIDDEN, FFN), f),
            "dw_out": xp.empty((HIDDEN, HIDDEN), f)}


def forms(xp, a: dict, mm=None) -> dict:
    """name -> a call doing that form once (into preallocated outputs), each GEMM through ``mm``."""
    mm = mm or xp.matmul
    x, ws, ys, dys, dws = a["x"], a["ws"], a["ys"], a["dys"], a["dws"]

    def separate_forward():
        for w, y in zip(ws, ys):
            mm(x, w.T, out=y)

    def stacked_forward_copying():
        for k, w in enumerate(ws):
            a["w_stacked"][k * HIDDEN:(k + 1) * HIDDEN] = w
        mm(x, a["w_stacked"].T, out=a["y_stacked"])

    def separate_weight_grad():
        for dy, dw in zip(dys, dws):
            mm(dy.T, x, out=dw)

    def stacked_weight_grad_copying():
        for k, dy in enumerate(dys):
            a["dy_stacked"][:, k * HIDDEN:(k + 1) * HIDDEN] = dy
        mm(a["dy_stacked"].T, x, out=a["dw_stacked"])

    def reference():                      # the step's other GEMMs, as the recipe's module calls them
        mm(x, a["w1"].T, out=a["y_ffn"])               # FFN up, forward
        mm(a["h"], a["w2"].T, out=a["y_out"])          # FFN down, forward
        mm(a["y_out"], a["w2"], out=a["y_ffn"])        # FFN down, dX
        mm(a["h"], a["w1"], out=a["y_out"])            # FFN up, dX
        mm(a["h"].T, x, out=a["dw1"])                  # FFN weight gradients
        mm(x.T, a["h"], out=a["dw2"])
        mm(x, ws[0].T, out=ys[0])                      # attention output projection: forward, dX, dW
        mm(ys[0], ws[0], out=ys[1])
        mm(ys[0].T, x, out=a["dw_out"])

    return {"qkv_forward separate": separate_forward,
            "qkv_forward stacked, weights copied in the step": stacked_forward_copying,
            "qkv_forward stacked, weights kept stacked": lambda: mm(x, a["w_stacked"].T, out=a["y_stacked"]),
            "qkv_weight_grad separate": separate_weight_grad,
            "qkv_weight_grad stacked, gradients copied in the step": stacked_weight_grad_copying,
            "qkv_weight_grad stacked, gradients written stacked":
                lambda: mm(a["dy_stacked"].T, x, out=a["dw_stacked"]),
            "reference: the step's other GEMMs": reference}


def check(xp, a: dict, f: dict) -> float:
    """The largest difference between a stacked form's product and the separate calls', relative to the
    largest product (float32 sums in another order: ~1e-6)."""
    f["qkv_forward separate"]()
    f["qkv_forward stacked, weights copied in the step"]()
    f["qkv_weight_grad separate"]()
    f["qkv_weight_grad stacked, gradients copied in the step"]()
    worst = 0.0
    for k in range(3):
        for got, want in ((a["y_stacked"][:, k * HIDDEN:(k + 1) * HIDDEN], a["ys"][k]),
                          (a["dw_stacked"][k * HIDDEN:(k + 1) * HIDDEN], a["dws"][k])):
            scale = float(xp.abs(want).max()) or 1.0
            worst = max(worst, float(xp.abs(got - want).max()) / scale)
    return worst


def run(xp, timer, matmul=None) -> list[dict]:
    """One row per form: ``us`` per call, and for a stacked form ``saving_us`` against its separate calls."""
    a = _operands(xp)
    f = forms(xp, a, matmul)
    error = check(xp, a, f)
    if error > 1e-4:
        raise AssertionError(f"a stacked GEMM differs from the separate calls by {error:.2g} of the largest product")
    rows = [{"form": name, "us": timer(fn) * 1e6} for name, fn in f.items()]
    base = {r["form"].split(" ")[0]: r["us"] for r in rows if r["form"].endswith("separate")}
    for r in rows:
        family = r["form"].split(" ")[0]
        if family in base and not r["form"].endswith("separate"):
            r["saving_us"] = base[family] - r["us"]
    return rows


def table(rows: list[dict]) -> str:
    return "\n".join(f"  {r['us']:8.1f} us  {r['form']:<56}" + (f" saves {r['saving_us']:7.1f} us"
                                                                 if "saving_us" in r else "") for r in rows)
