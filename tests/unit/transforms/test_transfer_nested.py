"""Transfer tuning across the blocks of a stage (``transforms.layers``): torchvision nests a
``Sequential`` of blocks inside a ``Sequential`` of stages (EfficientNet's ``features.6.1``), so a
kernel's first numbered component is the stage and the block is numbered once more. Built here: a
small residual CNN of that shape, exported by the TorchScript exporter, trained with MSE + AdamW.
Its equal blocks are found although a block reads the previous block's output (whose name sorts
differently against its own names for each index) and owns per-channel BatchNorm statistics
(constants that differ between equal blocks), and tuning one block and transferring reaches the
bytes of the whole-graph recipe and still matches the original model."""
from __future__ import annotations

import onnx
import pytest

from studio.session.recipe import CNN, run_recipe, tune_one_layer
from studio.session import Session
from transforms.layers import Family, equal_group, layer_of, layers, parse_key

TRAINING = {"loss": "mse", "optimizer": "adamw"}


def _stages(width: int = 8, blocks: int = 3):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                       nn.ReLU(), nn.Conv2d(width, width, 1, bias=False), nn.BatchNorm2d(width))

        def forward(self, x):
            return x + self.block(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()),
                nn.Sequential(*[Block() for _ in range(blocks)]))
            self.head = nn.Linear(width, 4)

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))
    torch.manual_seed(0)
    return Net().train(), (torch.randn(2, 3, 8, 8),)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tests.peer.test_autodiff_models import _export
    from transforms.autodiff import build_training_graph
    net, example = _stages()
    path = tmp_path_factory.mktemp("nested") / "stages.onnx"
    onnx.save(build_training_graph(_export(net, example), **TRAINING), path)
    return path


def test_nested_numbering_names_the_block():
    stage = Family("features.6")
    assert layer_of("/features/features.6/features.6.1/block/block.0/block.0.0/Conv") == (stage, 1)
    assert layer_of("update/features.6.2.block.0.0.weight/Sub") == (stage, 2)
    assert layer_of("grad//features/features.6/features.6.1/Add_output_0/Sum") == (stage, 1)
    assert layer_of("/features/features.6/Add") == (Family("features"), 6)        # in the stage, in no block
    assert layer_of("/layer1/layer1.0/conv1/Conv") == (Family("layer1"), 0)       # ResNet: numbered once
    assert parse_key("features.6.1") == (stage, 1) and stage.key(1) == "features.6.1"
    assert stage.rename('{"name": "features.6.1.block.0.0.weight"} /features.6/features.6.1/x', 1, 2) == \
        '{"name": "features.6.2.block.0.0.weight"} /features.6/features.6.2/x'


def test_equal_blocks_of_a_stage_are_found(model):
    g = Session.open(model, autosave=False).graph
    stage = Family("features.1")
    assert sorted(layers(g)[stage]) == [0, 1, 2]
    # the last block's output gradient has one term (no residual reads it): it differs from the others
    assert equal_group(g, stage) == (0, [1])


def test_tuning_one_block_reaches_the_recipe(model):
    whole = Session.open(model, autosave=False)
    run_recipe(whole, CNN)
    one = Session.open(model, autosave=False)
    counts = tune_one_layer(one, CNN)
    assert counts.get("transfer", 0) > 0
    assert one.metrics().bytes <= whole.metrics().bytes
    assert one.validate().ok
