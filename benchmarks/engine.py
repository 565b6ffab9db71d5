"""The layer-sequential engine on the DE10-Nano: predicted figures (issue 30's benchmark,
its predicted half; the RTL-measured half comes with the engine's RTL).

For ResNet-18 and ResNet-34 Group-Nets with K=5 at 224x224 (random eval state, seed 0)
this compiles the engine program for the DE10-Nano's default engine
(:func:`groupnet_hw.compiler.engine.sizing.size_engine`), and writes per descriptor the
predicted cycles, what bounds them, lane utilisation and DRAM bytes, then per frame the
cycles, frames/s at the engine's clock, DRAM bytes and their share of the sustained
bandwidth, under the default DRAM model and at higher bandwidths (sensitivity), with
the compile time and peak memory, and a what-if: the frame rate if the 32-bit
fixed-point maps (ranges of the random eval state) were 16-bit (a trained network's).

    python benchmarks/engine.py                       # writes benchmarks/results/engine.json
    python benchmarks/engine.py --arch resnet18 -o /tmp/e.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

from groupnet_hw.compiler.engine.config import DramModel
from groupnet_hw.compiler.engine.cycles import descriptor_cycles, predict
from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.sizing import size_engine
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config

RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"
#: sustained GB/s of the sensitivity rows (1.0: the default model; 3.2: DDR3-800 x32 peak)
BANDWIDTHS = (1.0, 1.6, 2.0, 3.2)


def _narrowed(d, port):
    """A what-if copy of a descriptor whose 32-bit fixed-point tensors were 16-bit (the
    trained networks' 14-bit maps): pitches and sizes halve, tiling unchanged."""
    d = dict(d)
    for side, h, w, c in (("in", "in_h", "in_w", "in_c"), ("side", "out_h", "out_w", "side_c"),
                          ("out", "out_h", "out_w", "out_c")):
        if d[f"{side}_fmt"] == 2 and d[f"{side}_elem"] == 32 and d[c]:
            f = TensorFormat("fixed", 16, d[c], d[h], d[w], port)
            d[f"{side}_pitch"] = f.row_bytes
            if side != "side":
                d[f"{side}_bytes"] = f.nbytes
    return d


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(arch, bases=5, seed=0, board="de10nano"):
    model = randomize_eval_state(GroupNet(arch_config(arch, bases=bases)),
                                 torch.Generator().manual_seed(seed)).eval()
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
        sensitivity[f"{gbs:.1f}"] = dict(cycles=f.cycles, fps=f.fps,
                                         memory_bound=sum(d.bound == "memory" for d in f.descriptors))
    narrow = sum(descriptor_cycles(_narrowed(d, sized.config.port_bytes), program.header,
                                   sized.config, dram).cycles for d in program.descriptors)
    return dict(
        arch=arch, bases=bases, seed=seed, image_size=224, board=board,
        engine=dict(sized.config.__dict__), resources=dict(estimate=sized.estimate,
                                                           limits=sized.limits,
                                                           utilisation=sized.utilisation,
                                                           calibrated=False),
        dram=dict(latency_cycles=dram.latency, bytes_per_cycle=dram.bytes_per_cycle,
                  gbytes_per_s=dram.gbytes_per_s(clock)),
        descriptors=len(program.descriptors), graph_nodes=len(g),
        image_bytes=len(program.image), param_bytes=program.header["param_bytes"],
        arena_bytes=program.header["arena_bytes"], tensor_containers=containers,
        cycles_per_frame=frame.cycles, fps=frame.fps, clock_mhz=clock,
        dram_bytes_per_frame=frame.dram_bytes, bandwidth_share=frame.bandwidth_share,
        binary_macs=frame.binary_macs, lane_utilisation=frame.lane_utilisation,
        memory_bound=sum(d.bound == "memory" for d in frame.descriptors),
        compute_only_cycles=sum(d.compute for d in frame.descriptors),
        sensitivity_gbytes_per_s=sensitivity,
        what_if_16bit_maps=dict(cycles=narrow, fps=clock * 1e6 / narrow),
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
    lines.append(f"what if the 32-bit maps were 16-bit (trained ranges): "
                 f"{r['what_if_16bit_maps']['fps']:.1f} frames/s at the default DRAM model")
    lines.append(f"compile: graph {r['compile_seconds']['graph']:.1f} s, engine "
                 f"{r['compile_seconds']['engine']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB; "
                 f"image {r['image_bytes'] / 1e6:.1f} MB (parameters {r['param_bytes'] / 1e6:.1f} MB, "
                 f"arena {r['arena_bytes'] / 1e6:.1f} MB); tensors {r['tensor_containers']}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=["resnet18", "resnet34"])
    ap.add_argument("-o", "--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    results = [run(a) for a in (args.arch or ["resnet18", "resnet34"])]
    for r in results:
        print(table(r))
        print()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(dict(results=results), indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
