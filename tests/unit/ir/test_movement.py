"""ir.movement: per-kernel bytes and FLOPs against hand-computed values on the BERT-base layer graph.

Shapes (B=8, L=128, H=768, heads=12, FFN=3072), float32 = 4 bytes.
"""
from __future__ import annotations

import pytest

from ir.containers import Role
from ir.movement import Estimate, kernel_estimate, lower_bound, report
from ir.onnx_import import import_model

B, L, H, NH, FF = 8, 128, 768, 12, 3072
F32 = 4


@pytest.fixture(scope="module")
def bert(fixtures_dir):
    return import_model(fixtures_dir / "ort_artifacts/bert_layer_base/legacy16/train_step_adamw.onnx")


def test_estimate_adds():
    a, b = Estimate(1, 2, 3, 4), Estimate(10, 20, 30, 40)
    s = a + b
    assert (s.bytes_read, s.bytes_written, s.accesses, s.flops) == (11, 22, 33, 44)
    assert s.bytes == 33 and (s - b) == a
    assert Estimate().intensity == 0.0 and Estimate(2, 2, 0, 8).intensity == 2.0


def test_matmul_bytes_and_flops(bert):
    e = kernel_estimate(bert, bert.node("/layer/attention/self/query/MatMul"))
    assert e.bytes_read == (B * L * H + H * H) * F32          # activation + transposed weight, once each
    assert e.bytes_written == B * L * H * F32
    assert e.flops == 2 * B * L * H * H                       # one multiply-add per (b, l, n, k)
    assert e.accesses == B * L * H + H * H + B * L * H
    assert e.intensity == pytest.approx(2 * B * L * H * H / ((2 * B * L * H + H * H) * F32))


def test_attention_scores_matmul(bert):
    e = kernel_estimate(bert, bert.node("/layer/attention/self/MatMul"))
    d = H // NH
    assert e.bytes_read == 2 * B * NH * L * d * F32
    assert e.bytes_written == B * NH * L * L * F32
    assert e.flops == 2 * B * NH * L * L * d


def test_bias_add_reads_the_bias_once(bert):
    e = kernel_estimate(bert, bert.node("/layer/attention/self/query/Add"))
    assert e.bytes_read == (H + B * L * H) * F32
    assert e.bytes_written == B * L * H * F32


def test_shape_reads_metadata_only(bert):
    shape_ops = [n for n in bert.nodes.values() if getattr(n, "op_type", "") in ("Shape", "Size")]
    assert shape_ops
    for n in shape_ops:
        assert kernel_estimate(bert, n).bytes_read == 0


def test_lower_bound_is_interface_read_once_and_written_once(bert):
    params = 4 * H * H + 4 * H + 2 * 2 * H + 2 * H * FF + FF + H     # Q K V O, biases, 2 LayerNorms, FFN
    assert sum(bert.containers[n].numel() for n in bert.inputs
               if bert.containers[n].role is Role.PARAMETER) == params
    constants = sum(bert.containers[n].nbytes() for n in bert.values
                    if any(m is not None and m.container == n for k in bert.nodes.values() for m in k.inputs))
    expected = (2 * B * L * H * F32        # input and target, read once
                + 3 * params * F32         # p, m, v read once
                + 3 * params * F32         # p, m, v written once
                + 4 + 4 + 4                # learning_rate, step, loss
                + constants)
    assert lower_bound(bert) == expected
    assert lower_bound(bert) == pytest.approx(176.4e6, rel=1e-3)   # ANCHORS.md: 176 MB


def test_report_total_is_the_sum_of_kernels(bert):
    rep = report(bert)
    assert len(rep.kernels) == len(bert.nodes)
    assert rep.total.bytes == sum(k.estimate.bytes for k in rep.kernels)
    assert rep.ratio == pytest.approx(rep.total.bytes / rep.bound_bytes)
    # ANCHORS.md counts 1,834 MB op by op for this graph (it also charges Shape/Size for their input)
    assert rep.total.bytes == pytest.approx(1834e6, rel=0.005)


# --- ops whose FLOPs come from their expansion into a map (ir/lowering) ------------------------
# FLOP convention: every operation in a tasklet expression counts 1 (exp, erf and sqrt included),
# a wcr update counts 1, times the iterations of the tasklet's enclosing maps.

def test_add_flops_one_per_element(bert):
    e = kernel_estimate(bert, bert.node("/layer/attention/self/query/Add"))
    assert e.flops == B * L * H                               # one add per output element
    assert e.accesses == B * L * H + B * L * H + B * L * H    # bias per access, activation, output


def test_softmax_bytes_and_flops(bert):
    e = kernel_estimate(bert, bert.node("/layer/attention/self/Softmax"))
    rows, n = B * NH * L, L
    assert e.bytes_read == rows * n * F32 and e.bytes_written == rows * n * F32
    # two-pass: max (1 wcr per element); sum of exp(x - max): sub, exp, wcr add (3); exp(x - max) / sum (3)
    assert e.flops == rows * (1 * n + 3 * n + 3 * n)


def test_layernorm_bytes_and_flops(bert):
    node = bert.node("/layer/attention/output/LayerNorm/Mul/LayerNormFusion/")
    e = kernel_estimate(bert, node)
    rows = B * L
    assert e.bytes_read == (rows * H + H + H) * F32                 # x, scale, bias
    assert e.bytes_written == (rows * H + rows + rows) * F32        # y, saved mean, saved inv std
    # Σx (H wcr adds); mean = Σ/H (1); d = x - mean, Σ d*d (sub, mul, wcr add: 3H);
    # inv_std = 1/sqrt(var/H + eps) (div, add, sqrt, recip: 4); y = d*inv_std*scale + bias (4H)
    assert e.flops == rows * (H + 1 + 3 * H + 4 + 4 * H)


def test_gelu_bytes_and_flops(bert):
    e = kernel_estimate(bert, bert.node("Gelu"))
    n = B * L * FF
    assert e.bytes_read == n * F32 and e.bytes_written == n * F32
    # 0.5 * x * (1 + erf(x * 1/sqrt(2))): mul, erf, add, mul, mul
    assert e.flops == 5 * n


def test_op_level_and_expanded_figures_agree(bert):
    from ir import lowering
    g = bert.clone()
    before = {k.node_id: k.estimate for k in report(g).kernels}
    for ident in ("/layer/attention/self/Softmax", "Gelu", "/layer/attention/self/query/Add"):
        m = lowering.expand_node(g, ident)
        after = kernel_estimate(g, m)
        assert after == before[ident], ident
