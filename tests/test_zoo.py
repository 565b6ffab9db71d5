"""Topologies of the zoo, calibration, and the 224x224 ResNets in the integer graph."""

import pytest
import torch

from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import check_fits
from groupnet_hw.models.calibrate import THRESHOLD_FRAC, calibrate
from groupnet_hw.models.groupnet import GroupNet
from groupnet_hw.models.layers import BatchNorm
from groupnet_hw.models.zoo import ARCHS, arch_config
from conftest import randomize_bn, random_model


@pytest.mark.parametrize("arch,bases", [("resnet18", 1),
                                        pytest.param("resnet34", 1, marks=pytest.mark.slow)])
def test_imagenet_resnets_run_exactly_in_the_integer_graph(arch, bases):
    """7x7 stride-2 stem, max pooling, binary downsample, per-conv shortcuts, one theta
    per block and per-tensor alpha (the authors' layout): integer graph == fixed-point
    forward on a 224x224 RGB image; the board check names what it would need."""
    torch.manual_seed(0)
    model = GroupNet(arch_config(arch, variant="groupnet-star", bases=bases, gate="block",
                                 alpha="tensor")).eval()
    randomize_bn(model, torch.Generator().manual_seed(1))
    graph = compile_model(model)
    assert {"maxpool", "int_conv", "bin_conv", "mixer", "head"} <= set(graph.ops())
    assert graph[graph.input].channels == 3 and graph[graph.input].height == 224
    image = torch.randint(0, 256, (1, 3, 224, 224), generator=torch.Generator().manual_seed(2),
                          dtype=torch.uint8)
    values = execute(graph, image)
    assert torch.equal(values[graph.output], model.forward_quantized(image).logits)
    with pytest.raises(ValueError, match=r"needs at least .* MiB .* does not fit this board yet"):
        check_fits(graph, "de10nano")


def test_every_zoo_topology_builds():
    for arch in ARCHS:
        with torch.device("meta"):
            GroupNet(arch_config(arch, bases=1))


def test_calibration_gives_thresholds_precision_and_joins_one_format():
    model = random_model(3, image_size=8, stem_channels=4, stages=[[4, 1, 1], [6, 1, 2]], bases=2)
    images = torch.randint(0, 256, (32, 8, 8), generator=torch.Generator().manual_seed(0),
                           dtype=torch.uint8)
    chosen = calibrate(model, images)
    # the first layer's BN of every base feeds only a sign: free precision
    assert chosen["blocks.0.bases.0.layer1.bn"] == THRESHOLD_FRAC
    # the stem output and every base output meet at adds and the aggregation
    joined = {chosen["stem.1"], chosen["blocks.0.bases.0.layer2.bn"],
              chosen["blocks.0.bases.1.layer2.bn"]}
    assert len(joined) == 1 and joined.pop() < THRESHOLD_FRAC
    assert all(int(m.out_frac) == chosen[n] for n, m in model.named_modules()
               if isinstance(m, BatchNorm))
    # still exact after calibration
    graph = compile_model(model)
    assert torch.equal(execute(graph, images)[graph.output], model.forward_quantized(images).logits)
