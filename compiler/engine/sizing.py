"""Engine resource estimates: the *intended* engine (:func:`estimate`, :func:`size_engine`)
and the engine *as built* (:func:`estimate_core`).

Two models, for two different engines:

- :func:`estimate` and :func:`size_engine` size the engine the cycle model assumes
  (``arrays`` XNOR arrays side by side, vector lanes, overlapped transfers:
  :class:`~.config.EngineConfig`). That engine is being built unit by unit
  (docs/architecture.md section 15): its units that exist are measured, joined as
  ``UnitEngine`` at three sizes (Yosys's Cyclone V counts,
  ``benchmarks/engine_units.py``); the units not built yet are a guess.
  ``benchmarks/engine.py`` and the layout tests use it.
- :func:`estimate_core` estimates :class:`~groupnet_hw.hw.engine.core.EngineCore`, the
  RTL that exists (one ``pe x simd`` array, the scalar datapath, one scratchpad, the
  DMAs and the register file), from the keyword arguments a build elaborates it with.
  Its per-unit costs are fitted to Yosys's Cyclone V counts of the core at thirteen sizes
  (``benchmarks/engine_resources.py``, ``benchmarks/results/engine_resources.json``);
  its block RAMs are counted memory by memory as Yosys maps them (:func:`core_memories`,
  :func:`yosys_m10k_blocks`). See :func:`estimate_core` for the model and its errors.

The intended engine's model, per unit, in the board family's logic cells (Cyclone V
ALMs; LUT4-based families count two LUT4s per ALM), block-RAM bits and multipliers:

- an XNOR lane with its share of its PE's accumulators: measured, ``BaseArrays`` (one
  array of 16 x 48 lanes and five: the per-lane figure of their difference);
- a vector lane: measured for its post-op, residual add, ReLU and one threshold
  (``EpilogueLanes``, 16 lanes: one multiplier, an 18-bit scale times a sum) and its
  mixer lane (``MixerLanes``, 16 lanes: four, a lambda's and a gate's product in two
  pieces each, the shifts wiring at the lanes' own fraction); the head's lanes (its
  logic measured with the rest of the units, below; its products on the mixer lanes'
  multipliers), max pooling and the threshold lanes behind the mixer (fusion rule 7)
  are not in the figure;
- an array beyond its lanes, and what does not grow with the arrays: measured, the
  engine of the units (``UnitEngine``: register file, sequencer, DMAs and the port
  the stem runner shares them through, the stem runner, the classifier head, the
  runner with its layer datapath, loaders, packers, unpacker and writer; built without
  the subsampler) at one array of 16 x 48 lanes and at five
  of 16 x 64, less their XNOR and vector lanes and the stem's array; five arrays of 16
  x 32 check the fit (``tests/test_engine_units.py`` holds the three within 5 %);
- the subsampler (option-A shortcuts), where a network needs it: 660 ALMs, measured;
- the stem: ``stem_pe * stem_simd`` 9x9 multipliers (three per Cyclone V DSP block),
  and the adder trees and accumulators of its array: 23 ALMs a multiplier, measured
  (``StemArray``, 16 x 9); the rest of the stem runner is in the engine of the units;
- DSP blocks: the vector lanes' (epilogue and mixer lanes: the classifier head borrows
  the mixer's) and the rest of the engine of the units', measured;
- tile buffers: their bytes in block RAM at 1,024 usable bytes per 10-kbit block
  (32-bit-wide M10K ports assembled to the port width).

Measured so, 5 x 16 x 64 takes 105 % of the DE10-Nano's ALMs: the DE10-Nano holds the
ladder's second rung, 5 arrays x 16 PE x 32 SIMD with 8 vector lanes and a 16 x 6 stem
(88.4 % of its ALMs by the estimate; the narrow engine's 16 x 9 stem: 94.6 % by Yosys's
count, 4.0 % over its estimate), with the subsampler too (89.9 %). K = 5 bases run in
one round, and SIMD 32 divides every channel count of the paper's networks (the window
gatherer gives a tap's channels words of their own).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...devices import get_board
from ...engine_format import accumulator_channels, core_paths, pair_table_bits, window_words
from .config import EngineConfig

__all__ = ["SizedEngine", "size_engine", "estimate", "CANDIDATES", "estimate_core",
           "core_features", "core_memories", "core_paths_of", "yosys_m10k_blocks",
           "full_core_params", "CORE_DEFAULTS"]

#: (arrays, pe, simd), most preferred first. ``simd`` divides the paper's channel
#: counts (64 to 512): the window gatherer gives each tap's channels words of their
#: own, so 64 channels on 48 lanes would take two words of which a third is idle.
#: PE rows of at least 8: the units' vector lanes are 8 (a beat starts on a byte) and
#: divide PE.
CANDIDATES = ((5, 16, 64), (5, 16, 32), (5, 16, 16), (4, 16, 32), (3, 16, 32), (2, 16, 32),
              (2, 8, 32), (1, 8, 32), (1, 8, 16))
#: Measured (``benchmarks/results/engine_units.json``; ``tests/test_engine_units.py``
#: keeps them equal to the records): ALMs an XNOR lane with its accumulators, and ALMs
#: and DSP blocks a vector lane: an epilogue lane and a mixer lane (the mixer writes
#: most of a Group-Net's maps, fusion rules 5 and 7).
_ALM_PER_LANE = 2.27
_ALM_PER_VECTOR_LANE, _DSP_PER_VECTOR_LANE = 272, 1
_ALM_PER_MIXER_LANE, _DSP_PER_MIXER_LANE = 304, 4
#: Measured: the engine of the units' DSP blocks beside its vector lanes' and the stem's
#: multipliers (the same at all three sizes: the DMAs', the runner's, the head's and the
#: stem runner's post-op lane's own).
_DSP_FIXED = 11
#: Vector lanes the sizing keeps when the logic does not fit: the units' packers take
#: beats of a multiple of 8 lanes that divides PE, so that every beat starts on a byte
#: (``hw/engine/packer.py``).
_MIN_VECTOR_LANES = 8
#: Measured: the engine of the units (``UnitEngine``: register file, sequencer, DMAs,
#: the stem runner, the classifier head and the convolution runner with its layer
#: datapath, loaders, lanes, packers, unpacker and writer) at one array of 16 x 48 lanes
#: and at five of 16 x 64 (``unit-engine-one``, ``unit-engine-intended``), less the XNOR
#: and vector lanes and the stem's array above: what an array adds beyond its lanes
#: (its slice of the gatherer's ring, its fold issuer, its job's share of the feeder,
#: packers, unpacker and writer) and what does not grow with the arrays. A third size,
#: five arrays of 16 x 32 (``unit-engine-narrow``), checks the fit.
_ALM_PER_ARRAY = 786
_ALM_FIXED = 20477
#: Measured (``subsample``): the subsampler (option-A shortcuts' SUBSAMPLE
#: descriptors), in the three engines' counts above; an engine for a network without
#: option-A shortcuts is built without it.
_ALM_SUBSAMPLER = 660
#: The fewest stem lanes the sizing shrinks the stem to where frames are in flight:
#: the next frame's stem then runs beside this frame's rest, so past what it takes to
#: stay behind the rest its multipliers buy nothing (ResNet-18 at 224x224: 1.25 M
#: cycles on 16 x 6 against a rest of 4.3 M on 5 x 16 x 32).
_HIDDEN_STEM_SIMD = 6
#: Vector lanes the sizing keeps before it takes the stem's multipliers: a 3x3 layer of
#: 64 channels gives 5 arrays' 80 sums every 9 cycles, 10 beats of 8 lanes (1 % of
#: ResNet-18's frame against 16 lanes; 4 lanes would double its first stage).
_KEPT_VECTOR_LANES = 8
#: Measured (``stem-intended``): ALMs of the stem array a multiplier (its products'
#: adder trees, accumulators and output; the multipliers are DSP blocks).
_ALM_PER_STEM_MULT = 23
_BRAM_BYTES_PER_BLOCK = 1024
_MULTS_PER_DSP = {"cyclonev": 3}


@dataclass(frozen=True)
class SizedEngine:
    """A configuration and its estimate against a board's budget."""

    config: EngineConfig
    estimate: dict
    limits: dict
    utilisation: dict
    fits: bool


def estimate(config, family="cyclonev", subsampler=False):
    """``{"logic", "ram_bits", "dsp"}`` of an engine (module docstring's model), with
    the subsampler if ``subsampler``."""
    alms = (config.lanes * _ALM_PER_LANE + config.arrays * _ALM_PER_ARRAY
            + config.vector_lanes * (_ALM_PER_VECTOR_LANE + _ALM_PER_MIXER_LANE) + _ALM_FIXED
            + config.stem_pe * config.stem_simd * _ALM_PER_STEM_MULT
            + (_ALM_SUBSAMPLER if subsampler else 0))
    logic = alms if family == "cyclonev" else 2 * alms
    buffers = config.input_buffer + config.output_buffer + config.arrays * config.weight_buffer
    blocks = -(-buffers // _BRAM_BYTES_PER_BLOCK)
    mults = config.stem_pe * config.stem_simd
    dsp = (-(-mults // _MULTS_PER_DSP.get(family, 1)) + _DSP_FIXED
           + config.vector_lanes * (_DSP_PER_VECTOR_LANE + _DSP_PER_MIXER_LANE))
    return dict(logic=int(logic), ram_bits=blocks * _BRAM_BYTES_PER_BLOCK * 8, dsp=dsp)


def budget_limits(budget):
    """``{"logic", "ram_bits", "dsp"}`` limits of a board's budget
    (:meth:`~groupnet_hw.devices.Board.budget`), in :func:`estimate`'s units."""
    lim = budget["limits"]
    return dict(logic=lim.get("alm", lim.get("lut")), ram_bits=budget["ram_bits"], dsp=lim["dsp"])


def size_engine(board="de10nano", max_util=0.9, clock_mhz=100.0, bases=None,
                subsampler=False):
    """The first candidate of :data:`CANDIDATES` that fits ``max_util`` of the board,
    for a network of ``bases`` bases a block (as many arrays, or the most a candidate
    has: the runner mixes a block's bases one an array, so fewer could not mix them and
    more would idle), with the subsampler if ``subsampler`` (a network with option-A
    shortcuts).

    Buffers shrink (halving, down to 2 KiB each) before the arrays do. Over the logic
    budget, with frames in flight (the stem hidden behind the rest of the frame before),
    the stem's lanes go first, three at a time down to :data:`_HIDDEN_STEM_SIMD`; then
    the vector lanes halve down to :data:`_MIN_VECTOR_LANES` before the next
    candidate is tried (ResNet-18 K=5 at 224x224 on the DE10-Nano: 5 x 16 x 64 takes
    104 % of its ALMs, so 5 x 16 x 32 with 8 lanes; with the subsampler too, 5 x 16 x
    16). Over the DSP budget the vector lanes go first down to
    :data:`_KEPT_VECTOR_LANES`, then the stem's multipliers (three at a time: a Cyclone
    V DSP block's three 9x9 products), then its PE rows.

    Returns
    -------
    SizedEngine
        The fitting configuration, or the smallest candidate with ``fits=False``.
    """
    budget = get_board(board).budget()
    family, limits = budget["family"], budget_limits(budget)
    tried = None
    most = max(a for a, _, _ in CANDIDATES)
    for arrays, pe, simd in CANDIDATES:
        if bases and arrays != min(bases, most):
            continue
        cfg = EngineConfig(arrays=arrays, pe=pe, simd=simd, clock_mhz=clock_mhz)
        stem_pe, stem_simd, vector = cfg.stem_pe, cfg.stem_simd, cfg.vector_lanes
        while True:
            est = estimate(cfg, family, subsampler)
            util = {k: est[k] / limits[k] for k in est}
            tried = SizedEngine(cfg, est, limits, util, all(v <= max_util for v in util.values()))
            if tried.fits:
                return tried
            if util["ram_bits"] > max_util and cfg.input_buffer > 2048:
                cfg = replace(cfg, input_buffer=cfg.input_buffer // 2,
                              output_buffer=cfg.output_buffer // 2,
                              weight_buffer=max(256, cfg.weight_buffer // 2))
            elif (util["logic"] > max_util and cfg.frames_in_flight
                  and stem_simd > _HIDDEN_STEM_SIMD):
                stem_simd -= 3
                cfg = replace(cfg, stem_simd=stem_simd)
            elif util["logic"] > max_util and vector > _MIN_VECTOR_LANES:
                vector //= 2
                cfg = replace(cfg, vector_lanes=vector)
            elif util["dsp"] > max_util and (vector > _KEPT_VECTOR_LANES or stem_simd > 3
                                             or stem_pe > 1):
                if vector > _KEPT_VECTOR_LANES:
                    vector //= 2
                elif stem_simd > 3:
                    stem_simd -= 3
                else:
                    stem_pe //= 2
                cfg = replace(cfg, stem_pe=stem_pe, stem_simd=stem_simd, vector_lanes=vector)
            else:
                break
    return tried


# ---------------------------------------------------------------- the core as built

#: :class:`~groupnet_hw.hw.engine.core.EngineCore`'s keyword defaults (the sizing's and
#: the cycle model's; ``buffer_depth`` None: the DMAs' own defaults).
CORE_DEFAULTS = dict(data_width=128, pe=4, simd=8, stem_pe=16, stem_simd=12,
                     buffer_bytes=32768, max_jobs=8, max_window=4608, max_out_c=512,
                     max_burst=16, max_outstanding=4, buffer_depth=None, planes=4)

#: Cyclone V ALUTs per unit of each :func:`core_features` feature, fitted (non-negative
#: least squares, relative errors) to Yosys's counts of ``benchmarks/engine_resources.py``
#: (``python3 benchmarks/engine_resources.py --fit`` prints them) at the thirteen sizes
#: of one RTL (each record's ``verilog_sha256`` in the JSON), within 1.2 % of each; each
#: size left out of the fit is predicted by the others within 2.2 % (``small-buf256k``
#: -2.1 %, ``small`` +1.6 %). Lanes, PE rows and SIMD lanes vary together in the
#: thirteen sizes, so their split is loose.
_CORE_ALUTS = {"one": 22764.61, "lanes": 16.927, "plane_lanes": 6.056, "pe": 13.861,
               "simd": 17.935, "word_bits": 62.64, "job_bits": 8.068, "mux_bits": 3.085,
               "stem_lanes": 198.956}
#: DSP blocks of the scalar datapath (its products of 32-bit operands and the address
#: arithmetic's per-descriptor products), set by the RTL rather than by any kwarg:
#: Cyclone V MISTRAL_MUL* 76-81 over the nine sizes without the stem's array (its
#: second channel adds ``stem_simd``: 84 with 8 lanes, 95-96 with 16; the
#: output writer's gate multiplier runs beside the post-op's, so Yosys shares it with
#: no other); ECP5 MULT18X18D measured once (``ecp5_pnr``); iCE40 not measured (ECP5's
#: count: the UP5K's 8 SB_MAC16 could not hold the core anyway).
_CORE_DSP = {"cyclonev": 80, "ecp5": 107, "ice40": 107}
#: LUT4 sites (LUT4 + 2 per CCU2C carry + 6 per DPR16X4) per Cyclone V ALUT: the ECP5
#: synthesis of ``small`` (49,413 sites, ``ecp5_pnr``) over the Cyclone V count of the
#: same RTL (34,161 ALUTs); applied to iCE40 too.
_LUT4_PER_ALUT = 1.45


def full_core_params(core_params=None, **overrides):
    """Every sizing kwarg of an :class:`~groupnet_hw.hw.engine.core.EngineCore`: the given
    ones over the core's defaults (:data:`CORE_DEFAULTS`)."""
    params = {**CORE_DEFAULTS, **(core_params or {}), **overrides}
    unknown = set(params) - set(CORE_DEFAULTS) - {"addr_width"}
    if unknown:
        raise ValueError(f"unknown EngineCore kwarg(s): {', '.join(sorted(unknown))}")
    return params


def core_paths_of(core_params):
    """:func:`~groupnet_hw.engine_format.core_paths` of an EngineCore's kwargs (missing
    ones take the core's defaults)."""
    p = full_core_params(core_params)
    return core_paths(p["data_width"], p["pe"], p["simd"], p["stem_pe"], p["stem_simd"],
                      p["planes"])


def core_memories(core_params):
    """``{name: (words, width)}``: the memories of an EngineCore as elaborated
    (``hw/engine/core.py``, ``dma.py``): the scratchpad (a bus word wide, in ``banks``
    banks of one block RAM per byte lane), the array's
    window buffer (``ceil(max_window / simd)`` words of ``planes`` bit planes x ``simd``,
    or of the stem's ``stem_simd`` bytes when wider; with window pairs words of two
    folds, in two memories of half a word each), the
    accumulator buffer (``max_jobs x max_out_c`` 32-bit sums, ``pe`` to a word, with
    ``max_out_c`` rounded as the core rounds it), the post-op pair table (``max_jobs x
    max_out_c`` pairs of 32-bit constants) and the two DMAs' block-RAM FIFOs
    (a :class:`~amaranth.lib.fifo.SyncFIFOBuffered` keeps ``depth - 1`` rows in memory).
    Keyword arguments ``core_params`` does not give take the core's defaults.
    """
    p = full_core_params(core_params)
    w, pe, simd = p["data_width"], p["pe"], p["simd"]
    paths = core_paths_of(p)
    banks, vector = paths["banks"], paths["vector"]
    maxc = accumulator_channels(p["max_out_c"], pe)
    folds = max(maxc >> (pe.bit_length() - 1 if vector else 0), 1)
    burst = p.get("max_burst", 16)
    rd_depth = p.get("buffer_depth") or 4 * burst
    words = p["buffer_bytes"] // (w // 8)
    # a bank is a block RAM per byte lane (the writer's byte enables)
    pad = {f"scratchpad{b}_{lane}": (words // banks, 8)
           for b in range(banks) for lane in range(w // 8)}
    # with window pairs the window buffer is two memories, a half word each
    fold_words = window_words(p["max_window"], simd)
    window = ({"window_lo": (fold_words, paths["window_bits"] // 2),
               "window_hi": (fold_words, paths["window_bits"] // 2)}
              if paths["window_pairs"] else {"window": (fold_words, paths["window_bits"])})
    return {**pad, **window,
            "accumulators": (p["max_jobs"] * folds, 32 * pe),
            "pairs": (p["max_jobs"] << pair_table_bits(p["max_out_c"]), 64),
            "read_fifo": (rd_depth - 1, w),
            "write_fifo": (2 * burst - 1, w)}


#: Yosys's M10K aspect ratios (``share/intel_alm/common/bram_m10k.txt``): (width, depth).
_M10K_MODES = ((1, 8192), (2, 4096), (5, 2048), (10, 1024), (20, 512), (40, 256))


def yosys_m10k_blocks(words, width):
    """``(blocks, blocks in the address direction)`` of one memory (one read, one write
    port) as Yosys's ``memory_bram`` maps it to Cyclone V M10K, or ``(0, 0)`` when it stays
    in logic.

    ``memory_bram`` keeps the aspect ratio of best *nominal* efficiency (the memory's bits
    over the blocks' ``width x depth`` in that ratio, in whole per cent, at least 5),
    then fewest blocks, then fewest in the address direction. The 8192 x 1 and 4096 x 2
    ratios count 8 kbit a block, so a power-of-two scratchpad of 8,192 words or more
    takes one block per bit and 8,192 words (1 Mbit in 128 blocks), not the 104 blocks
    that 1024 x 10 would take: 20 % more than its bits need. Quartus would pack better;
    this is Yosys's count.
    """
    best = None
    for mw, md in _M10K_MODES:
        across, down = -(-width // mw), -(-words // md)
        cells = across * down
        efficiency = 100 * words * width // (cells * mw * md)
        if efficiency < 5:
            continue
        key = (efficiency, -cells, -down)
        if best is None or key > best[0]:
            best = (key, cells, down)
    return (0, 0) if best is None else best[1:]


def core_features(core_params):
    """Structural features of an EngineCore (:func:`estimate_core`'s model):

    - ``one``: the fixed part: the compute sequencer's state machine and descriptor
      register, the 64-bit scalar datapath (element reader, products, epilogue), the
      DMAs' and register file's control;
    - ``lanes``: ``pe x simd`` XNOR lanes of the array (a lane's first bit plane: its
      AND or XNOR and its share of a popcount), zero when the packing does not divide
      the bus word (binary convolutions then run on the scalar path);
    - ``plane_lanes``: ``lanes x (planes - 1)``: the other bit planes' popcounts;
    - ``pe``: per PE the 32-bit accumulate, the bit planes' shifted sums and the
      accumulator buffer's lane select;
    - ``simd``: the window gather (``planes x simd`` bits shifted into place) and the
      lane mask;
    - ``word_bits``: ``data_width``: the element reader's shifter, the output merge, the
      weight-fold select, the DMA FIFOs' and the descriptor's word paths;
    - ``job_bits``: 64 bits per ``max_jobs`` result register and its select;
    - ``mux_bits``: per memory, ``width x (blocks in the address direction - 1)``: the
      read multiplexer behind a memory deeper than one block;
    - ``stem_lanes``: when the core elaborates the stem's multiplier array, its lanes
      whose products are shifted adds in logic: ``stem_simd`` per output channel it
      takes a cycle but the second (DSP blocks), each with its byte gather and adder
      tree; at the sizes measured the banked scratchpad's word select comes with it
      (the build's engines have all of them).

    Keyword arguments ``core_params`` does not give take the core's defaults.
    """
    p = full_core_params(core_params)
    paths = core_paths_of(p)
    vector = paths["vector"]
    mux = sum(width * (yosys_m10k_blocks(words, width)[1] - 1)
              for words, width in core_memories(p).values())
    lanes = p["pe"] * p["simd"] if vector else 0
    return {"one": 1.0, "lanes": float(lanes), "plane_lanes": float(lanes * (p["planes"] - 1)),
            "pe": float(p["pe"]), "simd": float(p["simd"]),
            "word_bits": float(p["data_width"]), "job_bits": 64.0 * p["max_jobs"],
            "mux_bits": float(mux),
            "stem_lanes": float(p["stem_simd"] * max(1, paths["stem_channels"] - 1)
                                if paths["stem_vector"] else 0)}


def _core_ram_blocks(core_params, family):
    """Block RAMs of the core's memories on ``family``: Yosys's M10K choice on Cyclone V
    (:func:`yosys_m10k_blocks`), else the family's best aspect ratio
    (:func:`~groupnet_hw.compiler.hard_blocks.rom_blocks`; not checked against Yosys)."""
    from ..hard_blocks import rom_blocks
    blocks = 0
    for words, width in core_memories(core_params).values():
        if family == "cyclonev":
            blocks += yosys_m10k_blocks(words, width)[0]
        else:
            blocks += rom_blocks(words, width, family)
    return blocks


def estimate_core(core_params: dict, family: str = "cyclonev") -> dict:
    """``{"logic", "ram_bits", "dsp"}`` of :class:`~groupnet_hw.hw.engine.core.EngineCore`
    built with ``core_params`` (its kwargs; missing ones take the core's defaults) on a
    board of ``family``, in the units of :func:`estimate` and of the board budgets
    (``size_engine``'s limits): ``logic`` in Cyclone V ALMs (Yosys's ALUTs / 1.6, the
    family's :attr:`~groupnet_hw.devices.Family.aluts_per_alm`) or LUT4 sites on ECP5
    and iCE40; ``ram_bits`` the block RAMs' whole bits (10,240 per M10K); ``dsp``
    multiplier blocks.

    Logic is ``sum(coefficient x feature)`` over :func:`core_features`, coefficients
    fitted to Yosys's Cyclone V counts; block RAM is counted memory by memory
    (:func:`core_memories`) as Yosys maps it; the DSP blocks are the scalar datapath's,
    the same at every size. ECP5 and iCE40 logic is the Cyclone V ALUT count times one
    ratio measured on one ECP5 synthesis; their block RAM is the family's best aspect
    ratio per memory (ECP5 ``small``: 55 DP16KD estimated, 51 measured, its write FIFO
    being LUT RAM there).

    Against Yosys at the thirteen recorded sizes (``engine_resources.json``): logic
    within 1.2 %, each size left out of the fit and predicted by the others within
    2.2 %; M10K exact; DSP within 4 blocks.
    """
    from ...devices import get_family
    p = full_core_params(core_params)
    feats = core_features(p)
    aluts = sum(_CORE_ALUTS.get(name, 0.0) * v for name, v in feats.items())
    fam = get_family(family)
    if fam.aluts_per_alm:
        logic = aluts / fam.aluts_per_alm
    else:
        logic = aluts * _LUT4_PER_ALUT
    blocks = _core_ram_blocks(p, family)
    paths = core_paths_of(p)
    # the stem's second channel multiplies in DSP blocks, one a lane
    stem_dsp = p["stem_simd"] if paths["stem_channels"] > 1 else 0
    return dict(logic=int(round(logic)), ram_bits=blocks * fam.bram_bits,
                dsp=_CORE_DSP.get(family, _CORE_DSP["ecp5"]) + stem_dsp)
