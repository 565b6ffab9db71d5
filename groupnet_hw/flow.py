"""The build flow: checkpoint -> accelerator, as one listed sequence of named steps.

Everything ``groupnet-hw build`` and ``verify`` do happens here; the command line only
parses options into a :class:`BuildConfig` and presents a :class:`Build`. Tests and
benchmarks call the same functions.

    load       read and validate the checkpoint (untrusted input: weights only)
    lower      trace the network (library layers as leaves) into the graph IR
    passes     fold ReLU, BN and gates; thresholds; prove every width (integer graph)
    schedule   folding, base mapping, line buffers, streams, FIFOs; cycles, resources
    elaborate  the Amaranth accelerator and its Verilog (elaborated once per build)
    write      Verilog, board project, schedule, report and manifest, atomically

>>> from groupnet_hw.flow import BuildConfig, build, verify   # doctest: +SKIP
>>> b = build("model.pt", BuildConfig(board="ulx3s"), out_dir="out")
>>> verify("out", images=50).ok

``build(..., stop_after="schedule")`` stops after a step (no file is written unless
``write`` runs); ``Build.timings`` holds every step's seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

from .compiler.artifact import BuildError, BuildManifest, file_sha256, read_manifest, write_manifest
from .compiler.engine.cycles import predict as predict_engine
from .compiler.engine.layout import compile_engine
from .compiler.engine.report import engine_report, render_engine_text, units_report
from .compiler.engine.target import (SCRATCHPAD_BYTES, array_planes, compile_for_core,
                                     engine_target)
from .compiler.engine.units import bound as bound_units
from .compiler.engine.units import (network_bases, network_subsamples, program_refusal,
                                    units_target)
from .compiler.frontend import lower
from .compiler.passes import run_passes
from .compiler.report import render_text
from .compiler.resources import FAMILIES, design_cells
from .compiler.schedule import ScheduleOptions, schedule
from .devices import get_board
from .hw.accelerator import Accelerator
from .hw.boards.core_instance import CoreInstance
from .hw.engine.core import EngineCore
from .hw.engine.unit_engine import UnitEngine
from .models.checkpoint import CheckpointError, load_checkpoint
from .sim.cocotb_runner import RTLError, default_build_dir
from .sim.engine_rtl import build_engine_rtl
from .sim.engine_verify import EngineRunError, verify_engine
from .sim.verify import RTLDesign, port_widths
from .sim.verify import verify as run_verify
from .toolchain.board_project import BoardBuildError, write_board_project

__all__ = ["BuildConfig", "Build", "Step", "STEPS", "FlowError", "build", "verify",
           "load_build", "engine_rtl", "engine_verilog", "EngineBuild", "CORE_NAME", "ENGINE_NAME", "ENGINE_IMAGE",
           "ENGINES"]

#: Module name of the accelerator core in the Verilog a build writes.
CORE_NAME = "groupnet_core"
#: Module name of the layer-sequential engine in the Verilog an engine build writes.
ENGINE_NAME = "groupnet_engine"
#: The engine's memory image in an engine build's directory.
ENGINE_IMAGE = "engine_image.bin"
#: ``BuildConfig.engine`` choices.
ENGINES = ("auto", "dataflow", "sequential")
#: ``BuildConfig.engine_scratchpad_kib`` choices.
SCRATCHPAD_KIB = tuple(n // 1024 for n in SCRATCHPAD_BYTES)


class FlowError(ValueError):
    """A build or verification that cannot proceed; the message is one line that says
    what is wrong and what to do."""


@dataclass(frozen=True)
class BuildConfig(ScheduleOptions):
    """Every choice of a build, with the one set of defaults the library and the command
    line share: the schedule's options (:class:`~groupnet_hw.compiler.schedule.
    ScheduleOptions`, checked there) and the board top's.

    Parameters
    ----------
    board : str
        Target board (``de10nano``, ``ulx3s``, ``icebreaker``).
    target_cycles : int, optional
        Frame interval to fold for; default: the fastest that fits the board.
    fps : float, optional
        Frames per second to reach at the board clock (sets ``target_cycles``).
    max_util : float
        Fraction of each budgeted board resource the design may use.
    folding : tuple of (str, (int, int)), optional
        ``(conv node, (PE, SIMD))`` overrides of the chosen folding (a dict is accepted).
    bases : {"auto", "parallel", "shared"}
        How each block's K bases map to hardware.
    line_buffers : {"auto", "logic", "block", "serial"}
        Where the convolutions' line buffers go.
    fuse_activations : bool
        Apply a threshold's or post-op's work in the MVU in front of it.
    fifos : {"auto", "block"}
        How the join FIFOs' memories are built.
    streams : {"auto", "pixels", "beats"}
        How tensors travel between units.
    baud : int
        UART host link speed of the board top.
    bitstream : bool, optional
        Run the board's toolchain; ``None``: when it is installed and the estimate fits.
    engine : {"auto", "dataflow", "sequential"}
        The back end: the dataflow accelerator (every layer its own units, weights on
        chip), the layer-sequential engine (one set of units, weights and feature maps
        in DRAM; boards with a DRAM port), or the dataflow one where it fits the board
        and else the engine (auto).
    engine_clock_mhz : float
        The engine's own clock (a PLL output on the board), in MHz.
    engine_scratchpad_kib : int, optional
        The engine's scratchpad in KiB (32, 64, 128 or 256); default: the largest.
    """

    baud: int = 115200
    bitstream: bool | None = None
    engine: str = "auto"
    engine_clock_mhz: float = 100.0
    engine_scratchpad_kib: int | None = None

    def __post_init__(self):
        if self.folding is not None:
            items = self.folding.items() if isinstance(self.folding, dict) else self.folding
            try:
                folding = tuple((str(k), (int(v[0]), int(v[1]))) for k, v in items)
            except (TypeError, ValueError, IndexError):
                raise FlowError('folding must map conv node names to [PE, SIMD], '
                                'e.g. {"conv1": [4, 9]}') from None
            object.__setattr__(self, "folding", folding)
        try:
            super().__post_init__()
        except ValueError as exc:
            raise FlowError(str(exc)) from None
        if self.target_cycles is not None and self.target_cycles < 1:
            raise FlowError(f"target_cycles must be at least 1, not {self.target_cycles}")
        if self.engine not in ENGINES:
            raise FlowError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.engine_scratchpad_kib not in (None, *SCRATCHPAD_KIB):
            raise FlowError(f"engine_scratchpad_kib must be one of "
                            f"{', '.join(map(str, SCRATCHPAD_KIB))}, not {self.engine_scratchpad_kib}")
        if not 1 <= self.engine_clock_mhz <= 1000:
            raise FlowError(f"engine_clock_mhz must be in [1, 1000], not {self.engine_clock_mhz}")

    def schedule_options(self) -> dict:
        """Keyword arguments of :func:`~groupnet_hw.compiler.schedule.schedule`."""
        options = {f.name: getattr(self, f.name) for f in fields(ScheduleOptions)}
        options["folding"] = {k: list(v) for k, v in self.folding} if self.folding else None
        return options

    def to_dict(self) -> dict:
        d = asdict(self)
        d["folding"] = {k: list(v) for k, v in self.folding} if self.folding else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BuildConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise FlowError(f"unknown build options {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


@dataclass
class Build:
    """What a build made, step by step; fields are ``None`` until their step ran.

    Attributes
    ----------
    config : BuildConfig
    checkpoint : str or None
        Absolute path of the checkpoint (``None`` when built from a model object).
    checkpoint_sha256 : str or None
    model : torch.nn.Module
        The network (eval mode; its fixed-point forward is the reference).
    payload : dict
        The checkpoint's metadata (metrics, dataset, training configuration).
    graph : Graph
        After ``lower``: the IR; after ``passes``: the integer graph.
    schedule : Schedule
    accelerator : Accelerator
        The dataflow accelerator (``None`` for an engine build: its Verilog comes from
        :func:`engine_verilog`).
    verilog : str
        The core's Verilog text (module :data:`CORE_NAME`).
    port_widths : (int, int)
        Payload widths of the core's ``i`` and ``o`` streams.
    out_dir : pathlib.Path or None
        Where ``write`` put the build.
    manifest : BuildManifest or None
    board_plan : dict or None
        What the board-project writer returned (its ``message`` says how to build).
    timings : dict
        Seconds per step that ran, in order.
    backend : {"dataflow", "sequential"} or None
        The back end ``schedule`` chose (``BuildConfig.engine``).
    engine : EngineBuild or None
        The layer-sequential engine's program and prediction (``backend ==
        "sequential"``); ``schedule`` is then ``None``.
    """

    config: BuildConfig
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    model: object = None
    payload: dict = field(default_factory=dict)
    graph: object = None
    schedule: object = None
    accelerator: object = None
    verilog: str | None = None
    port_widths: tuple | None = None
    out_dir: Path | None = None
    manifest: BuildManifest | None = None
    board_plan: dict | None = None
    timings: dict = field(default_factory=dict)
    backend: str | None = None
    engine: "EngineBuild | None" = None

    def report(self) -> dict:
        """The build's report: the schedule (or the engine's program and cycle model),
        estimated cells per family, metrics."""
        if self.backend == "sequential":
            report = dict(self.engine.report)
            report["checkpoint"] = self.checkpoint
            report["metrics"] = self.payload.get("metrics", {})
            return report
        report = self.schedule.to_dict()
        report["estimate_cells"] = {f: design_cells(self.schedule, f) for f in FAMILIES}
        report["checkpoint"] = self.checkpoint
        report["metrics"] = self.payload.get("metrics", {})
        return report

    def report_text(self) -> str:
        if self.backend == "sequential":
            return render_engine_text(self.engine.report)
        return render_text(self.schedule)


@dataclass
class EngineBuild:
    """What ``schedule`` made for the layer-sequential engine.

    Attributes
    ----------
    target : UnitsTarget or EngineTarget
        The engine of the units (:mod:`~groupnet_hw.compiler.engine.units`) where it
        runs every descriptor of the program, else the core as built
        (:mod:`~groupnet_hw.compiler.engine.target`): its ``implementation``, the top's
        keyword arguments (``params``), the compiler's configuration, the DRAM model.
    program : EngineProgram
        Descriptors and memory image.
    prediction : FrameCycles or CoreFrameCycles
        The cycle model of the engine built under ``target.dram``: the units'
        (:func:`~groupnet_hw.compiler.engine.cycles.predict`) or the core's.
    report : dict
        :func:`~groupnet_hw.compiler.engine.report.engine_report`.
    """

    target: object
    program: object
    prediction: object
    report: dict


@dataclass(frozen=True)
class Step:
    """One named step of the flow: ``run(build, out_dir)`` fills fields of ``build``."""

    name: str
    description: str
    run: Callable


# ------------------------------------------------------------------------- the steps
def _load(b: Build, source, out_dir):
    if isinstance(source, (str, os.PathLike)):
        try:
            b.model, b.payload, b.graph = load_checkpoint(source, with_graph=True)
        except CheckpointError as exc:
            raise FlowError(str(exc)) from None
        b.checkpoint = os.path.abspath(source)
        b.checkpoint_sha256 = file_sha256(source)
    else:
        b.model = source.eval()


def _lower(b: Build, source, out_dir):
    if b.graph is not None:
        return                  # a checkpoint's validation lowered it
    try:
        b.graph = lower(b.model)
    except ValueError as exc:
        raise FlowError(str(exc)) from None


def _passes(b: Build, source, out_dir):
    try:
        b.graph = run_passes(b.graph)
    except ValueError as exc:
        raise FlowError(str(exc)) from None


def _schedule(b: Build, source, out_dir):
    choice, reason = b.config.engine, None
    if choice != "sequential":
        # auto falls back to the engine only on a board that can hold it
        dataflow_only = choice == "dataflow" or not get_board(b.config.board).dram_port_bits
        try:
            b.schedule = schedule(b.graph, **b.config.schedule_options())
        except ValueError as exc:
            if dataflow_only:
                raise FlowError(str(exc)) from None
            reason = f"the dataflow design does not fit: {exc}"
        else:
            if dataflow_only or b.schedule.fits():
                b.backend = "dataflow"
                return
            reason = "the dataflow design's estimate exceeds the board"
            b.schedule = None
    b.backend = "sequential"
    units, refused = None, None
    if b.config.engine_scratchpad_kib is None:   # a scratchpad is the core's alone
        units, refused = _units_engine(b, reason)
    if units is not None:
        b.engine = units
    else:
        if refused:
            reason = "; ".join(r for r in (reason, f"the engine of the units does not run "
                                                   f"it yet ({refused})") if r)
        b.engine = _core_engine(b, reason)
    report, prediction = b.engine.report, b.engine.prediction
    fps, clock = report["frame"]["fps"], b.engine.target.config.clock_mhz
    wanted = b.config.fps or (b.config.target_cycles and clock * 1e6 / b.config.target_cycles)
    if wanted and fps < wanted:
        raise FlowError(f"the layer-sequential engine reaches {fps:.3g} frames/s at {clock:g} MHz "
                        f"({prediction.frame_interval:,} cycles/frame), below the {wanted:.3g} "
                        "asked; drop --fps/--target-cycles or raise --engine-clock")


def _units_engine(b: Build, reason):
    """``(EngineBuild, None)`` for the engine of the units sized for the board, or
    ``(None, why)`` when it cannot run the program (the core runs it instead)."""
    if array_planes(b.graph) > 1:
        # the units take levels as bit planes, but their sizing counts arrays of one
        # plane (four cost about three times the logic): not sized honestly yet
        return None, ("its 2- and 4-bit activations: the units' sizing counts arrays of "
                      "one bit plane")
    try:
        sized = units_target(b.config.board, b.config.engine_clock_mhz, b.config.max_util,
                             bases=network_bases(b.graph),
                             subsampler=network_subsamples(b.graph))
        program = compile_engine(b.graph, sized.config)
    except ValueError as exc:
        return None, str(exc)
    target = bound_units(sized, program.descriptors)
    refused = program_refusal(program, target.units)
    if refused:
        return None, refused
    prediction = predict_engine(program, target.dram)
    report = units_report(program, target, prediction, reason=reason,
                          estimate=target.estimate())
    return EngineBuild(target, program, prediction, report), None


def _core_engine(b: Build, reason):
    """The core as built (``hw/engine/core.py``) for the board and its program."""
    try:
        kib = b.config.engine_scratchpad_kib
        target = engine_target(b.config.board, b.config.engine_clock_mhz,
                               buffer_bytes=kib and kib * 1024, max_util=b.config.max_util,
                               planes=array_planes(b.graph))
        program, prediction = compile_for_core(b.graph, target)
    except ValueError as exc:
        raise FlowError(f"the layer-sequential engine cannot run this network: {exc}") from None
    intended = predict_engine(program, target.dram)
    report = engine_report(program, target, prediction, intended, reason=reason,
                           estimate=target.estimate())
    return EngineBuild(target, program, prediction, report)


def engine_verilog(params: dict, implementation: str = "core") -> str:
    """The Verilog of the engine ``implementation`` (``"core"``:
    :class:`~groupnet_hw.hw.engine.core.EngineCore`; ``"units"``:
    :class:`~groupnet_hw.hw.engine.unit_engine.UnitEngine`) with keyword arguments
    ``params`` (module :data:`ENGINE_NAME`). It depends on them and the hardware
    library's source alone (the program is data in DRAM), so a process converts each
    configuration once, and the conversion (10-35 s) is kept in the RTL cache
    (:func:`default_build_dir`) under a key of the parameters, the source of ``hw/`` and
    the package's top-level modules it reads, and Amaranth's version."""
    return _engine_verilog(json.dumps(params, sort_keys=True), implementation)


#: the engine tops a build elaborates, by :attr:`EngineTarget.implementation`
_ENGINE_TOPS = {"core": EngineCore, "units": UnitEngine}


def _engine_source_key(key: str) -> str:
    import amaranth

    from . import hw
    # the folders as imported: hw/ sits beside groupnet_hw/ in a checkout
    top, lib = Path(__file__).resolve().parent, Path(hw.__file__).resolve().parent
    h = hashlib.sha256(repr((key, amaranth.__version__, ENGINE_NAME)).encode())
    for root, paths in ((top, top.glob("*.py")), (lib, lib.rglob("*.py"))):
        for path in sorted(paths):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:24]


@functools.lru_cache(maxsize=4)
def _engine_verilog(params_json: str, implementation: str = "core") -> str:
    from amaranth.back import verilog
    key = params_json if implementation == "core" else f"{implementation}:{params_json}"
    cached = default_build_dir() / f"{ENGINE_NAME}-{_engine_source_key(key)}.v"
    if cached.is_file():
        return cached.read_text()
    top = _ENGINE_TOPS[implementation](**json.loads(params_json))
    text = verilog.convert(top, name=ENGINE_NAME, emit_src=False)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, prefix=".verilog-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, cached)      # whole or absent: a reader never sees half a file
    except OSError:
        pass                         # a read-only cache only costs the next conversion
    return text


def _elaborate(b: Build, source, out_dir):
    from amaranth.back import verilog
    if b.backend == "sequential":
        b.verilog = engine_verilog(b.engine.target.params, b.engine.target.implementation)
        return
    b.accelerator = Accelerator(b.schedule)
    # No source-location attributes: they double the file and no tool needs them.
    b.verilog = verilog.convert(b.accelerator, name=CORE_NAME, emit_src=False)
    b.port_widths = port_widths(b.accelerator)


def _write(b: Build, source, out_dir):
    if out_dir is None:
        return
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FlowError(f"{out}: exists and is not a directory; choose another -o")
    out.parent.mkdir(parents=True, exist_ok=True)
    # everything goes to a staging folder first: a failed build leaves no half-written
    # directory behind, and a directory's files are always of one build
    staging = Path(tempfile.mkdtemp(prefix=".groupnet-build-", dir=out.parent))
    try:
        if b.backend == "sequential":
            _write_engine(b, staging)
        else:
            _write_dataflow(b, staging, out)
        write_manifest(staging, b.manifest)
        out.mkdir(exist_ok=True)
        for item in staging.iterdir():
            target = out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            shutil.move(str(item), target)
        b.out_dir = out
        if b.board_plan:
            plan = b.board_plan
            plan["message"] = plan["message"].replace(str(staging), str(out))
            plan["project_dir"] = out / Path(plan["project_dir"]).name
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_engine(b: Build, staging: Path):
    """The engine's Verilog, its memory image, the program's descriptors and the report
    (no board project yet: the board top with the HPS bridge is a later step)."""
    program = b.engine.program
    (staging / f"{ENGINE_NAME}.v").write_text(b.verilog)
    (staging / ENGINE_IMAGE).write_bytes(bytes(program.image))
    (staging / "program.json").write_text(json.dumps(dict(
        header=_plain(program.header),
        descriptors=[dict(_plain(d), nodes=[n.name for n in grp.nodes])
                     for d, grp in zip(program.descriptors, program.groups)]), indent=1))
    (staging / "report.json").write_text(json.dumps(b.report(), indent=2))
    (staging / "report.txt").write_text(b.report_text())
    b.manifest = BuildManifest(
        checkpoint=b.checkpoint, checkpoint_sha256=b.checkpoint_sha256,
        board=b.config.board, options=_manifest_options(b.config),
        verilog=f"{ENGINE_NAME}.v", toplevel=ENGINE_NAME,
        verilog_sha256=file_sha256(staging / f"{ENGINE_NAME}.v"),
        in_width=0, out_width=0, frame_cycles=b.engine.prediction.frame_interval,
        backend="sequential", image=ENGINE_IMAGE,
        image_sha256=file_sha256(staging / ENGINE_IMAGE))


def _plain(record):
    """A decoded header or descriptor as JSON values (bytes fields as text)."""
    def value(v):
        if isinstance(v, (bytes, bytearray)):
            return v.decode("ascii", errors="replace")
        return v if isinstance(v, float) else int(v)
    return {k: value(v) for k, v in record.items()}


def _write_dataflow(b: Build, staging: Path, out: Path):
    """The core's Verilog, the board project, the schedule and the report."""
    (staging / f"{CORE_NAME}.v").write_text(b.verilog)
    config = b.config
    run = config.bitstream if config.bitstream is not None else (
        None if b.schedule.fits() else False)
    try:
        # the board top instantiates the core's module: no second elaboration
        core = CoreInstance(b.accelerator, CORE_NAME)
        b.board_plan = write_board_project(core, staging, board=config.board,
                                           baud=config.baud, run_toolchain=run,
                                           sources={f"{CORE_NAME}.v": b.verilog})
    except BoardBuildError as exc:
        failed = out / f"{config.board}-failed"
        shutil.rmtree(failed, ignore_errors=True)
        out.mkdir(exist_ok=True)
        shutil.move(str(staging), failed)
        raise FlowError(str(exc).replace(str(staging), str(failed))) from None
    (staging / "schedule.json").write_text(b.schedule.to_json())
    (staging / "report.json").write_text(json.dumps(b.report(), indent=2))
    (staging / "report.txt").write_text(b.report_text())
    in_width, out_width = b.port_widths
    b.manifest = BuildManifest(
        checkpoint=b.checkpoint, checkpoint_sha256=b.checkpoint_sha256,
        board=config.board, options=_manifest_options(config),
        verilog=f"{CORE_NAME}.v", toplevel=CORE_NAME,
        verilog_sha256=file_sha256(staging / f"{CORE_NAME}.v"),
        in_width=in_width, out_width=out_width, frame_cycles=b.schedule.frame_cycles)


#: The flow, in order. ``build(..., stop_after=name)`` stops after the named step.
STEPS = (
    Step("load", "reading the checkpoint", _load),
    Step("lower", "tracing the network into the graph IR", _lower),
    Step("passes", "folding BN, ReLU and gates into the integer graph", _passes),
    Step("schedule", "scheduling (dataflow: folding, base mappings, line buffers, streams; "
                     "minutes on a large network; or the engine's program)", _schedule),
    Step("elaborate", "elaborating the accelerator and writing its Verilog", _elaborate),
    Step("write", "writing the board project, reports and manifest", _write),
)


def build(source, config: BuildConfig | None = None, out_dir=None, *, stop_after=None,
          progress: Callable | None = None) -> Build:
    """Run the flow's :data:`STEPS` on ``source``.

    Parameters
    ----------
    source : path-like or torch.nn.Module
        A checkpoint (loaded safely and validated) or a model of the layer library.
    config : BuildConfig, optional
        Default: ``BuildConfig()``.
    out_dir : path-like, optional
        Where ``write`` puts the build; ``None``: nothing is written.
    stop_after : str, optional
        Name of the last step to run.
    progress : callable, optional
        ``progress(step)`` is called with each :class:`Step` before it runs.

    Returns
    -------
    Build

    Raises
    ------
    FlowError
        One line saying what is wrong: an unreadable checkpoint, a network the compiler
        cannot lower, a board the network does not fit at the requested rate, a failed
        toolchain run.
    """
    config = config or BuildConfig()
    names = [s.name for s in STEPS]
    if stop_after is not None and stop_after not in names:
        raise FlowError(f"unknown step {stop_after!r}; the steps are {', '.join(names)}")
    b = Build(config=config)
    for step in STEPS:
        if progress:
            progress(step)
        t0 = time.perf_counter()
        step.run(b, source, out_dir)
        b.timings[step.name] = round(time.perf_counter() - t0, 3)
        if step.name == stop_after:
            break
    return b


def _manifest_options(config: BuildConfig) -> dict:
    d = config.to_dict()
    del d["board"]
    return d


# ---------------------------------------------------------------------- verification
def load_build(directory, progress: Callable | None = None) -> Build:
    """A :class:`Build` for a directory ``build`` wrote, ready for :func:`verify`.

    The checkpoint must be unchanged (its SHA-256), and the schedule recomputed from it
    with the recorded configuration must equal the recorded ``schedule.json``: what the
    report claims is what is simulated. The Verilog is not regenerated; the file on
    disk is what ``verify`` simulates.

    Raises
    ------
    FlowError
        Not a build directory, a changed or missing checkpoint, or a schedule that
        differs from the recorded one.
    """
    directory = Path(directory)
    try:
        manifest = read_manifest(directory)
    except BuildError as exc:
        raise FlowError(str(exc)) from None
    try:
        config = BuildConfig.from_dict({"board": manifest.board, **manifest.options})
    except (FlowError, TypeError) as exc:
        raise FlowError(f"{directory}/build.json: {exc}; rebuild the directory") from None
    b = build(manifest.checkpoint, config, stop_after="schedule", progress=progress)
    b.manifest, b.out_dir = manifest, directory
    if manifest.backend == "sequential":
        recorded = directory / (manifest.image or ENGINE_IMAGE)
        if (b.backend != "sequential" or not recorded.is_file()
                or file_sha256(recorded) != manifest.image_sha256
                or recorded.read_bytes() != bytes(b.engine.program.image)):
            raise FlowError(f"{recorded} differs from the engine program this groupnet-hw "
                            f"compiles for {manifest.checkpoint}; rebuild the directory")
        return b
    recorded = directory / "schedule.json"
    if (not recorded.is_file()
            or json.loads(recorded.read_text()) != json.loads(b.schedule.to_json())):
        raise FlowError(f"{directory}/schedule.json differs from the schedule this "
                        f"groupnet-hw computes for {manifest.checkpoint}; rebuild the "
                        "directory")
    b.port_widths = (manifest.in_width, manifest.out_width)
    return b


def rtl_design(b: Build, cache_dir=None):
    """The :class:`~groupnet_hw.sim.verify.RTLDesign` of a build: the Verilog it wrote,
    or (a build that wrote nothing) its Verilog saved under ``cache_dir`` by content."""
    if b.manifest is not None and b.out_dir is not None:
        return RTLDesign(Path(b.out_dir, b.manifest.verilog), b.manifest.toplevel,
                         *(b.port_widths or (0, 0)))
    if b.verilog is None:
        _elaborate(b, None, None)
    name = ENGINE_NAME if b.backend == "sequential" else CORE_NAME
    cache = Path(cache_dir or default_build_dir()) / "designs"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}-{hashlib.sha256(b.verilog.encode()).hexdigest()[:16]}.v"
    if not path.exists():
        tmp = path.with_suffix(f".partial{os.getpid()}")
        tmp.write_text(b.verilog)
        os.replace(tmp, path)
    return RTLDesign(path, name, *(b.port_widths or (0, 0)))


def verify(target, images=None, *, simulator="verilator", stall=0.0, seed=0, jobs=None,
           waves=None, build_dir=None, progress: Callable | None = None):
    """Prove a build bit-exact: its RTL against the model's fixed-point forward and the
    integer graph, on ``images``.

    Parameters
    ----------
    target : Build, path-like
        A :class:`Build`, a build directory (:func:`load_build`) or a checkpoint (its
        default build, in memory).
    images : uint8 tensor or int, optional
        The images, or the first N held-out test images of the model's built-in dataset
        (default: all of them).
    simulator : {"verilator", "cocotb", "icarus", "amaranth"}
    stall : float
        Probability of random input gaps and output ready-stalls.
    seed : int
    jobs : int, optional
        Simulator processes for the fast path.
    waves : path-like, optional
        VCD of the first mismatching frame.
    build_dir : path-like, optional
        Where simulator builds are cached (default
        :func:`~groupnet_hw.sim.cocotb_runner.default_build_dir`).
    progress : callable, optional
        ``progress(text)`` with what is being done.

    Returns
    -------
    VerifyResult
        ``ok`` only if every output of every image is equal.
    """
    if isinstance(target, Build):
        b = target
    elif os.path.isdir(target):
        b = load_build(target)
    else:
        b = build(target, BuildConfig(), stop_after="schedule")
    if images is None or isinstance(images, int):
        images = test_images(b.model.config, images)
    root = Path(build_dir or default_build_dir())
    if b.backend == "sequential":
        return _verify_engine(b, images, simulator, stall, seed, root, progress)
    design = None
    if simulator != "amaranth":
        root.mkdir(parents=True, exist_ok=True)
        design = rtl_design(b, root)
    return run_verify(b.model, b.schedule, images, simulator=simulator, design=design,
                      build_dir=str(root / simulator), stall=stall, seed=seed, jobs=jobs,
                      waves=waves, progress=progress, accelerator=b.accelerator)


def engine_rtl(b: Build, build_dir=None, progress=None):
    """The fast-path simulator (:func:`~groupnet_hw.sim.engine_rtl.build_engine_rtl`)
    of an engine build's Verilog, built once per Verilog under ``build_dir``."""
    root = Path(build_dir or default_build_dir())
    root.mkdir(parents=True, exist_ok=True)
    design = rtl_design(b, root)
    try:
        return build_engine_rtl(design.verilog, design.toplevel, build_dir=root,
                                progress=progress)
    except RTLError as exc:
        raise FlowError(f"the engine's Verilog did not build: {str(exc).splitlines()[0]}") from None


def _verify_engine(b: Build, images, simulator, stall, seed, root, progress):
    """The engine's Verilog on the fast path with the C++ DRAM model under the build's
    DRAM model (:mod:`groupnet_hw.sim.engine_verify`)."""
    if simulator != "verilator":
        raise FlowError(f"an engine build is verified on the fast Verilator path only, "
                        f"not {simulator}; drop --sim")
    rtl = engine_rtl(b, root, progress)
    dram = b.engine.target.dram
    try:
        return verify_engine(b.model, b.graph, b.engine.program, rtl, images,
                             latency=dram.latency, bytes_per_cycle=dram.bytes_per_cycle,
                             stall=stall, seed=seed,
                             predicted_cycles=b.engine.prediction.frame_interval,
                             progress=progress)
    except EngineRunError as exc:
        raise FlowError(f"{exc}: the program and the engine disagree; please report this") from None


def test_images(config, n=None):
    """The first ``n`` held-out test images (all when ``None``) of the built-in dataset
    of a model with ``config``."""
    from .models.data import load_dataset
    from .models.train import dataset_for
    try:
        test = load_dataset(dataset_for(config))[2]
    except ValueError as exc:
        raise FlowError(f"{exc}; pass your own images") from None
    return test if n is None else test[:n]
