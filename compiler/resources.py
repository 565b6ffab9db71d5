"""Resource model, calibrated against Yosys per device family.

Every op describes its hardware by a few structural *features* (``Op.resource_features``:
bits of line buffer, XNOR lanes, accumulator bits, shift-add adder bits, multipliers,
register bits, ...), computed from the node and its folding. The count of each cell
type Yosys reports for that op's unit(s) is modelled as a non-negative combination
of those features, with one coefficient vector per (family, op, cell type). The
coefficients live in ``resource_model.json`` beside this module; they are fitted by
``benchmarks/calibrate_resources.py`` from per-module synthesis (``-noflatten``) of a
sweep of generated designs, and the test suite holds every unit's estimate of that
sweep within 15 % of Yosys's count (docs/architecture.md section 6).

Cell types per family (what :mod:`groupnet_hw.toolchain.synth` counts):

- ``ecp5``: ``lut`` (LUT4), ``carry`` (CCU2C, two LUT4 sites each), ``ff``, ``lutram``
  (TRELLIS_DPR16X4), ``bram`` (DP16KD), ``dsp`` (MULT18X18D);
- ``ice40``: ``lut`` (SB_LUT4), ``carry`` (SB_CARRY, inside a LUT site), ``ff``, ``bram``
  (SB_RAM40_4K), ``dsp`` (SB_MAC16);
- ``cyclonev``: ``lut`` (ALUTs, arithmetic ones included), ``ff``, ``lutram`` (MLAB),
  ``bram`` (M10K), ``dsp``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from ..devices import FAMILIES as DEVICE_FAMILIES
from .graph import Graph
# the family's block RAM and DSP rules, re-exported: the model counts cells by them
from .hard_blocks import (BRAM_MIN_FILL, BRAM_MODES, BRAM_ROM_COST, LATE_BLOCK_READ,
                          LATE_DSP_OUTPUT, LUT_ROM_MAX_DEPTH, block_ram_blocks, rom_blocks,
                          rom_in_block_ram, rom_read_register)
from .ops import op_of

__all__ = ["FAMILIES", "CELLS", "MODEL_FILE", "load_model", "estimate_unit", "family_features",
           "rom_blocks", "rom_in_block_ram", "rom_read_register", "LUT_ROM_MAX_DEPTH",
           "BRAM_ROM_COST", "LATE_BLOCK_READ", "fifo_memory", "fifo_in_block_ram", "block_ram_blocks", "BRAM_MIN_FILL",
           "COUNTED_CELLS", "FIXED_COEFFICIENTS",
           "logic_sites", "fit_unit_model"]

#: The families the model is calibrated for (:data:`groupnet_hw.devices.FAMILIES`).
FAMILIES = tuple(DEVICE_FAMILIES)
CELLS = ("lut", "carry", "ff", "lutram", "bram", "dsp")
#: Package data (pyproject.toml ``package-data``): installed beside this module.
MODEL_FILE = files(__package__) / "resource_model.json"


@lru_cache(maxsize=None)
def load_model(path=MODEL_FILE):
    """``{family: {op: {cell: {feature: coefficient}}}}`` from the calibration file."""
    return json.loads(Path(path).read_text())["coefficients"]


#: Features that are cell counts themselves, not fitted (:func:`family_features`):
#: feature -> the cell type it counts.
COUNTED_CELLS = {"rom_blocks": "bram", "line_blocks": "bram", "fifo_blocks": "bram",
                 "fifo_lutram": "lutram"}


def family_features(features: dict, family: str) -> dict:
    """The features the family's model counts: a weight ROM (``rom_depth`` x
    ``rom_width``) that Yosys puts in block RAM (:func:`rom_in_block_ram`) is ``rom_blocks`` block RAMs
    instead of ``weight_bits`` of LUT ROM; a block-RAM line buffer (``line_copies``
    memories of ``line_depth`` x ``line_width``) is ``line_blocks`` block RAMs; a FIFO's
    memory is block RAM or registers as the family maps it."""
    f = dict(features)
    depth, width = f.pop("rom_depth", 0), f.pop("rom_width", 0)
    if depth and rom_in_block_ram(depth, width, family):
        f["weight_bits"] = 0
        f["rom_blocks"] = rom_blocks(depth, width, family)
    # an MVU's threshold ROM (``act_rom_*``) is mapped by the same rule as its weights'
    depth, width = f.pop("act_rom_depth", 0), f.pop("act_rom_width", 0)
    if depth and rom_in_block_ram(depth, width, family):
        f["rom_blocks"] = f.get("rom_blocks", 0) + rom_blocks(depth, width, family)
    elif depth:
        f["weight_bits"] = f.get("weight_bits", 0) + depth * width
    if "fifo_rows" in f:
        f.update(fifo_memory(f.pop("fifo_rows"), f.pop("fifo_width"), family,
                             bool(f.pop("fifo_marked", 0))))
        if f.get("block_fifo"):
            # a block-RAM FIFO's data path (the block's read data and the output
            # register, with its bypass) is not a register FIFO's output register
            f["block_width"] = f.pop("width")
    copies = f.pop("line_copies", 0)
    depth, width = f.pop("line_depth", 0), f.pop("line_width", 0)
    if copies:
        blocks = block_ram_blocks(depth, width, family)
        if blocks is None:
            # scheduled for another family: here Yosys builds each copy in logic
            f["line_bits"] = copies * depth * width
            f["tap_mux_bits"] = f.pop("block_mux_bits", 0)
        else:
            f["line_blocks"] = copies * blocks
    return f


def estimate_unit(features: dict, op: str, family: str, model=None) -> dict:
    """Cell counts of one unit: ``{cell: count}`` (rounded to the nearest: rounding
    up would add a block RAM to every unit with a fractional estimate). Deep weight
    ROMs, block-RAM line buffers and FIFO memories count their cells exactly
    (:data:`COUNTED_CELLS`, :func:`family_features`)."""
    model = model or load_model()
    per_cell = model.get(family, {}).get(op, {})
    features = family_features(features, family)
    counted = {name: features.pop(name) for name in COUNTED_CELLS if name in features}
    out = {}
    for cell in CELLS:
        # a fixed coefficient holds until a calibration writes it into the model
        coefs = {**FIXED_COEFFICIENTS.get((op, cell), {}), **per_cell.get(cell, {})}
        value = sum(coefs.get(name, 0.0) * v for name, v in features.items())
        out[cell] = int(round(value)) if value > 0 else 0
    for name, n in counted.items():
        out[COUNTED_CELLS[name]] += n
    return out


def logic_sites(cells: dict, family: str) -> int:
    """LUT sites a set of cells occupies: what a device's LUT count budgets.

    An ECP5 CCU2C takes two LUT4 sites; a TRELLIS_DPR16X4 takes six (four LUTs as RAM
    and two for its write port: nextpnr's utilisation report of a placed design); iCE40
    carries sit in the LUT they follow; Cyclone V arithmetic ALUTs are already in ``lut``.
    """
    if family == "ecp5":
        return cells.get("lut", 0) + 2 * cells.get("carry", 0) + 6 * cells.get("lutram", 0)
    if family == "cyclonev":
        # An MLAB is a LAB of 10 ALMs (20 ALUT sites) turned into memory.
        return cells.get("lut", 0) + 20 * cells.get("lutram", 0)
    return cells.get("lut", 0)


#: Coefficients known from the hardware rather than fitted, ``{(op, cell): {feature:
#: coefficient}}``: an MVU's output and collect registers are one flip-flop per bit.
#: Small sweep units cannot separate them from the unit's other registers (the fit put
#: them on its constant and its tap registers), and a fully connected layer folded to
#: one PE, whose collect and output registers are nearly all its flip-flops, then came
#: out at half its count (FINN's CNV: 5,906 against Yosys's 11,386). So are the window
#: registers and the MVU's input buffer: a window's taps (``tap_bits``, or a serial
#: window's ``serial_tap_bits``), a logic line buffer's read registers (``read_bits``)
#: and the buffer (``buffer_bits``) have the same number of bits, or a fixed multiple,
#: in every sample, so no fit can tell them apart: fitted, ECP5 put 2.5 flip-flops on
#: every buffer bit and a serial window's estimate paid for read registers it has not.
#: An MVU that reads its serial window's register in place (``in_place_bits``: the issue
#: multiplexer over the window's register) has no buffer: no flip-flop. An MVU with an
#: activation registers each PE's value once (``act_level_bits``), and a post-op in it
#: multiplies in the DSP blocks its features count (``act_mults``). The skid beside an
#: output register that takes a beat every cycle (``skid_bits``, ``hw.skid``) is a
#: flip-flop per bit too, as is the fabric copy of an integer MVU's products
#: (``product_copy_bits``, :data:`LATE_DSP_OUTPUT`).
FIXED_COEFFICIENTS = {
    ("bin_conv", "ff"): {"out_bits": 1.0, "collect_bits": 1.0, "serial_tap_bits": 1.0,
                         "tap_bits": 1.0, "read_bits": 1.0, "buffer_bits": 1.0,
                         "in_place_bits": 0.0, "act_level_bits": 1.0, "skid_bits": 1.0},
    ("int_conv", "ff"): {"out_bits": 1.0, "collect_bits": 1.0, "serial_tap_bits": 1.0,
                         "tap_bits": 1.0, "read_bits": 1.0, "act_level_bits": 1.0,
                         "skid_bits": 1.0, "product_copy_bits": 1.0},
    ("mixer", "ff"): {"skid_bits": 1.0},
    # the beat pack in front of the head (a window's counts as its MVU's collect bits)
    ("head", "ff"): {"pack_bits": 1.0},
    # the register after a late block RAM read (hw.fifo's out_register)
    ("fifo", "ff"): {"out_register_bits": 1.0},
    ("bin_conv", "dsp"): {"act_mults": 1.0},
    ("int_conv", "dsp"): {"act_mults": 1.0},
    # no sweep design has a thresholded first layer (FINN's CNV has): a LUT per
    # compared bit, what Cyclone V's comparators measure (ECP5's and iCE40's half that)
    ("int_conv", "lut"): {"act_compare_bits": 1.0},
}


def fit_unit_model(samples, features_of, cells=CELLS):
    """Non-negative least squares per (op, cell) over ``samples``.

    Parameters
    ----------
    samples : list of dict
        ``{"op": str, "features": {name: value}, "cells": {cell: count}}``.
    features_of : callable(op) -> list of feature names

    Returns
    -------
    dict
        ``{op: {cell: {feature: coefficient}}}``. Relative errors are weighted
        equally (rows scaled by 1/count), so small and large units both fit.
    """
    import numpy as np
    from scipy.optimize import nnls

    by_op = {}
    for s in samples:
        by_op.setdefault(s["op"], []).append(s)
    model = {}
    for op, rows in by_op.items():
        names = features_of(op)
        X = np.array([[r["features"].get(n, 0.0) for n in names] for r in rows], dtype=float)
        model[op] = {}
        for cell in cells:
            y = np.array([r["cells"].get(cell, 0) for r in rows], dtype=float)
            if not y.any():
                continue
            fixed = FIXED_COEFFICIENTS.get((op, cell), {})
            free = [i for i, n in enumerate(names) if n not in fixed]
            known = np.array([sum(c * r["features"].get(n, 0.0) for n, c in fixed.items())
                              for r in rows], dtype=float)
            # Relative errors matter, but a 10-LUT unit must not outweigh a 10,000-LUT one.
            w = 1.0 / np.sqrt(np.maximum(y, 8.0))
            coef, _ = nnls(X[:, free] * w[:, None], (y - known) * w)
            fitted = {names[i]: round(float(c), 5) for i, c in zip(free, coef) if c > 0}
            model[op][cell] = {**fitted, **fixed}
    return model


def fifo_features(width: int, depth: int, distinct: int | None = None, ram: str = "auto") -> dict:
    """Features of a :class:`~groupnet_hw.hw.fifo.StreamFIFO` of ``width`` x ``depth``
    (its memory has ``depth - 1`` rows beside the output register); what the memory
    becomes depends on the family (:func:`fifo_memory`). ``distinct``: how many of the
    ``width`` bits are different wires (a time-shared block's input is its K bases'
    one input repeated): the memory keeps every bit, but some families merge the
    output registers of equal bits (``repeated_bits``). ``ram``: as
    :class:`~groupnet_hw.hw.fifo.StreamFIFO`'s (``"block"``: the memory marked for block
    RAM)."""
    distinct = width if distinct is None else distinct
    f = {"one": 1, "width": distinct, "repeated_bits": width - distinct,
         "fifo_rows": depth - 1, "fifo_width": width}
    if ram == "block":
        f["fifo_marked"] = 1
    return f


def stream_fifo_features(g, src, depth: int, ram: str = "auto", beats: int = 1,
                         out_register: bool = False) -> dict:
    """:func:`fifo_features` of a FIFO of ``depth`` on node ``src``'s output stream (of
    ``beats`` beats per pixel); ``out_register``: with
    :class:`~groupnet_hw.hw.fifo.StreamFIFO`'s register after the memory
    (``out_register_bits``)."""
    distinct = len(set(op_of(src).channel_sources(g, src))) * src.bit_width
    width = src.channels // beats * src.bit_width
    f = fifo_features(width, depth, -(-distinct // beats), ram)
    if out_register:
        f["out_register_bits"] = width
    return f


def fifo_in_block_ram(features: dict, family: str) -> bool:
    """Whether the FIFO of :func:`fifo_features` ``features`` has its memory in the
    family's block RAM (:func:`fifo_memory`)."""
    return "block_fifo" in family_features(features, family)


#: iCE40: FIFO memories of this many rows or more go to SB_RAM40_4K (measured: 2-4 rows
#: stay registers, 13 and more are block RAM; the boundary between is not measured).
ICE40_FIFO_BRAM_ROWS = 8


def fifo_memory(rows: int, width: int, family: str, marked: bool = False) -> dict:
    """What Yosys makes of a FIFO's ``rows`` x ``width`` memory, as features.

    ``marked`` (``ram_style = "block"``): block RAM wherever the family's block RAM takes
    a marked memory (:func:`block_ram_blocks`: ECP5 and iCE40 always, Cyclone V from a
    5 % fill); otherwise, and unmarked:

    Measured on the calibration sweep (every FIFO of 2-71 rows, 28-448 bits):

    - Cyclone V: M10K when it fills 5 % of them (:func:`block_ram_blocks`), else registers;
    - iCE40: SB_RAM40_4K from :data:`ICE40_FIFO_BRAM_ROWS` rows, else registers;
    - ECP5: distributed RAM (``ceil(width/4)`` DPR16X4 per 16 rows) or DP16KD, whichever
      Yosys's memory mapper finds cheaper: 4 per DPR16X4 plus half a unit per bit of
      the read multiplexer against 128 per DP16KD.

    Returns ``fifo_blocks`` or ``fifo_lutram`` (counted exactly) and the fitted features
    of the memory's logic (``shallow_bits``: registers; ``lutram_mux_bits``; ``block_fifo``).
    """
    blocks = rom_blocks(rows, width, family)
    if marked and block_ram_blocks(rows, width, family) is not None:
        return {"fifo_blocks": blocks, "block_fifo": 1}
    if family == "ecp5":
        groups = -(-rows // 16)
        cells = -(-width // 4) * groups
        if 4 * cells + width * (groups - 1) / 2 <= 128 * blocks:
            return {"fifo_lutram": cells, "lutram_mux_bits": width * (groups - 1)}
        return {"fifo_blocks": blocks, "block_fifo": 1}
    if family == "ice40":
        in_bram = rows >= ICE40_FIFO_BRAM_ROWS
    else:
        in_bram = block_ram_blocks(rows, width, family) is not None
    if in_bram:
        return {"fifo_blocks": blocks, "block_fifo": 1}
    return {"shallow_bits": width * rows}


def fork_features(width: int, outputs: int) -> dict:
    """Features of a :class:`~groupnet_hw.hw.fork.Broadcast` to ``outputs`` streams."""
    return {"one": 1, "out_bits": width * outputs}


def _stream_bits(node):
    return node.channels * node.bit_width


def unit_features(sched):
    """``{(owner, role, slot): (op name, features)}`` for every unit the accelerator
    builds from ``sched``: each node's unit(s), each fork, each FIFO."""
    g = sched.graph
    out = {}
    readers = {}
    for node in g:
        parent = g.producer(node.inputs[0]) if node.inputs else None
        out[(node.name, "unit", None)] = (
            node.op, op_of(node).resource_features(g, node, parent, sched.units[node.name]))
        for slot, ref in enumerate(node.inputs):
            readers.setdefault(ref, []).append(node.name)
            depth = sched.fifos.get(node.name, {}).get(ref)
            if depth:
                src = Graph.source(ref)
                out[(node.name, "fifo", slot)] = (
                    "fifo", stream_fifo_features(g, g[src], depth, sched.fifo_ram(node.name, ref),
                                                 sched.units[src].beats))
    for ref, users in readers.items():
        if len(users) > 1:
            src, _, k = ref.partition(":")
            bits = _stream_bits(g[src]) // sched.units[src].beats
            out[(src, "fork", int(k) if k else 0)] = ("fork", fork_features(bits, len(users)))
    return out


def per_unit_cells(module_owners, modules, top="groupnet_core"):
    """Sum per-module synthesis counts (``toolchain.synth`` with ``per_module``) by the unit
    that owns each module: ``{(owner, role, slot): {cell: count}}``."""
    cells = {}
    for name, counts in modules.items():
        parts = name.split(".")
        if parts[0] != top or len(parts) < 2 or parts[1] not in module_owners:
            continue
        key = tuple(module_owners[parts[1]])
        acc = cells.setdefault(key, {})
        for cell, v in counts.items():
            acc[cell] = acc.get(cell, 0) + int(v)
    return cells


#: Counts this small are compared with an absolute slack instead of 15 %: a unit of 20
#: LUTs that Yosys maps to 24 is not a modelling error.
SMALL_SLACK = 12


def relative_error(estimate: int, measured: int) -> float:
    """``|estimate - measured| / measured``, with :data:`SMALL_SLACK` cells forgiven."""
    diff = max(0, abs(estimate - measured) - SMALL_SLACK)
    return diff / max(measured, 1)


def design_cells(sched, family: str) -> dict:
    """Estimated cells of the whole accelerator of ``sched`` on ``family`` (every unit,
    FIFO and fork), to set beside Yosys's count of the same Verilog."""
    total = dict.fromkeys(CELLS, 0)
    for op, feats in unit_features(sched).values():
        for cell, v in estimate_unit(feats, op, family).items():
            total[cell] += v
    return total
