"""Fingerprints of the reference designs: what `build` chooses must not drift by accident.

For three seeded designs (the default digits build on the DE10-Nano, the CIFAR-size
K=1 network on the DE10-Nano, FINN's CNV with FINN's published folding on the ULX3S)
this writes the schedule (folding, FIFO depths, predicted cycles, estimates) and the
sha256 of the generated Verilog to a JSON file. Two runs of different code compare
with ``--compare``: equal schedules and equal Verilog mean the same design.

    python benchmarks/design_fingerprints.py -o before.json
    python benchmarks/design_fingerprints.py -o after.json --compare before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _groupnet(arch, bases, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    return randomize_eval_state(GroupNet(arch_config(arch, bases=bases)), gen).eval()


def _cnv():
    import finn_cnv
    model = finn_cnv.make_model("cnv", seed=0)
    graph = compile_model(model)
    return graph, {"folding": finn_cnv.finn_folding(graph)}


def designs():
    """``{name: (graph, board, schedule options)}`` of the reference designs."""
    yield "digits-k5-de10nano", compile_model(_groupnet("digits", 5, 5)), "de10nano", {}
    yield "cifar-k1-de10nano", compile_model(_groupnet("cifar", 1, 1)), "de10nano", {}
    graph, options = _cnv()
    yield "cnv-finn-folding-ulx3s", graph, "ulx3s", options


def verilog_text(sched):
    from amaranth.back import verilog
    from groupnet_hw.hw.accelerator import Accelerator
    return verilog.convert(Accelerator(sched), name="groupnet_core", emit_src=False)


def fingerprint(graph, board, options):
    # the build command's defaults (streams="auto"), as `groupnet-hw build` schedules
    sched = schedule(graph, board=board, streams="auto", **options)
    text = verilog_text(sched)
    return {"schedule": json.loads(sched.to_json()),
            "verilog_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "verilog_bytes": len(text)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--compare", help="an earlier output to compare with")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    result = {}
    for name, graph, board, options in designs():
        t0 = time.perf_counter()
        result[name] = fingerprint(graph, board, options)
        s = result[name]["schedule"]
        print(f"{name}: {s['frame_cycles']} cycles/frame, verilog "
              f"{result[name]['verilog_sha256'][:12]} ({time.perf_counter() - t0:.0f} s)")
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        same = True
        for name, fp in result.items():
            old = before.get(name)
            sched_same = old is not None and old["schedule"] == fp["schedule"]
            rtl_same = old is not None and old["verilog_sha256"] == fp["verilog_sha256"]
            print(f"{name}: schedule {'same' if sched_same else 'DIFFERENT'}, "
                  f"verilog {'same' if rtl_same else 'DIFFERENT'}")
            same &= sched_same and rtl_same
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
