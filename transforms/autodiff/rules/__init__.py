"""Gradient rules, one file per op family; importing this package fills ``GRADIENTS``.

- ``arithmetic``: Add Sub Mul Div Pow Neg Sqrt Reciprocal Exp Log Abs Sin Cos Sum Mean
- ``activation``: Tanh Sigmoid Relu LeakyRelu Gelu Erf HardSigmoid HardSwish Softmax LogSoftmax Softplus Clip
- ``contraction``: MatMul Gemm;  ``conv``: Conv ConvTranspose;  ``resize``: Resize (nearest, linear)
- ``normalization``: BatchNormalization LayerNormalization
- ``pooling``: MaxPool AveragePool GlobalAveragePool
- ``reduction``: ReduceSum ReduceMean ReduceSumSquare
- ``movement``: Reshape Flatten Squeeze Unsqueeze Transpose Expand Tile Identity Cast CastLike
- ``indexing``: Concat Split Slice Gather Where
- ``dropout``: Dropout
- ``einsum``: Einsum
- ``piecewise``: Floor Ceil Round Sign Shape Size Range (no differentiable input)
- ``selection``: Max Min ReduceMax ReduceMin GatherElements ScatterND CumSum
- ``padding``: Pad (constant, reflect, edge, wrap)
"""
from transforms.autodiff.rules import (  # noqa: F401  (sorted; each import registers its rules)
    activation,
    arithmetic,
    contraction,
    conv,
    dropout,
    einsum,
    indexing,
    movement,
    normalization,
    padding,
    piecewise,
    pooling,
    reduction,
    resize,
    selection,
)
