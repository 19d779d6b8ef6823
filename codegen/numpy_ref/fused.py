"""Reference kernels of the fused library nodes (``ir.fused_ops``), ai.dcstudio domain.

- ``MatMul``/``Gemm``/``FusedMatMul`` with an ``epilogue``: the contraction's own kernel
  computes the raw product ``@acc``, then the epilogue map runs over it with the map
  semantics of ``maps.run_map`` (the product is never an output).
- ``GroupedGemm``: each member's kernel in order, on the group's inputs.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ir import dtypes
from ir.containers import Container
from ir.fused_ops import ACC, CONTRACTIONS, EPILOGUE_KEYS, GROUP
from ir.serialize import _node_from_json

from .maps import run_map
from .registry import STUDIO_DOMAIN, Inputs, OpContext, kernel, lookup


def _contract(op_type: str, inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> np.ndarray:
    domain = attrs.get("gemm_domain", "")
    fn = lookup(domain, op_type)
    plain = {k: v for k, v in attrs.items() if k not in EPILOGUE_KEYS}
    acc = dtypes.to_numpy(attrs["acc_dtype"]) if attrs.get("acc_dtype") else None
    sub = OpContext(opset=ctx.opset, n_outputs=1, label=ctx.label, output_dtypes=(acc,), extra=ctx.extra)
    return np.asarray(fn(list(inputs[:attrs["gemm_inputs"]]), plain, sub)[0])


def with_epilogue(op_type: str, inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """The contraction, then the epilogue map over its product."""
    acc = _contract(op_type, inputs, attrs, ctx)
    epi = _node_from_json(attrs["epilogue"])
    env = {f"@in{k}": np.asarray(x) for k, x in enumerate(inputs) if x is not None}
    env[ACC] = acc.astype(dtypes.to_numpy(attrs["acc_dtype"]), copy=False)
    outs = {}
    for k, (shape, dt) in enumerate(zip(ctx.output_shapes, ctx.output_dtypes)):
        outs[f"@out{k}"] = Container(f"@out{k}", tuple(shape), np.dtype(dt).name)
    result = run_map(epi, env, outs, {})
    return [result[f"@out{k}"] for k in range(len(outs))]


for _domain, _op in CONTRACTIONS:
    kernel(_op, domain=STUDIO_DOMAIN)(partial(with_epilogue, _op))


@kernel(GROUP, domain=STUDIO_DOMAIN)
def grouped(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """Every member contraction on its inputs; outputs in the group's order."""
    results: list[np.ndarray | None] = [None] * ctx.n_outputs
    for rec in attrs["members"]:
        fn = lookup(rec["domain"], rec["op_type"])
        ins = [inputs[i] if i >= 0 else None for i in rec["inputs"]]
        extra = {"impl": rec["impl"]} if rec["impl"] != "default" else {}
        sub = OpContext(opset=ctx.opset, n_outputs=len(rec["outputs"]),
                        output_shapes=tuple(ctx.output_shapes[i] for i in rec["outputs"]),
                        output_dtypes=tuple(ctx.output_dtypes[i] for i in rec["outputs"]),
                        label=ctx.label, extra=extra)
        for i, val in zip(rec["outputs"], fn(ins, rec["attrs"], sub)):
            results[i] = np.asarray(val)
    return results
