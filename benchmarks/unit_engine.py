"""Run the engine of the units (``hw/engine/unit_engine.py``) on the fast Verilator path:
every descriptor it executes in two small compiled networks (the tests' engine: 2 arrays
of 8 x 16 lanes), in ResNet-18 K=5 at 32x32 (the ladder's top rung, 5 arrays of 16 x 64
lanes, maps of up to 8 x 8) and at 224x224 (the engine the sizing gives the DE10-Nano,
5 arrays of 16 x 32 lanes, maps of up to 64 x 64, frames of 224 x 224), behind the C++ DRAM model at two read latencies of a 16-byte
port at full rate and at the default DRAM model (``DE10_NANO_DRAM``: latency 48, 10
bytes a cycle), each checked byte for byte against the reference model's image; record
its cycles against the folds it computes and against the cycle model's figure.

    python3 benchmarks/unit_engine.py            # about five minutes on two cores

Writes ``benchmarks/results/unit_engine.json`` and the table of docs/architecture.md
section 15 (between the markers below). A descriptor's utilisation is its fold cycles
(``windows x in_folds x out_folds``: the arrays' busy cycles) over its cycles from START
to DONE (the fetch, the transfers one after another, the compute and the fence).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "unit_engine.json"
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- unit engine: begin (written by benchmarks/unit_engine.py; edit there) -->"
END = "<!-- unit engine: end -->"
#: read latencies in cycles: an on-chip memory's, and about the DE10-Nano's at 100 MHz
LATENCIES = (1, 40)
#: bytes a cycle of the DRAM model (a 128-bit port at full rate)
BYTES_PER_CYCLE = 16


#: the networks and helpers are the tests' (tests/test_engine_runner.py), so that the
#: benchmark measures what the tests check
sys.path.insert(0, str(ROOT / "tests"))


def engines():
    """(engine name, its sizes, its bursts, [(network name, compiled graph,
    EngineConfig)])."""
    from test_engine_program import zoo_model
    from test_engine_runner import (CONFIG, NETWORKS, RESIDUAL,
                                    compile_model, random_model)
    from test_engine_unit_engine import (DE10_NANO_CONFIG, DE10_NANO_SIZES, RESNET_CONFIG,
                                         RESNET_SIZES, SIZES)
    small = [("odd channels, stride 2", random_model(3, **NETWORKS["odd-channels-stride-2"]),
              CONFIG),
             ("residual adds, option A, BPAC", random_model(3, **RESIDUAL), CONFIG)]
    resnet = [("ResNet-18 K=5, 32x32", zoo_model("resnet18", 5, image_size=32),
               RESNET_CONFIG)]
    full = [("ResNet-18 K=5, 224x224", zoo_model("resnet18", 5, image_size=224),
             DE10_NANO_CONFIG)]
    return [("tests' engine", SIZES, 8, [(n, compile_model(m), c) for n, m, c in small]),
            ("intended arrays", RESNET_SIZES, 16,
             [(n, compile_model(m), c) for n, m, c in resnet]),
            ("DE10-Nano size", DE10_NANO_SIZES, 16,
             [(n, compile_model(m), c) for n, m, c in full])]


def stages_of(d):
    """The descriptor's epilogue stages and level outputs, as the table names them."""
    from groupnet_hw.compiler.engine.program import FLAG_BITS, OPCODE_CODES, STAGE_BITS
    if d["opcode"] == OPCODE_CODES["HEAD"]:
        return "head: sum pooling, classifier"
    names = [name.replace("postop", "post-op") for name, bit in STAGE_BITS.items()
             if d["stages"] & bit]
    if d["flags"] & FLAG_BITS["levels_out"]:
        names.append("levels out")
    return ", ".join(names)


def measure(progress=print):
    from amaranth.back import verilog

    from groupnet_hw.hw.engine.unit_engine import UnitEngine
    from groupnet_hw.sim.engine_rtl import build_engine_rtl
    from groupnet_hw.compiler.engine.config import DE10_NANO_DRAM, DramModel
    from groupnet_hw.compiler.engine.cycles import descriptor_cycles
    from test_engine_runner import program_steps
    from test_engine_unit_engine import measured_on_the_units

    rows, sizes_of = [], {}
    for engine, sizes, burst, nets in engines():
        sizes_of[engine] = dict(sizes, max_burst=burst)
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "unit_engine.v"
            path.write_text(verilog.convert(UnitEngine(data_width=128, max_burst=burst, **sizes),
                                            name="unit_engine"))
            t0 = time.perf_counter()
            build = build_engine_rtl(path, "unit_engine")
            progress(f"{engine}: built in {time.perf_counter() - t0:.1f} s")
            measured = measured_on_the_units(sizes)
            for name, g, config in nets:
                program, descs, steps = program_steps(g, config, which=measured)
                for i, before, after in steps:
                    rows.append(_run(build, name, descs[i], i, before, after))
                    # the cycle model's figure for the same descriptor and DRAM
                    for latency in LATENCIES:
                        dram = DramModel(latency=latency, bytes_per_cycle=BYTES_PER_CYCLE)
                        rows[-1][f"predicted_{latency}"] = descriptor_cycles(
                            descs[i], program.header, config, dram).cycles
                    rows[-1]["predicted_default"] = descriptor_cycles(
                        descs[i], program.header, config, DE10_NANO_DRAM).cycles
                    r = rows[-1]
                    progress(f"{name}: descriptor {i}: {r['cycles_1']} / "
                             f"{r[f'cycles_{LATENCIES[-1]}']} cycles, {r['folds']} folds")
    return {"latencies": list(LATENCIES), "bytes_per_cycle": BYTES_PER_CYCLE,
            "engines": sizes_of, "descriptors": rows}


def _run(build, name, d, i, before, after):
    """One descriptor at each latency: its row of the table."""
    from test_engine_unit_engine import the_image, verilog_run
    folds = d["windows"] * d["in_folds"] * d["out_folds"]
    row = dict(network=name, descriptor=i, jobs=d["jobs"], in_c=d["in_c"], out_c=d["out_c"],
               size=d["out_h"], stride=d["stride"], dilation=d["dilation"],
               stages=stages_of(d), folds=folds)
    from groupnet_hw.compiler.engine.config import DE10_NANO_DRAM
    runs = [(f"cycles_{latency}", latency, BYTES_PER_CYCLE) for latency in LATENCIES]
    runs.append(("cycles_default", DE10_NANO_DRAM.latency, DE10_NANO_DRAM.bytes_per_cycle))
    for key, latency, rate in runs:
        run, code = verilog_run(build, d, before, latency=latency, stall=0.0, seed=1,
                                bytes_per_cycle=rate)
        if not (run.done and the_image(run.image_after, before, code) == after):
            raise SystemExit(f"{name}, descriptor {i}: not the model's image")
        row[key] = run.cycles
    return row


def render(data):
    lat = data["latencies"]
    head = ("| network | descriptor | jobs | channels | output | stride, dilation | stages | folds | "
            + " | ".join(f"cycles (latency {n})" for n in lat) + " | "
            + " | ".join(f"predicted (latency {n})" for n in lat) + " | "
            + " | ".join(f"arrays busy (latency {n})" for n in lat) + " |")
    lines = [head, "|---|---:|---:|---|---:|---|---|---:|" + "---:|" * (3 * len(lat))]
    for r in data["descriptors"]:
        cycles = [r[f"cycles_{n}"] for n in lat]
        folds = f"{r['folds']:,}" if r["folds"] else ""      # a HEAD has none
        lines.append(
            f"| {r['network']} | {r['descriptor']} | {r['jobs']} | {r['in_c']} -> {r['out_c']} | "
            f"{r['size']}x{r['size']} | {r['stride']}, {r['dilation']} | "
            f"{r['stages']} | {folds} | "
            + " | ".join(f"{c:,}" for c in cycles) + " | "
            + " | ".join(f"{r[f'predicted_{n}']:,} ({100 * (c / r[f'predicted_{n}'] - 1):+.1f} %)"
                         for n, c in zip(lat, cycles)) + " | "
            + " | ".join(f"{100 * r['folds'] / c:.0f} %" if r["folds"] else ""
                         for c in cycles) + " |")
    lines += ["", "| network | " + " | ".join(
        f"cycles against predicted (latency {n})" for n in lat)
        + " | cycles against predicted (default DRAM model) |",
        "|---|" + "---:|" * (len(lat) + 1)]
    for net, total in totals(data).items():
        lines.append(f"| {net} | " + " | ".join(
            f"{c:,} / {p:,} ({100 * (c / p - 1):+.1f} %)" for c, p in total) + " |")
    return "\n".join(lines)


def totals(data):
    """Per network: ``(RTL cycles, predicted)`` summed over its descriptors, at each
    latency and at the default DRAM model."""
    keys = [(f"cycles_{n}", f"predicted_{n}") for n in data["latencies"]]
    keys.append(("cycles_default", "predicted_default"))
    out = {}
    for r in data["descriptors"]:
        sums = out.setdefault(r["network"], [[0, 0] for _ in keys])
        for s, (c, p) in zip(sums, keys):
            s[0] += r[c]
            s[1] += r[p]
    return {net: [tuple(s) for s in sums] for net, sums in out.items()}


def write_doc(data):
    text = DOC.read_text()
    block = f"{BEGIN}\n{render(data)}\n{END}"
    if BEGIN in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[end:]
    else:
        raise SystemExit(f"{DOC}: no {BEGIN!r} marker")
    DOC.write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--render", action="store_true", help="write the docs table only")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(OUT.read_text())
    else:
        data = measure()
        OUT.write_text(json.dumps(data, indent=1) + "\n")
    write_doc(data)


if __name__ == "__main__":
    main()
