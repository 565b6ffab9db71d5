"""Group-Net folded to each board: frames/s and estimated resources per topology and K.

For the digits network and the CIFAR-size network (`cifar`, ResNet-20 style) at
K = 1, 3, 5, the schedule maps each block's bases side by side or time-shared and folds
every unit to the fastest frame interval whose calibrated estimate fits the board within
``--max-util`` (``schedule(..., bases="auto", streams="auto")``); this writes its frames per second,
budgeted resources, base mapping and the other mapping's figures to
``benchmarks/results/groupnet_boards.json`` and a table to ``docs/boards.md``.
Weights and statistics are random (the structure, not the accuracy, sets the size);
the estimate is the resource model of docs/architecture.md section 9.

    python benchmarks/groupnet_boards.py
    python benchmarks/groupnet_boards.py --boards de10nano --archs digits
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import DEFAULT_MAX_UTIL, schedule
from groupnet_hw.devices import get_board
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config

ROOT = Path(__file__).resolve().parent.parent
#: A frame interval no unit needs to be faster than: every unit at its least parallelism.
FULLY_FOLDED = 1 << 24


def row(arch, bases, board, max_util):
    gen = torch.Generator().manual_seed(bases)
    torch.manual_seed(bases)
    model = randomize_eval_state(GroupNet(arch_config(arch, bases=bases)), gen).eval()
    t0 = time.perf_counter()
    graph = compile_model(model)
    sched = schedule(graph, board=board, max_util=max_util, streams="auto")
    limits = dict(get_board(board).device.limits)
    fits = sched.fits()
    smallest = None
    if not fits:
        # what the board would need: the slowest folding of the same mapping
        slowest = schedule(graph, board=board, max_util=max_util, bases=sched.base_mapping,
                           target_cycles=FULLY_FOLDED, streams="auto")
        smallest = {"frame_cycles": slowest.frame_cycles, "resources": slowest.resources}
    return {"arch": arch, "K": bases, "board": board, "fits": fits,
            "frame_cycles": sched.frame_cycles,
            "frames_per_second": round(sched.frames_per_second, 1),
            "clock_mhz": sched.clock_mhz, "resources": sched.resources, "budget": limits,
            "smallest": smallest, "base_mapping": sched.base_mapping, "time_shared_blocks": len(sched.time_shared()),
            "blocks": sum(n.op == "mixer" for n in sched.graph),
            "block_ram_line_buffers": len(sched.block_line_buffers()),
            "serial_line_buffers": len(sched.serial_line_buffers()),
            "beat_units": sum(u.beats > 1 for u in sched.units.values()),
            "units": len(sched.units),
            "other_mapping": [n for n in sched.notes if "instead" in n],
            "schedule_seconds": round(time.perf_counter() - t0, 1)}


def table(rows):
    out = ["| network | K | board | cycles/frame | frames/s | resources (estimate / budget) "
           "| bases | time-shared blocks | line buffers | outputs as beats | fits |",
           "|---|---:|---|---:|---:|---|---|---|---|---|---|"]
    for r in rows:
        shown = r["smallest"] or r
        res = ", ".join(f"{k} {shown['resources'][k]:,}/{v:,}" for k, v in r["budget"].items())
        if r["smallest"]:
            res = f"fully folded ({r['smallest']['frame_cycles']:,} cycles): {res}"
        shared = f"{r['time_shared_blocks']} of {r['blocks']}" if r["K"] > 1 else "-"
        serial = f", {r['serial_line_buffers']} serial" if r["serial_line_buffers"] else ""
        lines = (f"block RAM ({r['block_ram_line_buffers']}{serial})"
                 if r["block_ram_line_buffers"] else "logic")
        out.append(f"| {r['arch']} | {r['K']} | {r['board']} | {r['frame_cycles']:,} | "
                   f"{r['frames_per_second']:,.0f} | {res} | {r['base_mapping']} | {shared} | "
                   f"{lines} | {r['beat_units']} of {r['units']} | "
                   f"{'yes' if r['fits'] else 'no'} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default="digits,cifar")
    ap.add_argument("--bases", default="1,3,5")
    ap.add_argument("--boards", default="de10nano,ulx3s")
    ap.add_argument("--max-util", type=float, default=DEFAULT_MAX_UTIL)
    args = ap.parse_args(argv)
    rows = [row(a, int(k), b, args.max_util) for a in args.archs.split(",")
            for k in args.bases.split(",") for b in args.boards.split(",")]
    (ROOT / "benchmarks" / "results" / "groupnet_boards.json").write_text(
        json.dumps(rows, indent=1) + "\n")
    md = ROOT / "docs" / "boards.md"
    md.write_text(
        "# Group-Net on the boards\n\n"
        "Written by `python benchmarks/groupnet_boards.py`: each network folded to the fastest "
        f"frame interval whose calibrated estimate fits the board at {args.max_util:.0%} "
        "utilization (random weights; the structure sets the size), each block's K bases side "
        "by side or time-shared on one set of units, per block whichever mix is fastest "
        "within the budget (`build --bases auto`; `mixed`: some blocks shared). Resources are the board's budgeted "
        "ones: Cyclone V ALMs (ALUTs / 1.6), M10K and DSP blocks; ECP5 LUT4 sites, "
        "flip-flops, distributed-RAM cells (DPR16X4), EBR and multipliers. \"no\" means even "
        "the slowest folding of either mapping is over budget (shown: the mapping least over, "
        "its fastest interval and its fully folded resources). Line buffers are in logic or, "
        "where the device's block RAM takes them, in block RAM: a memory per ring row and "
        "window column, or one *serial* memory read a tap per cycle where the folded MVU "
        "leaves the time (`build --line-buffers auto`: the number of windows in block RAM, "
        "and how many of them serial, is shown); the DE10-Nano's M10K takes the digits "
        "network's 8-pixel rows only as serial memories. Thresholds and post-ops run in the "
        "MVU in front of them where that costs no DSP block and no logic more "
        "(`build --fuse-activations`), and on the ULX3S join FIFOs move to block RAM where "
        "the distributed RAM runs out (`build --fifos auto`). Tensors between the "
        "convolutions travel as whole pixels or as beats of a few channels of every base, "
        "whichever is better at each interval tried (`build --streams auto`; shown: how "
        "many units' outputs go as beats): with whole pixels the CIFAR-size network fit "
        "only at K = 1, the base mixers', residual adds' and skip FIFOs' K*C-channel "
        "pixels dominating at K = 3 and 5 (docs/architecture.md section 9)."
        "\n\n" + table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
