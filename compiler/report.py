"""Human-readable and JSON reports of a schedule."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from .resources import logic_sites

__all__ = ["schedule_table", "render_text", "budget_lines"]


def _cells_text(cells, family):
    """One unit's estimated cells in the board's terms (LUT sites, FFs, RAM, DSP)."""
    ram = cells.get("bram", 0)
    return [str(logic_sites(cells, family)), str(cells.get("ff", 0)), str(ram),
            str(cells.get("dsp", 0))]


def schedule_table(sched, title=None):
    """A rich table: per unit folding, cycles per frame and estimated cells; the totals
    in the board's budgeted resources beside the limits."""
    family = sched.budget["family"]
    table = Table(title=title or f"groupnet-hw schedule for {sched.board} "
                  f"({sched.budget['device']}, {sched.clock_mhz:g} MHz)")
    # unit names in full: they are what --folding files name
    longest = max(len(u.name) for u in sched.units.values()) + 2
    for col in ("unit", "op", "PE/lanes", "SIMD", "cycles/frame", "LUT", "FF", "BRAM", "DSP"):
        table.add_column(col, justify="left" if col in ("unit", "op") else "right",
                         no_wrap=col in ("unit", "op"),
                         min_width=longest if col == "unit" else None)
    bottleneck = sched.bottleneck()
    for u in sched.units.values():
        mark = " *" if u.name == bottleneck else ""
        # how a convolution's line buffer is built, where it is not logic
        notes = ([u.line_ram] if u.line_ram != "logic" else []) + \
            (["in place"] if u.in_place else []) + \
            (["ROM registered"] if u.registered_rom else []) + \
            ([f"{len(u.registered_fifos)} FIFO read{'s' * (len(u.registered_fifos) > 1)} registered"]
             if u.registered_fifos else []) + \
            ([f"+ {sched.graph.consumers(u.name)[0].op}"] if u.activation else []) + \
            (["in the MVU"] if u.fused else []) + \
            ([f"{u.beats} beats"] if u.beats > 1 else [])
        kind = f" ({', '.join(notes)})" if notes else ""
        table.add_row(u.name + mark, u.op + kind, str(u.pe or "-"), str(u.simd or "-"), str(u.cycles),
                      *_cells_text(u.resources, family))
    table.add_section()
    table.add_row("total (estimate, incl. FIFOs, forks)", "", "", "", str(sched.frame_cycles),
                  *_cells_text(sched.cells, family))
    return table


def budget_lines(sched):
    """Per budgeted resource: estimate, limit and the margin."""
    lines = []
    limits = sched.budget["limits"]
    for key, limit in limits.items():
        used = sched.resources[key]
        line = (f"{key}: estimate {used:,} of {limit:,} ({used / limit:.0%}; "
                f"--max-util {sched.max_util:.0%})")
        lines.append(line)
    return lines


def render_text(sched):
    """Plain-text report (the table plus the pipeline summary)."""
    console = Console(record=True, width=150, file=io.StringIO())
    console.print(schedule_table(sched))
    # one line per line of the summary (soft_wrap): a file is read by grep, not a terminal
    console.print(f"pipeline: {sched.frame_cycles} cycles/frame "
                  f"(bottleneck {sched.bottleneck()}), "
                  f"{sched.frames_per_second:,.0f} frames/s at {sched.clock_mhz:g} MHz; "
                  f"{sched.mapping_text()}; line buffers in {sched.line_buffers_text()}; "
                  f"{sched.streams_text()}",
                  soft_wrap=True)
    for line in budget_lines(sched):
        console.print(line, soft_wrap=True)
    for note in sched.notes:
        console.print(f"note: {note}", soft_wrap=True)
    return console.export_text()
