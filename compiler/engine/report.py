"""The report of an engine build: per descriptor and per frame, as JSON and as text.

Per descriptor: what it runs (opcode, the graph nodes it fuses, jobs, row tiles,
whether the core streams its weights), its predicted cycles, what bounds it (compute
or memory), lane utilisation and DRAM bytes; per frame: cycles, frames/s at the
engine's own clock, DRAM traffic and its share of the bandwidth; the engine's
parameters, its clock and DRAM model, and the program's memory.
"""

from __future__ import annotations

from .program import FLAG_BITS
from .tiling import scratchpad_need

__all__ = ["engine_report", "render_engine_text"]


def engine_report(program, target, prediction, *, reason=None, estimate=None):
    """The report dict of an engine build.

    Parameters
    ----------
    program : EngineProgram
    target : EngineTarget
    prediction : FrameCycles
        The cycle model's figures under ``target.dram``.
    reason : str, optional
        Why the build uses the engine (``--engine auto``).
    estimate : dict, optional
        The resource estimate against the board's budget.
    """
    h = program.header
    rows = []
    for d, p in zip(program.descriptors, prediction.descriptors):
        need = scratchpad_need(d, program.config) if program.config.scratchpad else None
        rows.append(dict(
            p.as_dict(), tiles=int(d["n_tiles"]),
            streams_weights=bool(need.streams_weights if need else
                                 d["flags"] & FLAG_BITS["weight_stream"]),
            scratchpad_bytes=need.bytes if need else None))
    clock = target.config.clock_mhz
    return dict(
        backend="sequential", reason=reason, board=target.board, engine=target.to_dict(),
        descriptors=rows,
        frame=dict(cycles=prediction.cycles, clock_mhz=clock, fps=prediction.fps,
                   dram_bytes=prediction.dram_bytes,
                   bandwidth_share=prediction.bandwidth_share,
                   binary_macs=prediction.binary_macs,
                   lane_utilisation=prediction.lane_utilisation,
                   memory_bound=sum(r["bound"] == "memory" for r in rows)),
        memory=dict(image_bytes=h["image_bytes"], param_bytes=h["param_bytes"],
                    arena_bytes=h["arena_bytes"], base=h["base"]),
        estimate=estimate)


def render_engine_text(report):
    """``report.txt`` of an engine build."""
    e, f, mem = report["engine"], report["frame"], report["memory"]
    core = e["core"]
    lines = [f"layer-sequential engine for {report['board']}"]
    if report.get("reason"):
        lines.append(f"  chosen because {report['reason']}")
    lines += [
        f"  core: one array of {core['pe']} PE x {core['simd']} SIMD XNOR lanes, "
        f"{core['data_width']}-bit Avalon-MM ports, {core['buffer_bytes'] // 1024} KiB "
        f"scratchpad, up to {core['max_jobs']} jobs per descriptor",
        f"  clock: {e['clock_mhz']:g} MHz (the engine's own; a PLL output on the board)",
        f"  DRAM model: {e['dram']['latency']} cycles latency, "
        f"{e['dram']['bytes_per_cycle']:g} bytes/cycle ({e['dram']['gbytes_per_s']:.2f} GB/s)",
        "",
        f"{'#':>3} {'opcode':<9} {'jobs':>4} {'tiles':>5} {'cycles':>12} {'bound':<7} "
        f"{'lanes':>6} {'DRAM bytes':>12}  nodes",
    ]
    for r in report["descriptors"]:
        util = "" if r["lane_utilisation"] is None else f"{100 * r['lane_utilisation']:.0f}%"
        lines.append(f"{r['index']:>3} {r['opcode']:<9} {r['jobs']:>4} {r['tiles']:>5} "
                     f"{r['cycles']:>12,} {r['bound']:<7} {util:>6} "
                     f"{r['bytes_read'] + r['bytes_written']:>12,}  {r['label']}"
                     + ("  (weights streamed)" if r["streams_weights"] else ""))
    lines += [
        "",
        f"cycles/frame: {f['cycles']:,} -> {f['fps']:.2f} frames/s at {f['clock_mhz']:g} MHz",
        f"DRAM per frame: {f['dram_bytes'] / 1e6:.2f} MB, {100 * f['bandwidth_share']:.0f}% "
        f"of the modelled bandwidth; {f['memory_bound']} of {len(report['descriptors'])} "
        "descriptors memory-bound",
        f"lane utilisation: {100 * f['lane_utilisation']:.1f}% "
        f"({f['binary_macs'] / 1e6:.1f} M binary MACs per frame)",
        f"memory image: {mem['image_bytes'] / 2**20:.2f} MiB at {mem['base']:#x} "
        f"(parameters {mem['param_bytes'] / 2**20:.2f} MiB, feature maps "
        f"{mem['arena_bytes'] / 2**20:.2f} MiB)",
    ]
    est = report.get("estimate")
    if est:
        lines.append("estimate: " + ", ".join(
            f"{k} {v:,} of {est['limits'][k]:,} ({100 * v / est['limits'][k]:.0f}%)"
            for k, v in est["cells"].items() if est["limits"].get(k)))
    return "\n".join(lines) + "\n"
