"""The layer-sequential engine on the DE10-Nano: the units' cycle model, the engine a
build writes, RTL-measured cycles, and where the dataflow design and the engine cross
over.

For ResNet-18 and ResNet-34 Group-Nets with K=5 at 224x224 (random eval state, seed 0)
this compiles the engine program for the DE10-Nano's sized engine of the units
(:func:`groupnet_hw.compiler.engine.sizing.size_engine`), and writes per descriptor the
predicted cycles, what bounds them, lane utilisation and DRAM bytes, then per frame the
cycles, frames/s at the engine's clock, DRAM bytes and their share of the sustained
bandwidth, under the default DRAM model and at higher bandwidths (sensitivity), with
the compile time and peak memory, and a what-if: the frame rate if the 32-bit
fixed-point maps (ranges of the random eval state) were 16-bit (a trained network's).

The *built* half: the engine that ``groupnet-hw build --engine sequential`` writes for
the same networks through the flow (the engine of the units where they run every
descriptor, else the core of :func:`groupnet_hw.compiler.engine.target.engine_target`;
compile time and peak memory; a network neither runs is reported with the flow's
one-line reason) and its model's cycles; RTL-measured cycles on Verilator (the core,
64 KiB scratchpad) for files in the Group-Net authors' layout at ResNet-18 and
ResNet-34 depth, narrow and at 32x32; full-size K=5 files in the authors' layout
through ``groupnet-hw import`` and ``build`` (times, peak memory, the engine, predicted
cycles; with ``--rtl-224 N``, N 224x224 images on Verilator, bit-exact and measured
cycles, and the same for the benchmark's own networks built through the flow, the ones
its frames/s are of); and frames/s of the dataflow design (at the board clock) against
the engine (at its clock) on digits and CIFAR-size networks. Writes ``docs/engine.md`` and
``docs/engine.png``; rows of networks a run does not measure are kept from the JSON
already there.

    python benchmarks/engine.py                       # writes benchmarks/results/engine.json
    python benchmarks/engine.py --arch resnet18 -o /tmp/e.json --no-rtl
    python benchmarks/engine.py --rtl-224 1 --no-rtl    # about 20 minutes, run alone
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from engine_resources import OUT as RESOURCES_JSON, is_current
from groupnet_hw.compiler.engine.config import DramModel, EngineConfig
from groupnet_hw.compiler.engine.cycles import descriptor_cycles, predict
from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.sizing import estimate, size_engine
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.devices import get_board
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from peak_memory import peak_rss_kib, reset_peak_rss  # noqa: E402  (the tests' helper)

RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"
#: the intended engine's program choices, each alone and together (``EngineConfig``
#: fields; the default configuration has both)
CHOICES = {
    "neither": dict(levels_at_producer=False, fixed_containers=(8, 16, 32, 64)),
    "levels at the producer": dict(fixed_containers=(8, 16, 32, 64)),
    "24-bit maps": dict(levels_at_producer=False),
    "both (the default)": {},
}
#: sustained GB/s of the sensitivity rows (1.0: the default model; 3.2: DDR3-800 x32 peak)
BANDWIDTHS = (1.0, 1.6, 2.0, 3.2)
#: what the intended engine's resource estimate stands on (``compiler/engine/sizing.py``)
CALIBRATED = "units built (the head among them): measured; stem control and pooling: guessed"


def _narrowed(d, port):
    """A what-if copy of a descriptor whose 24- and 32-bit fixed-point tensors were
    16-bit (the trained networks' 14-bit maps): pitches and sizes shrink, tiling
    unchanged."""
    d = dict(d)
    for side, h, w, c in (("in", "in_h", "in_w", "in_c"), ("side", "out_h", "out_w", "side_c"),
                          ("out", "out_h", "out_w", "out_c")):
        if d[f"{side}_fmt"] == 2 and d[f"{side}_elem"] in (24, 32) and d[c]:
            f = TensorFormat("fixed", 16, d[c], d[h], d[w], port)
            d[f"{side}_pitch"] = f.row_bytes
            if side != "side":
                d[f"{side}_bytes"] = f.nbytes
    return d


def _peak_rss_mb():
    """This process's peak resident size (MiB) since the network's work started
    (``reset_peak_rss``: each network's figure is its own, not the largest so far)."""
    return peak_rss_kib() / 1024


def run(arch, bases=5, seed=0, board="de10nano"):
    model = randomize_eval_state(GroupNet(arch_config(arch, bases=bases)),
                                 torch.Generator().manual_seed(seed)).eval()
    reset_peak_rss()
    t0 = time.perf_counter()
    g = compile_model(model)
    t1 = time.perf_counter()
    sized = size_engine(board)
    program = compile_engine(g, sized.config)
    t2 = time.perf_counter()
    clock = sized.config.clock_mhz
    dram = DramModel.at_clock(clock)
    frame = predict(program, dram)
    containers = {}
    for ref, (_, f) in program.tensors.items():
        key = f"{f.kind}{f.elem_bits}"
        containers[key] = containers.get(key, 0) + 1
    layers = [dict(d.as_dict(), dram_bytes=d.bytes_read + d.bytes_written,
                   bandwidth_share=(d.bytes_read + d.bytes_written) / (d.cycles * dram.bytes_per_cycle))
              for d in frame.descriptors]
    sensitivity = {}
    for gbs in BANDWIDTHS:
        f = predict(program, DramModel.at_clock(clock, gbytes_per_s=gbs))
        sensitivity[f"{gbs:.1f}"] = dict(cycles=f.frame_interval, fps=f.fps,
                                         memory_bound=sum(d.bound == "memory" for d in f.descriptors))
    narrow = sum(descriptor_cycles(_narrowed(d, sized.config.port_bytes), program.header,
                                   sized.config, dram).cycles for d in program.descriptors)
    # the ladder's top rung, which the sizing passes over while its measured units do
    # not fit: what the units must shrink to
    top = EngineConfig(clock_mhz=clock)
    if top == sized.config:
        top_frame, top_est = frame, sized.estimate
    else:
        top_frame = predict(compile_engine(g, top), dram)
        top_est = estimate(top, get_board(board).budget()["family"])
    design_point = dict(engine=f"{top.arrays}x{top.pe}x{top.simd}",
                        cycles=top_frame.frame_interval,
                        fps=top_frame.fps, estimate=top_est,
                        utilisation={k: top_est[k] / sized.limits[k] for k in top_est})
    choices = {}
    for name, fields in CHOICES.items():
        f = predict(compile_engine(g, replace(sized.config, **fields)), dram)
        choices[name] = dict(cycles=f.frame_interval, fps=f.fps, dram_bytes=f.dram_bytes,
                             memory_bound=sum(d.bound == "memory" for d in f.descriptors))
    return dict(
        arch=arch, bases=bases, seed=seed, image_size=224, board=board,
        engine=dict(sized.config.__dict__), resources=dict(estimate=sized.estimate,
                                                           limits=sized.limits,
                                                           utilisation=sized.utilisation,
                                                           calibrated=CALIBRATED),
        dram=dict(latency_cycles=dram.latency, bytes_per_cycle=dram.bytes_per_cycle,
                  gbytes_per_s=dram.gbytes_per_s(clock)),
        descriptors=len(program.descriptors), graph_nodes=len(g),
        image_bytes=len(program.image), param_bytes=program.header["param_bytes"],
        arena_bytes=program.header["arena_bytes"], tensor_containers=containers,
        cycles_per_frame=frame.frame_interval, latency_cycles=frame.cycles, fps=frame.fps,
        clock_mhz=clock,
        dram_bytes_per_frame=frame.dram_bytes, bandwidth_share=frame.bandwidth_share,
        binary_macs=frame.binary_macs, lane_utilisation=frame.lane_utilisation,
        memory_bound=sum(d.bound == "memory" for d in frame.descriptors),
        compute_only_cycles=sum(d.compute for d in frame.descriptors),
        sensitivity_gbytes_per_s=sensitivity,
        what_if_16bit_maps=dict(cycles=narrow, fps=clock * 1e6 / narrow),
        program_choices=choices, design_point=design_point,
        compile_seconds=dict(graph=t1 - t0, engine=t2 - t1), peak_rss_mb=_peak_rss_mb(),
        layers=layers)


def table(r):
    lines = [f"{r['arch']} K={r['bases']} 224x224 on {r['board']}: engine "
             f"{r['engine']['arrays']}x{r['engine']['pe']}x{r['engine']['simd']} at "
             f"{r['clock_mhz']:.0f} MHz, DRAM {r['dram']['gbytes_per_s']:.1f} GB/s, "
             f"latency {r['dram']['latency_cycles']} cycles",
             f"{'#':>3} {'op':8} {'K':>2} {'compute':>9} {'memory':>9} {'cycles':>9} "
             f"{'bound':7} {'util':>5} {'DRAM MB':>8} {'bw':>5}  nodes"]
    for d in r["layers"]:
        util = "" if d["lane_utilisation"] is None else f"{d['lane_utilisation']:.2f}"
        lines.append(f"{d['index']:>3} {d['opcode']:8} {d['jobs']:>2} {d['compute']:>9} "
                     f"{d['memory']:>9} {d['cycles']:>9} {d['bound']:7} {util:>5} "
                     f"{d['dram_bytes'] / 1e6:>8.2f} {d['bandwidth_share']:>5.2f}  {d['label'][:56]}")
    sens = ", ".join(f"{k} GB/s: {v['fps']:.1f}" for k, v in r["sensitivity_gbytes_per_s"].items())
    lines.append(f"frame: {r['cycles_per_frame']:,} cycles = {r['fps']:.1f} frames/s; "
                 f"{r['dram_bytes_per_frame'] / 1e6:.1f} MB DRAM per frame "
                 f"({r['bandwidth_share']:.0%} of the sustained bandwidth); lane utilisation "
                 f"{r['lane_utilisation']:.0%}; {r['memory_bound']} of {r['descriptors']} "
                 f"descriptors memory-bound; compute alone {r['compute_only_cycles']:,} cycles")
    lines.append(f"frames/s by sustained bandwidth: {sens}")
    lines.append(f"what if the 24- and 32-bit maps were 16-bit (trained ranges): "
                 f"{r['what_if_16bit_maps']['fps']:.1f} frames/s at the default DRAM model")
    lines.append("program choices: " + ", ".join(
        f"{k} {v['fps']:.1f} frames/s ({v['dram_bytes'] / 1e6:.1f} MB)"
        for k, v in r["program_choices"].items()))
    lines.append(f"compile: graph {r['compile_seconds']['graph']:.1f} s, engine "
                 f"{r['compile_seconds']['engine']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB; "
                 f"image {r['image_bytes'] / 1e6:.1f} MB (parameters {r['param_bytes'] / 1e6:.1f} MB, "
                 f"arena {r['arena_bytes'] / 1e6:.1f} MB); tensors {r['tensor_containers']}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the engine as built
def _model(arch, bases, seed=0, **fields):
    """The zoo's ``arch``, its weights and eval state drawn from ``seed``: the same
    network each call, so that a memory image names it."""
    torch.manual_seed(seed)
    return randomize_eval_state(GroupNet(arch_config(arch, bases=bases, **fields)),
                                torch.Generator().manual_seed(seed)).eval()


def dram_floor(program, wide_maps_at=None, proven=False):
    """Bytes a frame that any engine running ``program`` with its tensors in DRAM moves
    at least: the parameters and the input read once, every other tensor written once
    and read once (a tensor that strided windows alone read, the rows they take; the
    output written once). With ``wide_maps_at`` (16 or 24) the
    32-bit maps count as maps of that many bits an element, rows padded to the port
    as the formats pad them: every one of them (ranges as narrow as a trained model's
    might be), or with ``proven`` only those whose proven range fits (containers of
    that width for this program)."""
    from groupnet_hw.compiler.engine.formats import round_up
    from groupnet_hw.compiler.engine.fusion import main_ref
    from groupnet_hw.compiler.engine.layout import _norm
    from groupnet_hw.compiler.engine.tiling import input_rows_read
    g = program.graph
    name_in, name_out = g.input, g.output
    # a tensor that only strided windows read (a 1x1 stride-2 shortcut's levels) is
    # read in part: the largest share of its rows one reader takes
    share = {}
    for d, grp in zip(program.descriptors, program.groups):
        for job in grp.jobs:
            for r in main_ref(job):
                ref = _norm(r, g)
                part = input_rows_read(d) / d["in_h"] if d["in_h"] else 1.0
                share[ref] = max(share.get(ref, 0.0), min(1.0, part))
    total = program.header["param_bytes"]
    for name, (_, f) in program.tensors.items():
        n = f.nbytes
        if (wide_maps_at and f.kind == "fixed" and f.elem_bits == 32
                and (not proven or g.producer(name).bit_width <= wide_maps_at)):
            pixel = -(-f.channels * wide_maps_at // 8)
            n = f.height * round_up(f.width * pixel, f.port_bytes)
        read = 0 if name == name_out else n if name == name_in else int(n * share.get(name, 1.0))
        total += (0 if name == name_in else n) + read
    return total


def built(arch, bases=5, seed=0):
    """The flow's engine build of ``arch`` up to its program (no Verilog), timed, and
    the core model's cycles (also when the flow refuses the network: the reason)."""
    from groupnet_hw.compiler.engine.core_cycles import predict_core
    from groupnet_hw.compiler.engine.target import compile_for_core, engine_target
    from groupnet_hw.flow import BuildConfig, FlowError, build
    model = _model(arch, bases, seed)
    reset_peak_rss()
    t0 = time.perf_counter()
    reason = None
    try:
        b = build(model, BuildConfig(engine="sequential"), stop_after="schedule")
        g, program, target = b.graph, b.engine.program, b.engine.target
    except FlowError as exc:
        reason = str(exc)
        g, target = compile_model(model), engine_target("de10nano")
        program = compile_for_core(g, target)[0]
    seconds = time.perf_counter() - t0
    peak = round(_peak_rss_mb())    # the flow's own, before the model's extra programs
    dram = target.dram
    units = getattr(target, "implementation", "core") == "units"
    if units:
        # the engine of the units: its own cycle model (section 12), no array ladder
        c = b.engine.prediction
        phases, shapes = None, None
    else:
        c = predict_core(program, target.core, dram.latency, dram.bytes_per_cycle)
        phases = {k: v / c.cycles for k, v in c.phases.items()}
        shapes = array_shapes(g, target)
    # what dominates a descriptor: the core's phase, or the units' bound
    rows = [dict(index=d.index, opcode=d.opcode, cycles=d.cycles,
                 dominant=d.bound if units else d.dominant, label=d.label)
            for d in c.descriptors]
    # the fastest any engine could run this program under the DRAM model: its floor of
    # traffic at the model's sustained bytes a cycle
    per_s = dram.gbytes_per_s(target.config.clock_mhz) * 1e9
    floor, floor16 = dram_floor(program), dram_floor(program, wide_maps_at=16)
    # the same program with the stem's overlapping pooling on chip (the intended
    # engine's fusion; the core as built would evaluate the convolution once per tap):
    # the stem's wide map never reaches DRAM; and that with 24-bit containers too
    fused = compile_engine(g, replace(program.config, fuse_overlapping_pools=True))
    pooled, pooled24 = dram_floor(fused), dram_floor(fused, wide_maps_at=24, proven=True)
    wide = [g.producer(name).bit_width for name, (_, f) in fused.tensors.items()
            if f.kind == "fixed" and f.elem_bits == 32]
    return dict(arch=arch, bases=bases, implementation="units" if units else "core",
                engine=target.params, clock_mhz=target.config.clock_mhz,
                dram_floor=dict(bytes=floor, fps=per_s / floor, bytes_16bit_maps=floor16,
                                fps_16bit_maps=per_s / floor16, bytes_pooled_stem=pooled,
                                fps_pooled_stem=per_s / pooled,
                                bytes_pooled_stem_24bit_maps=pooled24,
                                fps_pooled_stem_24bit_maps=per_s / pooled24,
                                wide_map_bits=[min(wide), max(wide)] if wide else None),
                flow_refused=reason, flow_seconds=round(seconds, 1),
                image_sha256=hashlib.sha256(program.image).hexdigest(),
                peak_rss_mb=peak, cycles=c.frame_interval, latency_cycles=c.cycles, fps=c.fps,
                phases=phases, shapes=shapes,
                descriptors=rows)


def array_shapes(g, target):
    """The core model's cycles of integer graph ``g`` on each of the sizing's array
    shapes (``target.ARRAY_SHAPES``: the build takes the first that fits
    ``--max-util``) at the build's scratchpad, with each shape's logic share of the
    board's estimate."""
    from groupnet_hw.compiler.engine.core_cycles import predict_core
    from groupnet_hw.compiler.engine.target import (ARRAY_SHAPES, EngineTarget,
                                                    compile_for_core, core_config,
                                                    with_shape)
    rows = []
    for shape in ARRAY_SHAPES:
        core = with_shape(target.core, shape)
        t = EngineTarget(target.board, core, core_config(core, target.config.clock_mhz),
                         target.dram)
        c = predict_core(compile_for_core(g, t)[0], core, t.dram.latency,
                         t.dram.bytes_per_cycle)
        rows.append(dict(pe=core["pe"], stem_simd=core["stem_simd"], cycles=c.cycles,
                         logic=t.estimate()["utilisation"]["logic"],
                         built=core == target.core))
    return rows


def rtl_measured(arch, bases=5):
    """An authors'-layout file (ResNet depth, widths 8-64, 32x32, learned scales) built
    for the 64 KiB engine and verified on one image: measured against predicted."""
    import tempfile
    from authors_layout import narrow_authors_model
    from groupnet_hw.flow import BuildConfig, build, verify
    widths = (8, 16, 32, 64)
    with tempfile.TemporaryDirectory() as tmp:
        model, _ = narrow_authors_model(tmp, arch, bases=bases, image_size=32, widths=widths)
        b = build(model, BuildConfig(engine="sequential", engine_scratchpad_kib=64))
        images = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(1))
        r = verify(b, images=images)
    return dict(arch=arch, bases=bases, image_size=32, widths=widths, exact=r.ok,
                predicted=b.engine.prediction.frame_interval,
                measured=r.cycles_per_frame_measured,
                error=r.cycles_per_frame_measured / b.engine.prediction.frame_interval - 1)


def authors_at_224(arch, bases=5, rtl_images=0):
    """A full-size K=5 file in the authors' layout (stem 64, widths 64-512, 1000
    classes, learned scales; random values) through the command line as a user runs
    it: ``groupnet-hw import`` and ``groupnet-hw build --engine sequential`` for the
    DE10-Nano, timed, with their peak memory; the build's engine and its model's
    cycles; with
    ``rtl_images``, that many 224x224 images of the built-in photos on Verilator
    (about two minutes each for ResNet-18 on the units): bit-exact or not, and the
    measured cycles per frame. The import and the build see an empty RTL cache, so the
    build's time is a user's first (the engine's Verilog converted, not found)."""
    import tempfile
    from authors_layout import full_size_authors_file, import_and_build_cold
    from groupnet_hw.flow import load_build, verify
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = full_size_authors_file(tmp, arch, bases=bases)
        import_s, build_s, peak_mib = import_and_build_cold(src, arch, tmp)
        b = load_build(tmp / "out")
        row = dict(arch=arch, bases=bases, image_size=224, import_seconds=round(import_s, 1),
                   build_seconds=round(build_s, 1),
                   peak_rss_mb=round(peak_mib),
                   image_sha256=hashlib.sha256(b.engine.program.image).hexdigest(),
                   descriptors=len(b.engine.program.descriptors),
                   implementation=b.engine.target.implementation,
                   predicted=b.engine.prediction.frame_interval,
                   latency_cycles=b.engine.prediction.cycles, fps=b.engine.prediction.fps,
                   rtl_images=rtl_images, **threshold_placements(b))
        if rtl_images:
            row["engine_rtl_sha256"] = engine_rtl_digest()
            row["dram_model_sha256"] = dram_model_digest()
            t3 = time.perf_counter()
            r = verify(tmp / "out", images=rtl_images)
            row.update(exact=r.exact, ok=r.ok, measured=r.cycles_per_frame_measured,
                       error=r.cycles_per_frame_measured / row["predicted"] - 1,
                       rtl_seconds=round(time.perf_counter() - t3))
    return row


def engine_rtl_digest():
    """A hash of every file of hw/engine (``engine_rtl_sha256``): the RTL a measured
    cycle count is of, the engine of the units' as well as the core's."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parents[1] / "hw" / "engine").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def stream_at_224(arch, bases=5, seed=0, images=1):
    """The benchmark's own ``arch`` (random eval state, ``seed``: the network whose
    frames/s the tables predict) saved as a checkpoint, built through the flow for the
    DE10-Nano with its Verilog, and ``images`` 224x224 images run on Verilator as a
    stream (``verify``): bit-exact or not, and a frame's measured cycles against the
    prediction."""
    import tempfile
    from groupnet_hw.flow import BuildConfig, build, verify
    from groupnet_hw.models.checkpoint import save_checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_checkpoint(tmp / "model.pt", _model(arch, bases, seed))
        b = build(tmp / "model.pt", BuildConfig(engine="sequential"), out_dir=tmp / "out")
        t0 = time.perf_counter()
        r = verify(tmp / "out", images=images)
        return dict(arch=arch, bases=bases, seed=seed, rtl_images=images,
                    implementation=b.engine.target.implementation,
                    predicted=b.engine.prediction.frame_interval, fps=b.engine.prediction.fps,
                    exact=r.exact, ok=r.ok, measured=r.cycles_per_frame_measured,
                    error=r.cycles_per_frame_measured / b.engine.prediction.frame_interval - 1,
                    rtl_seconds=round(time.perf_counter() - t0),
                    image_sha256=hashlib.sha256(b.engine.program.image).hexdigest(),
                    engine_rtl_sha256=engine_rtl_digest(),
                    dram_model_sha256=dram_model_digest())


def threshold_placements(b):
    """The core model's cycles per frame of a build's graph compiled both ways the
    compiler chooses between (``EngineConfig.prologue_thresholds``): a binary
    convolution's input thresholds in its gather, or as PIXEL descriptors."""
    from groupnet_hw.compiler.engine.core_cycles import predict_core
    target = b.engine.target
    if target.implementation != "core":
        return {}       # the units take every threshold in the gather (their prologue)
    out = {}
    for key, prologues in (("prologue_cycles", True), ("pixel_cycles", False)):
        program = compile_engine(b.graph, replace(target.config, prologue_thresholds=prologues))
        out[key] = predict_core(program, target.core, target.dram.latency,
                                target.dram.bytes_per_cycle).cycles
    return out


#: (label, arch, bases) of the crossover rows
CROSSOVER = (("digits, K=1", "digits", 1), ("digits, K=5", "digits", 5),
             ("CIFAR-size, K=1", "cifar-small", 1), ("CIFAR-size, K=5", "cifar-small", 5))


def crossover(board="de10nano"):
    """Frames/s of the dataflow design (fastest folding that fits, at the board clock)
    and of the engine (as built and intended, at its clock) on small networks."""
    from groupnet_hw.flow import BuildConfig, FlowError, build
    rows = []
    for label, arch, bases in CROSSOVER:
        model = _model(arch, bases)
        try:
            df = build(model, BuildConfig(board=board, engine="dataflow"), stop_after="schedule")
            dataflow = df.schedule.frames_per_second if df.schedule.fits() else None
        except FlowError:
            dataflow = None
        eng = build(model, BuildConfig(board=board, engine="sequential"), stop_after="schedule")
        rep = eng.engine.report
        # the build writes the units where they run the network (their report is the
        # cycle model of section 12), else the core
        units = rep["engine"]["implementation"] == "units"
        rows.append(dict(network=label, dataflow_fps=dataflow, engine_fps=rep["frame"]["fps"],
                         engine=rep["engine"]["implementation"],
                         engine_intended_fps=rep["frame"]["fps"] if units
                         else rep["intended"]["fps"]))
    return rows


def _placed_clock():
    """nextpnr's ECP5 estimate after placement for the current hw/engine RTL (the best of
    the runs with and without Yosys's sharing) and whether it shared, or None."""
    if not RESOURCES_JSON.exists():
        return None
    runs = json.loads(RESOURCES_JSON.read_text())
    found = [(r["placed_fmax_estimate_mhz"], r.get("yosys_share", True))
             for r in (runs.get("ecp5_pnr"), runs.get("ecp5_pnr_no_share"))
             if r and r.get("placed_fmax_estimate_mhz") and is_current(r)]
    return max(found) if found else None


def _built_core():
    """The DE10-Nano engine a build writes for these binary networks, in words."""
    from groupnet_hw.compiler.engine.sizing import core_paths_of
    from groupnet_hw.compiler.engine.target import engine_target
    from groupnet_hw.flow import BuildConfig
    c = engine_target("de10nano", planes=1, max_util=BuildConfig().max_util).core
    n = core_paths_of(c)["stem_channels"]
    return (f"one XNOR array of {c['pe']} x {c['simd']} lanes of one bit plane, a "
            f"stem array of {c['stem_simd']} lanes ({n} channel{'s' if n > 1 else ''} a cycle)")


def write_docs(results, built_rows, rtl_rows, authors, cross, out_md, out_png, streams=()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines = ["# The layer-sequential engine: measured and predicted",
             "",
             "Written by `benchmarks/engine.py` (numbers in `benchmarks/results/engine.json`).",
             "A build writes the engine of the units (`hw/engine/unit_engine.py`, "
             "architecture section 15) where",
             "they run every descriptor of the program, else the core "
             f"(`hw/engine/core.py`: {_built_core()},",
             "a scalar datapath, one banked scratchpad, no overlap of transfers and "
             "compute). The cycle model",
             "of section 12 is the units' ({arrays} arrays of {pe} x {simd} lanes side by "
             "side, a stem of".format(**results[0]["engine"]),
             "{stem_pe} x {stem_simd} multipliers, {vector_lanes} vector lanes, transfers "
             "overlapping compute). DRAM:".format(**results[0]["engine"]),
             "the default DE10-Nano model (1.0 GB/s sustained, 48 cycles latency).",
             "Frames in flight (architecture section 12): in a stream of frames the "
             "next frame's stem runs beside each",
             "frame's other descriptors, so a frame takes the longer of the two; "
             "cycles/frame and frames/s are the stream's, and",
             "a frame's latency (the descriptors one after another) is beside them.",
             "",
             "| network (K=5, 224x224) | the units' model: cycles/frame | frames/s | "
             "latency (cycles) | DRAM MB/frame | the build: engine | cycles/frame | "
             "frames/s | flow |",
             "|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for r, b in zip(results, built_rows):
        flow = (f"refused: {b['flow_refused'].split(': ', 1)[-1]}" if b["flow_refused"]
                else f"built in {b['flow_seconds']} s, peak {b['peak_rss_mb']} MB")
        lines.append(f"| {r['arch']} | {r['cycles_per_frame']:,} | {r['fps']:.1f} | "
                     f"{r.get('latency_cycles', r['cycles_per_frame']):,} | "
                     f"{r['dram_bytes_per_frame'] / 1e6:.1f} | "
                     f"{b.get('implementation', 'core')} | {b['cycles']:,} | "
                     f"{b['fps']:.3f} | {flow} |")
    for r in results:
        top = r.get("design_point")
        sized = "{arrays}x{pe}x{simd}".format(**r["engine"])
        if top and top["engine"] != sized:
            lines += ["", f"{r['arch']} on the ladder's top rung, {top['engine']} (the "
                      "sizing's estimate of it, the built units measured: "
                      f"{100 * top['utilisation']['logic']:.0f} % of the ALMs, so the sizing "
                      f"takes {r['engine']['arrays']}x{r['engine']['pe']}x"
                      f"{r['engine']['simd']}): {top['cycles']:,} cycles/frame, "
                      f"{top['fps']:.1f} frames/s."]
    lines += ["", "The intended engine's program choices (architecture section 12): fusion "
              "rule 7 (a mixer applies its readers' input thresholds and writes the levels, "
              "so the next layers read bits, and a stage's first block writes no wide map "
              "at all) and 24-bit containers for the maps whose proven range fits, each "
              "alone and together, under the default DRAM model:", "",
              "| network | choices | cycles/frame | frames/s | DRAM MB/frame | "
              "memory-bound descriptors |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        for name, c in r.get("program_choices", {}).items():
            lines.append(f"| {r['arch']} | {name} | {c['cycles']:,} | {c['fps']:.1f} | "
                         f"{c['dram_bytes'] / 1e6:.1f} | {c['memory_bound']} of "
                         f"{r['descriptors']} |")
    if any(b.get("implementation", "core") == "core" for b in built_rows):
        lines += ["", "The floor below is of the core's program, whose tensors are the "
                  "wide maps; the units' program's level outputs replace most of them, so "
                  "its traffic is below that floor."]
    lines += ["", "Without levels at the producer the binary convolutions threshold the "
              "mixers' outputs as they read them, and the prologue reads 8-, 16- or 32-bit "
              "elements: those maps keep 32-bit containers, so 24-bit maps alone change "
              "little."]
    for b in built_rows:
        f = b.get("dram_floor")
        if f:
            lines += ["", f"The floor of {b['arch']}'s DRAM traffic, for any engine that keeps "
                      "the build's tensors in DRAM (the parameters and the input read once, "
                      "every other tensor written and read once; "
                      "`benchmarks/engine.py:dram_floor`): "
                      f"{f['bytes'] / 1e6:.1f} MB a frame, so at most {f['fps']:.1f} "
                      "frames/s under the default DRAM model, whatever its compute; with "
                      f"the 32-bit maps 16 bits wide {f['bytes_16bit_maps'] / 1e6:.1f} MB, "
                      f"{f['fps_16bit_maps']:.1f} frames/s"
                      + (f"; with the stem's overlapping max pooling on chip (its 32-bit "
                         "map never in DRAM, as the intended engine fuses it; the core as "
                         "built would evaluate the convolution once per pooling tap) "
                         f"{f['bytes_pooled_stem'] / 1e6:.1f} MB, "
                         f"{f['fps_pooled_stem']:.1f} frames/s"
                         if "bytes_pooled_stem" in f else "")
                      + ("; and with 24-bit containers too for the 32-bit maps whose "
                         "proven range fits (they span {}-{} bits; the core's element "
                         "reader takes 8, 16, 32 and 64) {:.1f} MB, {:.1f} frames/s".format(
                             *f["wide_map_bits"], f["bytes_pooled_stem_24bit_maps"] / 1e6,
                             f["fps_pooled_stem_24bit_maps"])
                         if f.get("wide_map_bits") else "") + "."]
    rows = [b for b in built_rows if b.get("shapes")]
    if rows:
        lines += ["", "The array shapes the build's sizing walks, fastest first "
                  "(`target.ARRAY_SHAPES`; it takes the first whose resource estimate "
                  "fits `--max-util`, 0.9 by default): the core model's cycles per frame "
                  "at the build's scratchpad and each shape's estimated share of the "
                  "DE10-Nano's logic:", "",
                  "| PE rows x stem lanes | logic | "
                  + " | ".join(f"{b['arch']} cycles/frame" for b in rows) + " |",
                  "|---|---:|" + "---:|" * len(rows)]
        for k, s in enumerate(rows[0]["shapes"]):
            mark = " (built)" if s["built"] else ""
            lines.append(f"| {s['pe']} x {s['stem_simd']}{mark} | {100 * s['logic']:.1f} % | "
                         + " | ".join(f"{b['shapes'][k]['cycles']:,}" for b in rows) + " |")
    phased = [b for b in built_rows if b.get("phases")]
    if phased:
        lines += ["", "Where the core's cycles go (share of the frame):", ""]
    for b in phased:
        lines.append(f"- {b['arch']}: " + ", ".join(
            f"{k} {100 * v:.0f} %" for k, v in sorted(b["phases"].items(), key=lambda kv: -kv[1])
            if v >= 0.005))
    placed = _placed_clock()
    cores = [b for b in built_rows if b.get("implementation", "core") == "core"]
    if not cores:
        lines += ["", "The engine's clock: 100 MHz is the target; the engine of the units "
                  "is not placed as a whole yet (its units' ECP5 placements are in "
                  "architecture section 15)."]
    elif placed:
        mhz, share = placed
        lines += ["", f"The engine's clock: nextpnr's estimate after placement on ECP5 (the "
                  f"64 KiB core, pe 4 x simd 8, Yosys {'with' if share else 'without'} "
                  f"resource sharing; `benchmarks/engine_resources.py --place-only`) is "
                  f"{mhz:.2f} MHz on this RTL. At that clock the engine as built runs "
                  + ", ".join(f"{b['arch']} at {b['fps'] * mhz / b['clock_mhz']:.3f} frames/s"
                              for b in cores) + "."]
    else:
        lines += ["", "The engine's clock: no ECP5 placement of this RTL is recorded "
                  "(`benchmarks/engine_resources.py --pnr-only --place-only`)."]
    if rtl_rows:
        lines += ["", "RTL-measured on Verilator (authors' layout, widths 8-64, 32x32, one "
                  "image, 64 KiB scratchpad):", "",
                  "| network | bit-exact | predicted cycles | measured cycles | error |",
                  "|---|---|---:|---:|---:|"]
        for r in rtl_rows:
            lines.append(f"| {r['arch']} K={r['bases']} | {'yes' if r['exact'] else 'NO'} | "
                         f"{r['predicted']:,} | {r['measured']:,.0f} | {100 * r['error']:+.2f} % |")
    if streams:
        lines += ["", "The networks above (random eval state, seed 0) saved as checkpoints, "
                  "built through the flow for the DE10-Nano with the engine's Verilog, and "
                  "run on Verilator as a stream (`verify`; a frame's cycles are a START's "
                  "after the first, which computes the first frame's stem alone):", "",
                  "| network | engine | 224x224 images bit-exact | predicted cycles/frame | "
                  "frames/s | measured cycles/frame | error |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for r in streams:
            lines.append(f"| {r['arch']} K={r['bases']} | {r['implementation']} | "
                         f"{r['exact']} of {r['rtl_images']} | {r['predicted']:,} | "
                         f"{r['fps']:.3f} | {r['measured']:,.0f} | "
                         f"{100 * r['error']:+.3f} % |")
    if authors:
        lines += ["", "Files in the authors' layout at the paper's size (K=5, learned scales, "
                  "1000 classes; random values), through `groupnet-hw import` and "
                  "`groupnet-hw build --engine sequential` for the DE10-Nano (the engine "
                  "the build writes; each build's RTL cache empty, so its time includes "
                  "converting the engine's Verilog, as a user's first build does); RTL on "
                  "Verilator, 224x224 images run as a stream (frames in flight: the "
                  "predicted and measured cycles are a frame's in the stream, each START "
                  "after the first, which computes the first frame's stem alone):", "",
                  "| network | import | build | peak memory | engine | descriptors | "
                  "predicted cycles/frame | frames/s | RTL images bit-exact | measured "
                  "cycles/frame | error |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"]
        for r in authors:
            rtl = (f"{r['exact']} of {r['rtl_images']} | {r['measured']:,.0f} | "
                   f"{100 * r['error']:+.3f} %" if r["rtl_images"] else "not run | | ")
            lines.append(f"| {r['arch']} K={r['bases']} | {r['import_seconds']} s | "
                         f"{r['build_seconds']} s | {r['peak_rss_mb']:,} MB | "
                         f"{r.get('implementation', 'core')} | "
                         f"{r['descriptors']} | {r['predicted']:,} | {r['fps']:.3f} | {rtl} |")
        placed = [r for r in authors if "pixel_cycles" in r]
        if placed:
            lines += ["", "The input thresholds of these files' binary convolutions, placed "
                      "both ways the compiler chooses between (the core model's cycles "
                      "per frame, jobs grouped by producer and the tiler's own tiling; "
                      "the build keeps the fewer, then groups and tiles it by the same "
                      "model): " + "; ".join(
                          f"{r['arch']} {r['pixel_cycles']:,} as PIXEL descriptors, "
                          f"{r['prologue_cycles']:,} in the convolutions' gathers"
                          for r in placed) + "."]
    lines += ["", "Dataflow against the engine on the DE10-Nano (dataflow at the board's "
              "50 MHz, the engine at 100 MHz):", "",
              "| network | dataflow frames/s | the engine the build writes | its frames/s | "
              "the units' cycle model |",
              "|---|---:|---|---:|---:|"]
    for r in cross:
        df = "does not fit" if r["dataflow_fps"] is None else f"{r['dataflow_fps']:,.0f}"
        lines.append(f"| {r['network']} | {df} | {r.get('engine', 'core')} | "
                     f"{r['engine_fps']:,.1f} | {r['engine_intended_fps']:,.0f} |")
    lines += ["", "![frames/s](engine.png)", ""]
    out_md.write_text("\n".join(lines))
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [r["network"] for r in cross] + [f"{b['arch']}, K=5" for b in built_rows]
    series = {"dataflow": [r["dataflow_fps"] for r in cross] + [None] * len(built_rows),
              "engine as built": [r["engine_fps"] for r in cross] + [b["fps"] for b in built_rows],
              "engine intended": [r["engine_intended_fps"] for r in cross]
              + [r["fps"] for r in results]}
    width = 0.27
    for i, (label, ys) in enumerate(series.items()):
        xs = [k + (i - 1) * width for k in range(len(names))]
        ax.bar([x for x, y in zip(xs, ys) if y], [y for y in ys if y], width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("frames/s (DE10-Nano)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def _merged(path, new):
    """``new``, with the per-network rows of the results already in ``path`` kept for the
    networks this run did not measure (one run per network can take hours with
    ``--rtl-224``), and an authors'-layout network's RTL figures kept when this run
    built the same memory image (its SHA-256) without running it."""
    if not path.exists():
        return new
    old = json.loads(path.read_text())
    out = dict(new)
    for key, rows in new.items():
        if key == "crossover":
            continue
        mine = {r["arch"] for r in rows}
        kept = [r for r in old.get(key, []) if r["arch"] not in mine]
        out[key] = sorted(kept + rows, key=lambda r: r["arch"])
    # an RTL run stays valid while the program it ran is the one built now, on the RTL
    # of hw/engine as it is now, against the DRAM model as it is now
    rtl, dram = engine_rtl_digest(), dram_model_digest()
    ran = {r["arch"]: r for r in old.get("authors_224", []) if r.get("rtl_images")}
    for r in out.get("authors_224", []):
        before = ran.get(r["arch"])
        if (not r["rtl_images"] and before
                and before.get("image_sha256") == r.get("image_sha256")
                and before.get("engine_rtl_sha256") == rtl
                and before.get("dram_model_sha256") == dram):
            r.update({k: before[k] for k in ("rtl_images", "exact", "ok", "measured",
                                            "error", "rtl_seconds", "engine_rtl_sha256",
                                            "dram_model_sha256")})
    # a stream's run, while its program is the one built now, on hw/engine as it is now
    images = {r["arch"]: r.get("image_sha256") for r in out.get("built", [])}
    out["streams_224"] = [r for r in out.get("streams_224", [])
                          if r.get("image_sha256") == images.get(r["arch"])
                          and r.get("engine_rtl_sha256") == rtl
                          and r.get("dram_model_sha256") == dram]
    return out


def dram_model_digest():
    """A hash of the fast path's C++ DRAM model (``dram_model_sha256``): a measured
    cycle count is of the RTL and of the DRAM it ran against."""
    from groupnet_hw.sim.engine_rtl import DRAM_MODEL_SOURCE
    return hashlib.sha256(DRAM_MODEL_SOURCE.read_bytes()).hexdigest()[:16]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=["resnet18", "resnet34"])
    ap.add_argument("-o", "--output", type=Path, default=RESULTS)
    ap.add_argument("--no-rtl", action="store_true", help="skip the Verilator runs")
    ap.add_argument("--rtl-224", type=int, default=0, metavar="N",
                    help="run N 224x224 images of the authors'-layout file on Verilator "
                         "(about two minutes an image for ResNet-18, four for ResNet-34)")
    ap.add_argument("--docs", type=Path, default=Path(__file__).resolve().parents[1] / "docs",
                    help="where engine.md and engine.png go")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite engine.md and engine.png from the JSON")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(args.output.read_text())
        write_docs(data["results"], data["built"], data["rtl"], data["authors_224"],
                   data["crossover"], args.docs / "engine.md", args.docs / "engine.png",
                   data.get("streams_224", ()))
        return
    archs = args.arch or ["resnet18", "resnet34"]
    results = [run(a) for a in archs]
    for r in results:
        print(table(r))
        print()
    built_rows = [built(a) for a in archs]
    for b in built_rows:
        print(f"{b['arch']} as built: {b['cycles']:,} cycles = {b['fps']:.3f} frames/s; "
              f"flow {b['flow_refused'] or 'ok'} ({b['flow_seconds']} s)")
    rtl_rows = [] if args.no_rtl else [rtl_measured(a) for a in archs]
    for r in rtl_rows:
        print(f"RTL {r['arch']}: predicted {r['predicted']:,}, measured {r['measured']:,.0f} "
              f"({100 * r['error']:+.2f} %), bit-exact {r['exact']}")
    authors = [authors_at_224(a, rtl_images=args.rtl_224) for a in archs]
    for r in authors:
        print(f"authors' {r['arch']} K=5 at 224: import {r['import_seconds']} s, build "
              f"{r['build_seconds']} s, peak {r['peak_rss_mb']} MB, predicted "
              f"{r['predicted']:,}" + (f", RTL {r['exact']}/{r['rtl_images']} bit-exact, "
                                       f"measured {r['measured']:,.0f}" if r["rtl_images"] else ""))
    streams = [stream_at_224(a, images=args.rtl_224) for a in archs] if args.rtl_224 else []
    for r in streams:
        print(f"{r['arch']} K=5 at 224 as a stream: predicted {r['predicted']:,}, measured "
              f"{r['measured']:,.0f} ({100 * r['error']:+.2f} %), {r['exact']}/"
              f"{r['rtl_images']} bit-exact")
    cross = crossover()
    for r in cross:
        print(r)
    data = _merged(args.output, dict(results=results, built=built_rows, rtl=rtl_rows,
                                     authors_224=authors, streams_224=streams,
                                     crossover=cross))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    write_docs(data["results"], data["built"], data["rtl"], data["authors_224"],
               data["crossover"], args.docs / "engine.md", args.docs / "engine.png",
               data["streams_224"])
    print(f"wrote {args.output}, {args.docs / 'engine.md'}, {args.docs / 'engine.png'}")


if __name__ == "__main__":
    main()
