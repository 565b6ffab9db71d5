# amaranth: UnusedElaboratable=no
"""The intended engine's constant loader (hw/engine/constants.py): a job's post-op and
threshold sections, packed as the compiler packs them (``params.pack_consts``, the
layout's ``_threshold_bytes``), become the feeder's words of ``lanes`` channels at the
job's addresses, with the job's shift and ReLU flags; 4- and 8-byte constants, channels
not a multiple of the lanes, 1 to 3 thresholds, stalls."""

import numpy as np
import pytest
import torch

from groupnet_hw.compiler.engine.formats import round_up
from groupnet_hw.compiler.engine.layout import _threshold_bytes
from groupnet_hw.compiler.engine.params import pack_consts
from groupnet_hw.compiler.graph import Node
from groupnet_hw.hw.engine.constants import POSTOP, THR, ConstantLoader
from amaranth.sim import Simulator

from groupnet_hw.sim.streams import run_streams, stream_put, to_python


def bus_words(raw, data_width):
    step = data_width // 8
    raw = np.concatenate([raw, np.zeros(round_up(raw.size, step) - raw.size, np.uint8)])
    return [int.from_bytes(raw[i:i + step].tobytes(), "little") for i in range(0, raw.size, step)]


def job_sections(rng, channels, levels, cb):
    """One job's constants and its two sections' bytes, as the layout writes them."""
    # scales as the epilogue lanes take them (18 bits: the compiler refuses wider ones)
    a = rng.integers(-2**17, 2**17, channels)
    b = rng.integers(-2**24, 2**24, channels)
    shift, pre, post = int(rng.integers(0, 16)), int(rng.integers(0, 2)), int(rng.integers(0, 2))
    t = np.sort(rng.integers(-5000, 5000, (channels, levels)), axis=1)
    inv = rng.integers(0, 2, channels)
    postop = np.concatenate([pack_consts([shift, pre | 2 * post], cb),
                             pack_consts(np.stack([a, b], axis=1), cb)])
    node = Node("t", "threshold", [], {"T": torch.from_numpy(t), "invert": torch.from_numpy(inv)},
                channels=channels)
    thr = np.concatenate(_threshold_bytes(node, cb))
    return dict(a=a, b=b, t=t, inv=inv, shift=shift, pre=pre, post=post), postop, thr


def run(arrays, lanes, channels, levels, cb, data_width=128, stall=0.0, seed=0,
        const_width=32):
    rng = np.random.default_rng(seed)
    words_a_job = -(-channels // lanes)
    cmds, data, jobs = [], [], []
    for k in range(arrays):
        consts, postop, thr = job_sections(rng, channels, levels, cb)
        jobs.append(consts)
        for section, raw in ((POSTOP, postop), (THR, thr)):
            words = bus_words(raw, data_width)
            cmds.append(dict(job=k, section=section, channels=channels, levels=levels,
                             base=k * words_a_job, beats=len(words)))
            data += words
    dut = ConstantLoader(arrays=arrays, lanes=lanes, const_width=const_width, value_width=24,
                         max_levels=3, data_width=data_width, max_channels=64, max_words=64)

    async def setup(ctx):
        ctx.set(dut.const_bytes, cb)

    n = arrays * words_a_job
    result = run_streams(dut, {"cmd": cmds, "data": data}, {"ab": n, "thr": n, "inv": n},
                         stall=stall, seed=seed, setup=setup,
                         max_cycles=40 * (len(data) * data_width // 32 + 50))
    return dut, jobs, result, words_a_job


def check(jobs, result, lanes, channels, levels, words_a_job):
    out = {name: {w["addr"]: w for w in result.outputs[name]} for name in ("ab", "thr", "inv")}
    for name in out:
        assert len(out[name]) == len(result.outputs[name]), f"a {name} word written twice"
    for k, j in enumerate(jobs):
        for w in range(words_a_job):
            addr = k * words_a_job + w
            for lane in range(lanes):
                c = w * lanes + lane
                if c >= channels:
                    continue                     # the feeder's padded channels
                assert out["ab"][addr]["a"][lane] == j["a"][c]
                assert out["ab"][addr]["b"][lane] == j["b"][c]
                assert out["thr"][addr]["t"][lane][:levels] == list(j["t"][c])
                assert out["inv"][addr]["invert"] >> lane & 1 == j["inv"][c]


@pytest.mark.parametrize("arrays, lanes, channels, levels, cb", [
    (2, 8, 64, 1, 4),       # ResNet's 64 channels, one threshold, 4-byte constants
    (3, 8, 13, 2, 8),       # 13 channels, 8-byte constants
    (1, 16, 40, 3, 4),      # 16 lanes, 3 levels, invert bits over two constants
    (2, 8, 70, 1, 8),       # invert bits across two 8-byte constants
    (2, 32, 33, 1, 4),      # a lane word of 32 channels: a constant of invert bits each
])
def test_sections_become_the_feeders_words(arrays, lanes, channels, levels, cb):
    dut, jobs, result, n = run(arrays, lanes, channels, levels, cb, seed=channels)
    check(jobs, result, lanes, channels, levels, n)


def test_constants_wider_than_four_bytes_in_hardware_are_sign_extended():
    # 40-bit b (and 18-bit a) from 4-byte constants: negative ones must stay negative
    dut, jobs, result, n = run(2, 8, 16, 1, 4, seed=3, const_width=40)
    check(jobs, result, 8, 16, 1, n)


def test_under_stalls():
    dut, jobs, result, n = run(3, 8, 21, 2, 4, stall=0.3, seed=5)
    check(jobs, result, 8, 21, 2, n)


def test_each_jobs_postop_settings():
    """The shift and ReLU flags of each job's post-op section, held after its load."""
    arrays, lanes, channels, cb = 3, 8, 16, 4
    rng = np.random.default_rng(9)
    dut = ConstantLoader(arrays=arrays, lanes=lanes, max_levels=1, max_channels=64,
                         max_words=64)
    jobs, beats = [], []
    for k in range(arrays):
        consts, postop, _ = job_sections(rng, channels, 1, cb)
        jobs.append(consts)
        words = bus_words(postop, 128)
        beats.append((dict(job=k, section=POSTOP, channels=channels, levels=1, base=0,
                           beats=len(words)), words))
    seen = {}

    async def bench(ctx):
        ctx.set(dut.const_bytes, cb)
        for o in (dut.ab, dut.thr, dut.inv):
            ctx.set(o.ready, 1)
        for cmd, words in beats:
            await stream_put(ctx, dut.cmd, cmd)
            for w in words:
                await stream_put(ctx, dut.data, w)
        for _ in range(20):
            await ctx.tick()
        seen["idle"] = ctx.get(dut.idle)
        seen["postops"] = [to_python(ctx.get(dut.postops[k])) for k in range(arrays)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["idle"] == 1
    assert seen["postops"] == [dict(shift=j["shift"], pre_relu=j["pre"], post_relu=j["post"])
                               for j in jobs]


@pytest.mark.parametrize("bad, message", [
    (dict(lanes=12), "divide 32"), (dict(data_width=96), "multiple of 64"),
    (dict(arrays=0), "arrays"),
])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        ConstantLoader(**(dict(arrays=2, lanes=8) | bad))


def test_the_loader_connects_to_the_feeder_and_the_level_lanes():
    # the loader's three kinds of word are the feeder's and the level lanes' buffers'
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from groupnet_hw.hw.engine.feeder import EpilogueFeeder
    from groupnet_hw.hw.engine.levels import LevelLanes
    feeder = EpilogueFeeder(arrays=5, pe=16, lanes=8, sum_width=14, max_levels=1,
                            max_out_folds=32)
    depth = 5 * 32 * 2
    loader = ConstantLoader(arrays=5, lanes=8, max_levels=1, max_words=depth)
    m = Module()
    for name in ("ab", "thr", "inv"):
        wiring.connect(m, getattr(loader, name), getattr(feeder, name))
    m.d.comb += feeder.postops.eq(loader.postops)
    levels = LevelLanes(lanes=8, pe=16, max_levels=1, max_jobs=5, max_out_folds=32)
    for name in ("thr", "inv"):
        wiring.connect(m, getattr(loader, name), getattr(levels, name))
