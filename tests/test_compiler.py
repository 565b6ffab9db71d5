"""Integer graph == fixed-point forward (verification level 2), passes, ranges, schedule."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupnet_hw.compiler import cycles
from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.frontend import lower
from groupnet_hw.compiler.passes import (analyze_ranges, compile_model, fold_relu,
                                         fold_thresholds, fuse_gates)
from groupnet_hw.compiler.schedule import choose_folding, schedule
from groupnet_hw.models.groupnet import VARIANTS
from groupnet_hw.sim.verify import first_divergence
from conftest import random_images, random_model

CONFIGS = [
    dict(image_size=8, stem_channels=4, stages=[[4, 1, 1], [6, 1, 2]], bases=2, num_classes=10),
    dict(image_size=7, stem_channels=3, stages=[[5, 1, 1]], bases=1, num_classes=3),
    dict(image_size=9, stem_channels=5, stages=[[5, 1, 2], [7, 1, 1]], bases=3, num_classes=4,
         dilations=[[1, 2, 3], [1, 1, 2]]),
    dict(image_size=6, stem_channels=2, stages=[[3, 2, 1], [4, 1, 2]], bases=4, num_classes=5,
         dilations=[[2, 1, 1, 2], [1, 1, 1, 1]]),
]


def _check_exact(model, images):
    graph = compile_model(model)
    values = execute(graph, images, check_ranges=True)
    q = model.forward_quantized(images)
    assert torch.equal(values[graph.output], q.logits), first_divergence(graph, model, images)
    assert first_divergence(graph, model, images, values) is None
    return graph


@pytest.mark.parametrize("seed", range(8))
def test_integer_graph_equals_fixed_point_forward(seed):
    cfg = CONFIGS[seed % len(CONFIGS)]
    model = random_model(seed, **cfg)
    _check_exact(model, random_images(seed, 16, cfg["image_size"]))


@st.composite
def family_configs(draw):
    """Any variant, K, activation bits, channels (not multiples of anything), strides,
    dilations, shortcut kind, alpha and gate granularity."""
    bases = draw(st.integers(1, 4))
    size = draw(st.integers(5, 9))
    stem = draw(st.integers(1, 6))
    stages, prev, cur = [], stem, size
    for _ in range(draw(st.integers(1, 2))):
        stride = draw(st.sampled_from([1, 2]))
        channels = draw(st.integers(prev, prev + 3))
        stages.append([channels, draw(st.integers(1, 2)), stride])
        prev = channels
    sizes, cur = [], size
    for _, _, stride in stages:
        cur = (cur - 1) // stride + 1
        sizes.append(cur)
    dilations = [[draw(st.integers(1, max(1, s - 1))) for _ in range(bases)] for s in sizes]
    return dict(variant=draw(st.sampled_from(list(VARIANTS))), image_size=size,
                in_channels=draw(st.sampled_from([1, 3])), stem_channels=stem,
                stem_kernel=draw(st.sampled_from([1, 3])), stages=stages, bases=bases,
                dilations=dilations, num_classes=draw(st.integers(2, 5)),
                act_bits=draw(st.sampled_from([1, 2, 4])),
                act_beta=draw(st.sampled_from([1.0, 2.5])),
                shortcut=draw(st.sampled_from(["A", "conv"])),
                alpha=draw(st.sampled_from(["channel", "tensor"])),
                gate=draw(st.sampled_from(["base", "block"]))), draw(st.integers(0, 1000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_configs())
def test_every_family_member_is_exact(case):
    """Hypothesis: fixed-point forward == integer graph, exactly, across the family."""
    cfg, seed = case
    model = random_model(seed, **cfg)
    gen = torch.Generator().manual_seed(seed)
    size, c = cfg["image_size"], cfg["in_channels"]
    images = torch.randint(0, 256, (6, c, size, size), generator=gen, dtype=torch.uint8)
    _check_exact(model, images)


@pytest.mark.parametrize("seed", range(4))
def test_threshold_folding_preserves_every_output(seed):
    cfg = dict(CONFIGS[seed], act_bits=(1, 2, 4, 1)[seed])
    model = random_model(seed + 10, **cfg)
    images = random_images(seed, 8, cfg["image_size"])
    before = analyze_ranges(fuse_gates(fold_relu(lower(model))))
    after = analyze_ranges(fold_thresholds(analyze_ranges(fuse_gates(fold_relu(lower(model))))))
    assert "postop" in {before.producer(n.inputs[0]).op for n in before if n.op == "threshold"}
    # every threshold whose post-op fed only it now compares the accumulator itself
    for n in after:
        if n.op == "threshold" and after.producer(n.inputs[0]).op == "postop":
            assert len(after.consumers(n.inputs[0])) > 1
    assert any(after.producer(n.inputs[0]).op == "bin_conv" for n in after if n.op == "threshold")
    vb, va = execute(before, images), execute(after, images)
    assert torch.equal(vb[before.output], va[after.output])
    for node in after:
        if node.op == "threshold":
            assert torch.equal(va[node.name], vb[node.name])  # levels == quant(postop)


def test_passes_fold_every_float_node():
    graph = compile_model(random_model(0, **CONFIGS[0]))
    assert "relu" not in graph.ops() and "gate" not in graph.ops()
    assert all(n.lo is not None for n in graph)


def test_no_node_name_carries_meaning():
    """Renaming every node leaves the integer graph's result unchanged."""
    model = random_model(1, **CONFIGS[0])
    images = random_images(1, 4, 8)
    graph = compile_model(model)
    want = execute(graph, images)[graph.output]
    from groupnet_hw.compiler.graph import Graph, Node
    rename = {n.name: f"n{i}" for i, n in enumerate(graph)}
    def ref(r):
        name, sep, k = r.partition(":")
        return rename[name] + sep + k
    renamed = Graph([Node(rename[n.name], n.op, [ref(r) for r in n.inputs], n.attrs, n.channels,
                          n.height, n.width, n.kind, n.bits, n.frac, n.outputs, n.lo, n.hi)
                     for n in graph], input=rename[graph.input], output=rename[graph.output])
    assert torch.equal(execute(renamed, images)[renamed.output], want)
    schedule(renamed, streams="pixels")


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
    sched = schedule(compile_model(GroupNet(GroupNetConfig()).eval()), bases="parallel", streams="pixels")
    d = sched.to_dict()
    assert all(d["resources"][k] <= d["budget"][k] * d["max_util"] for k in d["budget"])
    assert d["frame_cycles"] == max(u["cycles"] for u in d["units"])
    assert d["base_mapping"] == "parallel"
    # every join (residual add, base mixer) has a FIFO on each input; the skips of the
    # first block cover at least a row of lookahead
    g = sched.graph
    assert len(sched.fifos) == 5 * 2 + 2
    stem = g.producer(g.consumers(g.input)[0].name)
    stem_out = next(n.name for n in g if n.op == "postop")
    skips = [fifo[stem_out] for fifo in sched.fifos.values() if stem_out in fifo]
    assert len(skips) == 5 and all(depth > g[g.input].width for depth in skips)


def test_unknown_board_is_rejected():
    with pytest.raises(ValueError, match="unknown board"):
        schedule(compile_model(random_model(0, **CONFIGS[1])), board="nope", streams="pixels")


def test_range_analysis_refuses_what_int64_cannot_hold():
    """A post-op whose worst-case product leaves int64 is named, not left to wrap."""
    graph = compile_model(random_model(3, image_size=6, stem_channels=3, stages=[[3, 1, 1]],
                                       bases=2, num_classes=3))
    node = next(n for n in graph if n.op == "postop")
    node.attrs["A"] = node.attrs["A"].clone().fill_(1 << 60)
    with pytest.raises(ValueError, match=rf"{node.name}: its product before the shift "
                                         r"can reach 2\*\*\d+, beyond int64"):
        analyze_ranges(graph)


def test_consumers_from_the_index_are_the_scans():
    """Within ``Graph.unchanged`` a node's readers come from one index: the same nodes
    in the same order as the scan, nested or not; after it the graph scans again (a
    pass that changes the graph sees its changes)."""
    g = compile_model(random_model(3, bases=3, stages=[[4, 1, 1], [6, 1, 2]],
                                   stem_channels=4, image_size=6, shortcut="conv"))
    scanned = {n.name: g.consumers(n.name) for n in g}
    assert any(len(v) > 1 for v in scanned.values())
    with g.unchanged():
        with g.unchanged():
            assert {n.name: g.consumers(n.name) for n in g} == scanned
        assert {n.name: g.consumers(n.name) for n in g} == scanned
    reader = scanned[g.input][0]
    reader.inputs = []
    assert reader not in g.consumers(g.input)
