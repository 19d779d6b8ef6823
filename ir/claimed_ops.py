"""The ops the importer claims, per domain ('' is the default ONNX domain).

An op is claimed only when the reference executor implements it and the ONNX
backend node test cases made only of claimed ops pass at >= 95 %
(tests/peer/test_node_suite.py). ``EXCLUDED_CASES`` lists every in-scope node
test case that is not run or does not pass, with its reason.
"""
from __future__ import annotations

CLAIMED_OPS: dict[str, frozenset[str]] = {
    "": frozenset({
        'Add', 'BatchNormalization', 'Cast', 'Concat', 'Constant', 'ConstantOfShape', 'Conv', 'ConvTranspose',
        'Div', 'Dropout', 'Equal', 'Erf', 'Exp', 'Expand', 'Flatten', 'GatherElements', 'Gelu', 'Gemm',
        'GlobalAveragePool', 'Identity', 'LayerNormalization', 'LessOrEqual', 'LogSoftmax', 'MatMul', 'MaxPool',
        'MaxPoolGrad', 'Mul', 'Neg', 'Not', 'Pow', 'Reciprocal', 'ReduceMean', 'ReduceSum', 'Relu', 'Reshape',
        'ScatterElements', 'Shape', 'Size', 'Slice', 'Softmax', 'SoftmaxCrossEntropyLoss', 'Sqrt', 'Squeeze',
        'Sub', 'Sum', 'Transpose', 'Unsqueeze', 'Where', 'Less', 'RandomUniformLike', 'Sigmoid'}),
    "com.microsoft": frozenset({
        'BatchNormInternal', 'BatchNormalizationGrad', 'ConvGrad', 'FusedMatMul', 'Gelu', 'GeluGrad',
        'LayerNormalizationGrad', 'ReluGrad', 'Scale', 'SoftmaxCrossEntropyLossGrad', 'SoftmaxGrad_13'}),
    "ai.dcstudio": frozenset({"AdamW", "SGD", "Lion"}),
}

EXCLUDED_CASES: dict[str, str] = {}


def is_claimed(domain: str, op_type: str) -> bool:
    dom = "" if domain in ("", "ai.onnx") else domain
    return op_type in CLAIMED_OPS.get(dom, frozenset())
