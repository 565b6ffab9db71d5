"""Human-readable and JSON reports of a schedule."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

__all__ = ["schedule_table", "render_text"]


def schedule_table(sched, title=None):
    """A rich table: per unit folding, cycles per frame and estimated resources."""
    table = Table(title=title or f"groupnet-hw schedule for {sched.board} "
                  f"({sched.budget['device']}, {sched.clock_mhz:g} MHz)")
    for col in ("unit", "op", "PE", "SIMD", "cycles/frame", "ALM", "M10K", "DSP"):
        table.add_column(col, justify="left" if col in ("unit", "op") else "right")
    bottleneck = sched.bottleneck()
    for u in sched.units.values():
        mark = " *" if u.name == bottleneck else ""
        table.add_row(u.name + mark, u.op, str(u.pe or "-"), str(u.simd or "-"), str(u.cycles),
                      str(u.resources.get("alm", 0)), str(u.resources.get("m10k", 0)),
                      str(u.resources.get("dsp", 0)))
    r, b = sched.resources, sched.budget
    table.add_section()
    table.add_row("total (estimate, incl. FIFOs)", "", "", "", str(sched.frame_cycles),
                  f"{r['alm']}/{b['alm']}", f"{r['m10k']}/{b['m10k']}", f"{r['dsp']}/{b['dsp']}")
    return table


def render_text(sched):
    """Plain-text report (the table plus the pipeline summary)."""
    console = Console(record=True, width=110, file=io.StringIO())
    console.print(schedule_table(sched))
    console.print(f"pipeline: {sched.frame_cycles} cycles/frame "
                  f"(bottleneck {sched.bottleneck()}), "
                  f"{sched.frames_per_second:,.0f} frames/s at {sched.clock_mhz:g} MHz; "
                  f"bases mapped {sched.base_mapping}")
    for note in sched.notes:
        console.print(f"note: {note}")
    return console.export_text()
