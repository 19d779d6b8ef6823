"""Resize gradient rule (nearest, linear and cubic; the coordinate transformations torch exporters write; scales,
sizes and axes; up and down) against finite differences, onnxruntime (float32), the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, forward_model, rand
from transforms.autodiff import build_training_graph
from transforms.autodiff.registry import NoGradientError
from ir.interpolation import matrix

EMPTY = np.zeros((0,), np.float32)


def _case(x, attrs, scales=None, sizes=None, opset=17):
    inputs = [x, EMPTY, np.asarray(scales, np.float32) if scales is not None else EMPTY]
    if sizes is not None:
        inputs.append(np.asarray(sizes, np.int64))
    return OpCase("Resize", inputs, attrs, trainable=[0], ort_float64=False, opset=opset, fixed=[1, 2])


def test_nearest_upsampling_as_nn_upsample_exports_it():
    x = rand((2, 3, 3, 4), 1)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    check_op(_case(x, attrs, scales=[1, 1, 2, 2]), lambda x, *_: F.interpolate(x, scale_factor=2, mode="nearest"))


@pytest.mark.parametrize("ctm,align", [("pytorch_half_pixel", False), ("half_pixel", False),
                                       ("align_corners", True)])
def test_bilinear_upsampling(ctm, align):
    x = rand((2, 2, 3, 4), 2)
    attrs = {"mode": "linear", "coordinate_transformation_mode": ctm}
    check_op(_case(x, attrs, scales=[1, 1, 2, 2]),
             lambda x, *_: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=align))


@pytest.mark.parametrize("attrs,scales,sizes", [
    ({"mode": "nearest"}, [1, 1, 1.5, 0.5], None),                                        # round_prefer_floor
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "half_pixel_symmetric"}, [1, 1, 2.5, 1.5], None),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "align_corners"}, None,
     [2, 2, 7, 3]),
    ({"mode": "linear"}, [1, 1, 0.5, 1.75], None),                                         # down and up
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, None, [2, 2, 5, 9]),
    ({"mode": "cubic"}, [1, 1, 1.5, 0.8], None),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1, 1, 2, 2], None),
], ids=str)
def test_resize_variants(attrs, scales, sizes):
    check_op(_case(rand((2, 2, 4, 5), 3), attrs, scales=scales, sizes=sizes))


def test_axes_and_a_middle_axis_of_rank_3():
    x = rand((3, 4, 2), 4)
    check_op(_case(x, {"mode": "linear", "axes": [1]}, scales=[2.0], opset=18))


def test_interpolation_rows_are_partitions_of_unity():
    for attrs in ({"mode": "nearest"}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                  {"mode": "cubic", "exclude_outside": 1}):
        m = matrix(4, 9, 9 / 4, attrs)
        assert m.shape == (9, 4) and np.allclose(m.sum(axis=1), 1.0)


@pytest.mark.parametrize("attrs,variant", [({"mode": "linear", "antialias": 1}, "antialias 1"),
                                           ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
                                            "tf_crop_and_resize")])
def test_unsupported_variants_are_named(attrs, variant):
    model = forward_model(_case(rand((1, 1, 2, 2), 5), attrs, scales=[1, 1, 0.5, 0.5], opset=18), np.dtype(np.float32))
    with pytest.raises(NoGradientError) as err:
        build_training_graph(model, loss="mse", optimizer="sgd", trainable=["in0"])
    assert f"no gradient rule for op Resize" in str(err.value) and variant in str(err.value)
    assert "nn.Upsample" in str(err.value)
