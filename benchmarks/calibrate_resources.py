"""Calibrate the resource model against Yosys (per-module synthesis of a design sweep).

Builds a sweep of generated Group-Nets (random weights and statistics: the units'
structure, not accuracy, sets their size) at several foldings, synthesizes each with
the hierarchy kept (``-noflatten``) for every flow, attributes each module's cells to
the unit that owns it, fits the per-op coefficients (non-negative least squares on
the op's structural features) and writes

- ``compiler/resource_model.json``: the coefficients and every sample (features and
  Yosys's counts), which the test suite checks the estimate against;
- ``benchmarks/results/resource_calibration.json``: per-op worst relative error.

    python benchmarks/calibrate_resources.py                  # every flow, the full sweep
    python benchmarks/calibrate_resources.py --flows ecp5 --designs 2
    python benchmarks/calibrate_resources.py --only k5-c16-shared     # one design again
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from amaranth.back import verilog

from groupnet_hw.compiler import resources as R
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.toolchain.synth import synthesize
from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig, randomize_eval_state

ROOT = Path(__file__).resolve().parent.parent

#: (name, GroupNetConfig fields, frame interval multiple of the input rate)
SWEEP = [
    ("k1-c4", dict(bases=1, stem_channels=4, stages=[[4, 1, 1], [8, 1, 2]]), 1),
    ("k2-c8-a2", dict(bases=2, act_bits=2, stem_channels=8, stages=[[8, 1, 1], [12, 1, 2]]), 4),
    ("k3-c12", dict(bases=3, stem_channels=12, stages=[[12, 1, 1], [16, 1, 2]]), 8),
    ("k2-c6-rgb-a4", dict(bases=2, act_bits=4, in_channels=3, image_size=10, stem_channels=6,
                          stages=[[6, 1, 1], [10, 1, 2]], dilations=[[1, 2], [1, 1]]), 2),
    ("k1-c16", dict(bases=1, stem_channels=16, stages=[[16, 1, 1], [16, 1, 2]]), 8),
    # Line buffers in block RAM: 32- and 16-pixel rows of 16 and 32 bits, which every
    # family's block RAM takes (Cyclone V's M10K only from a 5 % fill), as a memory per
    # ring row and window column; then the same network at 8 cycles a pixel with serial
    # line buffers: the 32x32 stage's still one memory per row and column (8 cycles are
    # too few to read nine taps), the 16x16 stage's (32 cycles a pixel) one memory each.
    ("k2-c16-w32-bram", dict(bases=2, image_size=32, stem_channels=16,
                             stages=[[16, 1, 1], [32, 1, 2]]), 16),
    ("k2-c16-w32-serial", dict(bases=2, image_size=32, stem_channels=16,
                               stages=[[16, 1, 1], [32, 1, 2]]), 8),
    ("k5-c16-shared", dict(bases=5, stem_channels=16, stages=[[16, 1, 1], [16, 1, 2]]), 8),
    # Serial line buffers of 8- and 4-pixel rows of 48 bits (time-shared K = 3), which
    # M10K takes as one memory and not as one per row: 2,048 cycles/frame.
    ("k3-c16-shared-serial", dict(bases=3, stem_channels=16, stages=[[16, 1, 1], [16, 1, 2]]),
     32),
    # The same folded to 1,024 cycles a pixel (65,152 cycles/frame): the MVUs behind the
    # serial windows read the window's register in place, no input buffer.
    ("k3-c16-shared-inplace", dict(bases=3, stem_channels=16,
                                   stages=[[16, 1, 1], [16, 1, 2]]), 1024),
    # Beat streams: time-shared K = 3 at 512 cycles a pixel, and side by side K = 2 with
    # 2-bit activations whose stride-2 shortcut (8 channels a base) is padded to the
    # add's 12 at 32.
    ("k3-c16-shared-beats", dict(bases=3, stem_channels=16, stages=[[16, 1, 1], [16, 1, 2]]),
     512),
    ("k2-c8-a2-beats", dict(bases=2, act_bits=2, stem_channels=8,
                            stages=[[8, 1, 1], [12, 1, 2]]), 32),
]

#: Sweep designs scheduled with their line buffers in block RAM (``schedule``'s
#: ``line_buffers``); the others in logic.
LINE_BUFFERS = {"k2-c16-w32-bram": "block", "k2-c16-w32-serial": "serial",
                "k3-c16-shared-serial": "serial", "k3-c16-shared-inplace": "serial"}
#: Sweep designs scheduled with every block's bases time-shared (grouped MVUs, packed
#: mixers): the default digits network at 512 cycles/frame.
SHARED_BASES = {"k5-c16-shared", "k3-c16-shared-serial", "k3-c16-shared-inplace",
                "k3-c16-shared-beats"}
#: Sweep designs scheduled with tensors as beats (``schedule``'s ``streams``).
BEATS = {"k3-c16-shared-beats", "k2-c8-a2-beats"}


def sweep_design(name, fields, multiple, seed=0):
    """(schedule, Verilog text, accelerator) of one sweep design."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = randomize_eval_state(GroupNet(GroupNetConfig(**fields)), gen).eval()
    g = compile_model(model)
    inp = g[g.input]
    sched = schedule(g, target_cycles=multiple * inp.height * inp.width,
                     bases="shared" if name in SHARED_BASES else "parallel",
                     line_buffers=LINE_BUFFERS.get(name, "logic"),
                     streams="beats" if name in BEATS else "pixels")
    core = Accelerator(sched)
    text = verilog.convert(core, name="groupnet_core", emit_src=False)
    return sched, text, core


def samples_of(sched, core, modules, design):
    """Calibration samples of one synthesized design."""
    features = R.unit_features(sched)
    cells = R.per_unit_cells(core.module_owners, modules)
    out = []
    for key, (op, feats) in features.items():
        if op == "input":
            continue
        out.append({"design": design, "unit": "/".join(str(k) for k in key), "op": op,
                    "features": feats, "cells": cells.get(key, {})})
    return out


def features_of(samples):
    names = {}
    for s in samples:
        names.setdefault(s["op"], set()).update(n for n in s["features"]
                                                if n not in R.COUNTED_CELLS)
    return lambda op: sorted(names[op])


def _without_counted_cells(sample, flow):
    """Measured cells less those the estimate counts exactly (deep ROMs, block-RAM line
    buffers, FIFO memories)."""
    feats = R.family_features(sample["features"], flow)
    cells = dict(sample["cells"])
    for name, cell in R.COUNTED_CELLS.items():
        if feats.get(name):
            cells[cell] = max(0, cells.get(cell, 0) - feats[name])
    return cells


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows", default=",".join(R.FAMILIES))
    ap.add_argument("--designs", type=int, default=len(SWEEP))
    ap.add_argument("--model", type=Path, default=R.MODEL_FILE)
    ap.add_argument("--refit", action="store_true",
                    help="keep the synthesized counts of --model, recompute the features of "
                         "the same designs and fit again (after changing a feature)")
    ap.add_argument("--only", default=None,
                    help="comma-separated sweep designs to synthesize; the others keep "
                         "their counts from --model, as with --refit")
    args = ap.parse_args(argv)
    flows = args.flows.split(",")
    samples = {f: [] for f in flows}
    seconds = {}
    todo = SWEEP[:args.designs]
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {name for name, _, _ in SWEEP}
        if unknown:
            ap.error(f"unknown sweep design(s): {', '.join(sorted(unknown))}")
        todo = [d for d in SWEEP if d[0] in names]
    if args.refit or args.only:
        old = json.loads(args.model.read_text())
        seconds = old.get("yosys_seconds", {})
        kept = {name: sweep_design(name, fields, multiple)[0]
                for name, fields, multiple in SWEEP if not args.only or name not in names}
        for flow in flows:
            for s in old["samples"][flow]:
                if s["design"] not in kept:
                    continue
                owner, role, slot = s["unit"].split("/")
                key = (owner, role, None if slot == "None" else int(slot))
                s["op"], s["features"] = R.unit_features(kept[s["design"]])[key]
                samples[flow].append(s)
    with tempfile.TemporaryDirectory() as tmp:
        for name, fields, multiple in ([] if args.refit else todo):
            sched, text, core = sweep_design(name, fields, multiple)
            vfile = Path(tmp, f"{name}.v")
            vfile.write_text(text)
            for flow in flows:
                t0 = time.perf_counter()
                result = synthesize(vfile, "groupnet_core", flow, Path(tmp, name),
                                    place_and_route=False, per_module=True)
                seconds[f"{name}/{flow}"] = round(time.perf_counter() - t0, 1)
                samples[flow] += samples_of(sched, core, result["modules"], name)
                print(f"{name} {flow}: {result['cells']} ({seconds[f'{name}/{flow}']} s)",
                      flush=True)
    model = {"coefficients": {}, "samples": samples, "yosys_seconds": seconds}
    report = {}
    for flow in flows:
        # the family's features: a deep weight ROM is counted block RAMs, not fitted
        fit_samples = [dict(s, features=R.family_features(s["features"], flow),
                            cells=_without_counted_cells(s, flow)) for s in samples[flow]]
        fitted = R.fit_unit_model(fit_samples, features_of(fit_samples))
        model["coefficients"][flow] = fitted
        report[flow] = worst_errors(samples[flow], fitted, flow)
    args.model.write_text(json.dumps(model, indent=1, sort_keys=True) + "\n")
    out = ROOT / "benchmarks" / "results" / "resource_calibration.json"
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(json.dumps(report, indent=1))


def worst_errors(samples, fitted, flow):
    """Per op and cell: worst relative error of the estimate over the samples."""
    worst = {}
    for s in samples:
        est = R.estimate_unit(s["features"], s["op"], flow, {flow: fitted})
        for cell, measured in s["cells"].items():
            err = R.relative_error(est.get(cell, 0), measured)
            key = f"{s['op']}.{cell}"
            worst[key] = max(worst.get(key, 0.0), round(err, 3))
    return worst


if __name__ == "__main__":
    main()
