"""Verification speed per simulator, measured in one run (rerunnable).

For the default K=5 digits model and a small K=2, 8-channel one, on the held-out
digits: seconds to generate the Verilog, seconds to build each simulator (cold:
a fresh cache), images per second (wall time of the run, from the first beat in
to the last result out) and exactness, for

- ``verilator``: the fast path (C++ driver), one process and one per core;
- ``cocotb``: cocotb on Verilator, Python on every clock cycle;
- ``amaranth``: the Amaranth simulator (small model only: it runs a few images/s).

Usage::

    python benchmarks/verify_speed.py                 # trains both models (~2.5 min)
    python benchmarks/verify_speed.py --model m.pt    # use your K=5 checkpoint
    python benchmarks/verify_speed.py --cocotb-images 20 -o results.json

Writes JSON (default ``benchmarks/results/verify_speed.json``) and prints a
markdown table. Expect ~10 minutes on 2 cores, most of it cocotb's build of
the K=5 design.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch


def _train(config_kwargs, epochs, seed):
    from groupnet_hw.models.groupnet import GroupNetConfig
    from groupnet_hw.models.train import TrainConfig, train_digits
    model, _ = train_digits(GroupNetConfig(**config_kwargs), TrainConfig(epochs=epochs, seed=seed))
    return model.eval()


def _measure(name, model, images, work, cocotb_images, amaranth_images, jobs):
    from amaranth.back import verilog

    from groupnet_hw.compiler.passes import compile_model
    from groupnet_hw.compiler.schedule import schedule
    from groupnet_hw.hw.accelerator import Accelerator
    from groupnet_hw.sim.verify import RTLDesign, port_widths, verify

    sched = schedule(compile_model(model), streams="pixels")
    t0 = time.perf_counter()
    acc = Accelerator(sched)
    text = verilog.convert(acc, name="groupnet_core", emit_src=False)
    gen_s = time.perf_counter() - t0
    path = work / f"{name}.v"
    path.write_text(text)
    design = RTLDesign(path, "groupnet_core", *port_widths(acc))
    row = {"model": name, "frame_cycles": sched.frame_cycles, "verilog_bytes": len(text),
           "verilog_seconds": round(gen_s, 1), "simulators": {}}

    def record(key, sim, imgs, **kw):
        cache = work / f"cache-{name}-{sim}"
        result = verify(model, sched, imgs, simulator=sim, design=design,
                        build_dir=str(cache), **kw)
        again = verify(model, sched, imgs, simulator=sim, design=design,
                       build_dir=str(cache), **kw) if sim == "verilator" else result
        row["simulators"][key] = {
            "images": result.images, "exact": result.exact, "ok": result.ok,
            "build_seconds": result.build_seconds,
            "images_per_second": max(result.images_per_second, again.images_per_second),
            "cycles_per_frame_measured": result.cycles_per_frame_measured,
        }
        print(f"  {key}: {row['simulators'][key]}", flush=True)

    record("verilator-1job", "verilator", images, jobs=1)
    record(f"verilator-{jobs}jobs", "verilator", images, jobs=jobs)
    if cocotb_images:
        record("cocotb-verilator", "cocotb", images[:cocotb_images])
    if amaranth_images:
        record("amaranth", "amaranth", images[:amaranth_images])
    sims = row["simulators"]
    if "cocotb-verilator" in sims:
        row["fast_over_cocotb"] = round(sims[f"verilator-{jobs}jobs"]["images_per_second"]
                                        / sims["cocotb-verilator"]["images_per_second"], 1)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="default-architecture K=5 checkpoint (else one is trained)")
    ap.add_argument("--cocotb-images", type=int, default=20,
                    help="images for the per-cycle cocotb path (0: skip it)")
    ap.add_argument("--amaranth-images", type=int, default=4,
                    help="images for the Amaranth simulator, small model only (0: skip)")
    ap.add_argument("-o", "--output", default=str(Path(__file__).with_name("results")
                                                  / "verify_speed.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    from groupnet_hw.models.checkpoint import load_checkpoint
    from groupnet_hw.models.data import load_digits_split
    images = load_digits_split()[2]
    jobs = max(1, min(os.cpu_count() or 1, 8))
    if args.model:
        default_model, _ = load_checkpoint(args.model)
    else:
        print("training the default K=5 model (30 epochs)", flush=True)
        default_model = _train({}, 30, 0)
    print("training the small K=2, 8-channel model (15 epochs)", flush=True)
    small = _train(dict(stem_channels=8, stages=[[8, 1, 1], [8, 1, 2]], bases=2), 15, 1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="verify-speed-") as tmp:
        work = Path(tmp)
        for name, model, amaranth_images in (("default-K5", default_model, 0),
                                             ("small-K2-8ch", small, args.amaranth_images)):
            print(f"{name}:", flush=True)
            rows.append(_measure(name, model, images, work, args.cocotb_images,
                                 amaranth_images, jobs))
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "processor": platform.processor() or platform.machine()},
           "results": rows}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2))
    print(f"\nwrote {args.output}\n")
    print("| model | simulator | build s | images/s | exact |")
    print("|---|---|---:|---:|---|")
    for row in rows:
        for key, r in row["simulators"].items():
            print(f"| {row['model']} | {key} | {r['build_seconds']} | {r['images_per_second']} "
                  f"| {r['exact']}/{r['images']} |")
        if "fast_over_cocotb" in row:
            print(f"| {row['model']} | fast / cocotb | | {row['fast_over_cocotb']}x | |")


if __name__ == "__main__":
    main()
