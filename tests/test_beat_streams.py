"""Beat streams (``schedule(..., streams=)``, ``build --streams``): tensors between the
convolutions travel as beats of a few channels of every base instead of whole pixels.
The MVUs send beats, adds, mixers, thresholds, subsamples and repeats work beat by beat,
a shortcut with fewer channels is padded with zero beats, FIFOs are deeper and narrower,
and the windows and the head collect pixels. The accelerator is bit-exact under input
gaps and output stalls, at the predicted cycles per frame, and (slow tier) at the
predicted latency."""

import pytest
import torch

from groupnet_hw.compiler.beats import assign_beats
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.sim.verify import verify
from conftest import random_model, verify_on_verilator
from test_latency import assert_exact_and_timed, assert_latency
from test_line_buffers import CONFIGS, _case


BEAT_CASES = [
    (0, 64, "parallel"),    # K = 2 side by side, dilation 2, stride 2: a 3-beat shortcut
                            # padded to 5 beats, 3 and 5 channels (odd)
    (1, 64, "parallel"),    # K = 1, 4-bit activations (multi-thresholds on beats)
    (2, 64, "shared"),      # K = 2 time-shared: repeat, grouped MVUs, packed mixers, a
                            # conv shortcut, 2-bit activations
]


def _beats_schedule(index, multiple, bases):
    model, g, size, images = _case(index, 120 + index)
    sched = schedule(g, "ulx3s", target_cycles=multiple * size * size, bases=bases,
                     streams="beats")
    beats = {n: u.beats for n, u in sched.units.items() if u.beats > 1}
    assert beats, "nothing went as beats"
    ops = {sched.graph[n].op for n in beats}
    assert {"bin_conv", "add", "mixer"} <= ops
    return model, sched, images


@pytest.mark.parametrize("index,multiple,bases", [
    # the default tier's random network (seed 5: K = 3 time-shared with repeats, grouped
    # MVUs and packed mixers, dilation 2, stride 2, an option-A shortcut padded with zero
    # beats) has the first and third cases' units but for their odd channel counts and
    # the conv shortcut's MVU on beats, which run in -m slow; the second case's n-bit
    # thresholds on beats stay
    *(pytest.param(*c, marks=pytest.mark.slow if c[0] != 1 else ()) for c in BEAT_CASES),
    # faster: only the second stage's tensors go as beats (slow tier: the same units as
    # the case before, fewer of them as beats)
    pytest.param(2, 16, "shared", marks=pytest.mark.slow),
])
def test_beats_bit_exact_at_the_predicted_cycles(index, multiple, bases):
    """Bit-exact under input gaps and output stalls and without, at the predicted
    cycles per frame (the Amaranth simulator; the latency runs are the slow tier's)."""
    model, sched, images = _beats_schedule(index, multiple, bases)
    assert_exact_and_timed(model, sched, images, index, latency=False)


@pytest.mark.slow
@pytest.mark.parametrize("index,multiple,bases", BEAT_CASES)
def test_beats_latency_equals_prediction(index, multiple, bases):
    """The beat streams' latency, isolated and paced, is the predicted one."""
    _, sched, _ = _beats_schedule(index, multiple, bases)
    assert_latency(sched)


def test_padded_shortcut_and_packs_are_where_the_layout_needs_them():
    """The stride-2 block's shortcut (3 channels a base) reaches the add (5) as 3 beats,
    which the add pads to 5; every window and the head collect their input's beats."""
    model, g, size, _ = _case(0, 0)
    sched = schedule(g, "ulx3s", target_cycles=64 * size * size, bases="parallel",
                     streams="beats")
    g = sched.graph
    padded = [n for n in g if n.op == "add" and sched.units[n.name].input_beats(1)
              < sched.units[n.name].beats]
    assert padded and all(sched.units[n.name].input_beats(1) == 3 and
                          sched.units[n.name].beats == 5 for n in padded)
    for node in g:
        unit = sched.units[node.name]
        if node.op in ("bin_conv", "int_conv", "head"):
            parent = g.producer(node.inputs[0])
            assert unit.input_beats(0) == sched.units[parent.name].beats
    assert sched.units[g.output].beats == 1


def test_a_unit_that_takes_only_pixels_keeps_its_component_in_pixels():
    """Without activations in the MVUs a post-op is a unit of its own, which takes only
    whole pixels: its MVU, and everything joined to it by adds and mixers, stays in
    pixels; the windows then read pixels straight."""
    model, g, size, _ = _case(0, 0)
    sched = schedule(g, "ulx3s", target_cycles=64 * size * size, bases="parallel",
                     streams="beats", fuse_activations=False)
    for node in sched.graph:
        if node.op in ("postop", "add", "mixer"):
            assert sched.units[node.name].beats == 1, node.name


def test_an_mvu_wider_than_the_beats_keeps_its_component_in_pixels():
    """Beats of L channels need every MVU in the component at most L PEs and every
    tensor a multiple of L channels a base: at the input rate the 5-channel MVUs run 5
    PEs and the component joining 3- and 5-channel tensors has L = 1, so it stays in
    pixels."""
    model, g, size, _ = _case(0, 0)
    sched = schedule(g, "ulx3s", target_cycles=size * size, bases="parallel", streams="pixels")
    units = {n: u for n, u in sched.units.items()}
    assert assign_beats(sched.graph, units) == 0 or all(
        units[n.name].beats == 1 for n in sched.graph if n.op == "mixer")


# seed 5 in the default tier: K = 3 time-shared, 4 to 8 channels (an option-A shortcut),
# dilation 2 in one base
@pytest.mark.parametrize("seed", [5] + [pytest.param(s, marks=pytest.mark.slow) for s in (0, 1, 2)])
def test_random_networks_with_beats(seed):
    """Seeded random small Group-Nets (bases, channels, strides, dilations, activation
    bits), time-shared or not, folded slow enough for beats: bit-exact with stalls."""
    import random
    rng = random.Random(seed)
    k = rng.choice([1, 2, 3])
    c1 = rng.choice([2, 4, 6])
    c2 = c1 + rng.choice([0, 2, 4])         # option A: channels never shrink
    cfg = dict(bases=k, stem_channels=c1, image_size=rng.choice([5, 6, 7]), num_classes=3,
               stages=[[c1, 1, 1], [c2, 1, 2]], act_bits=rng.choice([1, 2]),
               dilations=[[rng.choice([1, 2]) for _ in range(k)], [1] * k])   # per base
    model = random_model(500 + seed, **cfg)
    g = compile_model(model)
    size = cfg["image_size"]
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (2, 1, size, size), generator=gen, dtype=torch.uint8)
    sched = schedule(g, "ulx3s", target_cycles=rng.choice([48, 96]) * size * size,
                     bases="shared" if k > 1 and seed % 2 else "parallel", streams="beats")
    assert any(u.beats > 1 for u in sched.units.values())
    result = verify(model, sched, images, simulator="amaranth", stall=0.3, seed=seed)
    assert result.exact == result.images, result.first_mismatch
    paced = verify(model, sched, images, simulator="amaranth")
    assert paced.cycles_per_frame_measured == sched.frame_cycles


def _cifar(k):
    from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
    from groupnet_hw.models.zoo import arch_config
    gen = torch.Generator().manual_seed(k)
    torch.manual_seed(k)
    model = randomize_eval_state(GroupNet(arch_config("cifar", bases=k)), gen).eval()
    return model, compile_model(model), gen


def test_cifar_size_k5_fits_the_de10nano_only_with_beats():
    """The CIFAR-size network at K = 5, time-shared, fully folded: whole pixels of K*C
    channels in every add, mixer and skip FIFO are 2.3 times the board; as beats of one
    channel of every base it fits, and the fastest fitting design has bases time-shared."""
    _, g, _ = _cifar(5)
    share = dict(bases="shared", line_buffers="serial")
    pixels = schedule(g, "de10nano", target_cycles=1 << 24, streams="pixels", **share)
    beats = schedule(g, "de10nano", target_cycles=1 << 24, streams="beats", **share)
    assert not pixels.fits() and beats.fits()
    assert beats.resources["alm"] * 2 < pixels.resources["alm"]
    assert beats.resources["m10k"] * 2 < pixels.resources["m10k"]


def test_in_place_where_it_costs_at_most_a_256th_of_the_frame():
    """Fully folded, the CIFAR-size network's MVUs all take thousands of cycles a vector
    and are all the bottleneck: reading the window in place (the window refilled after
    the last step) costs each ``kernel**2 + 1`` cycles a vector, which the schedule
    accepts up to 1/256 of the frame interval (an input buffer is a whole window of K*C
    channels), but never beyond a --target-cycles / --fps it was given."""
    from dataclasses import replace

    from groupnet_hw.compiler.ops import op_of
    _, g, _ = _cifar(5)
    kw = dict(bases="shared", line_buffers="serial", streams="beats")
    sched = schedule(g, "de10nano", target_cycles=1 << 24, **kw)
    sg = sched.graph
    plain = max(op_of(sg[u.name]).cycles(sg[u.name], sg.producer(sg[u.name].inputs[0]),
                                          replace(u, in_place=False))
                for u in sched.units.values() if sg[u.name].inputs)
    in_place = [u for u in sched.units.values() if u.in_place]
    assert sum(u.cycles > plain for u in in_place) >= 9     # the bottlenecks went in place
    assert plain < sched.frame_cycles <= plain + plain // 256
    capped = schedule(g, "de10nano", target_cycles=plain, **kw)
    assert capped.frame_cycles == plain


@pytest.mark.slow
def test_cifar_size_k5_verifies_on_verilator_in_its_de10nano_mapping(tmp_path):
    """The CIFAR-size network at K = 5 folded to the DE10-Nano (the fastest design that
    fits at 90 %: bases time-shared, tensors as beats): bit-exact on Verilator at the
    predicted cycles per frame, and under stalls."""
    model, g, gen = _cifar(5)
    sched = schedule(g, "de10nano", streams="auto")
    assert sched.fits() and sched.time_shared()
    assert any(u.beats > 1 for u in sched.units.values())
    images = torch.randint(0, 256, (3, 3, 32, 32), generator=gen, dtype=torch.uint8)
    verify_on_verilator(model, sched, images, tmp_path, stalled=2)
