"""Each descriptor of an engine build on its own, in RTL, against the cycle model, under
several DRAM models: which term of the model (compute, memory, their overlap) a
descriptor's error comes from.

The build directory is one that ``groupnet-hw build --engine sequential`` wrote (the
engine of the units or the core). A frame runs through the reference model
(``sim/engine_model.py``) descriptor by descriptor; before each, the memory image as the
descriptors before it left it gets that descriptor moved to the program's first slot
with END after it, and runs on the build's Verilog on the fast Verilator path with the
C++ DRAM model at each ``--dram LATENCY,BYTES_PER_CYCLE``. The model's prediction for
the same descriptor and DRAM (``compiler/engine/cycles.py``) stands beside it. At a
latency of 1 and 1,000 bytes a cycle the RTL's cycles are its compute alone, the
model's its compute term.

    python benchmarks/engine_descriptors.py OUT_DIR                  # the default DRAM
    python benchmarks/engine_descriptors.py OUT_DIR --dram 48,10 --dram 1,1000 \
        --label "authors' ResNet-18 K=5, 224x224"

Prints a table and writes ``benchmarks/results/engine_descriptors.json`` (``-o``).
A 224x224 ResNet-18 on the DE10-Nano's units takes about 10 s a descriptor and DRAM
model after the engine's Verilator build (minutes, cached).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from groupnet_hw.compiler.engine.config import DramModel
from groupnet_hw.compiler.engine.cycles import descriptor_cycles
from groupnet_hw.compiler.engine.layout import _encode_descriptor
from groupnet_hw.compiler.engine.program import DESCRIPTOR
from groupnet_hw.flow import ENGINE_NAME, load_build
from groupnet_hw.sim.engine_model import _Memory, run_descriptor
from groupnet_hw.sim.engine_rtl import build_engine_rtl, run_engine_rtl
from groupnet_hw.sim.engine_verify import cut_after, descriptor_outputs, frame_image

OUT = Path(__file__).parent / "results" / "engine_descriptors.json"


def _dram(text):
    latency, rate = text.split(",")
    return DramModel(latency=int(latency), bytes_per_cycle=float(rate))


def measure(b, build_dir, drams, seed=4, only=None, progress=print):
    """Rows of ``{index, opcode, dram, measured, predicted, compute, memory, overhead,
    exact}``, one per descriptor (INPUT, which does nothing, left out) and DRAM model,
    of the build ``b`` that ``load_build(build_dir)`` read."""
    program, header, config = b.engine.program, b.engine.program.header, b.engine.program.config
    rtl = build_engine_rtl(Path(build_dir) / f"{ENGINE_NAME}.v", ENGINE_NAME)
    x = b.graph[b.graph.input]
    frame = torch.randint(0, 256, (x.channels, x.height, x.width), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(seed))
    image = frame_image(program, frame)
    memory = _Memory(image, header["base"])
    first = header["desc_addr"] - header["base"]
    rows = []
    for i, d in enumerate(program.descriptors):
        before = bytes(image)
        run_descriptor(d, header, memory)          # the image after it: the reference
        if i == 0 or (only is not None and i not in only):
            continue
        alone = bytearray(before)
        alone[first:first + DESCRIPTOR.itemsize] = _encode_descriptor(dict(d, index=0), header)
        alone = bytes(cut_after(program, alone, 0))
        for dram in drams:
            t0 = time.perf_counter()
            run = run_engine_rtl(rtl, alone, window=(header["base"], header["base"] + len(alone)),
                                 program_address=header["desc_addr"], base=header["base"],
                                 latency=dram.latency, bytes_per_cycle=dram.bytes_per_cycle,
                                 max_cycles=100_000_000)
            exact = all(torch.equal(a, c) for a, c in zip(
                descriptor_outputs(program, run.image_after, i),
                descriptor_outputs(program, image, i)))
            c = descriptor_cycles(d, header, config, dram)
            row = dict(index=i, opcode=c.opcode, dram=[dram.latency, dram.bytes_per_cycle],
                       measured=run.cycles, predicted=c.cycles, compute=c.compute,
                       memory=c.memory, overhead=c.overhead, exact=exact)
            rows.append(row)
            progress(f"{i:3d} {c.opcode:8s} {dram.latency:4d} {dram.bytes_per_cycle:7.1f} "
                     f"{run.cycles:10,d} {c.cycles:10,d} {run.cycles / c.cycles - 1:+7.1%}  "
                     f"compute {c.compute:,} memory {c.memory:,}"
                     f"{'' if exact else '  OUTPUTS DIFFER'}  ({time.perf_counter() - t0:.0f} s)")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir", help="a directory `groupnet-hw build --engine sequential` wrote")
    ap.add_argument("--dram", action="append", type=_dram, metavar="LATENCY,BYTES_PER_CYCLE",
                    help="a DRAM model to run under (repeatable; default: the build's)")
    ap.add_argument("--only", help="descriptor indices, comma-separated (default: all)")
    ap.add_argument("--label", default="", help="what the build is, for the record")
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args(argv)
    b = load_build(args.build_dir)
    drams = args.dram or [b.engine.target.dram]
    only = set(map(int, args.only.split(","))) if args.only else None
    print("  i opcode    lat    B/cy   measured  predicted   error")
    rows = measure(b, args.build_dir, drams, only=only)
    totals = {}
    for r in rows:
        t = totals.setdefault(tuple(r["dram"]), [0, 0])
        t[0] += r["measured"]
        t[1] += r["predicted"]
    for (lat, rate), (m, p) in totals.items():
        print(f"all {lat:4d} {rate:7.1f} {m:10,d} {p:10,d} {m / p - 1:+7.1%}")
    record = dict(label=args.label, engine=b.engine.target.implementation, board=b.config.board,
                  descriptors=len(b.engine.program.descriptors), rows=rows)
    Path(args.output).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
