"""The engine of the units as a build's target: its sizes for a board and a program, and
which descriptors it runs.

``groupnet-hw build --engine sequential`` writes the engine of the units
(:class:`~groupnet_hw.hw.engine.unit_engine.UnitEngine`, docs/architecture.md section
15) when it runs every descriptor of the program, else the core as built
(:mod:`.target`), and the report says why.

- :func:`units_target` sizes the engine for a board (:func:`.sizing.size_engine`: the
  arrays, lanes and stem the board's budget holds) and gives the
  :class:`~.config.EngineConfig` the compiler compiles for.
- :func:`unit_sizes` gives the units' bounds for a compiled program: the largest map,
  window, row and channel count among its descriptors, rounded up to powers of two so
  that programs of one shape share one Verilog (and one Verilator build).
- :func:`refusal` says why the units would refuse a descriptor (their ``CHECK``
  states' conditions, which stop the engine with ``unsupported``), or ``None``; the
  engine's tests run every descriptor for which it is ``None`` and compare the image.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...devices import BOARDS, get_board, get_family
from ...engine_format import FLAG_BITS, OPCODE_CODES, STAGE_BITS
from ...hw.engine.prologue import PROLOGUE_ELEMS, PROLOGUE_LEVELS
from ...hw.engine.runner import RUNNER_FLAGS, RUNNER_STAGES
from ...hw.engine.subsample_runner import SUBSAMPLE_ELEMS
from .config import DramModel
from .sizing import budget_limits, estimate, size_engine, yosys_m10k_blocks
from .tiling import map_buffer_takes

__all__ = ["UnitsTarget", "units_target", "bound", "network_bases", "network_subsamples",
           "unit_sizes", "units_ram_blocks", "refusal",
           "program_refusal", "runner_refusal", "subsample_refusal", "map_buffer_takes"]

_OPCODES = {v: k for k, v in OPCODE_CODES.items()}
#: the head's map of at least 8 x 8 (ResNet's 7 x 7 at 224 x 224)
HEAD_SIZE = 8
_FIXED_FORMAT, _UINT_FORMAT = 2, 1


def _pow2(n, least):
    return max(least, 1 << max(0, int(n) - 1).bit_length())


def _levels_bits(levels):
    return PROLOGUE_LEVELS.get(int(levels), 0)


def _is_stem(d):
    return d["opcode"] == OPCODE_CODES["CONV"] and bool(d["flags"] & FLAG_BITS["int_weights"])


def _is_runner(d):
    return d["opcode"] == OPCODE_CODES["CONV"] and not _is_stem(d)


def _chunk_words(d, pe):
    """Weight words of a streamed chunk of ``d`` (0 when its weights do not stream)."""
    if not d.get("flags", 0) & FLAG_BITS["weight_stream"]:
        return 0
    return -(-d["chunk_c"] // pe) * d["in_folds"]


def _weight_words(d, pe):
    """Weight words ``d`` holds in a half of the fold issuer: a chunk's, or all."""
    return _chunk_words(d, pe) or d["out_folds"] * d["in_folds"]


def unit_sizes(config, descriptors):
    """Keyword arguments of :class:`~groupnet_hw.hw.engine.unit_engine.UnitEngine` for
    ``config``'s arrays, lanes and stem, bounded by the program's ``descriptors`` (the
    decoded ones: :attr:`~.layout.EngineProgram.descriptors`).

    The convolution runner's maps, words a tap, kernels, output folds and row pitch are
    the program's largest, rounded up to powers of two (at least ResNet's 3 x 3 windows
    and 8 x 8 maps); its weight words a half of the fold issuer are
    ``config.weight_buffer``'s half (the compiler streams the weights of larger
    layers), or a streamed chunk's where one PE fold's are more (ResNet's 3 x 3 x 512
    windows: 144 words of 16 x 32 lanes against 128); its bit planes are the widest activations its convolutions read. The stem
    runner's frame side is the program's, rounded up to 16 pixels; the head's classes a
    power of two."""
    runner = [d for d in descriptors if _is_runner(d)] or [dict.fromkeys(
        ("in_h", "in_w", "out_h", "out_w", "words", "kernel", "stride", "out_folds", "pitch",
         "in_levels", "out_levels", "aux_levels", "act_bits"), 1)]
    stems = [d for d in descriptors if _is_stem(d)]
    heads = [d for d in descriptors if d["opcode"] == OPCODE_CODES["HEAD"]]
    subsamples = [d for d in descriptors if d["opcode"] == OPCODE_CODES["SUBSAMPLE"]]
    word_bytes = config.pe * config.simd // 8
    planes = max(max(_levels_bits(d["in_levels"]), int(d["act_bits"]) or 1) for d in runner)
    sizes = dict(
        arrays=config.arrays, pe=config.pe, simd=config.simd, lanes=config.vector_lanes,
        planes=_pow2(planes, 1), ring_rows=config.ring_rows,
        ring_words=_pow2(max(d["pitch"] for d in runner) * config.ring_rows, 256),
        max_size=_pow2(max(max(d["in_h"], d["in_w"], d["out_h"], d["out_w"])
                           for d in runner + subsamples), 8),
        max_words=_pow2(max(d["words"] for d in runner), 4),
        max_kernel=max(3, *(max(d["kernel"], d["stride"]) for d in runner)),
        max_weight_words=max(config.weight_buffer // 2 // word_bytes,
                             *(_chunk_words(d, config.pe) for d in runner)),
        max_out_folds=_pow2(max(d["out_folds"] for d in runner), 4),
        max_levels=max(1, *(max(d["in_levels"], d["out_levels"], d["aux_levels"])
                            for d in runner)),
        map_words=config.map_buffer // config.port_bytes,
        head_size=_pow2(max([max(d["in_h"], d["in_w"]) for d in heads] or [1]), HEAD_SIZE),
        max_classes=_pow2(max([d["out_c"] for d in heads] or [16]), 16),
        stem=dict(pe=config.stem_pe, simd=config.stem_simd))
    # the subsampler only where the program subsamples (660 ALMs)
    sizes["subsample"] = dict(max_stride=max(2, *(d["stride"] for d in subsamples))) \
        if subsamples else False
    if stems:
        side = max(max(d["in_h"], d["in_w"]) for d in stems)
        # the stem runner's own defaults hold ResNet's 7 x 7 x 3 stem of 64 channels
        sizes["stem"].update(
            max_size=max(16, -(-side // 16) * 16),
            max_kernel=max(7, *(max(d["kernel"], d["stride"]) for d in stems)),
            max_in_folds=max(17, *(d["in_folds"] for d in stems)),
            max_out_folds=max(4, *(d["out_folds"] for d in stems)),
            max_pooled=max(64, *(d["out_w"] for d in stems)),
            ring_rows=_pow2(2 * max(d["dilation"] * (d["kernel"] - 1) + d["stride"]
                                    for d in stems), 8))
    return sizes


def units_ram_blocks(units, family="cyclonev"):
    """Block RAMs of the engine of the units built with ``units`` (the keyword arguments
    of :class:`~groupnet_hw.hw.engine.unit_engine.UnitEngine`), memory by memory: the
    engine is elaborated (about a second at the DE10-Nano's size) and each memory
    counted as Yosys maps it to Cyclone V M10K (:func:`.sizing.yosys_m10k_blocks`:
    503 for the DE10-Nano's units, Yosys's own count), else in the family's best
    aspect ratio (:func:`~groupnet_hw.compiler.hard_blocks.rom_blocks`; not checked
    against Yosys). The sizing's :func:`.sizing.estimate` counts the cycle model's
    buffers instead, which are not the units' memories (371 blocks for those 503)."""
    from amaranth.hdl import Fragment, Shape
    from amaranth.lib.memory import Memory

    from ...hw.engine.unit_engine import UnitEngine
    from ..hard_blocks import rom_blocks
    blocks = 0
    todo = [Fragment.get(UnitEngine(**units), None)]
    while todo:
        for sub, *_ in todo.pop().subfragments:
            mems = [o for o in getattr(sub, "origins", None) or () if isinstance(o, Memory)]
            if mems:
                words, width = mems[0].depth, Shape.cast(mems[0].shape).width
                blocks += (yosys_m10k_blocks(words, width)[0] if family == "cyclonev"
                           else rom_blocks(words, width, family))
            else:
                todo.append(sub)
    return blocks


@dataclass(frozen=True)
class UnitsTarget:
    """The engine of the units of a build.

    Attributes
    ----------
    board : str
    units : dict
        Keyword arguments of :class:`~groupnet_hw.hw.engine.unit_engine.UnitEngine`
        (:func:`unit_sizes`, with ``data_width`` and ``max_burst``).
    config : EngineConfig
        What the compiler compiles for (:func:`.sizing.size_engine`'s).
    dram : DramModel
        The default DRAM model at the engine clock.
    subsampler : bool
        Whether the engine has the subsampler (the network's option-A shortcuts).
    """

    board: str
    units: dict
    config: object
    dram: DramModel
    subsampler: bool = False
    implementation = "units"

    @property
    def params(self):
        """The top's keyword arguments (the flow's Verilog and its cache key)."""
        return self.units

    def estimate(self):
        """The resource estimate (:func:`.sizing.estimate`) against the board's budget:
        ``cells``, ``limits`` and ``utilisation`` over logic, block-RAM bits and DSP
        blocks; once the units' sizes are bounded by a program (:func:`bound`), their
        block RAM counted memory by memory (:func:`units_ram_blocks`)."""
        budget = get_board(self.board).budget()
        cells = estimate(self.config, budget["family"], self.subsampler)
        if self.units:
            cells["ram_bits"] = (units_ram_blocks(self.units, budget["family"])
                                 * get_family(budget["family"]).bram_bits)
        limits = budget_limits(budget)
        return dict(cells=cells, limits=limits,
                    utilisation={k: cells[k] / limits[k] for k in cells if limits.get(k)})

    def to_dict(self):
        return dict(board=self.board, implementation="units", units=dict(self.units),
                    clock_mhz=self.config.clock_mhz,
                    dram=dict(latency=self.dram.latency,
                              bytes_per_cycle=self.dram.bytes_per_cycle,
                              gbytes_per_s=self.dram.gbytes_per_s(self.config.clock_mhz)))


def network_bases(graph):
    """K: the most bases a mixer of ``graph`` aggregates (``None`` without mixers)."""
    return max((len(n.attrs["lambdas"]) for n in graph.nodes if n.op == "mixer"),
               default=None)


def network_subsamples(graph):
    """Whether ``graph`` has option-A shortcuts' subsamplings (the subsampler's work)."""
    return any(n.op == "subsample" for n in graph.nodes)


def units_target(board="de10nano", clock_mhz=100.0, max_util=None, bases=None,
                 subsampler=False):
    """The engine of the units :func:`.sizing.size_engine` gives ``board`` (at
    ``max_util``, default 0.9) for a network of ``bases`` bases a block (as many
    arrays: the runner mixes a block's bases one an array), with the subsampler
    if ``subsampler``, its sizes not yet bounded by a program (:func:`bound`).

    Raises
    ------
    ValueError
        The board has no DRAM port, or no size fits ``max_util``.
    """
    b = get_board(board)
    if not b.dram_port_bits:
        boards = ", ".join(n for n, other in BOARDS.items() if other.dram_port_bits)
        raise ValueError(f"{board} has no DRAM port for the layer-sequential engine "
                         f"(boards with one: {boards}); use --engine dataflow")
    sized = size_engine(board, 0.9 if max_util is None else max_util, clock_mhz,
                        bases=bases, subsampler=subsampler)
    if not sized.fits:
        worst = max(sized.utilisation, key=sized.utilisation.get)
        raise ValueError(f"the engine of the units' smallest size needs "
                         f"{100 * sized.utilisation[worst]:.0f} % of {board}'s {worst}, "
                         f"more than --max-util {max_util:g}")
    return UnitsTarget(board, {}, sized.config, DramModel.at_clock(clock_mhz), subsampler)


def bound(target, descriptors):
    """``target`` with the units' sizes bounded by ``descriptors`` (:func:`unit_sizes`)."""
    units = dict(unit_sizes(target.config, descriptors),
                 data_width=8 * target.config.port_bytes, max_burst=16)
    return UnitsTarget(target.board, units, target.config, target.dram, target.subsampler)


# ------------------------------------------------------------------ what the units run
def _streaming_refusal(d):
    side_ok = not d["stages"] & STAGE_BITS["add"] or (
        d["side_c"] == d["out_c"] and (d["side_c"] * d["side_elem"] // 8) % 16 == 0
        and (d["chunk_c"] * d["side_elem"] // 8) % 16 == 0)
    if not (d["chunk_c"] > 0 and d["chunk_c"] % 8 == 0):
        return f"its weights stream in chunks of {d['chunk_c']} channels, not a multiple of 8"
    if not side_ok:
        return "its residual add's side slices are not whole bus words while its weights stream"
    return None


def _prologue_refusal(d):
    if not (d["in_fmt"] == _FIXED_FORMAT and d["in_elem"] in PROLOGUE_ELEMS
            and d["in_c"] % 8 == 0 and d["const_bytes"] == 4
            and d["in_levels"] in PROLOGUE_LEVELS):
        return (f"its input threshold takes {d['in_c']} channels of {d['in_elem']}-bit "
                "elements (the prologue takes 8-, 16- or 32-bit elements, a multiple of 8 "
                "channels)")
    return None


def runner_refusal(d, arrays, region=None):
    """Why the convolution runner refuses ``d`` with ``arrays`` arrays and a map buffer
    of ``region`` bytes a map (``None``: not checked), or ``None``."""
    if d["groups"] != 1:
        return f"a grouped convolution ({d['groups']} groups)"
    if d["stages"] & ~RUNNER_STAGES:
        return "stages the runner does not execute (a fused max pooling)"
    if d["flags"] & ~RUNNER_FLAGS:
        return "flags the runner does not execute"
    if d["flags"] & FLAG_BITS["weight_stream"]:
        why = _streaming_refusal(d)
        if why:
            return why
    if d["stages"] & STAGE_BITS["mixer"]:
        if d["jobs"] != arrays:
            return (f"a mixer on chip of {d['jobs']} bases, but the runner mixes one base "
                    f"an array ({arrays})")
        if not (d["aux_outputs"] <= 1
                or (d["aux_outputs"] == 2 and d["flags"] & FLAG_BITS["levels_only"])):
            return "two level outputs beside a wide one"
    if d["stages"] & STAGE_BITS["prologue_threshold"]:
        why = _prologue_refusal(d)
        if why:
            return why
    if region is not None and not map_buffer_takes(d, region):
        return (f"its streamed output maps do not fit the map buffer's regions of "
                f"{region:,} bytes")
    return None


def refusal(d, arrays, region=None, stem_lanes=3, port_bytes=16):
    """Why the engine of the units refuses descriptor ``d`` (decoded fields), or
    ``None``: each opcode goes to its unit (``hw/engine/unit_engine.py``)."""
    op = d["opcode"]
    if op == OPCODE_CODES["INPUT"]:
        return None
    if op == OPCODE_CODES["HEAD"]:
        if d["in_c"] % 8:
            return f"a head of {d['in_c']} channels (the head takes multiples of 8)"
        if d["in_elem"] > 24:
            return f"a head over {d['in_elem']}-bit elements (it takes up to 24)"
        return None
    if _is_stem(d):
        if d["in_c"] > stem_lanes:
            return f"a stem of {d['in_c']} input channels (it takes up to {stem_lanes})"
        return None
    if op == OPCODE_CODES["CONV"]:
        return runner_refusal(d, arrays, region)
    if op == OPCODE_CODES["SUBSAMPLE"]:
        return subsample_refusal(d, port_bytes)
    return f"no unit runs {_OPCODES.get(op, op)} descriptors yet"


def subsample_refusal(d, port_bytes=16):
    """Why the subsampler (``hw/engine/subsample_runner.py``) refuses ``d``, or
    ``None``: it copies whole pixels of whole bus words, nothing fused."""
    if d["stages"] or d["flags"] & ~FLAG_BITS["shared_input"]:
        return "a SUBSAMPLE with fused stages or flags"
    if (d["kernel"], d["padding"]) != (1, 0) or d["in_c"] != d["out_c"] \
            or (d["in_fmt"], d["in_elem"]) != (d["out_fmt"], d["out_elem"]):
        return "a SUBSAMPLE that changes its map's format"
    pixel = d["in_c"] * d["in_elem"] // 8
    if d["in_elem"] not in SUBSAMPLE_ELEMS or pixel == 0 or pixel % port_bytes:
        return (f"a SUBSAMPLE of {pixel}-byte pixels (the subsampler copies pixels of whole "
                f"{port_bytes}-byte bus words)")
    return None


def _bounds_refusal(d, units):
    """Why the runner's bounds of ``units`` refuse ``d`` (the ones a program's shapes
    set: :func:`unit_sizes` takes them from the program), or ``None``."""
    checks = (
        (max(d["in_h"], d["in_w"], d["out_h"], d["out_w"]) <= units["max_size"],
         f"maps over {units['max_size']} pixels a side"),
        (d["words"] <= units["max_words"], f"over {units['max_words']} bus words a tap"),
        (max(d["kernel"], d["stride"]) <= units["max_kernel"],
         f"a kernel or stride over {units['max_kernel']}"),
        (d["out_folds"] <= units["max_out_folds"],
         f"over {units['max_out_folds']} output folds"),
        (d["in_folds"] <= units["max_kernel"] ** 2 * units["max_words"], "too many input folds"),
        (_weight_words(d, units["pe"]) <= units["max_weight_words"],
         f"{_weight_words(d, units['pe'])} weight words in a half of the fold issuer of "
         f"{units['max_weight_words']}"),
        (d["pitch"] * units["ring_rows"] <= units["ring_words"],
         f"rows of {d['pitch']} words that the ring of {units['ring_words']} does not hold"),
        (d["span"] < units["ring_rows"], f"a window of {d['span'] + 1} rows"),
    )
    return next((why for ok, why in checks if not ok), None)


def program_refusal(program, units):
    """The first descriptor of ``program`` the engine of ``units`` refuses, as
    ``"descriptor N (OPCODE, label): why"``, or ``None`` when it runs them all."""
    region = units["map_words"] // (2 * units["arrays"]) * units["data_width"] // 8
    for i, (d, grp) in enumerate(zip(program.descriptors, program.groups)):
        why = refusal(d, units["arrays"], region, port_bytes=units["data_width"] // 8) or (
            _is_runner(d) and _bounds_refusal(d, units))
        if why:
            names = ", ".join(n.name for n in grp.nodes)
            return f"descriptor {i} ({_OPCODES.get(d['opcode'], d['opcode'])}: {names}): {why}"
    return None
