"""FINN's CNV-W1A1 on groupnet-hw: the published folding, cycles, resources, lane density.

The comparison of issue 7 (item 8). FINN's CNV-W1A1 (BNN-PYNQ) is the zoo topology
``cnv`` (``models/cnv.py``). This script

1. builds a CNV with random, seeded weights (batch-norm statistics measured on random
   images so that every sign varies from image to image) and saves it as a checkpoint;
2. maps BNN-PYNQ's published CNV-W1A1 folding (SIMD x PE per layer: six convolutions,
   then three fully connected layers, which are 1x1 convolutions here) onto the conv
   nodes of the compiled graph, in graph order (no node name is written down here);
   on ``cnv-small`` each PE and SIMD is scaled by the layer's size against ``cnv``;
3. times ``groupnet-hw build CKPT --board ulx3s --folding F --no-bitstream`` (checkpoint
   to Verilog, wall clock);
4. reports each layer's predicted cycles per frame (the schedule's cycle model) and the
   frame interval measured on the generated Verilog (the fast Verilator path), with a few
   random images checked bit-exact against PyTorch's fixed-point forward. Per-layer
   cycles are predicted only: inside the pipeline every unit runs at the bottleneck's
   rate, so the simulation measures the frame interval, which is the slowest layer's;
5. estimates resources with the calibrated model (ECP5, ``design_cells``) and, with
   ``--synth``, counts them with Yosys and places and routes with nextpnr
   (``groupnet-hw synth OUT --flow ecp5``); a tool that runs out of ``--timeout`` is
   recorded as such;
6. searches our own folding for FINN's LUT budget: it bisects ``target_cycles`` of the
   schedule until the estimated ECP5 LUT sites are at most FINN's LUT count;
7. computes the XNOR lane density, sum over layers of PE x SIMD per thousand LUTs, for
   both;

and writes ``benchmarks/results/finn_cnv.json``, ``docs/finn.md`` and
``docs/finn_cnv.png``. FINN's figures are the published ones (they are not rerun
here): bottleneck 32,768 cycles per frame, 26,072 LUTs on a Zynq-7020.

Usage::

    python benchmarks/finn_cnv.py                        # cnv, measured on Verilator
    python benchmarks/finn_cnv.py --synth --timeout 2400  # + Yosys / nextpnr on ECP5
    python benchmarks/finn_cnv.py --arch cnv-small --no-measure   # seconds

Needs ``pip install -e '.[bench]'`` (matplotlib) and, for ``--synth``, ``'.[synth]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from math import ceil
from pathlib import Path

import torch

from groupnet_hw.devices import get_board

ROOT = Path(__file__).resolve().parent.parent
BOARD = "ulx3s"
#: The board's family: its resource model and its ``groupnet-hw synth --flow``.
FAMILY = get_board(BOARD).family

#: BNN-PYNQ's CNV-W1A1 as published: (SIMD, PE) of the six convolutions and the three
#: fully connected layers in network order, its bottleneck and its LUTs on a Zynq-7020.
FINN = {
    "source": "BNN-PYNQ CNV-W1A1 (FINN), Xilinx Zynq-7020",
    "simd_pe": [(3, 16), (32, 32), (32, 16), (32, 16), (32, 4), (32, 1), (4, 1), (8, 1), (1, 4)],
    "bottleneck_cycles": 32_768,
    "luts": 26_072,
}

#: The ops that are matrix-vector units, in the order the compiled graph lists them.
CONV_OPS = ("bin_conv", "int_conv")


# -- model and graph --------------------------------------------------------------------

def make_model(arch="cnv", seed=0, calibration=32):
    """An untrained CNV of the zoo with random weights and non-degenerate statistics.

    Parameters
    ----------
    arch : str
        ``"cnv"`` or ``"cnv-small"`` (:data:`groupnet_hw.models.zoo.CNV_ARCHS`).
    seed : int
        Seeds the weights, the batch-norm affine parameters and the calibration images.
    calibration : int
        Random images the batch-norm statistics and fractional bits are measured on.

    Returns
    -------
    CNV
        In eval mode, calibrated (its fixed-point forward is defined).

    Notes
    -----
    Random running statistics alone saturate the signs of the deeper layers (every
    image would give the same logits, and a bit-exact check would prove little), so the
    statistics are measured on random images, as ``tests/test_cnv.py`` does.
    """
    from groupnet_hw.models.calibrate import calibrate_untrained
    from groupnet_hw.models.groupnet import randomize_eval_state
    from groupnet_hw.models.zoo import CNV_ARCHS, arch_config, build_model
    if arch not in CNV_ARCHS:
        raise ValueError(f"arch {arch!r} is not a CNV topology; known: {', '.join(CNV_ARCHS)}")
    torch.manual_seed(seed)
    model = build_model(arch_config(arch))
    randomize_eval_state(model, torch.Generator().manual_seed(seed + 1), zero_gamma=True)
    calibrate_untrained(model, random_images(seed + 2, calibration, model.config))
    return model


def random_images(seed, n, config):
    """``n`` seeded uint8 images ``[n, C, H, W]`` of ``config``'s input size."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, config.in_channels, config.image_size, config.image_size),
                         generator=gen, dtype=torch.uint8)


def conv_names(graph):
    """Names of the matrix-vector units (convolutions, fully connected layers as 1x1
    convolutions) in graph order."""
    return [n.name for n in graph if n.op in CONV_OPS]


def layer_shapes(graph):
    """``[(C_out, n_in, output pixels)]`` of every conv node, graph order; ``n_in`` is
    ``k * k * C_in``, the length of one weight row."""
    out = []
    for name in conv_names(graph):
        node = graph[name]
        parent = graph.producer(node.inputs[0])
        out.append((node.channels, node.attrs["kernel"] ** 2 * parent.channels,
                    node.height * node.width))
    return out


def config_shapes(config):
    """:func:`layer_shapes` of a CNV computed from its config alone (no compile): the
    reference sizes the published folding was made for."""
    from groupnet_hw.models.cnv import KERNEL, POOL_AFTER
    out, c_prev, size = [], config.in_channels, config.image_size
    for i, c in enumerate(config.conv_channels):
        size -= KERNEL - 1                    # valid convolution
        out.append((c, KERNEL * KERNEL * c_prev, size * size))
        c_prev = c
        if i in POOL_AFTER:
            size //= 2
    final = config.final_size()
    n_in = c_prev * final * final             # the first fc covers the final map
    for f in [*config.fc_features, config.num_classes]:
        out.append((f, n_in, 1))
        n_in = f
    return out


def finn_folding(graph, reference=None):
    """The published folding as ``{conv node: [PE, SIMD]}`` (the ``--folding`` format).

    Parameters
    ----------
    graph : Graph
        The compiled CNV; its conv nodes are taken in graph order.
    reference : list of (C_out, n_in, pixels), optional
        Layer sizes the folding was published for (default: FINN's CNV,
        ``config_shapes(arch_config("cnv"))``). A smaller network of the same
        structure gets each PE scaled by its C_out and each SIMD by its n_in, rounded
        up and kept within the layer, so each layer keeps about FINN's cycles.

    Raises
    ------
    ValueError
        the graph does not have as many conv nodes as the folding has layers.
    """
    if reference is None:
        from groupnet_hw.models.zoo import arch_config
        reference = config_shapes(arch_config("cnv"))
    names, shapes = conv_names(graph), layer_shapes(graph)
    if len(names) != len(FINN["simd_pe"]) or len(reference) != len(names):
        raise ValueError(f"the published folding has {len(FINN['simd_pe'])} layers, the graph "
                         f"{len(names)} conv nodes ({', '.join(names)})")
    out = {}
    for name, (simd, pe), (c, n, _), (c_ref, n_ref, _) in zip(names, FINN["simd_pe"], shapes,
                                                               reference):
        out[name] = [min(c, max(1, ceil(pe * c / c_ref))), min(n, max(1, ceil(simd * n / n_ref)))]
    return out


# -- schedule figures -------------------------------------------------------------------

def sites(cells):
    """ECP5 LUT4 sites of estimated or counted cells (``logic_sites``: carries and LUT
    RAM occupy several sites each)."""
    from groupnet_hw.compiler.resources import logic_sites
    return logic_sites(cells, FAMILY)


def lanes(sched):
    """Sum over the conv units of PE x SIMD (XNOR lanes; 8-bit lanes on the first layer,
    as FINN counts its first layer's SIMD)."""
    return sum(sched.units[n].pe * sched.units[n].simd for n in conv_names(sched.graph))


def density(n_lanes, luts):
    """Lanes per thousand LUTs (``None`` without a LUT count)."""
    return round(n_lanes / (luts / 1000), 1) if luts else None


def finn_layer_cycles(shapes=None):
    """Cycles per frame of each layer of FINN's CNV under its published folding, by
    FINN's own formula ``pixels * ceil(C_out / PE) * ceil(n_in / SIMD)``; their maximum
    is the published bottleneck. ``shapes`` default to FINN's CNV's."""
    if shapes is None:
        from groupnet_hw.models.zoo import arch_config
        shapes = config_shapes(arch_config("cnv"))
    return [px * ceil(c / pe) * ceil(n / simd)
            for (c, n, px), (simd, pe) in zip(shapes, FINN["simd_pe"])]


def weight_rom_sites(sched):
    """Estimated LUT sites of each conv unit's weight ROM: the unit's estimate minus the
    same estimate without its ``weight_bits`` feature (the model is a non-negative
    linear combination of features, so the difference is that feature's share)."""
    from groupnet_hw.compiler.resources import estimate_unit, unit_features
    out = {}
    for key, (op, feats) in unit_features(sched).items():
        name = key[0] if isinstance(key, tuple) else key
        if op in CONV_OPS and feats.get("weight_bits"):
            out[name] = sites(estimate_unit(feats, op, FAMILY)) - sites(
                estimate_unit(dict(feats, weight_bits=0), op, FAMILY))
    return out


def design_summary(sched):
    """Cycles, frames/s at the board clock, estimated cells and LUT sites of ``sched``."""
    from groupnet_hw.compiler.resources import design_cells
    cells = design_cells(sched, FAMILY)
    return {"frame_cycles": sched.frame_cycles, "bottleneck": sched.bottleneck(),
            "clock_mhz": sched.clock_mhz,
            "frames_per_second": round(sched.frames_per_second, 1),
            "estimate_cells": cells, "estimate_lut_sites": sites(cells),
            "lanes": lanes(sched), "lanes_per_klut_estimate": density(lanes(sched), sites(cells)),
            "folding": {n: [sched.units[n].pe, sched.units[n].simd]
                        for n in conv_names(sched.graph)}}


def per_layer(sched, folding):
    """One row per conv node: sizes, requested and applied folding, predicted cycles,
    FINN's cycles for its folding, estimated LUT sites of the unit (window + MVU)."""
    shapes = layer_shapes(sched.graph)
    roms = weight_rom_sites(sched)
    rows = []
    for i, (name, (c, n, px), finn_cycles) in enumerate(
            zip(conv_names(sched.graph), shapes, finn_layer_cycles())):
        unit = sched.units[name]
        rows.append({
            "layer": name, "kind": "conv" if i < 6 else "fc", "c_out": c, "n_in": n,
            "pixels": px, "finn_simd_pe": list(FINN["simd_pe"][i]),
            "requested_pe_simd": list(folding[name]), "pe": unit.pe, "simd": unit.simd,
            "lanes": unit.pe * unit.simd, "predicted_cycles": unit.cycles,
            "finn_cycles": finn_cycles,
            "estimate_lut_sites": sites(unit.resources),
            "estimate_weight_rom_lut_sites": roms.get(name, 0),
            "estimate_ff": unit.resources.get("ff", 0)})
    return rows


def budget_search(graph, luts=FINN["luts"], progress=None):
    """Our own folding at FINN's LUT budget: the least ``target_cycles`` whose schedule's
    estimated ECP5 LUT sites are at most ``luts``.

    The estimate falls as the interval grows (every unit is folded to just meet it), so
    the frontier is bisected between the input rate and the fully folded interval (one
    PE and one SIMD lane everywhere). Returns ``(schedule, fits, trials)``; when even the
    fully folded design is over budget, that design and ``fits = False``.
    """
    from groupnet_hw.compiler.schedule import schedule
    shapes = layer_shapes(graph)
    slowest = max(px * c * n for c, n, px in shapes)
    trials = []

    def plan(t):
        s = schedule(graph, BOARD, target_cycles=t, streams="pixels")
        trials.append({"target_cycles": t, "frame_cycles": s.frame_cycles,
                       "estimate_lut_sites": sites(s.cells)})
        if progress:
            progress(f"budget search: {t:,} cycles -> {trials[-1]['estimate_lut_sites']:,} "
                     "LUT sites")
        return s

    inp = graph[graph.input]
    lo, hi = inp.height * inp.width, slowest
    best = plan(hi)
    if sites(best.cells) > luts:
        return best, False, trials
    first = plan(lo)
    if sites(first.cells) <= luts:
        return first, True, trials
    while hi - lo > max(1, lo // 256):
        mid = (lo + hi) // 2
        s = plan(mid)
        if sites(s.cells) <= luts:
            hi, best = mid, s
        else:
            lo = mid
    return best, True, trials


# -- tools ------------------------------------------------------------------------------

def _cli():
    exe = shutil.which("groupnet-hw")
    return [exe] if exe else [sys.executable, "-m", "groupnet_hw.cli"]


def build(checkpoint, folding, out_dir):
    """``groupnet-hw build CKPT --board ulx3s --folding F --no-bitstream -o OUT``, timed.

    Returns
    -------
    dict
        ``seconds`` (wall clock, checkpoint to Verilog, process start included),
        ``verilog_bytes``, ``frame_cycles`` from the build's manifest.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fold_file = out_dir.parent / f"{out_dir.name}-folding.json"
    fold_file.write_text(json.dumps(folding, indent=1) + "\n")
    # whole pixels between units, as the schedule computed here and the published
    # comparison (docs/finn.md) were measured
    cmd = [*_cli(), "build", str(checkpoint), "--board", BOARD, "--folding", str(fold_file),
           "--streams", "pixels", "--no-bitstream", "-o", str(out_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"groupnet-hw build failed: {(proc.stderr or proc.stdout).strip()}")
    manifest = json.loads((out_dir / "build.json").read_text())
    return {"command": " ".join(["groupnet-hw", *cmd[len(_cli()):]]),
            "seconds": round(seconds, 1),
            "verilog_bytes": (out_dir / manifest["verilog"]).stat().st_size,
            "verilog_sha256": manifest["verilog_sha256"],
            "frame_cycles": manifest["frame_cycles"]}


def measure(model, sched, out_dir, images, build_dir=None, progress=None):
    """Simulate the Verilog a build wrote on the fast Verilator path.

    The build's ``schedule.json`` must equal ``sched`` (what ``groupnet-hw verify``
    requires), so the measured design is the predicted one.

    Returns
    -------
    dict
        ``images``, ``exact``, ``bit_exact`` (every logit and class equal, and the
        integer graph equal to PyTorch's fixed-point forward), ``cycles_per_frame``
        measured (stall-free, the mean interval between results), the simulator's
        one-off ``build_seconds`` and ``sim_seconds``.
    """
    from groupnet_hw import flow
    # the build's own check (its schedule recomputed from the checkpoint), then this
    # benchmark's: the schedule it predicts from is the one simulated
    b = flow.load_build(out_dir)
    if json.loads(b.schedule.to_json()) != json.loads(sched.to_json()):
        raise RuntimeError(f"{out_dir}/schedule.json differs from the schedule computed here")
    r = flow.verify(b, images, build_dir=build_dir, progress=progress)
    return {"simulator": "verilator (fast path)", "images": r.images, "exact": r.exact,
            "bit_exact": r.ok, "first_mismatch": r.first_mismatch,
            "cycles_per_frame": r.cycles_per_frame_measured,
            "cycles_per_frame_predicted": r.cycles_per_frame_predicted,
            "build_seconds": r.build_seconds, "sim_seconds": r.sim_seconds}


def synth(out_dir, timeout):
    """``groupnet-hw synth OUT --flow ecp5 --timeout T``: Yosys counts and nextpnr's Fmax.

    Returns
    -------
    dict
        ``status``: ``"ok"`` (``cells``, ``lut_sites``, and ``fmax_mhz`` or
        ``pnr_error``), ``"timeout"`` or ``"failed"`` (``error``); ``seconds`` wall clock.
    """
    cmd = [*_cli(), "synth", str(out_dir), "--flow", "ecp5", "--timeout", str(int(timeout))]
    t0 = time.perf_counter()
    try:
        # each tool gets `timeout`; Yosys then nextpnr, plus the DSP retry at worst
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * timeout + 300)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "timeout_s": timeout,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": f"groupnet-hw synth did not finish within {4 * timeout + 300} s"}
    seconds = round(time.perf_counter() - t0, 1)
    if proc.returncode:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        err = err[-1] if err else f"exit status {proc.returncode}"
        status = "timeout" if "did not finish" in err else "failed"
        r = {"status": status, "timeout_s": timeout, "seconds": seconds, "error": err}
        # A tool that dies without a message (the WebAssembly Yosys) leaves its log: say
        # where it stopped.
        log = Path(out_dir, "synth-ecp5", "yosys.log")
        if log.is_file():
            tail = [line.strip() for line in log.read_text(errors="replace").splitlines()
                    if line.strip()]
            r["yosys_log_last_line"] = tail[-1] if tail else ""
        return r
    r = json.loads(Path(out_dir, "report.json").read_text())["synthesis"]["ecp5"]
    r.update(status="ok", timeout_s=timeout, seconds=seconds, lut_sites=sites(r["cells"]),
             pnr_utilisation=pnr_utilisation(out_dir))
    return r


# -- outputs ----------------------------------------------------------------------------

def _n(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"


def markdown(res):
    """``docs/finn.md`` from the results dictionary."""
    ours, own, finn = res["finn_folding"], res["own_folding_at_finn_luts"], res["finn"]
    m, s = res.get("measured"), res.get("synthesis")
    lines = [
        "# FINN's CNV-W1A1 on groupnet-hw",
        "",
        f"Written by `python benchmarks/finn_cnv.py` ({res['arch']}, "
        f"{res['date']}, {res['machine']}). The network is FINN's CNV-W1A1 topology "
        "(`models/cnv.py`) with random, seeded weights and batch-norm statistics measured "
        "on random images: the structure, not the accuracy, sets cycles and resources. "
        "BNN-PYNQ's published folding (SIMD x PE per layer) is applied to our conv nodes in "
        "graph order (`--folding`, `[PE, SIMD]`), and the design is built for the ULX3S "
        f"(ECP5 LFE5U-85F, {ours['clock_mhz']:g} MHz).",
        "",
        "What each figure is:",
        "",
        "- **predicted**: the schedule's cycle model (`units[name].cycles`, `frame_cycles`);",
        "- **measured**: the generated Verilog simulated on the fast Verilator path, frames "
        "back to back, cycles per frame = mean interval between results, with every logit "
        "and class compared with PyTorch's fixed-point forward. Per-layer cycles are "
        "predicted only: inside the pipeline every unit runs at the bottleneck's rate, so "
        "the simulation measures the frame interval (the slowest layer's);",
        "- **estimate**: the calibrated resource model (`compiler/resources.py`, ECP5 cells; "
        "LUT4 sites as `logic_sites` counts them: a carry cell or a LUT-RAM cell occupies "
        "several LUT4 sites);",
        "- **Yosys / nextpnr**: `groupnet-hw synth OUT --flow ecp5` (only with `--synth`);",
        f"- **published**: {finn['source']}: bottleneck {finn['bottleneck_cycles']:,} cycles "
        f"per frame, {finn['luts']:,} LUTs (6-input LUTs on a Xilinx 7-series device, "
        "ours are ECP5 4-input LUTs: the LUT counts are not the same unit). FINN's per-layer "
        "cycles below are its folding put through FINN's formula "
        "`pixels * ceil(C_out/PE) * ceil(n_in/SIMD)`, not a measurement.",
        "",
        "## Per layer",
        "",
        "| layer | kind | C_out | n_in | pixels | FINN SIMD x PE | ours PE x SIMD (applied) "
        "| FINN's CNV cycles (its folding, formula) | ours cycles (predicted) "
        "| est. LUT sites | of which weight ROM | est. FF |",
        "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in res["layers"]:
        lines.append(
            f"| {r['layer']} | {r['kind']} | {r['c_out']:,} | {r['n_in']:,} | {r['pixels']:,} | "
            f"{r['finn_simd_pe'][0]} x {r['finn_simd_pe'][1]} | {r['pe']} x {r['simd']} | "
            f"{r['finn_cycles']:,} | {r['predicted_cycles']:,} | "
            f"{r['estimate_lut_sites']:,} | {r['estimate_weight_rom_lut_sites']:,} | "
            f"{r['estimate_ff']:,} |")
    if m:
        meas = (f"{_n(m['cycles_per_frame'], 1)} ({m['exact']}/{m['images']} random images "
                f"bit-exact; Verilator build "
                + (f"{m['build_seconds']:,.0f} s" if m["build_seconds"] else
                   "cached from an earlier run") + ")")
        meas_fps = (_n(ours["clock_mhz"] * 1e6 / m["cycles_per_frame"], 1)
                    if m["cycles_per_frame"] else "-")
    else:
        meas, meas_fps = f"not measured ({res.get('measure_note', 'skipped')})", "-"
    syn_cells = s.get("cells", {}) if s and s.get("status") == "ok" else {}
    if s is None:
        syn = "not run (`--synth`)"
    elif s["status"] != "ok":
        syn = f"{s['status']} after {s['seconds']:,.0f} s: {s.get('error', '')}"
        if s.get("yosys_log_last_line"):
            syn += f"; the Yosys log ends with `{s['yosys_log_last_line']}`"
    else:
        syn = (f"Yosys finished in {s['yosys_seconds']:,.0f} s; "
               + (f"Fmax {s['fmax_mhz']} MHz" if s.get("fmax_mhz")
                  else s.get("pnr_error", "not run")))
    syn = syn.split(" (log: ")[0]        # the work directory's log path is not kept
    est = ours["estimate_cells"]
    fmax = s.get("fmax_mhz") if s else None
    lines += [
        "",
        "## Summary",
        "",
        "| figure | ours, FINN's folding | ours, own folding at FINN's LUT count | "
        "FINN CNV-W1A1 (published) |",
        "|---|---|---|---|",
        f"| cycles per frame | {ours['frame_cycles']:,} predicted; {meas} measured | "
        f"{own['frame_cycles']:,} predicted | {finn['bottleneck_cycles']:,} |",
        f"| bottleneck | {ours['bottleneck']} | {own['bottleneck']} | "
        f"{', '.join(finn['bottleneck_layers'])} |",
        f"| frames/s at {ours['clock_mhz']:g} MHz | {ours['frames_per_second']:,.1f} predicted, "
        f"{meas_fps} measured | {own['frames_per_second']:,.1f} | "
        f"{ours['clock_mhz'] * 1e6 / finn['bottleneck_cycles']:,.1f} (same clock) |",
        f"| LUTs | {est['lut']:,} LUT4 + {est['carry']:,} carry + {est['lutram']:,} LUT RAM = "
        f"{ours['estimate_lut_sites']:,} LUT4 sites (estimate)"
        + (f"; Yosys {syn_cells.get('lut', 0):,} LUT4 + {syn_cells.get('carry', 0):,} carry + "
           f"{syn_cells.get('lutram', 0):,} LUT RAM = {s['lut_sites']:,} sites"
           if syn_cells else "")
        + f" | {own['estimate_lut_sites']:,} sites (estimate)"
        + ("" if res["own_fits"] else ", over budget even fully folded")
        + f" | {finn['luts']:,} LUT6 |",
        f"| flip-flops | {est['ff']:,} (estimate)"
        + (f"; Yosys {syn_cells.get('ff', 0):,}" if syn_cells else "")
        + f" | {own['estimate_cells']['ff']:,} | - |",
        f"| block RAM (DP16KD) | {est['bram']:,} (estimate)"
        + (f"; Yosys {syn_cells.get('bram', 0):,}" if syn_cells else "")
        + f" | {own['estimate_cells']['bram']:,} | - |",
        f"| DSP | {est['dsp']:,} (estimate)"
        + (f"; Yosys {syn_cells.get('dsp', 0):,}" if syn_cells else "")
        + f" | {own['estimate_cells']['dsp']:,} | - |",
        f"| XNOR lanes (sum PE x SIMD) | {ours['lanes']:,} | {own['lanes']:,} | "
        f"{finn['lanes']:,} |",
        f"| lanes per kLUT | {_n(ours['lanes_per_klut_estimate'], 1)} (estimate)"
        + (f"; {_n(s.get('lanes_per_klut'), 1)} (Yosys)" if syn_cells else "")
        + f" | {_n(own['lanes_per_klut_estimate'], 1)} | {_n(finn['lanes_per_klut'], 1)} |",
        "| Fmax (nextpnr, LFE5U-85F) | "
        + (f"{fmax} MHz, {s.get('frames_per_second_at_fmax', 0):,.1f} frames/s"
           if fmax else ("not measured: " + (s.get("pnr_error", syn).split(" (log: ")[0]
                                             if s else syn)))
        + " | - | - |",
        f"| compile, checkpoint to Verilog | {res['build']['seconds']:,.1f} s wall clock "
        f"({res['build']['verilog_bytes'] / 2**20:,.1f} MiB of Verilog; {res['machine']} "
        "shared with other jobs, so wall clock varies) | - | - |",
        "",
        f"Synthesis: {syn.rstrip('.')}."
        + (f" Timeout per tool {s['timeout_s']} s." if s else "")
        + (f" These synthesis figures come from an earlier run of this script on the same "
           f"Verilog (SHA-256 {s['reused_for_verilog_sha256'][:16]}...; `--synth-from`)."
           if s and s.get("reused_from") else ""),
        "",
        f"Own folding: {res['own_note']}",
        "",
    ]
    lines += [f"- {note}" for note in res["notes"]]
    return "\n".join(lines) + "\n"


def plot(res, path):
    """``docs/finn_cnv.png``: per-layer cycles (ours predicted, FINN's folding by its
    formula, the measured frame interval, FINN's published bottleneck) and estimated
    LUT sites per layer beside FINN's total."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    layers = res["layers"]
    x = range(len(layers))
    names = [r["layer"] for r in layers]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5.8))
    w = 0.4
    a.bar([i - w / 2 for i in x], [r["predicted_cycles"] for r in layers], w,
          label="ours, predicted (FINN's folding)")
    a.bar([i + w / 2 for i in x], [r["finn_cycles"] for r in layers], w,
          label="FINN's CNV, its folding (FINN's formula)")
    a.axhline(res["finn"]["bottleneck_cycles"], color="k", ls="--", lw=1,
              label=f"FINN published bottleneck {res['finn']['bottleneck_cycles']:,}")
    m = res.get("measured")
    if m and m.get("cycles_per_frame"):
        a.axhline(m["cycles_per_frame"], color="tab:red", ls=":", lw=2,
                  label=f"ours measured frame interval {m['cycles_per_frame']:,.0f}")
    a.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
    a.set_ylabel("cycles per frame")
    a.set_title(f"{res['arch']}: cycles per layer")
    a.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2)
    b.bar(list(x), [r["estimate_lut_sites"] for r in layers], color="tab:green",
          label="ours, estimated ECP5 LUT4 sites per layer")
    b.bar(list(x), [r["estimate_weight_rom_lut_sites"] for r in layers], color="tab:olive",
          label="of which weight ROMs")
    b.axhline(res["finn"]["luts"], color="k", ls="--", lw=1,
              label=f"FINN published total {res['finn']['luts']:,} LUTs (Zynq-7020)")
    b.set_yscale("log")
    b.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
    b.set_ylabel("LUTs")
    b.set_title(f"LUTs (ours total {res['finn_folding']['estimate_lut_sites']:,} sites, estimate)")
    b.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def derive_notes(res):
    """What the figures say, as sentences computed from them (none is written down)."""
    notes = []
    pred, fin = res["finn_folding"], res["finn"]
    notes.append(f"Predicted frame interval with FINN's folding: {pred['frame_cycles']:,} cycles "
                 f"(FINN publishes {fin['bottleneck_cycles']:,}; its folding through FINN's "
                 f"formula gives {fin['bottleneck_by_formula']:,}, in "
                 f"{' and '.join(fin['bottleneck_layers'])}).")
    if res["measured"]:
        m = res["measured"]
        eq = "equals" if m["cycles_per_frame"] == pred["frame_cycles"] else "differs from"
        notes.append(f"Measured on Verilator: {m['cycles_per_frame']} cycles per frame, which "
                     f"{eq} the prediction; {m['exact']}/{m['images']} random images bit-exact.")
    lut_ratio = pred["estimate_lut_sites"] / fin["luts"]
    rom = sum(r["estimate_weight_rom_lut_sites"] for r in res["layers"])
    notes.append(f"Estimated LUT sites with FINN's folding: {pred['estimate_lut_sites']:,}, "
                 f"{lut_ratio:,.2f} x FINN's LUT count; {rom:,} of them "
                 f"({rom / pred['estimate_lut_sites']:.0%}) are weight ROMs kept in LUTs, and "
                 f"the estimate has {pred['estimate_cells']['bram']} DP16KD block RAMs (the "
                 "deeper weight ROMs). The largest units are " + ", ".join(
                     f"{r['layer']} ({r['estimate_lut_sites']:,})" for r in sorted(
                         res["layers"], key=lambda r: -r["estimate_lut_sites"])[:3]) + ".")
    s = res.get("synthesis")
    limit = res.get("lut_budget_device")
    if s and s.get("status") == "ok":
        c = s["cells"]
        wbits = sum(r["c_out"] * r["n_in"] for r in res["layers"])
        notes.append(f"Yosys infers {c.get('bram', 0):,} DP16KD block RAMs where the estimate "
                     f"has {pred['estimate_cells']['bram']} (the binary weights are "
                     f"{wbits:,} bits, at least {ceil(wbits / 18_432)} DP16KD), and counts "
                     f"{s['lut_sites']:,} LUT4 sites, {s['lut_sites'] / pred['estimate_lut_sites']:.0%}"
                     f" of the estimate, and {c.get('ff', 0):,} flip-flops, "
                     f"{c.get('ff', 0) / max(1, pred['estimate_cells']['ff']):.2f} x the "
                     "estimate."
                     + (" The resource model, calibrated on small designs whose ROMs stay in "
                        "LUTs, does not extrapolate to memories this large."
                        if c.get("bram", 0) and not pred["estimate_cells"]["bram"] else ""))
        u = s.get("pnr_utilisation", {}).get("TRELLIS_COMB")
        if u:
            notes.append(f"nextpnr packs it into {u[0]:,} of the LFE5U-85F's {u[1]:,} logic "
                         f"cells (TRELLIS_COMB, {u[0] / u[1]:.0%})"
                         + (": it does not fit the device, so there is no Fmax."
                            if u[0] > u[1] else "."))
    elif limit and pred["estimate_lut_sites"] > limit:
        notes.append(f"The estimate exceeds the LFE5U-85F's {limit:,} LUT4 sites: place and "
                     "route is not expected to fit unless Yosys maps the weight ROMs to block "
                     "RAM.")
    if s and s.get("status") != "ok":
        notes.append("Synthesis did not complete (see the summary): no Yosys counts, no Fmax.")
    return notes


def pnr_utilisation(work_dir):
    """``{bel type: [used, available]}`` from nextpnr's device utilisation in
    ``work_dir/synth-ecp5/nextpnr.log`` (written after packing, so it is there even when
    placement then fails or times out); empty without a log."""
    import re
    log = Path(work_dir, "synth-ecp5", "nextpnr.log")
    if not log.is_file():
        return {}
    out = {}
    for m in re.finditer(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)", log.read_text(errors="replace")):
        if int(m.group(2)):
            out[m.group(1)] = [int(m.group(2)), int(m.group(3))]
    return out


def _git():
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except OSError:
        return None


# -- driver -----------------------------------------------------------------------------

def run(arch="cnv", *, seed=0, images=4, do_measure=True, do_synth=False, timeout=2400,
        out_dir=None, results=None, docs=None, sim_build_dir=None, console=None,
        synth_from=None):
    """The whole comparison; see the module docstring. Returns the results dict and
    writes ``results`` (JSON), ``docs/finn.md`` and ``docs/finn_cnv.png`` under ``docs``
    (``None``: not written)."""
    from rich.console import Console

    from groupnet_hw.compiler.passes import compile_model
    from groupnet_hw.compiler.schedule import schedule
    from groupnet_hw.models.checkpoint import save_checkpoint
    console = console or Console(stderr=True)
    out_dir = Path(out_dir or ROOT / "build" / f"finn-{arch}")
    out_dir.mkdir(parents=True, exist_ok=True)
    res = {"arch": arch, "seed": seed, "board": BOARD, "date": time.strftime("%Y-%m-%d"),
           "machine": f"{os.cpu_count()} cores, {platform.machine()}", "git": _git()}
    with console.status("building the model") as status:
        model = make_model(arch, seed)
        ckpt = out_dir / f"{arch}.pt"
        save_checkpoint(ckpt, model, metrics={"note": "random weights (benchmarks/finn_cnv.py)"})
        status.update("compiling the graph")
        graph = compile_model(model)
        folding = finn_folding(graph)
        sched = schedule(graph, BOARD, folding=folding, streams="pixels")
        status.update("groupnet-hw build (checkpoint to Verilog)")
        res["build"] = build(ckpt, folding, out_dir / "build")
    console.log(f"build: {res['build']['seconds']} s, {sched.frame_cycles:,} cycles/frame "
                "predicted")
    res["folding_file"] = folding
    res["layers"] = per_layer(sched, folding)
    res["finn_folding"] = design_summary(sched)
    res["schedule_notes"] = sched.notes
    finn = dict(FINN, simd_pe=[list(p) for p in FINN["simd_pe"]])
    finn["lanes"] = sum(s * p for s, p in FINN["simd_pe"])
    finn["lanes_per_klut"] = density(finn["lanes"], FINN["luts"])
    finn["layer_cycles_by_formula"] = finn_layer_cycles()
    finn["bottleneck_by_formula"] = max(finn["layer_cycles_by_formula"])
    # FINN's bottleneck layers, named by our graph's nodes (same order)
    finn["bottleneck_layers"] = [r["layer"] for r in res["layers"]
                                 if r["finn_cycles"] == finn["bottleneck_by_formula"]]
    res["finn"] = finn

    pending = None
    if do_synth:
        # Synthesis is a separate process on the finished build: start it now so that it
        # runs beside the Verilator build instead of after it (two cores).
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(1)
        pending = pool.submit(synth, out_dir / "build", timeout)
        console.log(f"groupnet-hw synth --flow ecp5 started (timeout {timeout} s per tool)")
    if do_measure:
        with console.status("Verilator: building and simulating") as status:
            imgs = random_images(seed + 100, images, model.config)
            res["measured"] = measure(model, sched, out_dir / "build", imgs, sim_build_dir,
                                      progress=status.update)
        m = res["measured"]
        console.log(f"measured: {m['cycles_per_frame']} cycles/frame, {m['exact']}/{m['images']}"
                    f" bit-exact (simulator build {m['build_seconds']} s)")
    else:
        res["measured"] = None
        res["measure_note"] = "--no-measure"

    with console.status("own folding at FINN's LUT count") as status:
        own, fits, trials = budget_search(graph, progress=status.update)
    res["own_folding_at_finn_luts"] = design_summary(own)
    res["own_fits"] = fits
    res["budget_trials"] = trials
    if fits:
        res["own_note"] = (f"the fastest target_cycles whose estimate is at most "
                           f"{FINN['luts']:,} ECP5 LUT4 sites: {own.frame_cycles:,} cycles per "
                           "frame (bisected).")
    else:
        res["own_note"] = (f"no folding fits {FINN['luts']:,} LUT sites: even fully folded "
                           f"(one PE, one SIMD lane per layer, {own.frame_cycles:,} cycles per "
                           f"frame) the estimate is {sites(own.cells):,} LUT sites; the table "
                           "shows that design.")
    console.log(res["own_note"])

    if synth_from and not do_synth:
        # Synthesis measures the Verilog alone: an earlier run's figures hold for a build
        # whose Verilog is byte-identical (same SHA-256), whatever else changed.
        old = json.loads(Path(synth_from).read_text())
        same = old.get("build", {}).get("verilog_sha256") == res["build"]["verilog_sha256"]
        if same and old.get("synthesis"):
            res["synthesis"] = dict(old["synthesis"], reused_from=str(synth_from),
                                    reused_for_verilog_sha256=res["build"]["verilog_sha256"])
            console.log(f"synthesis: reused from {synth_from} (same Verilog)")
        else:
            console.log(f"synthesis: {synth_from} is of other Verilog; not reused")
    if pending is not None:
        with console.status(f"waiting for groupnet-hw synth --flow ecp5 (timeout {timeout} s "
                            "per tool)"):
            s = pending.result()
        pool.shutdown()
        if s.get("status") == "ok":
            s["lanes_per_klut"] = density(res["finn_folding"]["lanes"], s["lut_sites"])
        res["synthesis"] = s
        console.log(f"synthesis: {s['status']} ({s['seconds']} s)")
    elif not res.get("synthesis"):
        res["synthesis"] = None

    res["lut_budget_device"] = sched.budget["limits"]["lut"]
    res["notes"] = derive_notes(res)

    if results:
        Path(results).parent.mkdir(parents=True, exist_ok=True)
        Path(results).write_text(json.dumps(res, indent=1) + "\n")
    if docs:
        Path(docs).mkdir(parents=True, exist_ok=True)
        Path(docs, "finn.md").write_text(markdown(res))
        plot(res, Path(docs, "finn_cnv.png"))
    return res


def main(argv=None):
    class Formatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
        """The module docstring as written, and every option's default."""

    ap = argparse.ArgumentParser(
        prog="python benchmarks/finn_cnv.py", description=__doc__,
        epilog="Time on 2 cores: cnv-small under a minute; cnv about ten minutes (a minute "
               "of build, several minutes of one-off Verilator build, cached on the Verilog). "
               "--synth runs beside the simulation; Yosys and nextpnr on the whole network "
               "may take an hour or more, or fail: --timeout bounds each tool, and a timeout "
               "or failure is recorded in the JSON and docs/finn.md, not hidden. "
               "--from-json redraws the docs without rerunning.",
        formatter_class=Formatter)
    ap.add_argument("--arch", default="cnv", choices=["cnv", "cnv-small"],
                    help="cnv: FINN's CNV-W1A1; cnv-small: channels / 8, the published folding "
                         "scaled to it (fast)")
    ap.add_argument("--seed", type=int, default=0, help="seeds weights, statistics, images")
    ap.add_argument("--images", type=int, default=4,
                    help="random images simulated and compared bit for bit")
    ap.add_argument("--measure", action=argparse.BooleanOptionalAction, default=True,
                    help="simulate the Verilog on the fast Verilator path (cycles per frame "
                         "measured, outputs compared with PyTorch)")
    ap.add_argument("--synth", action="store_true",
                    help="also run groupnet-hw synth --flow ecp5 (Yosys counts, nextpnr Fmax)")
    ap.add_argument("--timeout", type=int, default=2400,
                    help="seconds each synthesis tool (Yosys, nextpnr) may run")
    ap.add_argument("--out-dir", default=str(ROOT / "build" / "finn-cnv"),
                    help="work directory: checkpoint, folding file, build, synthesis logs")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "finn_cnv.json"),
                    help="JSON to write")
    ap.add_argument("--docs", default=str(ROOT / "docs"),
                    help="directory for finn.md and finn_cnv.png")
    ap.add_argument("--synth-from", metavar="FILE", default=None,
                    help="without --synth: reuse the synthesis figures of an earlier results "
                         "JSON when its Verilog has this build's SHA-256")
    ap.add_argument("--from-json", metavar="FILE", default=None,
                    help="only rewrite finn.md and finn_cnv.png from an earlier results JSON")
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        syn = res.get("synthesis")
        work = Path(args.out_dir, "build")
        if syn and syn.get("status") == "ok" and not syn.get("pnr_utilisation"):
            # a results file written before this field existed: read it from the run's log
            syn["pnr_utilisation"] = pnr_utilisation(work)
        from groupnet_hw.devices import get_board
        res.setdefault("lut_budget_device", get_board(res["board"]).device.limits["lut"])
        res["notes"] = derive_notes(res)
        Path(args.from_json).write_text(json.dumps(res, indent=1) + "\n")
        Path(args.docs, "finn.md").write_text(markdown(res))
        plot(res, Path(args.docs, "finn_cnv.png"))
        print(markdown(res))
        return
    res = run(args.arch, seed=args.seed, images=args.images, do_measure=args.measure,
              do_synth=args.synth, timeout=args.timeout, out_dir=args.out_dir,
              results=args.results, docs=args.docs, synth_from=args.synth_from)
    print(markdown(res))


if __name__ == "__main__":
    main()
