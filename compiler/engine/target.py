"""The engine a build elaborates: the RTL core's parameters and the compiler's view of it.

:mod:`.sizing` sizes the *intended* engine (``arrays`` arrays side by side with
overlapped transfers, :mod:`.cycles`); this module describes the engine that
``hw/engine/core.py`` implements today and that ``groupnet-hw build --engine
sequential`` writes: one XNOR-popcount array of ``pe x simd`` lanes time-shared by a
descriptor's jobs, a scalar datapath, and one scratchpad of ``buffer_bytes`` that holds a
descriptor's job table, parameter blocks and every job's tile rows at once
(docs/architecture.md section 13).

- :func:`engine_target` picks the core's parameters for a board with a DRAM port
  (:attr:`~groupnet_hw.devices.Board.dram_port_bits`) and the :class:`EngineConfig`
  the compiler compiles for, so that the program and the core agree: the weight
  packing (``pe``, ``simd``, ``stem_pe``, ``stem_simd``), the port width, and tiles
  sized for all jobs of a descriptor (``arrays = max_jobs``: the core holds every job's
  rows, the compiler's tiling counts the tensors of one round of ``arrays`` jobs).
- The row tiles are sized for the core's scratchpad by the tiler
  (:func:`.tiling.scratchpad_need` mirrors the core's region layout).
- :func:`check_program` refuses, at build time and with the descriptor named, a program
  that the core would stop with its ``unsupported`` error, among them one whose values
  (the graph's ranges) or constants need wider multiplier operands than the core's
  ``MUL_BITS``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...devices import BOARDS, get_board
from ...engine_format import MUL_BITS
from ...numerics import signed_width
from .config import DramModel, EngineConfig
from .formats import POWER_OF_TWO_FIXED
from .params import tap_aligned_weights
from .program import FLAG_BITS, OPCODE_CODES, STAGE_BITS, job_table
from .sizing import budget_limits, estimate_core
from .tiling import core_tilings, scratchpad_need, slices_fit

__all__ = ["EngineTarget", "engine_target", "array_planes", "with_shape", "core_config",
           "compile_for_core", "check_program", "multiplier_operands"]

#: The core's fixed limits: K <= 8 bases per block, windows up to 3x3x512 lanes on the
#: array, up to 512 output channels per job in the accumulator buffer (ResNet-18/34).
MAX_JOBS, MAX_WINDOW, MAX_OUT_C = 8, 4608, 512
#: the array's PE rows: with ``simd`` a quarter of the bus (4 bit planes) or half of it (one),
#: 16 x 32 or 16 x 64 lanes at 128 bits
ARRAY_PE = 16
#: scratchpad sizes tried, largest first (halved until the board's block RAM takes it)
SCRATCHPAD_BYTES = (256 << 10, 128 << 10, 64 << 10, 32 << 10)
#: the array's shapes tried, fastest first, as (PE rows, the stem's lanes per channel
#: in bus bytes' fractions): the full array and stem; half the stem's lanes (a bus word
#: is 16 of its 8-bit weights; half costs ResNet-18's stem about 10 % of the frame, and
#: its binary windows their pairs); half the PE rows (the binary layers' folds, a third
#: of the frame, take twice as long); both halved
ARRAY_SHAPES = ((ARRAY_PE, 1), (ARRAY_PE, 2), (ARRAY_PE // 2, 1), (ARRAY_PE // 2, 2))


def with_shape(core, shape):
    """``core`` with the PE rows and stem lanes of ``shape``, one of :data:`ARRAY_SHAPES`
    (the stem's array: ``pe`` output channels a fold, its sums sharing the binary
    array's accumulator words)."""
    pe, stem_fraction = shape
    return dict(core, pe=pe, stem_pe=pe, stem_simd=core["data_width"] // 8 // stem_fraction)


@dataclass(frozen=True)
class EngineTarget:
    """The engine of a build.

    Attributes
    ----------
    board : str
    core : dict
        Keyword arguments of :class:`~groupnet_hw.hw.engine.core.EngineCore`.
    config : EngineConfig
        What the compiler compiles for (:func:`core_config` of ``core``).
    dram : DramModel
        The default DRAM model at the engine clock.
    passed_over : tuple of dict
        The faster :data:`ARRAY_SHAPES` that :func:`engine_target` did not take, each
        with ``pe``, ``stem_simd``, its most used ``resource`` (over ``max_util``) and its
        ``utilisation`` at the smallest scratchpad.
    """

    board: str
    core: dict
    config: EngineConfig
    dram: DramModel
    passed_over: tuple = ()
    implementation = "core"

    @property
    def params(self):
        """The top's keyword arguments (the flow's Verilog and its cache key)."""
        return self.core

    def estimate(self):
        """The core's resource estimate (:func:`.sizing.estimate_core`) against the
        board's budget: ``cells``, ``limits`` and ``utilisation`` dicts over logic,
        block-RAM bits and DSP blocks."""
        budget = get_board(self.board).budget()
        cells = estimate_core(self.core, budget["family"])
        limits = budget_limits(budget)
        util = {k: cells[k] / limits[k] for k in cells if limits.get(k)}
        return dict(cells=cells, limits=limits, utilisation=util)

    def fits(self, max_util):
        """Every budgeted resource of the estimate within ``max_util`` of the board."""
        return all(u <= max_util for u in self.estimate()["utilisation"].values())

    def to_dict(self):
        return dict(board=self.board, implementation="core", core=dict(self.core),
                    clock_mhz=self.config.clock_mhz,
                    passed_over=[dict(p) for p in self.passed_over],
                    dram=dict(latency=self.dram.latency,
                              bytes_per_cycle=self.dram.bytes_per_cycle,
                              gbytes_per_s=self.dram.gbytes_per_s(self.config.clock_mhz)))


#: The program choices of :class:`EngineConfig` that the core as built cannot run, off:
#: no level outputs (it has no threshold behind its mixer), maps in power-of-two
#: containers (its element reader's widths) and binary weights in the flat window's
#: folds (its gather packs a tap's channels against the previous tap's), and no frames
#: in flight (its sequencer detaches nothing).
CORE_PROGRAM = dict(levels_at_producer=False, fixed_containers=POWER_OF_TWO_FIXED,
                    tap_aligned_weights=False, coefficient_fraction=None, scale_bits=None,
                    frames_in_flight=False)


def core_config(core, clock_mhz=100.0):
    """The :class:`EngineConfig` whose programs ``core`` runs: the same weight packing
    and port, row tiles sized for its scratchpad, and ``arrays = max_jobs`` so that a
    block's mixer is fused onto its convolutions (the core holds every job's values);
    a pooling whose windows overlap is not fused (the core would recompute its taps)."""
    return EngineConfig(arrays=core["max_jobs"], pe=core["pe"], simd=core["simd"],
                        stem_pe=core["stem_pe"], stem_simd=core["stem_simd"],
                        port_bytes=core["data_width"] // 8, clock_mhz=clock_mhz,
                        scratchpad=core["buffer_bytes"], fuse_overlapping_pools=False,
                        **CORE_PROGRAM)


def array_planes(graph):
    """The bit planes the array of an engine for ``graph`` needs: 1 when every binary
    convolution takes binary activations (one XNOR popcount a PE row), else 4 (2- and
    4-bit activations as bit planes)."""
    return 1 if all(n.attrs.get("in_bits", 0) == 0 for n in graph.nodes
                    if n.op == "bin_conv") else 4


def engine_target(board="de10nano", clock_mhz=100.0, buffer_bytes=None, max_util=None,
                  planes=4):
    """The engine for ``board``: an array of ``ARRAY_PE`` PE rows whose ``simd`` lanes
    are a quarter of the bus word with 4 bit ``planes`` (a window word's planes are one
    bus word) or half of it with one (binary activations alone: a lane costs about half
    as much, so twice the lanes fit), its fold's weights four or eight bus words, one
    from each bank of the scratchpad; a stem array of a bus word's 8-bit weights per
    channel; and the largest scratchpad of :data:`SCRATCHPAD_BYTES` up to
    ``buffer_bytes`` whose resource estimate (:func:`.sizing.estimate_core`) fits
    ``max_util`` of every budgeted resource of the board (``None``: the largest,
    unchecked). Where no scratchpad fits, the next of :data:`ARRAY_SHAPES`: half the
    stem's lanes, then half the PE rows, then both.

    Raises
    ------
    ValueError
        The board has no DRAM port the engine can use, or no scratchpad size fits.
    """
    b = get_board(board)
    if not b.dram_port_bits:
        boards = ", ".join(n for n, other in BOARDS.items() if other.dram_port_bits)
        raise ValueError(f"{board} has no DRAM port for the layer-sequential engine "
                         f"(boards with one: {boards}); use --engine dataflow")
    width = b.dram_port_bits
    sizes = [s for s in SCRATCHPAD_BYTES if buffer_bytes is None or s <= buffer_bytes]
    if not sizes:
        raise ValueError(f"buffer_bytes {buffer_bytes} is below the smallest scratchpad "
                         f"({SCRATCHPAD_BYTES[-1]} bytes)")
    # each shape at every scratchpad size before the next, slower shape (the
    # scratchpad takes block RAM, the array and the stem logic)
    passed_over = []
    for shape in ARRAY_SHAPES:
        for size in sizes:
            full = dict(data_width=width, pe=ARRAY_PE, simd=width // (4 if planes == 4 else 2),
                        stem_pe=ARRAY_PE, stem_simd=width // 8, buffer_bytes=size,
                        max_jobs=MAX_JOBS, max_window=MAX_WINDOW, max_out_c=MAX_OUT_C,
                        planes=planes)
            core = with_shape(full, shape)
            target = EngineTarget(board, core, core_config(core, clock_mhz),
                                  DramModel.at_clock(clock_mhz), tuple(passed_over))
            if max_util is None or target.fits(max_util):
                return target
        # what this shape needs at the smallest scratchpad (the report says why the
        # build's engine is smaller)
        util = target.estimate()["utilisation"]
        worst = max(util, key=util.get)
        passed_over.append(dict(pe=core["pe"], stem_simd=core["stem_simd"], resource=worst,
                                utilisation=util[worst], max_util=max_util))
    est = target.estimate()
    worst = max(est["utilisation"], key=est["utilisation"].get)
    raise ValueError(f"the engine's smallest configuration needs {est['cells'][worst]:,} "
                     f"{worst} of {board}'s {est['limits'][worst]:,}, more than "
                     f"--max-util {max_util:g}")


def _unsupported(d, core):
    """Why the core's ``CHECK`` state would refuse ``d`` (None if it runs it)."""
    op, st, fl = d["opcode"], d["stages"], d["flags"]
    names = {v: k for k, v in OPCODE_CODES.items()}
    if op == OPCODE_CODES["REPEAT"]:
        return f"{names[op]} descriptors are not implemented by the engine's core yet"
    if op not in (OPCODE_CODES["CONV"], OPCODE_CODES["HEAD"], OPCODE_CODES["MIXER"],
                  OPCODE_CODES["GATE"], OPCODE_CODES["PIXEL"], OPCODE_CODES["SUBSAMPLE"],
                  OPCODE_CODES["MAXPOOL"]):
        return None
    is_conv = op == OPCODE_CODES["CONV"]
    mixing = (is_conv and st & STAGE_BITS["mixer"]) or op == OPCODE_CODES["MIXER"]
    if d["groups"] != 1:
        return "grouped convolutions are not implemented by the engine's core yet"
    if fl & (FLAG_BITS["levels_out"] | FLAG_BITS["levels_only"]):
        return "level outputs (a mixer's thresholds applied where it writes) are not run by the core"
    if not 1 <= d["jobs"] <= core["max_jobs"]:
        return f"{d['jobs']} jobs, the core takes 1 to {core['max_jobs']}"
    if op == OPCODE_CODES["GATE"] and d["jobs"] < 2:
        return "a GATE needs its gated inputs and the aggregate (2 jobs or more)"
    if (st & STAGE_BITS["maxpool"] and not is_conv) or (st & STAGE_BITS["gated"] and not mixing) \
            or (st & (STAGE_BITS["mixer"] | STAGE_BITS["prologue_threshold"]) and not is_conv) \
            or d["in_fmt"] > 2 or d["out_fmt"] > 2 \
            or (op == OPCODE_CODES["CONV"] and not fl & FLAG_BITS["int_weights"]
                and d["in_levels"] == 0 and d["act_bits"] == 0 and d["in_fmt"] != 0):
        return "a combination of stages and formats the core does not run"
    widths, sizes = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8)
    if d["in_elem"] not in widths or d["out_elem"] not in widths \
            or (st & STAGE_BITS["add"] and d["side_elem"] not in widths) \
            or ((fl & FLAG_BITS["int_weights"] or op == OPCODE_CODES["HEAD"])
                and d["weight_bytes"] not in sizes):
        return "element widths (bits) and integer weights (bytes) are powers of two to 64 and 8"
    if d["const_bytes"] not in (4, 8):
        return f"constants of {d['const_bytes']} bytes (the core takes 4 or 8)"
    if fl & FLAG_BITS["sliced"] and not (fl & FLAG_BITS["weight_stream"] and d["n_tiles"] == 1
                                         and slices_fit(d, d["chunk_c"], core["data_width"])):
        return ("channel slices need a streamed convolution in one row tile whose chunks "
                "divide its channels, outputs of 8 bits or more, slices of whole bus "
                "words and a side input as wide as the output")
    return None


def compile_for_core(g, target):
    """The program of integer graph ``g`` for ``target``'s core, with the cheapest of
    the ways the compiler may cut the network into descriptors, each a field of
    :class:`EngineConfig` that the core's cycle model
    (:func:`.core_cycles.predict_core`, under ``target.dram``) decides for the whole
    program:

    - where a binary convolution's input threshold is applied
      (``prologue_thresholds``): in the convolution's gather, which reads a wide
      element per lane and the thresholds beside it, or as PIXEL descriptors that
      write the levels as packed bits once (a descriptor of fetch, loads and stores
      each, then a tap's channels per read). Wide maps favour the PIXEL descriptors
      (ResNet-18 K=5 at 224x224 in the authors' layout: 46 M cycles against 179 M),
      small ones the prologue (a 1x1 convolution keeps its prologue either way,
      fusion rule 3);
    - then, with the better of those, which element-wise jobs share a descriptor
      (``group_by_tensor``): every job whose input one descriptor wrote (fewer
      descriptors), or only jobs that read the same tensor (each input loaded once,
      more rows a tile). ResNet-18's PIXEL descriptors, each base's map thresholded
      for its first convolution, favour the second.

    Then each descriptor of the cheaper program whose weights stream takes the
    cheapest of its tilings (:func:`.tiling.core_tilings`: chunk sizes, row tiles,
    channel slices) by the same model.

    Returns
    -------
    (EngineProgram, CoreFrameCycles)
        The program and its predicted cycles.

    Raises
    ------
    ValueError
        No program runs on the core (the first reason, as :func:`check_program`).
    """
    from .core_cycles import predict_core
    from .layout import compile_engine
    best, error = None, None

    def consider(config):
        nonlocal best, error
        try:
            program = compile_engine(g, config)
            check_program(program, target.core)
        except ValueError as exc:
            error = error or exc
            return None
        prediction = predict_core(program, target.core, target.dram.latency,
                                  target.dram.bytes_per_cycle)
        if best is None or prediction.cycles < best[1].cycles:
            best = (program, prediction)
        return program

    for prologues in (True, False):
        program = consider(replace(target.config, prologue_thresholds=prologues))
        if prologues and program is not None and not any(
                d["stages"] & STAGE_BITS["prologue_threshold"] for d in program.descriptors):
            break       # no prologue to trade: the other program is this one
    if best is None:
        raise error
    if not best[0].config.group_by_tensor:
        consider(replace(best[0].config, group_by_tensor=True))
    program, prediction = best
    if _tile_by_model(program, prediction, target):
        check_program(program, target.core)
        prediction = predict_core(program, target.core, target.dram.latency,
                                  target.dram.bytes_per_cycle)
    return program, prediction


def _tile_by_model(program, prediction, target):
    """Give each descriptor of ``program`` whose weights stream the tiling of
    :func:`.tiling.core_tilings` that the core's cycle model predicts fewer cycles for,
    under ``target.dram``, than its own (``prediction``'s). Returns whether any
    descriptor changed."""
    from .core_cycles import _Core, descriptor_core_cycles
    core = _Core(target.core, target.dram.latency, target.dram.bytes_per_cycle)
    changed = False
    for i, d in enumerate(program.descriptors):
        others = list(core_tilings(d, program.config))
        if not others:
            continue
        table = job_table(program.image, program.base, d, d["jobs"])
        cycles = [descriptor_core_cycles(e, table, core).cycles for e in others]
        j = min(range(len(others)), key=cycles.__getitem__)
        if cycles[j] < prediction.descriptors[i].cycles:
            program.replace_descriptor(i, others[j])
            changed = True
    return changed


#: the largest post-op shift: the core rounds in 72 bits (a 64-bit product and offset)
MAX_POSTOP_SHIFT = 62


def multiplier_operands(grp, graph):
    """``(what, lo, hi)`` of everything the core's multipliers take in descriptor
    ``grp``: constants from its nodes, values from ``graph``'s ranges (a post-op's input
    after its pre-ReLU, a mixer's or gate's inputs and aggregate, a head's channel sums,
    an integer convolution's inputs)."""
    def span(t):
        return int(t.min()), int(t.max())

    for n in grp.nodes:
        a = n.attrs
        ins = [graph.producer(r) for r in n.inputs]
        if n.op == "postop":
            x = ins[0]
            yield "post-op scale", *span(a["A"])
            yield ("post-op input", *((max(x.lo, 0), max(x.hi, 0)) if a["pre_relu"]
                                      else (x.lo, x.hi)))
        elif n.op in ("mixer", "gate"):
            if n.op == "mixer":
                yield "lambda", *span(a["lambdas"])
            for x in ins:
                yield f"{n.op} input", x.lo, x.hi
            if a.get("gates") is not None:
                yield "gate", *span(a["gates"])
                yield "gate complement", *span((1 << a["gate_frac"]) - a["gates"])
                if n.op == "mixer":
                    yield "aggregate", *a["agg_range"]
        elif n.op == "head":
            yield "classifier weight", *span(a["weight"])
            yield "channel sum", *a["sum_range"]
        elif n.op == "int_conv":
            yield "integer weight", *span(a["weight"])
            yield "integer convolution input", ins[0].lo, ins[0].hi


def _operand_refusal(grp, graph):
    """Why the core's multipliers or rounding cannot take ``grp`` exactly, or None."""
    for n in grp.nodes:
        if n.op == "postop" and n.attrs["shift"] > MAX_POSTOP_SHIFT:
            return (f"{n.name}: a post-op shift of {n.attrs['shift']}, the core rounds "
                    f"shifts up to {MAX_POSTOP_SHIFT}")
    for what, lo, hi in multiplier_operands(grp, graph):
        bits = signed_width(lo, hi)
        if bits > MUL_BITS:
            return (f"a {what} in [{lo}, {hi}] needs {bits}-bit multiplier operands, the "
                    f"core's are {MUL_BITS}-bit")
    return None


def check_program(program, core):
    """Raise ``ValueError`` naming the first descriptor of ``program`` that ``core``
    would refuse (its ``unsupported`` error at run time), among them one whose
    multiplier operands (:func:`multiplier_operands`) need more than ``MUL_BITS``."""
    if tap_aligned_weights(program.header):
        raise ValueError("the program's binary weights are tap-aligned (the intended "
                         "engine's order); the core reads the flat window's folds")
    config = core_config(core)
    for d, grp in zip(program.descriptors, program.groups):
        why = _unsupported(d, core)
        if why is None:
            why = _operand_refusal(grp, program.graph)
        if why is None and d["opcode"] != OPCODE_CODES["INPUT"]:
            need = scratchpad_need(d, config)
            if need.bytes > core["buffer_bytes"]:
                why = (f"needs {need.bytes} bytes of scratchpad, the core has "
                       f"{core['buffer_bytes']}")
        if why:
            raise ValueError(f"descriptor {d['index']} ({grp.nodes[0].name}): {why}")
