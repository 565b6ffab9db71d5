"""An engine configuration for a board budget (a first, uncalibrated resource model).

The estimate is per unit, in the board family's logic cells (Cyclone V ALMs; LUT4-based
families count two LUT4s per ALM), block-RAM bits and multipliers:

- an XNOR lane: 0.75 ALM (the XNOR and its share of the popcount compressor tree);
- a PE: 60 ALMs (accumulator, threshold compare, epilogue registers);
- an array: 300 ALMs (window, weight-buffer addressing, control);
- a vector lane (post-op, add, mixer, pooling, head): 120 ALMs and one multiplier;
- the stem: ``stem_pe * stem_simd`` 9x9 multipliers (three per Cyclone V DSP block);
- fixed: 4,000 ALMs for the Avalon-MM DMA, the sequencer, the control and status
  registers and the head's control;
- tile buffers: their bytes in block RAM at 1,024 usable bytes per 10-kbit block
  (32-bit-wide M10K ports assembled to the port width).

These per-unit costs are rough engineering estimates, NOT yet calibrated against
Yosys or Quartus for the engine (the dataflow back end's model is; the engine's RTL
does not exist yet). The ladder of candidates tops out at 5 arrays x 16 PE x 48 SIMD:
K = 5 bases run in one round, and the cycle model already predicts ResNet-18 K=5 to be
DRAM-bound on the DE10-Nano at that size, so more lanes would buy nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...devices import get_board
from .config import EngineConfig

__all__ = ["SizedEngine", "size_engine", "estimate", "CANDIDATES"]

#: (arrays, pe, simd), most preferred first
CANDIDATES = ((5, 16, 48), (5, 16, 32), (4, 16, 32), (3, 16, 32), (2, 16, 32), (2, 8, 32),
              (1, 8, 32), (1, 8, 16), (1, 4, 16), (1, 4, 8))
_ALM_PER_LANE, _ALM_PER_PE, _ALM_PER_ARRAY = 0.75, 60, 300
_ALM_PER_VECTOR_LANE, _ALM_FIXED = 120, 4000
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


def estimate(config, family="cyclonev"):
    """``{"logic", "ram_bits", "dsp"}`` of an engine (module docstring's model)."""
    alms = (config.lanes * _ALM_PER_LANE + config.arrays * config.pe * _ALM_PER_PE
            + config.arrays * _ALM_PER_ARRAY + config.vector_lanes * _ALM_PER_VECTOR_LANE
            + _ALM_FIXED)
    logic = alms if family == "cyclonev" else 2 * alms
    buffers = config.input_buffer + config.output_buffer + config.arrays * config.weight_buffer
    blocks = -(-buffers // _BRAM_BYTES_PER_BLOCK)
    mults = config.stem_pe * config.stem_simd
    dsp = -(-mults // _MULTS_PER_DSP.get(family, 1)) + config.vector_lanes
    return dict(logic=int(logic), ram_bits=blocks * _BRAM_BYTES_PER_BLOCK * 8, dsp=dsp)


def _limits(budget):
    lim = budget["limits"]
    return dict(logic=lim.get("alm", lim.get("lut")), ram_bits=budget["ram_bits"], dsp=lim["dsp"])


def size_engine(board="de10nano", max_util=0.9, clock_mhz=100.0):
    """The first candidate of :data:`CANDIDATES` that fits ``max_util`` of the board.

    Buffers shrink (halving, down to 2 KiB each) before the arrays do.

    Returns
    -------
    SizedEngine
        The fitting configuration, or the smallest candidate with ``fits=False``.
    """
    budget = get_board(board).budget()
    family, limits = budget["family"], _limits(budget)
    tried = None
    for arrays, pe, simd in CANDIDATES:
        cfg = EngineConfig(arrays=arrays, pe=pe, simd=simd, clock_mhz=clock_mhz)
        stem_pe, stem_simd, vector = cfg.stem_pe, cfg.stem_simd, cfg.vector_lanes
        while True:
            est = estimate(cfg, family)
            util = {k: est[k] / limits[k] for k in est}
            tried = SizedEngine(cfg, est, limits, util, all(v <= max_util for v in util.values()))
            if tried.fits:
                return tried
            if util["ram_bits"] > max_util and cfg.input_buffer > 2048:
                cfg = replace(cfg, input_buffer=cfg.input_buffer // 2,
                              output_buffer=cfg.output_buffer // 2,
                              weight_buffer=max(256, cfg.weight_buffer // 2))
            elif util["dsp"] > max_util and stem_pe * stem_simd > 4:
                stem_simd, vector = max(1, stem_simd // 2), max(1, vector // 2)
                stem_pe = stem_pe // 2 if stem_simd == 1 else stem_pe
                cfg = replace(cfg, stem_pe=max(1, stem_pe), stem_simd=stem_simd, vector_lanes=vector)
            else:
                break
    return tried
