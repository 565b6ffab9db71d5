"""The report of an engine build: per descriptor and per frame, as JSON and as text.

Per descriptor: what it runs (opcode, the graph nodes it fuses, jobs, row tiles,
whether the core streams its weights), its cycles on the core as built
(:mod:`.core_cycles`) with the phase that dominates them, what bounds it (memory when
loads and stores dominate, else compute), the XNOR lanes' utilisation and the DRAM
bytes it moves (:mod:`.cycles`' count: tensors, parameters, halo rows once); per frame:
cycles, frames/s at the engine's own clock, DRAM traffic and its share of the
bandwidth; the engine's parameters, its clock and DRAM model, the program's memory,
and the intended engine's figures (:mod:`.cycles`: ``arrays`` arrays side by side,
transfers overlapped) for comparison.
"""

from __future__ import annotations

from .program import FLAG_BITS
from .tiling import scratchpad_need

#: the core's phases that wait for DRAM (:class:`.core_cycles.CoreDescriptorCycles`)
MEMORY_PHASES = ("fetch", "loads", "stores", "fence")

__all__ = ["engine_report", "units_report", "render_engine_text"]


def engine_report(program, target, core, intended, *, reason=None, estimate=None):
    """The report dict of an engine build.

    Parameters
    ----------
    program : EngineProgram
    target : EngineTarget
    core : CoreFrameCycles
        :func:`.core_cycles.predict_core` under ``target.dram``: the core as built.
    intended : FrameCycles
        :func:`.cycles.predict` under ``target.dram``: DRAM bytes and MACs per
        descriptor, and the intended engine's figures.
    reason : str, optional
        Why the build uses the engine (``--engine auto``).
    estimate : dict, optional
        The resource estimate against the board's budget.
    """
    h = program.header
    lanes = target.core["pe"] * target.core["simd"]
    rows = []
    for d, c, p in zip(program.descriptors, core.descriptors, intended.descriptors):
        need = scratchpad_need(d, program.config)
        rows.append(dict(
            index=c.index, opcode=c.opcode, jobs=c.jobs, label=c.label,
            tiles=int(d["n_tiles"]), cycles=c.cycles, phases=c.phases, dominant=c.dominant,
            bound="memory" if c.dominant in MEMORY_PHASES else "compute",
            lane_utilisation=(p.macs / (c.cycles * lanes)) if p.macs else None,
            bytes_read=p.bytes_read, bytes_written=p.bytes_written, macs=p.macs,
            streams_weights=need.streams_weights, scratchpad_bytes=need.bytes))
    clock = target.config.clock_mhz
    dram_bytes = sum(r["bytes_read"] + r["bytes_written"] for r in rows)
    return dict(
        backend="sequential", reason=reason, board=target.board, engine=target.to_dict(),
        descriptors=rows,
        frame=dict(cycles=core.cycles, clock_mhz=clock, fps=clock * 1e6 / core.cycles,
                   dram_bytes=dram_bytes,
                   bandwidth_share=dram_bytes / (core.cycles * target.dram.bytes_per_cycle),
                   binary_macs=intended.binary_macs,
                   lane_utilisation=intended.binary_macs / (core.cycles * lanes),
                   memory_bound=sum(r["bound"] == "memory" for r in rows),
                   phases=core.phases),
        program=dict(descriptors=len(rows),
                     prologue_thresholds=program.config.prologue_thresholds,
                     group_by_tensor=program.config.group_by_tensor),
        intended=dict(cycles=intended.cycles, fps=intended.fps,
                      arrays=program.config.arrays,
                      lane_utilisation=intended.lane_utilisation),
        memory=dict(image_bytes=h["image_bytes"], param_bytes=h["param_bytes"],
                    arena_bytes=h["arena_bytes"], base=h["base"]),
        estimate=estimate)


def units_report(program, target, prediction, *, reason=None, estimate=None):
    """The report dict of a build for the engine of the units
    (:class:`~.units.UnitsTarget`): per descriptor the cycle model's figures
    (:func:`.cycles.predict` under ``target.dram``, the model the units' RTL is
    measured against), per frame its totals; the same keys as :func:`engine_report`."""
    h = program.header
    rows = [dict(index=p.index, opcode=p.opcode, jobs=p.jobs, label=p.label,
                 tiles=int(d["n_tiles"]), cycles=p.cycles, compute=p.compute,
                 memory=p.memory, overhead=p.overhead, bound=p.bound,
                 lane_utilisation=p.lane_utilisation, bytes_read=p.bytes_read,
                 bytes_written=p.bytes_written, macs=p.macs,
                 streams_weights=bool(d["flags"] & FLAG_BITS["weight_stream"]))
            for d, p in zip(program.descriptors, prediction.descriptors)]
    clock = target.config.clock_mhz
    return dict(
        backend="sequential", reason=reason, board=target.board, engine=target.to_dict(),
        descriptors=rows,
        frame=dict(cycles=prediction.cycles, interval=prediction.frame_interval,
                   clock_mhz=clock, fps=prediction.fps, dram_bytes=prediction.dram_bytes,
                   bandwidth_share=prediction.bandwidth_share,
                   binary_macs=prediction.binary_macs,
                   lane_utilisation=prediction.lane_utilisation,
                   memory_bound=sum(r["bound"] == "memory" for r in rows)),
        program=dict(descriptors=len(rows), arrays=program.config.arrays,
                     pe=program.config.pe, simd=program.config.simd,
                     vector_lanes=program.config.vector_lanes),
        memory=dict(image_bytes=h["image_bytes"], param_bytes=h["param_bytes"],
                    arena_bytes=h["arena_bytes"], base=h["base"]),
        estimate=estimate)


def _header(report, title):
    """The report's first line and why the build took the engine."""
    lines = [f"layer-sequential engine for {report['board']}{title}"]
    if report.get("reason"):
        lines.append(f"  chosen because {report['reason']}")
    return lines


def _dram_line(e):
    return (f"  DRAM model: {e['dram']['latency']} cycles latency, "
            f"{e['dram']['bytes_per_cycle']:g} bytes/cycle ({e['dram']['gbytes_per_s']:.2f} GB/s)")


def _frame_lines(report):
    """A frame's cycles, frames/s and DRAM traffic."""
    f = report["frame"]
    interval = f.get("interval", f["cycles"])
    if interval != f["cycles"]:
        speed = [f"cycles/frame in a stream of frames: {interval:,} -> {f['fps']:.2f} "
                 f"frames/s at {f['clock_mhz']:g} MHz (the next frame's stem beside each "
                 "frame's rest)",
                 f"latency: {f['cycles']:,} cycles a frame, "
                 f"{f['cycles'] / f['clock_mhz'] / 1e3:.1f} ms"]
    else:
        speed = [f"cycles/frame: {f['cycles']:,} -> {f['fps']:.2f} frames/s at "
                 f"{f['clock_mhz']:g} MHz"]
    return speed + [
        f"DRAM per frame: {f['dram_bytes'] / 1e6:.2f} MB, {100 * f['bandwidth_share']:.0f}% "
        f"of the modelled bandwidth; {f['memory_bound']} of {len(report['descriptors'])} "
        "descriptors memory-bound"]


def _memory_line(mem):
    return (f"memory image: {mem['image_bytes'] / 2**20:.2f} MiB at {mem['base']:#x} "
            f"(parameters {mem['param_bytes'] / 2**20:.2f} MiB, feature maps "
            f"{mem['arena_bytes'] / 2**20:.2f} MiB)")


def _descriptor_table(report, core):
    """A line a descriptor: opcode, jobs, (the core's row tiles,) cycles, what bounds
    them (the core: its dominant phase), lane use, DRAM bytes, the nodes it runs."""
    what = "mostly" if core else "bound"
    lines = [f"{'#':>3} {'opcode':<9} {'jobs':>4} " + (f"{'tiles':>5} " if core else "")
             + f"{'cycles':>12} {what:<8} {'lanes':>6} {'DRAM bytes':>12}  nodes"]
    for r in report["descriptors"]:
        util = "" if r["lane_utilisation"] is None else f"{100 * r['lane_utilisation']:.1f}%"
        lines.append(f"{r['index']:>3} {r['opcode']:<9} {r['jobs']:>4} "
                     + (f"{r['tiles']:>5} " if core else "")
                     + f"{r['cycles']:>12,} {r['dominant' if core else 'bound']:<8} {util:>6} "
                     f"{r['bytes_read'] + r['bytes_written']:>12,}  {r['label']}"
                     + ("  (weights streamed)" if r["streams_weights"] else ""))
    return lines


def _render_units(report):
    e, f, mem = report["engine"], report["frame"], report["memory"]
    u = e["units"]
    lines = _header(report, ": the engine of the units") + [
        f"  units: {u['arrays']} XNOR arrays of {u['pe']} PE x {u['simd']} SIMD lanes "
        f"({u['planes']} bit plane{'s' if u['planes'] > 1 else ''}), {u['lanes']} vector "
        f"lanes, a stem array of {u['stem']['pe']} x {u['stem']['simd']} multipliers, "
        f"{u['data_width']}-bit Avalon-MM ports; maps up to {u['max_size']} pixels a side",
        f"  clock: {e['clock_mhz']:g} MHz (the engine's own; a PLL output on the board)",
        _dram_line(e),
        "",
        *_descriptor_table(report, core=False),
    ]
    return lines + ["", *_frame_lines(report),
                     f"lane utilisation: {100 * f['lane_utilisation']:.2f}% "
                     f"({f['binary_macs'] / 1e6:.1f} M binary MACs per frame)",
                     _memory_line(mem)]


def _estimate_line(report):
    est = report.get("estimate")
    if not est:
        return []
    return ["estimate: " + ", ".join(
        f"{k} {v:,} of {est['limits'][k]:,} ({100 * v / est['limits'][k]:.0f}%)"
        for k, v in est["cells"].items() if est["limits"].get(k))]


def _planes(core):
    """The array's bit planes, as the report says them (4 in a report that predates
    them)."""
    planes = core.get("planes", 4)
    if planes == 1:
        return "one bit plane: binary activations"
    return f"{planes} bit planes: binary, 2- and 4-bit activations"


def render_engine_text(report):
    """``report.txt`` of an engine build."""
    if report["engine"].get("implementation") == "units":
        return "\n".join(_render_units(report) + _estimate_line(report)) + "\n"
    e, f, mem, prog = (report[k] for k in ("engine", "frame", "memory", "program"))
    core = e["core"]
    lines = _header(report, "") + [
        f"  core: one array of {core['pe']} PE x {core['simd']} SIMD XNOR lanes "
        f"({_planes(core)}), "
        f"{core['data_width']}-bit Avalon-MM ports, {core['buffer_bytes'] // 1024} KiB "
        f"scratchpad, up to {core['max_jobs']} jobs per descriptor, a stem array of "
        f"{core['stem_simd']} lanes a channel",
        *(f"  (not {p['pe']} PE rows with a {p['stem_simd']}-lane stem: they would need "
          f"{100 * p['utilisation']:.1f} % of the board's {p['resource']}, over --max-util "
          f"{p['max_util']:g})" for p in e.get("passed_over", ())),
        f"  clock: {e['clock_mhz']:g} MHz (the engine's own; a PLL output on the board; the "
        "core's timing at it is not closed yet, architecture.md section 13)",
        _dram_line(e),
        # each choice the core's cycle model made (target.compile_for_core)
        f"  program: {prog['descriptors']} descriptors; binary convolutions' input "
        "thresholds " + ("in their gathers" if prog["prologue_thresholds"]
                         else "in PIXEL descriptors that write levels (1x1 ones: in "
                              "their gathers)")
        + "; element-wise jobs grouped by "
        + ("the tensor they read" if prog["group_by_tensor"] else "their producer")
        + " (each the faster by the core's cycle model)",
        "",
        *_descriptor_table(report, core=True),
    ]
    lines += [
        "",
        *_frame_lines(report),
        f"lane utilisation: {100 * f['lane_utilisation']:.2f}% "
        f"({f['binary_macs'] / 1e6:.1f} M binary MACs per frame); cycles by phase: "
        + ", ".join(f"{k} {100 * v / f['cycles']:.0f}%"
                    for k, v in sorted(f["phases"].items(), key=lambda kv: -kv[1]) if v),
        f"this program on {report['intended']['arrays']} arrays side by side with transfers "
        f"overlapped (section 12's cycle model): {report['intended']['cycles']:,} "
        f"cycles/frame, {report['intended']['fps']:.1f} frames/s",
        _memory_line(mem),
    ]
    return "\n".join(lines + _estimate_line(report)) + "\n"
