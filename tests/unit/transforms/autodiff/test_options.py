"""TrainingOptions: defaults, validation with named options, and the JSON round trip."""
from __future__ import annotations

import json

import pytest

from ir.errors import StudioError
from transforms.autodiff import OptionError, TrainingOptions


def test_defaults_fill_the_optimizer_betas():
    assert TrainingOptions().betas == (0.9, 0.999)
    assert TrainingOptions(optimizer="lion").betas == (0.9, 0.99)
    assert TrainingOptions(optimizer="sgd").betas is None
    assert TrainingOptions(optimizer="adamw", betas=[0.8, 0.9]).betas == (0.8, 0.9)


@pytest.mark.parametrize("kwargs", [
    {"optimizer": "sgd", "momentum": 0.5, "weight_decay": 1e-4, "trainable": ["a", "b"]},
    {"loss": "mse", "optimizer": None, "batchnorm": "eval", "output": "y", "initial_values": False},
    {"optimizer": "lion", "lr": 3e-4, "ignore_index": -100},
    {},
])
def test_json_round_trip(kwargs):
    opts = TrainingOptions(**kwargs)
    data = opts.to_json()
    assert data["format"] == "dcstudio-training-options"
    text = json.dumps(data)
    assert TrainingOptions.from_json(text) == opts == TrainingOptions.from_json(json.loads(text))


@pytest.mark.parametrize("kwargs,words", [
    ({"loss": "hinge"}, "loss='hinge'"),
    ({"optimizer": "adam"}, "optimizer='adam'"),
    ({"lr": 0}, "lr"),
    ({"weight_decay": -1}, "weight_decay"),
    ({"betas": (0.9, 1.5)}, "betas"),
    ({"trainable": "fc1.weight"}, "trainable"),
    ({"ignore_index": 1.5}, "ignore_index"),
    ({"batchnorm": "frozen"}, "batchnorm"),
])
def test_invalid_options_name_the_option(kwargs, words):
    with pytest.raises(OptionError, match=words) as info:
        TrainingOptions(**kwargs)
    assert isinstance(info.value, StudioError) and isinstance(info.value, ValueError)


def test_from_json_rejects_unknown_keys_and_formats():
    with pytest.raises(OptionError, match="unknown training options"):
        TrainingOptions.from_json({"format": "dcstudio-training-options", "learning_rate": 1})
    with pytest.raises(OptionError, match="format"):
        TrainingOptions.from_json({"format": "something-else"})


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        TrainingOptions().lr = 1.0  # type: ignore[misc]
