"""The convolution runner (hw/engine/runner.py) runs a compiled program's binary
convolution descriptors on the layer units, DRAM to DRAM, behind the read and write
DMAs and the Avalon-MM memory model of the DMA tests: the memory after it equals, byte
for byte, the memory after the reference model ran the same descriptor on the same
image (sim/engine_model.py), and a descriptor it cannot run is refused before any
transfer."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from conftest import random_model, shortcut_thresholds_apart
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.units import map_buffer_takes, runner_refusal
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, FLAG_BITS, OPCODE_CODES,
                                                 STAGE_BITS, encode)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.engine_registers import ERROR_CAUSES
from groupnet_hw.hw.engine.dma import ReadDMA, WriteDMA
from groupnet_hw.hw.engine.runner import ConvRunner
from groupnet_hw.sim.engine_model import _Memory, read_program, run_descriptor
from test_engine_dma import AvalonDRAM
from test_engine_program import images_for

BASE = 0x1000          # the image's first byte in the memory model
#: The runner's simulations take 30 to 120 s each in the Amaranth simulator: the default
#: tier keeps the refusals and the DE10-Nano's descriptors at 224; the engine of the
#: units runs the odd-channel, residual, dilated and weight-streaming networks' programs
#: and the shared input's replay on Verilator (tests/test_engine_unit_engine.py); every
#: feature's run in the Amaranth simulator is in -m slow.
SLOW = pytest.mark.slow
#: a small intended engine: weight words of pe x simd = 128 bits, one bus word; weight
#: buffers that hold the test networks' layers
CONFIG = EngineConfig(arrays=2, pe=8, simd=16, input_buffer=4096, weight_buffer=4096,
                      output_buffer=4096, port_bytes=16)
#: ... whose weight buffers do not: 3x3 layers of 12 and 20 channels stream their weights
STREAMING_CONFIG = replace(CONFIG, weight_buffer=512)


class RunnerTop(Elaboratable):
    """The runner (or another unit of its ports, ``unit``) between a read and a write
    DMA; a unit that borrows multipliers (a ``loan`` it drives) borrows ``lender``'s."""

    def __init__(self, unit=None, lender=None, **params):
        self.lender = lender
        self.runner = unit or ConvRunner(**params)
        dw = self.runner.data_width
        self.rd = ReadDMA(data_width=dw, max_burst=8)
        self.wr = WriteDMA(data_width=dw, max_burst=8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.runner, m.submodules.rd, m.submodules.wr = self.runner, self.rd, self.wr
        if self.lender is not None:
            m.submodules.lender = self.lender
            wiring.connect(m, self.runner.loan, self.lender.loan)
        wiring.connect(m, self.runner.rd_cmd, self.rd.cmd)
        wiring.connect(m, self.rd.o, self.runner.rd)
        wiring.connect(m, self.runner.wr_cmd, self.wr.cmd)
        wiring.connect(m, self.runner.wr, self.wr.i)
        return m


def runnable(d, arrays=None):
    """What the runner executes: the compiler's rules of it (compiler/engine/units.py),
    which the runs below hold to the RTL."""
    return (d["opcode"] == OPCODE_CODES["CONV"]
            and runner_refusal(d, arrays or CONFIG.arrays) is None)


def program_steps(g, config=None, frames=1, which=None):
    """``(program, [(index, image before, image after)])``: the reference model's image
    around each descriptor the runner executes (or that ``which`` takes), for the first
    frame."""
    program = compile_engine(g, config, base=BASE)
    header, descs = read_program(program)
    image = bytearray(program.image)
    mem = _Memory(image, BASE)
    frame = images_for(g, frames)[0]
    from groupnet_hw.sim.engine_model import _fmt
    in_f = _fmt(header["in_fmt"], header["in_elem"], header["in_c"], header["in_h"],
                header["in_w"], header["port_bytes"])
    mem.write(header["in_addr"], in_f.pack(frame.to(int).numpy()), "input frame")
    steps = []
    for i, d in enumerate(descs):
        before = bytes(image)
        run_descriptor(d, header, mem)
        if (which or (lambda d: runnable(d, config.arrays)))(d):
            steps.append((i, before, bytes(image)))
    return program, descs, steps


def run_runner(program, d, image, **bench):
    """Run descriptor ``d`` on ``image``; return ``(memory, result)`` where result is
    ``"done"`` or ``("error", code)``."""
    return run_runner_in_turn(program, [(d, image)], **bench)[0]


def run_runner_in_turn(program, runs, *, p_wait=0.0, latency=(1, 3), seed=0,
                       max_cycles=200_000, unit=None, lender=None, words_read=None,
                       **params):
    """Run each ``(descriptor, image)`` of ``runs`` on one runner (or ``unit``, a
    component of the runner's ports), one after another, the memory set to the run's
    image before its descriptor is given (one simulation: building it takes as long as
    running a small descriptor). Returns each run's ``(memory, result)``, result
    ``"done"`` or ``("error", code)``. A ``unit`` that borrows multipliers borrows
    ``lender``'s. A list ``words_read`` gets each run's bus words read."""
    cfg = program.config
    top = RunnerTop(unit, lender, arrays=cfg.arrays, pe=cfg.pe, simd=cfg.simd,
                    data_width=8 * cfg.port_bytes, **params)
    size = len(runs[0][1])
    assert all(len(image) == size for _, image in runs)
    mem = bytearray(BASE + size + 256)
    rng = random.Random(seed)
    window = (BASE, BASE + size)
    rd = AvalonDRAM(mem, top.rd.bus_signature, rng, latency=latency, p_wait=p_wait,
                    window=window)
    wr = AvalonDRAM(mem, top.wr.bus_signature, rng, latency=latency, p_wait=p_wait,
                    window=window)
    outcomes = []

    async def run_one(ctx, d, image):
        mem[BASE:BASE + size] = image
        runner = top.runner
        ctx.set(runner.desc.payload.as_value(), int.from_bytes(encode(d, DESCRIPTOR), "little"))
        ctx.set(runner.desc.valid, 1)
        result = []
        for cycle in range(max_cycles):
            given = bool(ctx.get(runner.desc.ready) and ctx.get(runner.desc.valid))
            rd.step(ctx, top.rd.bus)
            wr.step(ctx, top.wr.bus)
            if ctx.get(runner.error):
                result.append(("error", ctx.get(runner.error_code)))
            if ctx.get(runner.done):
                result.append("done")
            await ctx.tick()
            if given:
                ctx.set(runner.desc.valid, 0)
            if result and not ctx.get(top.wr.busy) and wr.idle() and rd.idle():
                outcomes.append((bytes(mem[BASE:BASE + size]), result[0]))
                if words_read is not None:
                    words_read.append(rd.words_returned - sum(words_read))
                return
        raise AssertionError(f"the runner did not finish in {max_cycles} cycles")

    async def bench(ctx):
        for dma in (top.rd, top.wr):
            ctx.set(dma.window_base, window[0])
            ctx.set(dma.window_limit, window[1])
        for d, image in runs:
            await run_one(ctx, d, image)
            assert ctx.get(top.runner.idle), "the runner is not idle after its descriptor"

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert rd.violations == [] and wr.violations == []
    return outcomes


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def run_steps(g, config, *, planes=1, max_levels=1, ring_rows=8, **bench):
    """Run every descriptor of ``g``'s program that the runner executes; each memory
    after it equals the model's, byte for byte. Returns the descriptors run."""
    program, descs, steps = program_steps(g, config)
    assert steps, "the network has no descriptor the runner executes"
    outcomes = run_runner_in_turn(program, [(descs[i], before) for i, before, _ in steps],
                                  planes=planes, max_levels=max_levels, max_size=16,
                                  max_words=4, max_out_folds=4, ring_rows=ring_rows,
                                  ring_words=256, **bench)
    for (i, before, after), (got, result) in zip(steps, outcomes):
        assert result == "done", (i, result)
        assert got != before, f"descriptor {i} wrote nothing"
        at = first_difference(got, after)
        assert at is None, f"descriptor {i}: first differing byte at {BASE + at:#x}"
    return [descs[i] for i, _, _ in steps]


# two blocks a stage, so that a stage's convolutions read the previous mixer's levels
# (fusion rule 7) and need no prologue threshold: channels not a multiple of SIMD 16
# (12, 20), stride 2, BPAC dilations (a base a descriptor where its rates differ: one
# job, as K=1), a window of five rows (dilation 2) in a ring of eight
NETWORKS = {
    "odd-channels-stride-2": dict(image_size=8, stem_channels=12,
                                  stages=[[12, 2, 1], [20, 2, 2]], bases=2),
    "bpac-dilations": dict(image_size=8, stem_channels=16, stages=[[16, 2, 1]], bases=2,
                           dilations=[[1, 2]]),
}


@SLOW
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_each_descriptor_runs_dram_to_dram_as_the_model_runs_it(name):
    g = compile_model(random_model(3, **NETWORKS[name]))
    ran = run_steps(g, CONFIG)
    if name == "odd-channels-stride-2":
        assert any(d["stride"] == 2 for d in ran) and any(d["in_c"] % 16 for d in ran)
    if name == "bpac-dilations":
        assert any(d["dilation"] == 2 for d in ran) and all(d["jobs"] == 1 for d in ran)
        # the stem's 16 channels of 16-bit fixed point, thresholded as the rows arrive
        assert any(d["stages"] & STAGE_BITS["prologue_threshold"] and d["in_elem"] == 16
                   for d in ran)


#: a block's second convolutions with their residual add (BPAC: a base a descriptor):
#: 16-bit side maps, option A (16 side channels added to 24), stride 2 and dilation 2
#: before them; weights that fit the buffer, so no weight streaming
RESIDUAL = dict(image_size=8, stem_channels=16, stages=[[16, 1, 1], [24, 2, 2]], bases=2,
                dilations=[[1, 2], [1, 2]])


@SLOW
def test_residual_adds_read_their_side_maps():
    g = compile_model(random_model(3, **RESIDUAL))
    ran = run_steps(g, CONFIG)
    adds = [d for d in ran if d["stages"] & STAGE_BITS["add"]]
    assert len(adds) >= 4 and any(d["side_c"] < d["out_c"] for d in adds)


@SLOW
def test_weight_words_of_two_bus_words():
    """PE x SIMD = 16 x 16 = 256 bits: a weight word is two bus words, the first the
    lower half; 16 lanes an epilogue beat."""
    g = compile_model(random_model(3, **NETWORKS["odd-channels-stride-2"]))
    run_steps(g, replace(CONFIG, pe=16, simd=16))


@SLOW
def test_constants_of_eight_bytes(monkeypatch):
    """Parameter blocks of 8-byte constants (the compiler's choice where a value needs
    more than 4 bytes; forced here): post-ops, thresholds, the mixer's section and the
    level outputs' thresholds."""
    from groupnet_hw.compiler.engine import layout
    monkeypatch.setattr(layout, "int_bytes", lambda values, choices=(1, 2, 4, 8): 8)
    g = compile_model(random_model(3, **NETWORKS["odd-channels-stride-2"]))
    ran = run_steps(g, CONFIG)
    assert all(d["const_bytes"] == 8 for d in ran) and any(mixing(d) for d in ran)


@SLOW
def test_two_bit_levels_in_four_planes():
    """2-bit activations: the convolutions read levels (planes) and write levels of 3
    thresholds; the block's mixer writes 2-bit level outputs."""
    g = compile_model(random_model(4, image_size=8, stem_channels=16,
                                   stages=[[16, 2, 1]], bases=2, act_bits=2))
    ran = run_steps(g, CONFIG, planes=4, max_levels=3)
    assert all(d["act_bits"] == 2 for d in ran)
    assert any(d["flags"] & FLAG_BITS["levels_out"] and d["aux_levels"] == 3 for d in ran)


def mixing(d):
    return bool(d["stages"] & STAGE_BITS["mixer"])


@SLOW
def test_block_mixers_of_three_bases_write_gated_maps_and_levels():
    """K = 3 on three arrays: each block's second convolutions, their residual adds,
    the mixer's three gated outputs and their signs for the next block (rule 7), and
    the last block's aggregate."""
    g = compile_model(random_model(6, image_size=8, stem_channels=12,
                                   stages=[[12, 2, 1], [20, 2, 2]], bases=3))
    ran = run_steps(g, replace(CONFIG, arrays=3))
    gated = [d for d in ran if d["stages"] & STAGE_BITS["gated"]]
    assert len(gated) >= 2 and all(d["flags"] & FLAG_BITS["levels_out"] for d in gated)
    # the last block's mixer: the aggregate alone, the head's input
    assert any(mixing(d) and not d["stages"] & STAGE_BITS["gated"] for d in ran)


@SLOW
def test_a_one_by_one_downsample_convolution():
    """The conv shortcut's 1x1 stride-2 binary convolution, and the mixer before it,
    whose outputs two readers threshold differently (the shortcut's thresholds moved a
    level: equal ones share one level output): two level outputs an output and no wide
    map (the second through the second level lanes and the main packer). Two level
    outputs beside a wide map are refused."""
    g = shortcut_thresholds_apart(compile_model(random_model(
        7, image_size=8, stem_channels=16, stages=[[16, 2, 1], [24, 1, 2]], bases=2,
        shortcut="conv")))
    ran = run_steps(g, CONFIG)
    assert any(d["kernel"] == 1 and d["stride"] == 2 for d in ran)
    assert any(d["aux_outputs"] == 2 and d["flags"] & FLAG_BITS["levels_only"] for d in ran)
    program, descs, steps = program_steps(g, CONFIG)
    two = next(d for d in descs if d["aux_outputs"] == 2)
    wide_too = {**two, "flags": two["flags"] & ~FLAG_BITS["levels_only"]}
    got, result = run_runner(program, wide_too, steps[0][1], max_size=16, max_words=4,
                             max_out_folds=4, ring_rows=8, ring_words=256)
    assert result == ("error", ERROR_CAUSES["unsupported"]) and got == steps[0][1]


def sharing_one_input(program, d, image):
    """``d`` made to read one input map for all its jobs: its job table's input
    addresses the first job's and the ``shared_input`` flag; ``(descriptor, image,
    the model's image after it)``."""
    from groupnet_hw.compiler.engine.program import JOB
    header, _ = read_program(program)
    image = bytearray(image)
    at = d["table_addr"] - BASE
    for k in range(1, d["jobs"]):
        image[at + k * JOB.itemsize:at + k * JOB.itemsize + 4] = image[at:at + 4]
    shared = {**d, "flags": d["flags"] | FLAG_BITS["shared_input"]}
    after = bytearray(image)
    run_descriptor(shared, header, _Memory(after, BASE))
    return shared, bytes(image), bytes(after)


@SLOW
def test_a_map_every_job_reads_is_read_once_for_all_of_them():
    """Each two-job convolution without a residual add of a network, made to read one
    input map (``shared_input``): the runner reads each row once and the replay unit
    gives it to both arrays in turn, so the memory after it is the model's and it reads
    fewer words than the same descriptor without the flag; wait states."""
    g = compile_model(random_model(3, **NETWORKS["odd-channels-stride-2"]))
    program, descs, steps = program_steps(g, CONFIG)
    picked = [(descs[i], before) for i, before, _ in steps
              if descs[i]["jobs"] == 2 and not descs[i]["stages"] & STAGE_BITS["add"]]
    assert len(picked) >= 2
    runs, afters = [], []
    for d, before in picked:
        shared, image, after = sharing_one_input(program, d, before)
        runs += [(shared, image), (d, image)]
        afters.append(after)
    counts = []
    outcomes = run_runner_in_turn(program, runs, max_size=16, max_words=4, max_out_folds=4,
                                  ring_rows=8, ring_words=256, p_wait=0.2, latency=(2, 9),
                                  seed=7, words_read=counts)
    for n, after in enumerate(afters):
        for got, result in outcomes[2 * n:2 * n + 2]:
            assert result == "done" and first_difference(got, after) is None, n
        rows = picked[n][0]["in_h"] * picked[n][0]["in_pitch"] // CONFIG.port_bytes
        assert counts[2 * n] == counts[2 * n + 1] - rows, (n, counts)


@SLOW
def test_under_wait_states_and_long_latency():
    g = compile_model(random_model(5, **NETWORKS["odd-channels-stride-2"]))
    run_steps(g, CONFIG, p_wait=0.3, latency=(2, 9), seed=5)


def test_what_it_cannot_run_is_refused_before_any_transfer():
    g = compile_model(random_model(3, **NETWORKS["odd-channels-stride-2"]))
    program, descs, steps = program_steps(g, CONFIG)
    i, before, _ = steps[0]
    thresholding = {**descs[i], "stages": descs[i]["stages"] | STAGE_BITS["prologue_threshold"]}
    # a mixer needs every base at once: more bases than arrays cannot mix on chip
    mixing = next(d for d in descs if d["stages"] & STAGE_BITS["mixer"] and runnable(d))
    too_many = {**mixing, "jobs": CONFIG.arrays + 1}
    streaming = {**descs[i], "flags": descs[i]["flags"] | FLAG_BITS["weight_stream"]}
    # the stem's 12 channels: a prologue of groups of 8 channels cannot take them
    odd = next(d for d in descs if d["stages"] & STAGE_BITS["prologue_threshold"])
    assert odd["in_c"] == 12
    # rows of 2**16 bus words or more: the runner counts a row's words in 16 bits
    long_rows = [{**descs[i], name: (1 << 16) * CONFIG.port_bytes}
                 for name in ("in_pitch", "side_pitch")]
    outcomes = run_runner_in_turn(program, [(d, before) for d in (thresholding, too_many,
                                                                  streaming, odd, *long_rows)],
                                  max_size=16, max_words=4, max_out_folds=4, ring_words=256)
    for got, result in outcomes:
        assert result == ("error", ERROR_CAUSES["unsupported"])
        assert got == before


@SLOW
def test_more_bases_than_arrays_run_in_rounds():
    """K = 3 on 2 arrays: a descriptor of 3 jobs runs 2, then 1, each round its own
    job table entries, weights and maps (the mixers, which need every base at once, are
    descriptors of their own); the 1-job round leaves the other array's lanes idle."""
    g = compile_model(random_model(4, **dict(NETWORKS["odd-channels-stride-2"], bases=3)))
    ran = run_steps(g, CONFIG)
    assert len(ran) >= 4 and all(d["jobs"] == 3 for d in ran)
    assert any(d["stages"] & STAGE_BITS["add"] for d in ran)
    assert any(d["stride"] == 2 for d in ran)


@SLOW
@pytest.mark.parametrize("ring_rows", [8, 4])
def test_weights_stream_in_chunks_of_output_channels(ring_rows):
    """Weights more than half the fold issuer holds (20 words of 8 x 16 bits) stream: a
    chunk of output channels at a time, the next chunk's weights loaded into the free
    half while the arrays compute this one, every chunk's slices assembled in the map
    buffer, and the input read once where the ring holds the whole map (8 rows: the 8x8
    and 4x4 maps; 4 rows: the 4x4 ones), else again for each chunk; channels 20 in
    chunks of 8, 8 and 4, stride 2, three bases on two arrays, wait states."""
    g = compile_model(random_model(4, **dict(NETWORKS["odd-channels-stride-2"], bases=3)))
    ran = run_steps(g, STREAMING_CONFIG, max_weight_words=20, p_wait=0.3, latency=(2, 9),
                    seed=2, ring_rows=ring_rows)
    streamed = [d for d in ran if d["flags"] & FLAG_BITS["weight_stream"]]
    assert len(streamed) >= 3
    assert any(d["out_folds"] * d["in_folds"] > 20 for d in streamed)
    assert any(d["out_c"] % d["chunk_c"] for d in streamed)
    assert any(d["stride"] == 2 for d in streamed) and all(d["jobs"] == 3 for d in streamed)


@SLOW
def test_streamed_residual_adds_read_their_side_slices():
    """A streaming block's residual add reads, for each chunk, every pixel's slice of its
    side map (16-bit, 16 and 32 channels: whole bus words); the first block's
    convolutions threshold the stem's map as it arrives, chunk after chunk; one side
    map shared by the jobs; three bases on two arrays; wait states."""
    g = compile_model(random_model(3, **dict(RESIDUAL, stages=[[16, 2, 1], [32, 2, 2]],
                                             dilations=None, bases=3)))
    ran = run_steps(g, STREAMING_CONFIG, max_weight_words=20, map_words=512, p_wait=0.3,
                    latency=(2, 9), seed=3)
    streamed = [d for d in ran if d["flags"] & FLAG_BITS["weight_stream"]]
    adds = [d for d in streamed if d["stages"] & STAGE_BITS["add"]]
    assert len(adds) >= 3 and {d["out_c"] for d in adds} == {16, 32}
    assert any(d["flags"] & FLAG_BITS["shared_side"] for d in adds)
    assert any(d["stages"] & STAGE_BITS["prologue_threshold"] for d in streamed)


@SLOW
@pytest.mark.parametrize("shortcut", ["conv", None])
def test_streamed_mixers_and_their_level_outputs(shortcut):
    """A block's streaming second convolutions with their mixer on chip: each chunk's
    gated outputs and their level outputs (rule 7) assembled as two kinds of map in
    the map buffer (the level lanes read the chunk's thresholds); a stage's last mixer's
    two level outputs an output and no wide map (the conv shortcut's, its thresholds
    moved a level from the first convolution's); the last block's aggregate alone."""
    stages = [[16, 2, 1], [32, 1 if shortcut else 2, 2]]
    g = shortcut_thresholds_apart(compile_model(random_model(
        5, **dict(RESIDUAL, stages=stages, dilations=None, bases=2,
                  shortcut=shortcut or "A"))))
    # 8 x 8 maps of 16-bit values: 2 KiB each, four maps (two kinds a job) in the buffer
    ran = run_steps(g, STREAMING_CONFIG, max_weight_words=20, map_words=512, p_wait=0.2,
                    latency=(1, 5), seed=4)
    mixers = [d for d in ran if d["flags"] & FLAG_BITS["weight_stream"] and mixing(d)]
    assert any(d["flags"] & FLAG_BITS["levels_out"] and not d["flags"]
               & FLAG_BITS["levels_only"] for d in mixers)
    if shortcut:
        assert any(d["aux_outputs"] == 2 for d in mixers)
    else:
        assert any(not d["stages"] & STAGE_BITS["gated"] for d in mixers)


@SLOW
def test_streamed_maps_too_large_for_the_map_buffer_go_straight_to_dram():
    """A map buffer of 128 words (a region of 512 bytes a map): the streaming block
    mixers' gated 8 x 8 and 4 x 4 maps of 16-bit values (2 and 1 KiB) do not fit, so each
    pixel's slice of a chunk (8 channels, a bus word) goes straight to its place in DRAM,
    the writer skipping the pixel's other channels, while their sign outputs (rule 7) are
    assembled in the map buffer; wait states."""
    g = compile_model(random_model(5, **dict(RESIDUAL, stages=[[16, 2, 1], [32, 2, 2]],
                                             dilations=None, bases=2)))
    ran = run_steps(g, STREAMING_CONFIG, max_weight_words=20, map_words=128, p_wait=0.2,
                    latency=(1, 5), seed=6)
    region = 128 * 16 // (2 * STREAMING_CONFIG.arrays)
    direct = [d for d in ran if d["flags"] & FLAG_BITS["weight_stream"]
              and not d["flags"] & FLAG_BITS["levels_only"]
              and d["out_h"] * d["out_pitch"] > region]
    assert {d["out_c"] for d in direct} == {16, 32}
    assert any(mixing(d) and d["flags"] & FLAG_BITS["levels_out"] for d in direct)


def test_a_window_taller_than_the_ring_is_refused():
    g = compile_model(random_model(3, **NETWORKS["bpac-dilations"]))
    program, descs, steps = program_steps(g, CONFIG)
    i, before, _ = next(s for s in steps if descs[s[0]]["dilation"] == 2)
    got, result = run_runner(program, descs[i], before, max_size=16, max_words=4,
                             max_out_folds=4, ring_rows=4, ring_words=256)
    assert result == ("error", ERROR_CAUSES["unsupported"]) and got == before


def units_take(unit, descriptors):
    """Whether ``unit`` (a compute unit of the runner's ports) takes each descriptor: its
    own check in simulation, reset before each (a refusal, ``unsupported``, comes before
    the first read; a descriptor taken issues its first read)."""
    from amaranth.hdl import ResetInserter, Signal
    reset = Signal()
    taken = []

    async def bench(ctx):
        for d in descriptors:
            ctx.set(reset, 1)
            await ctx.tick()
            ctx.set(reset, 0)
            ctx.set(unit.desc.payload.as_value(), int.from_bytes(encode(d, DESCRIPTOR), "little"))
            ctx.set(unit.desc.valid, 1)
            await ctx.tick()
            ctx.set(unit.desc.valid, 0)
            for _ in range(32):
                if ctx.get(unit.error) or ctx.get(unit.rd_cmd.valid):
                    break
                await ctx.tick()
            taken.append(bool(ctx.get(unit.rd_cmd.valid)))
            assert taken[-1] or ctx.get(unit.error_code) == ERROR_CAUSES["unsupported"]

    sim = Simulator(ResetInserter(reset)(unit))
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return taken


#: binary convolutions the intended runner takes at 224x224, of each network's
#: binary convolutions of ResNet-18 and -34 K=5 at 224x224
BINARY_CONVS_AT_224 = {"resnet18": 19, "resnet34": 35}


@pytest.mark.parametrize("arch", ["resnet18", pytest.param("resnet34", marks=SLOW)])
def test_the_intended_runner_takes_the_paper_networks_binary_convolutions_at_224(arch):
    """The runner at the DE10-Nano's size (5 arrays of 16 x 64 lanes, a map buffer of
    4,096 words: 6,544 bytes a map) checks every CONV descriptor of ResNet-18 and
    ResNet-34 K=5 at 224x224 as the tests' rule says: the stem (integer weights) is not
    its; the 14x14 and 7x7 stages' streaming maps of 24 bits (up to 75 KB) go straight
    to DRAM; the 28x28 stage's sign and level maps (12.5 KB) take two regions when they
    are the buffer's one kind. Its last mixer's outputs are read only through equal
    thresholds (the next block's first convolution's and its 1x1 shortcut's), so it
    writes one level output an output (fusion rule 7), its one kind in two regions, and
    both read it. Every binary convolution runs: 19 of ResNet-18, 35 of ResNet-34."""
    from test_engine_program import zoo_model
    from test_engine_unit_engine import DE10_NANO_CONFIG, DE10_NANO_SIZES, runner_sizes
    sizes = runner_sizes(DE10_NANO_SIZES)
    runner = ConvRunner(data_width=8 * DE10_NANO_CONFIG.port_bytes, **sizes)
    region = runner.maps.region_bytes
    program = compile_engine(compile_model(zoo_model(arch, 5, image_size=224)),
                             DE10_NANO_CONFIG, base=BASE)
    descs = read_program(program)[1]
    convs = [d for d in descs if d["opcode"] == OPCODE_CODES["CONV"]]
    taken = units_take(runner, convs)
    for i, (d, ran) in enumerate(zip(convs, taken)):
        assert ran == (runnable(d, sizes["arrays"]) and map_buffer_takes(d, region)), (arch, i)
    binary = [(d, ran) for d, ran in zip(convs, taken) if runnable(d, sizes["arrays"])]
    assert len(binary) == BINARY_CONVS_AT_224[arch] and all(ran for _, ran in binary)
    # the 28x28 stage's last mixer: one level output an output and nothing else, which
    # the next stage's first convolutions and shortcuts read as bits
    last = [d for d in descs if d["out_h"] == 28 and d["stages"] & STAGE_BITS["mixer"]][-1]
    assert last["flags"] & FLAG_BITS["levels_only"] and last["aux_outputs"] == 1
    readers = [e for e in descs if e["opcode"] == OPCODE_CODES["CONV"] and e["in_h"] == 28
               and e["out_h"] == 14]
    assert {e["kernel"] for e in readers} == {1, 3}
    assert all(e["in_elem"] == 1 and not e["stages"] & STAGE_BITS["prologue_threshold"]
               for e in readers)
