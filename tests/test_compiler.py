"""Integer graph == quantized eval (verification level 2), passes, ranges, schedule."""

import pytest
import torch

from groupnet_hw.compiler import cycles
from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.passes import (analyze_ranges, compile_model, fold_postops,
                                         fold_thresholds)
from groupnet_hw.compiler.schedule import choose_folding, schedule
from groupnet_hw.compiler.trace import trace
from conftest import random_images, random_model

CONFIGS = [
    dict(image_size=8, stem_channels=4, blocks=[[4, 1], [6, 2]], bases=2, num_classes=10),
    dict(image_size=7, stem_channels=3, blocks=[[5, 1]], bases=1, num_classes=3),
    dict(image_size=9, stem_channels=5, blocks=[[5, 2], [7, 1]], bases=3, num_classes=4,
         dilations=[1, 2, 3]),
    dict(image_size=6, stem_channels=2, blocks=[[3, 1], [3, 1], [4, 2]], bases=4, num_classes=5,
         dilations=[2, 1, 1, 2]),
]


@pytest.mark.parametrize("seed", range(8))
def test_integer_graph_equals_quantized_eval(seed):
    cfg = CONFIGS[seed % len(CONFIGS)]
    model = random_model(seed, **cfg)
    images = random_images(seed, 16, cfg["image_size"])
    graph = compile_model(model)
    values = execute(graph, images, check_ranges=True)
    q = model.forward_quantized(images, keep_trace=True)
    assert torch.equal(values["head"], q.logits)
    assert torch.equal(values["classes"], q.classes)
    for name, ref in q.trace.items():  # every intermediate the two share
        if name in values and not isinstance(values[name], list):
            got = values[name]
            if name in graph and graph[name].kind == "bits":
                ref = (ref >= 0).to(torch.int64)
            assert torch.equal(got, ref), name


@pytest.mark.parametrize("seed", range(4))
def test_threshold_folding_preserves_every_output(seed):
    cfg = CONFIGS[seed]
    model = random_model(seed + 10, **cfg)
    images = random_images(seed, 8, cfg["image_size"])
    before = analyze_ranges(fold_postops(trace(model)))
    after = analyze_ranges(fold_thresholds(fold_postops(trace(model))))
    assert "threshold" not in before.ops() and "threshold" in after.ops()
    vb, va = execute(before, images), execute(after, images)
    assert torch.equal(vb["head"], va["head"])
    for node in after:
        if node.op == "threshold":
            assert torch.equal(va[node.name], vb[node.name])  # bits == sign(postop)


def test_passes_fold_every_float_node():
    graph = compile_model(random_model(0, **CONFIGS[0]))
    assert not {"scale", "relu", "batchnorm"} & set(graph.ops())
    assert all(n.lo is not None for n in graph)


def test_range_analysis_holds_on_extreme_inputs():
    cfg = CONFIGS[2]
    model = random_model(5, **cfg)
    graph = compile_model(model)
    size = cfg["image_size"]
    extremes = torch.stack([torch.zeros(size, size), torch.full((size, size), 255),
                            (torch.arange(size * size).view(size, size) % 2) * 255]).to(torch.uint8)
    execute(graph, extremes, check_ranges=True)


@pytest.mark.parametrize("pixels,c_out,n_in,target", [(64, 16, 144, 64), (16, 16, 144, 64),
                                                      (64, 16, 9, 64), (36, 7, 45, 100)])
def test_folding_meets_target_with_least_parallelism(pixels, c_out, n_in, target):
    pe, simd = choose_folding(pixels, c_out, n_in, target)
    assert cycles.mvu_cycles(pixels, c_out, n_in, pe, simd) <= target
    for p in range(1, c_out + 1):
        for s in range(1, n_in + 1):
            if cycles.mvu_cycles(pixels, c_out, n_in, p, s) <= target:
                assert p * s >= pe * simd


def test_default_network_fits_de10nano_and_reports():
    from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig
    sched = schedule(compile_model(GroupNet(GroupNetConfig()).eval()))
    d = sched.to_dict()
    assert all(d["resources"][k] <= d["budget"][k] for k in ("alm", "m10k", "dsp"))
    assert d["frame_cycles"] == max(u["cycles"] for u in d["units"])
    assert d["base_mapping"] == "parallel"
    # skip FIFOs exist for every base and cover the conv path's lookahead
    # every join (residual add, base mixer) has a FIFO on each input; the skips of the
    # first block cover at least a row of lookahead
    assert len(sched.fifos) == 5 * 2 + 2
    assert all(fifo["stem"] > sched.graph["input"].width
               for name, fifo in sched.fifos.items() if name.startswith("block0.base"))


def test_unknown_board_is_rejected():
    with pytest.raises(ValueError, match="unknown board"):
        schedule(compile_model(random_model(0, **CONFIGS[1])), board="nope")


def test_range_analysis_refuses_what_int64_cannot_hold():
    """A post-op whose worst-case product leaves int64 is named, not left to wrap."""
    graph = compile_model(random_model(3, image_size=6, stem_channels=3, blocks=[[3, 1]],
                                       bases=2, num_classes=3))
    node = next(n for n in graph if n.op == "postop")
    node.attrs["A"] = node.attrs["A"].clone().fill_(1 << 60)
    with pytest.raises(ValueError, match=rf"{node.name}: its product before the shift "
                                         r"can reach 2\*\*\d+, beyond int64"):
        analyze_ranges(graph)
