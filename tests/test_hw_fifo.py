# amaranth: UnusedElaboratable=no
"""StreamFIFO (hw/fifo.py) and Subsample (hw/subsample.py): order, stalls, reset, rate."""

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module, Signal, signed, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from groupnet_hw.compiler.cycles import elementwise_cycles
from groupnet_hw.hw.fifo import FIFOChoices, StreamFIFO
from groupnet_hw.hw.subsample import Subsample
from groupnet_hw.sim.streams import run_streams


class Clocked(Elaboratable):
    """Gives a purely combinational DUT (``StreamFIFO(depth=0)``, ...) a ``sync`` domain,
    which the simulator's clock needs; the streams stay the DUT's own."""

    def __init__(self, dut):
        self.dut = dut
        self.i = dut.i
        self.o = dut.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        toggle = Signal()
        m.d.sync += toggle.eq(~toggle)
        return m


FIX = data.ArrayLayout(signed(4), 3)


def fix_pixels(rng, n):
    return [[int(v) for v in row] for row in rng.integers(-8, 8, (n, 3))]


# ---- StreamFIFO ------------------------------------------------------------------------

@pytest.mark.parametrize("out_register", [False, True])
@pytest.mark.parametrize("ram", ["auto", "block"])
@pytest.mark.parametrize("seed, depth", list(enumerate([0, 1, 2, 3, 5, 16])))
def test_fifo_keeps_order_under_stalls(seed, depth, ram, out_register):
    rng = np.random.default_rng(seed)
    beats = fix_pixels(rng, 80)
    result = run_streams(Clocked(StreamFIFO(FIX, FIFOChoices(depth, ram, out_register))), {"i": beats},
                         {"o": len(beats)},
                         stall=0.3, seed=seed, max_cycles=5000)
    assert result.outputs["o"] == beats


@pytest.mark.parametrize("out_register", [False, True])
@pytest.mark.parametrize("ram", ["auto", "block"])
@pytest.mark.parametrize("depth, reset_at", [(4, 23), (16, 40)])
def test_fifo_reset_mid_stream(depth, reset_at, ram, out_register):
    beats = list(range(100, 160))
    result = run_streams(StreamFIFO(unsigned(8), FIFOChoices(depth, ram, out_register)), {"i": beats},
                         {"o": len(beats)},
                         stall=0.3, seed=3, reset_at=reset_at, max_cycles=5000)
    assert result.outputs["o"] == beats


@pytest.mark.parametrize("ram", ["auto", "block"])
@pytest.mark.parametrize("depth, cycles", [(0, 60), (1, 120), (2, 121), (3, 62), (4, 62),
                                           (32, 62)])
def test_fifo_rate_and_latency(depth, cycles, ram):
    """depth >= 3: II 1 and latency 2; depth 1, 2: II 2; depth 0: a wire. The same
    with the memory marked for block RAM."""
    beats = list(range(60))
    result = run_streams(Clocked(StreamFIFO(unsigned(8), FIFOChoices(depth, ram))), {"i": beats}, {"o": 60})
    assert result.outputs["o"] == beats
    assert result.cycles == cycles


@pytest.mark.parametrize("ram", ["auto", "block"])
@pytest.mark.parametrize("depth, cycles", [(0, 60), (3, 63), (4, 63), (32, 63)])
def test_fifo_out_register_rate_and_latency(depth, cycles, ram):
    """With the output register: latency 3 (``latency``), still one beat per cycle from
    depth 3; depth 0 stays a wire."""
    beats = list(range(60))
    dut = StreamFIFO(unsigned(8), FIFOChoices(depth, ram, out_register=True))
    assert dut.latency == (3 if depth else 0)
    result = run_streams(Clocked(dut), {"i": beats}, {"o": 60})
    assert result.outputs["o"] == beats
    assert result.cycles == cycles
    assert np.all(np.diff(result.out_cycles["o"]) == 1)


@pytest.mark.parametrize("out_register", [False, True])
@pytest.mark.parametrize("depth", [1, 3, 7])
def test_fifo_holds_exactly_depth(depth, out_register):
    """``depth`` beats, and one more in the output register."""
    dut = StreamFIFO(unsigned(8), FIFOChoices(depth, out_register=out_register))
    depth += out_register
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    log = {}

    async def testbench(ctx):
        accepted = 0
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        for _ in range(depth + 10):
            ctx.set(dut.i.payload, accepted)
            *_, ready = await ctx.tick().sample(dut.i.ready)
            accepted += ready
        ctx.set(dut.i.valid, 0)
        log["accepted"] = accepted
        out = []
        ctx.set(dut.o.ready, 1)
        for _ in range(depth + 5):
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                out.append(payload)
        log["out"] = out

    sim.add_testbench(testbench)
    sim.run()
    assert log["accepted"] == depth
    assert log["out"] == list(range(depth))


# ---- Subsample --------------------------------------------------------------------------

SUBSAMPLE_CONFIGS = [(5, 7, 2, "u4"), (6, 6, 2, "fix"), (7, 5, 3, "u4"), (4, 5, 1, "fix"),
                     (1, 6, 2, "u4"), (6, 1, 2, "fix")]


def subsample_case(height, width, stride, kind, frames, rng):
    if kind == "u4":
        shape, images = unsigned(4), rng.integers(0, 16, (frames, height, width, 1))
        to_beat = lambda px: int(px[0])  # noqa: E731
    else:
        shape, images = FIX, rng.integers(-8, 8, (frames, height, width, 3))
        to_beat = lambda px: [int(v) for v in px]  # noqa: E731
    kept = images[:, ::stride, ::stride]          # the reference: numpy slicing
    beats = [to_beat(px) for px in images.reshape(-1, images.shape[-1])]
    expected = [to_beat(px) for px in kept.reshape(-1, kept.shape[-1])]
    return Subsample(shape, height, width, stride), beats, expected


@pytest.mark.parametrize("seed, config", list(enumerate(SUBSAMPLE_CONFIGS)))
def test_subsample_under_stalls(seed, config):
    dut, beats, expected = subsample_case(*config, frames=3, rng=np.random.default_rng(seed))
    assert (dut.out_height, dut.out_width) == (-(-config[0] // config[2]),
                                               -(-config[1] // config[2]))
    result = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=seed,
                         max_cycles=5000)
    assert result.outputs["o"] == expected


def test_subsample_reset_mid_frame():
    dut, beats, expected = subsample_case(5, 7, 2, "u4", frames=3, rng=np.random.default_rng(9))
    result = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=9,
                         reset_at=50, max_cycles=5000)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("config", SUBSAMPLE_CONFIGS[:4])
def test_subsample_full_rate(config):
    """One input pixel per cycle, latency 0: the last kept pixel of frame F leaves in the
    cycle it arrives, (F-1)*elementwise_cycles + its index + 1."""
    height, width, stride, _ = config
    frames = 3
    dut, beats, expected = subsample_case(*config, frames=frames, rng=np.random.default_rng(1))
    result = run_streams(dut, {"i": beats}, {"o": len(expected)})
    assert result.outputs["o"] == expected
    last_kept = (height - 1) // stride * stride * width + (width - 1) // stride * stride
    assert result.cycles == (frames - 1) * elementwise_cycles(height, width) + last_kept + 1


def test_subsample_drops_without_waiting_for_ready():
    """With ``o.ready`` low a dropped pixel is still accepted, a kept one is held and
    offered (``o.valid`` high); ``o.valid`` does not follow ``o.ready``."""
    height, width, stride, frames = 4, 5, 2, 2
    dut = Subsample(unsigned(8), height, width, stride)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.i.valid, 1)
        for n in range(frames * height * width):
            ctx.set(dut.i.payload, n % 256)
            ctx.set(dut.o.ready, 0)
            blocked = (ctx.get(dut.i.ready), ctx.get(dut.o.valid))
            ctx.set(dut.o.ready, 1)
            seen.append(blocked + (ctx.get(dut.i.ready), ctx.get(dut.o.valid)))
            await ctx.tick()

    sim.add_testbench(testbench)
    sim.run()
    keep = np.zeros((frames, height, width), dtype=bool)
    keep[:, ::stride, ::stride] = True
    expected = [(int(not k), int(k), 1, int(k)) for k in keep.reshape(-1)]
    assert seen == expected


def test_convert_to_verilog():
    for dut in (StreamFIFO(FIX, FIFOChoices(0)), StreamFIFO(FIX, FIFOChoices(8)), Subsample(FIX, 5, 7, 2)):
        assert "module top" in verilog.convert(dut, name="top")
    # ram="block" marks the one memory for block RAM; "auto" leaves it to the flow
    marked = verilog.convert(StreamFIFO(FIX, FIFOChoices(8, "block")), name="top")
    assert marked.count('ram_style = "block"') == 1
    auto = verilog.convert(StreamFIFO(FIX, FIFOChoices(8)), name="top")
    assert "ram_style" not in auto
    # a FIFO never reads the word it writes in that cycle: every memory says so, so that
    # Yosys adds no collision logic behind a block RAM it picks by itself
    assert auto.count("no_rw_check") == marked.count("no_rw_check") == 1
    with pytest.raises(ValueError):
        FIFOChoices(4, "bram")
    with pytest.raises(ValueError):
        FIFOChoices(-1)
    with pytest.raises(ValueError):
        Subsample(unsigned(1), 4, 4, 0)


def _fifo_verilog(fifo):
    return verilog.convert(fifo, name="top", ports=[fifo.w_data, fifo.w_en, fifo.w_rdy,
                                                    fifo.r_data, fifo.r_en, fifo.r_rdy,
                                                    fifo.level])


def test_block_ram_fifo_is_a_marked_fifo_of_at_least_thirty_two_words():
    from groupnet_hw.hw.fifo import BLOCK_FIFO_DEPTH, block_ram_fifo
    assert block_ram_fifo(width=256, depth=4).depth == BLOCK_FIFO_DEPTH == 32
    assert block_ram_fifo(width=8, depth=40).depth == 40
    # a word a cycle both ways, and the level counts the output register's word
    fifo = block_ram_fifo(width=8, depth=4)
    seen = []
    sim = Simulator(fifo)
    sim.add_clock(1e-8)

    async def steady(ctx):
        for t in range(20):
            ctx.set(fifo.w_en, 1)
            ctx.set(fifo.w_data, t)
            ctx.set(fifo.r_en, 1)
            if ctx.get(fifo.r_rdy):
                seen.append((t, ctx.get(fifo.r_data), ctx.get(fifo.level)))
            await ctx.tick()

    sim.add_testbench(steady)
    sim.run()
    # the first word three cycles after its write, then one a cycle
    assert [t for t, _, _ in seen] == list(range(3, 20))
    assert [w for _, w, _ in seen] == list(range(17))
    # the level: words written and not yet read, three once reads keep pace
    assert {level for _, _, level in seen} == {3}
    text = _fifo_verilog(block_ram_fifo(width=256, depth=4))
    assert text.count('ram_style = "block"') == text.count("no_rw_check") == 1
    # words out in order under random stalls on both sides
    fifo = block_ram_fifo(width=12, depth=5)
    rng = np.random.default_rng(3)
    words = [int(w) for w in rng.integers(0, 1 << 12, 100)]
    got = []
    sim = Simulator(fifo)
    sim.add_clock(1e-8)

    async def testbench(ctx):
        pending = list(words)
        while len(got) < len(words):
            w_en = bool(pending) and rng.random() < 0.7
            r_en = rng.random() < 0.6
            ctx.set(fifo.w_en, w_en)
            ctx.set(fifo.w_data, pending[0] if pending else 0)
            ctx.set(fifo.r_en, r_en)
            if w_en and ctx.get(fifo.w_rdy):
                pending.pop(0)
            if r_en and ctx.get(fifo.r_rdy):
                got.append(ctx.get(fifo.r_data))
            await ctx.tick()

    sim.add_testbench(testbench)
    sim.run()
    assert got == words


@pytest.mark.toolchain
def test_block_ram_fifo_goes_to_cyclone_v_block_ram(tmp_path):
    """Yosys's Cyclone V flow builds a wide FIFO of eight words of flip-flops and a read
    multiplexer, and :func:`block_ram_fifo`'s in M10K blocks."""
    from amaranth.lib.fifo import SyncFIFOBuffered
    from groupnet_hw.hw.fifo import block_ram_fifo
    from groupnet_hw.toolchain.synth import synthesize
    cells = {}
    for name, fifo in (("plain", SyncFIFOBuffered(width=256, depth=8)),
                       ("block", block_ram_fifo(width=256, depth=8))):
        vfile = tmp_path / f"{name}.v"
        vfile.write_text(_fifo_verilog(fifo))
        cells[name] = synthesize(vfile, "top", "cyclonev", tmp_path / name)["cells"]
    assert cells["plain"]["bram"] == 0 and cells["plain"]["lut"] > 500
    assert cells["block"]["bram"] == 7 and cells["block"]["lut"] < 100
