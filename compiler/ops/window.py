"""Ops built on a sliding window: binary and full-precision convolutions, max pooling.

A convolution is a line-buffer window (one input pixel per cycle) feeding a folded
matrix-vector unit: ``ceil(C_out/PE) * ceil(k*k*C_in/SIMD)`` cycles per output pixel
(docs/architecture.md section 5).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import ceil

import numpy as np
import torch

from ...hw.maxpool import MaxPool
from ...hw.mvu import (POPCOUNT_CHUNK, TREE_LAST_STAGE_TERMS, TREE_LEVELS_PER_STAGE, BinaryMVU,
                       BinaryWeightMVU, IntegerMVU, MVUChoices, binary_tree_terms)
from ...hw.window import SlidingWindow, WindowChoices, WindowGeometry
from ...numerics import signed_width
from .. import cycles as cyc
from ..hard_blocks import LATE_DSP_OUTPUT, block_ram_blocks, rom_read_register
from .base import TIMING_FRAMES, Op, op_of, register, same_attrs

__all__ = ["window_patches", "flat_weight", "choose_folding", "BinConv", "IntConv", "MaxPoolOp"]


def window_patches(x, kernel, stride, dilation, padding, pad_value):
    """[N, C, H, W] -> [N, Ho, Wo, k*k*C] with lane j = tap*C + channel, tap = ky*k + kx."""
    n, c, h, w = x.shape
    xp = torch.full((n, c, h + 2 * padding, w + 2 * padding), pad_value, dtype=x.dtype)
    xp[:, :, padding:padding + h, padding:padding + w] = x
    ho = (h + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    wo = (w + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    taps = []
    for ky in range(kernel):
        for kx in range(kernel):
            y0, x0 = ky * dilation, kx * dilation
            taps.append(xp[:, :, y0:y0 + stride * (ho - 1) + 1:stride,
                           x0:x0 + stride * (wo - 1) + 1:stride])
    patches = torch.stack(taps, dim=1)          # N, T, C, Ho, Wo
    return patches.permute(0, 3, 4, 1, 2).reshape(n, ho, wo, kernel * kernel * c)


def flat_weight(w):
    """(Cout, Cin, k, k) -> (Cout, k*k*Cin) in window lane order (the hardware's too)."""
    return w.permute(0, 2, 3, 1).reshape(w.shape[0], -1)


def _to_nchw(y):
    return y.permute(0, 3, 1, 2).contiguous()


def choose_folding(out_pixels, c_out, n_in, target):
    """Least PE*SIMD (then least padding waste) with mvu cycles <= target."""
    best = None
    for pe in range(1, c_out + 1):
        out_folds = ceil(c_out / pe)
        if pe > 1 and ceil(c_out / (pe - 1)) == out_folds:
            continue  # same folds with fewer PEs
        for simd in range(1, n_in + 1):
            in_folds = ceil(n_in / simd)
            if simd > 1 and ceil(n_in / (simd - 1)) == in_folds:
                continue
            c = cyc.mvu_cycles(out_pixels, c_out, n_in, pe, simd)
            if c <= target:
                key = (pe * simd, c)
                if best is None or key < best[0]:
                    best = (key, pe, simd)
                break
    if best is None:
        return c_out, n_in
    return best[1], best[2]


def _window_last_input(node, parent, q_local):
    """Raster index of the last input pixel a window output needs."""
    a = node.attrs
    k, s, d, p = a["kernel"], a["stride"], a.get("dilation", 1), a["padding"]
    r, c = divmod(q_local, node.width)
    last_row = max(0, min(parent.height - 1, r * s - p + (k - 1) * d))
    last_col = max(0, min(parent.width - 1, c * s - p + (k - 1) * d))
    return last_row * parent.width + last_col


def _window_shape(ctx, node, parent, choices):
    a = node.attrs
    # binary activations pad with +1 (every bit 1); n-bit levels and integers with 0
    binary = node.op == "bin_conv" and not a["in_bits"]
    return SlidingWindow(ctx.pixel_shape(parent), parent.height, parent.width,
                         kernel=a["kernel"], stride=a["stride"], dilation=a.get("dilation", 1),
                         padding=a["padding"], pad_value=(1 << parent.channels) - 1 if binary else 0,
                         choices=choices)


@lru_cache(maxsize=None)
def _ring_rows(height, width, kernel, stride, dilation, padding, line_ram="logic"):
    # cached: the schedule asks for the same windows' line buffers many times over
    return WindowGeometry(height, width, kernel, stride, dilation, padding).ring_rows(line_ram)


def _line_memory(node, parent, kind="block"):
    """``(depth, width, copies)`` of a convolution's line buffer built in block RAM
    (:data:`groupnet_hw.hw.window.LINE_RAM_KINDS`): ``"block"``, one memory of a row's
    pixels per ring row and window column; ``"serial"``, the whole ring in one memory,
    ``2**ceil(log2(width))`` words per ring row."""
    a = node.attrs
    rows = _ring_rows(parent.height, parent.width, a["kernel"], a["stride"],
                      a.get("dilation", 1), a["padding"], kind)
    pixel = parent.channels * parent.bit_width
    if kind == "serial":
        return rows << max(1, (parent.width - 1).bit_length()), pixel, 1
    return parent.width, pixel, a["kernel"] * rows


def _window_features(node, parent, unit):
    """Line buffer bits, and the tap bits of the window register and its row multiplexers;
    in block RAM (``unit.line_ram``), the memory's geometry (counted in blocks by the
    family, :func:`..resources.family_features`) and the row multiplexers, or for a
    serial window the register filled tap by tap and the pad multiplexer in front of it."""
    a = node.attrs
    k = a["kernel"]
    pix_bits = parent.channels * parent.bit_width
    if unit is not None and unit.line_ram == "serial":
        depth, width, _ = _line_memory(node, parent, "serial")
        return {"one": 1, "line_depth": depth, "line_width": width, "line_copies": 1,
                "serial_tap_bits": k * k * width, "serial_pixel_bits": width}
    if unit is not None and unit.line_ram == "block":
        depth, width, copies = _line_memory(node, parent)
        rows = copies // k
        # the row multiplexers, and the registers of the block RAM's late data
        return {"one": 1, "line_depth": depth, "line_width": width, "line_copies": copies,
                "block_mux_bits": k * k * rows * width, "block_tap_bits": copies * width}
    rows = (k - 1) * a.get("dilation", 1) + 2
    # read_bits: the k read ports' data registers, a window column of every ring row each
    return {"one": 1, "line_bits": rows * parent.width * pix_bits,
            "tap_bits": k * k * pix_bits, "tap_mux_bits": k * k * pix_bits * rows,
            "read_bits": k * rows * pix_bits}


def _adder_level(widths):
    """One level of the MVU's adder tree over terms of ``widths`` bits (adjacent pairs
    summed, an odd last term passed on): ``(widths after, widths of the adders)``."""
    out = [max(widths[k], widths[k + 1]) + 1 for k in range(0, len(widths) - 1, 2)]
    return out + widths[len(widths) - len(widths) % 2:], list(out)


def _mvu_tree_features(node, unit):
    """Adder-tree features of the folded MVU (``hw.mvu._FoldedMVU``) as it is built:

    - ``pair_add_bits``: XNOR-popcount only, the adders of chunk-count pairs before the
      first register (two-operand sums: a carry chain each);
    - ``tree_reg_bits``: the terms registered at every pipeline stage of the tree;
    - ``tree_sum_bits``: the sums each stage makes of up to ``2**TREE_LEVELS_PER_STAGE``
      registered terms (Yosys merges each into one multi-operand sum: one carry chain of
      the result's width) and ``tree_csa_bits``, the carry-save bits of those with more
      than two operands (LUTs).

    A binary-weight MVU (``in_bits``) sums ``simd`` masked n-bit lanes per PE plus one
    shared sum of the lanes themselves."""
    pe, simd, in_bits = unit.pe, unit.simd, node.attrs["in_bits"]
    f = {"pair_add_bits": 0, "tree_reg_bits": 0, "tree_sum_bits": 0, "tree_csa_bits": 0}
    if in_bits:
        trees = [[in_bits] * simd] * (pe + 1)
    else:
        chunks = [POPCOUNT_CHUNK.bit_length()] * -(-simd // POPCOUNT_CHUNK)
        per_pe, adders = _adder_level(chunks)
        f["pair_add_bits"] = pe * sum(adders)
        trees = [per_pe] * pe
    span = 1 << TREE_LEVELS_PER_STAGE
    while True:
        f["tree_reg_bits"] += sum(map(sum, trees))
        if all(len(t) <= TREE_LAST_STAGE_TERMS for t in trees):
            # the last stage's terms, summed into the accumulator's operand
            f["tree_sum_bits"] += sum(max(t) + 1 for t in trees if len(t) == 2)
            return f
        new = []
        for terms in trees:
            outs = []
            for k in range(0, len(terms), span):
                ws = terms[k:k + span]
                for _ in range(TREE_LEVELS_PER_STAGE):
                    ws, _ = _adder_level(ws)
                if len(terms[k:k + span]) > 1:
                    f["tree_sum_bits"] += ws[0]
                    f["tree_csa_bits"] += (len(terms[k:k + span]) - 2) * ws[0]
                outs.append(ws[0])
            new.append(outs)
        trees = new


class _Conv(Op):
    """Shared cycle model, timing and window of the convolutions."""

    #: The MVU multiplies (DSP blocks), so it always registers its operands once more.
    integer = False
    takes_activation = True

    def beat_source(self, node, unit):
        return True         # hw.mvu's `beats`

    def beat_input(self, node, unit):
        return "pack"       # the window reads whole pixels

    def beat_groups(self, node, in_groups):
        return node.attrs.get("groups", 1)

    #: Bits per weight in the MVU's ROM.
    rom_lane_bits = 1

    def weight_rom(self, node, unit):
        """``(depth, width)`` of the MVU's weight ROM (depth 0: fully parallel, its
        weights are constants)."""
        folds = self.vector_steps(node, unit)
        return (folds if folds > 1 else 0), unit.pe * unit.simd * self.rom_lane_bits

    def registers_rom(self, node, unit, family):
        return rom_read_register(*self.weight_rom(node, unit), family)

    def operand_stage(self, node, unit):
        """Whether the MVU registers its operands once more (``compiler.cycles.mvu_operand_stage``)."""
        slices = node.attrs.get("groups", 1) * ceil(unit.n_in / unit.simd)
        return cyc.mvu_operand_stage(slices, self.integer, unit.registered_rom)

    def line_memory(self, node, parent, kind="block"):
        """``(depth, width, copies)`` of the line buffer in block RAM, built as ``kind``
        (``"block"`` or ``"serial"``, :data:`groupnet_hw.hw.window.LINE_RAM_KINDS`)."""
        return _line_memory(node, parent, kind)

    def block_line_ram(self, node, parent, unit, family, serial=False):
        # "serial" (one memory, a tap per cycle) where the MVU leaves the window the
        # cycles to read its taps one by one, so that it costs no cycle: fewer blocks,
        # and block RAM takes the short rows one memory per row is too small for

        def in_block_ram(kind):
            depth, width, _ = _line_memory(node, parent, kind)
            return block_ram_blocks(depth, width, family) is not None

        if (serial and self.vector_steps(node, unit) >= cyc.window_refill("serial", node.attrs["kernel"])
                and in_block_ram("serial")):
            return "serial"
        return "block" if in_block_ram("block") else None

    def tree_terms(self, node, unit):
        """Terms the MVU's adder tree sums per step and PE (its pipeline depth)."""
        return unit.simd

    def lane_width(self, g, node):
        # the MVU's accumulator: the bound of any input, not the range of these weights
        parent = g.producer(node.inputs[0])
        n_in = node.attrs["kernel"] ** 2 * parent.channels // node.attrs.get("groups", 1)
        if self.name == "bin_conv":
            bound = n_in * ((1 << max(1, node.attrs["in_bits"])) - 1)
        else:
            w = node.attrs["weight"].reshape(node.channels, -1).abs().sum(1).max()
            x_max = (1 << (parent.bit_width - 1)) if parent.kind == "fixed" else \
                (1 << parent.bit_width) - 1
            bound = int(w) * x_max
        return signed_width(-bound, bound)

    def _weights(self, node):
        raise NotImplementedError

    def folding(self, node, parent, target):
        # A grouped convolution (time-shared bases) runs its groups one after the other
        # on one set of PE x SIMD lanes: as `groups` times the pixels of one group.
        groups = node.attrs.get("groups", 1)
        n_in = node.attrs["kernel"] ** 2 * parent.channels // groups
        pe, simd = choose_folding(groups * node.height * node.width, node.channels // groups,
                                  n_in, target)
        return pe, simd, n_in

    def vector_steps(self, node, unit):
        """Cycles the MVU spends per output pixel (its initiation interval)."""
        return _out_folds(node, unit) * ceil(unit.n_in / unit.simd)

    def pixel_interval(self, node, unit):
        """Fewest cycles between two output pixels of the window and MVU: the MVU's
        steps, or a serial window's refill when that is longer
        (:func:`~groupnet_hw.compiler.cycles.window_refill`); an MVU that reads the
        serial window's register in place takes the window with its last step, and the
        window refills only then: one cycle less than the two one after the other."""
        ii = self.vector_steps(node, unit)
        refill = cyc.window_refill(unit.line_ram, node.attrs["kernel"])
        return ii + refill - 1 if unit.in_place else max(ii, refill)

    def reads_in_place(self, node, unit, target):
        # A serial window holds the vector in its register until it is taken: the MVU
        # can read it there instead of copying it, where the frame interval leaves the
        # refill's cycles after every vector
        if unit.line_ram != "serial" or self.vector_steps(node, unit) < 2 or not target:
            return False
        steps = self.pixel_interval(node, replace(unit, in_place=True))
        return node.height * node.width * steps <= target

    def cycles(self, node, parent, unit):
        # input beats are collected at one a cycle
        return max(node.height * node.width * self.pixel_interval(node, unit),
                   cyc.window_cycles(parent.height, parent.width) * unit.input_beats(0))

    def timing(self, node, parent, ins, unit):
        # window: its latency after the last pixel it needs; MVU: its latency per vector.
        # The MVU takes a window when it is there and the previous one is `interval`
        # behind: a logic or block window has the next ready a cycle after a take, and
        # an MVU step is at least a cycle, so only a serial window's refill can be longer.
        wait = cyc.window_latency(unit.line_ram, node.attrs["kernel"])
        ii = self.vector_steps(node, unit)
        interval = self.pixel_interval(node, unit)
        # with beats out, beat j of a vector `beat_steps` after beat j - 1
        beats = unit.beats
        beat_steps = ii // beats
        latency = cyc.mvu_latency(beat_steps, self.tree_terms(node, unit),
                                  self.operand_stage(node, unit), unit.activation,
                                  unit.registered_products)
        pixels = _packed_times(ins[0], unit.input_beats(0))
        n_out, n_par = node.height * node.width, parent.height * parent.width
        out, start_prev = [], float("-inf")
        for q in range(TIMING_FRAMES * n_out):
            f, ql = divmod(q, n_out)
            start = max(pixels[f * n_par + _window_last_input(node, parent, ql)] + wait,
                        start_prev + interval)
            start_prev = start
            out.extend(start + latency + j * beat_steps for j in range(beats))
        return out, None  # the window's line buffer accepts at arrival

    def mvu_choices(self, g, node, unit) -> MVUChoices:
        """The implementation choices of the MVU of ``node`` (in graph ``g``) from its
        schedule's ``unit``: its folding, the node's groups (time-shared bases), the
        in-place read, the consumer's activation table where the unit applies it
        (``Unit.activation``), its output beats and the extra registers on the board's
        family. The one place a ``Unit`` becomes hardware choices."""
        return MVUChoices(pe=unit.pe, simd=unit.simd, groups=node.attrs.get("groups", 1),
                          in_place=unit.in_place, activation=_activation_table(g, node, unit),
                          beats=unit.beats, registered_rom=unit.registered_rom,
                          registered_products=unit.registered_products)

    def window_choices(self, unit, consumer_ii) -> WindowChoices:
        """The implementation choices of the sliding window of a node from its
        schedule's ``unit``: its line buffer (``Unit.line_ram``), and paced where its MVU
        takes a window at most every ``consumer_ii >= 2`` cycles, so that the window
        reads the next one without looking at the MVU's ``ready``."""
        return WindowChoices(line_ram=unit.line_ram, paced=consumer_ii >= 2)

    def build(self, ctx, node, unit):
        parent = ctx.parent(node)
        mvu = self._mvu(node, parent, self.mvu_choices(ctx.graph, node, unit))
        window = ctx.add(node, _window_shape(ctx, node, parent,
                                             self.window_choices(unit, mvu.ii)), "_window")
        mvu = ctx.add(node, mvu, "_mvu")
        groups = node.attrs.get("groups", 1)
        if groups == 1:
            # the window's taps are already in the MVU's lane order (tap-major, channel-minor)
            ctx.connect_raw(window.o, mvu.i)
        else:
            # a grouped MVU takes each group's taps together (group-major); within a
            # group, tap-major and channel-minor as the weights are flattened
            taps, per = node.attrs["kernel"] ** 2, parent.channels // groups
            order = [t * parent.channels + g * per + c
                     for g in range(groups) for t in range(taps) for c in range(per)]
            ctx.connect_lanes(window.o, mvu.i, order, ctx.lane_width(parent))
        ctx.acc_width[node.name] = mvu.acc_width
        return [ctx.packed(parent, node, window.i)], [mvu.o]


@register
class BinConv(_Conv):
    """XNOR-popcount convolution of binary activations, or binary-weight convolution of
    unsigned n-bit activations (``in_bits`` > 0).

    Attributes: ``bits`` (C_out, C_in, k, k) of {0, 1}, ``kernel``, ``stride``,
    ``dilation``, ``padding``, ``in_bits`` (0: binary input, padded with bit 1; n: n-bit
    levels, padded with 0). Binary: ``dot = 2*popcount(xnor) - N``; n-bit:
    ``sum_j (w_j ? x_j : -x_j)``.
    """

    name = "bin_conv"

    def tree_terms(self, node, unit):
        return unit.simd if node.attrs["in_bits"] else binary_tree_terms(unit.simd)

    def execute(self, node, ins):
        a = node.attrs
        groups = a.get("groups", 1)
        if groups > 1:
            # each group convolves its own slice of the input channels
            per_in, per_out = ins[0].shape[1] // groups, node.channels // groups
            return torch.cat([self._dense(a, a["bits"][g * per_out:(g + 1) * per_out],
                                          ins[0][:, g * per_in:(g + 1) * per_in])
                              for g in range(groups)], dim=1)
        return self._dense(a, a["bits"], ins[0])

    @staticmethod
    def _dense(a, bits, x):
        w = flat_weight(bits)
        if a["in_bits"]:
            p = window_patches(x, a["kernel"], a["stride"], a["dilation"], a["padding"], 0)
            # sum over +1 lanes minus sum over -1 lanes, on the levels themselves
            return _to_nchw(p @ w.t() - p @ (1 - w).t())
        p = window_patches(x, a["kernel"], a["stride"], a["dilation"], a["padding"], 1)
        matches = p @ w.t() + (1 - p) @ (1 - w).t()        # popcount(xnor)
        return _to_nchw(2 * matches - w.shape[1])

    def value_range(self, node, ins):
        n = node.attrs["bits"][0].numel()
        top = ins[0].hi if node.attrs["in_bits"] else 1
        return -n * top, n * top

    def _mvu(self, node, parent, choices):
        flat = flat_weight(node.attrs["bits"]).numpy()
        if node.attrs["in_bits"]:
            return BinaryWeightMVU(flat.shape[1], node.channels, flat, node.attrs["in_bits"],
                                   choices)
        return BinaryMVU(flat.shape[1], node.channels, flat, choices)

    def stack(self, nodes):
        # K bases' convolutions become one grouped convolution (time-shared bases)
        a = nodes[0].attrs
        keys = ("kernel", "stride", "dilation", "padding", "in_bits")
        if any(n.attrs.get("groups", 1) != 1 or any(n.attrs[k] != a[k] for k in keys)
               for n in nodes):
            return None
        return dict(a, bits=torch.cat([n.attrs["bits"] for n in nodes]), groups=len(nodes))

    def resource_features(self, g, node, parent, unit):
        f = _window_features(node, parent, unit)
        folds = self.vector_steps(node, unit)
        groups = node.attrs.get("groups", 1)
        lane = max(1, node.attrs["in_bits"])
        # A fully parallel MVU (one step per vector) has its weights as constants: the
        # XNORs fold into the popcount's LUTs and there is no input buffer or ROM.
        kind = "xnor_bits" if folds > 1 else "const_xnor_bits"
        f.update({kind: unit.pe * unit.simd * lane}, acc_bits=unit.pe * node.bit_width,
                 weight_bits=folds * unit.pe * unit.simd if folds > 1 else 0,
                 buffer_bits=groups * unit.n_in * lane if folds > 1 and not unit.in_place else 0,
                 in_place_bits=groups * unit.n_in * lane if unit.in_place else 0)
        f["rom_depth"], f["rom_width"] = self.weight_rom(node, unit)
        f.update(_output_features(g, node, unit))
        f["collect_bits"] += _pack_bits(g, parent, unit)
        if self.operand_stage(node, unit):
            # the step's input slice and weight word registered once more; a grouped
            # MVU registers its group's whole vector at issue and picks the slice after
            slices = -(-unit.n_in // unit.simd) if groups > 1 else 1
            f["operand_bits"] = slices * unit.simd * lane + unit.pe * unit.simd
        # the popcount adder tree: its pipeline registers, carry chains and carry-save LUTs
        f.update(_mvu_tree_features(node, unit))
        return f

@register
class IntConv(_Conv):
    """Full-precision convolution on integers (the first layer), zero padding.

    Attributes: ``weight`` (C_out, C_in, k, k) int64, ``kernel``, ``stride``,
    ``dilation``, ``padding``.
    """

    name = "int_conv"
    integer = True
    rom_lane_bits = 8   # (what the resource model counts per weight)

    def execute(self, node, ins):
        a = node.attrs
        p = window_patches(ins[0], a["kernel"], a["stride"], a["dilation"], a["padding"], 0)
        return _to_nchw(p @ flat_weight(a["weight"]).t())

    def value_range(self, node, ins):
        w = node.attrs["weight"].reshape(node.attrs["weight"].shape[0], -1)
        x_lo, x_hi = min(ins[0].lo, 0), max(ins[0].hi, 0)  # zero padding
        los = (torch.clamp(w, min=0) * x_lo + torch.clamp(w, max=0) * x_hi).sum(1)
        his = (torch.clamp(w, min=0) * x_hi + torch.clamp(w, max=0) * x_lo).sum(1)
        return int(los.min()), int(his.max())

    def _mvu(self, node, parent, choices):
        flat = flat_weight(node.attrs["weight"]).numpy().astype(np.int64)
        return IntegerMVU(flat.shape[1], node.channels, flat, parent.bit_width,
                          parent.kind == "fixed", choices)

    def registers_products(self, node, unit, family):
        return family in LATE_DSP_OUTPUT

    def resource_features(self, g, node, parent, unit):
        f = _window_features(node, parent, unit)
        folds = self.vector_steps(node, unit)
        f.update(mults=unit.pe * unit.simd,
                 mult_bits=unit.pe * unit.simd * (parent.bit_width + 8),
                 acc_bits=unit.pe * node.bit_width,
                 weight_bits=folds * unit.pe * unit.simd * self.rom_lane_bits)
        if unit.registered_products:
            w = node.attrs["weight"]
            f["product_copy_bits"] = unit.pe * unit.simd * IntegerMVU.product_width_of(
                int(w.min()), int(w.max()), parent.bit_width, parent.kind == "fixed")
        f["rom_depth"], f["rom_width"] = self.weight_rom(node, unit)
        f.update(_output_features(g, node, unit))
        f["collect_bits"] += _pack_bits(g, parent, unit)
        return f


def _out_folds(node, unit):
    """An MVU's output folds per vector: ``ceil(C/groups/beats/PE)`` per group and beat
    (``hw.mvu._FoldedMVU.out_folds``)."""
    groups = node.attrs.get("groups", 1)
    return groups * unit.beats * ceil(node.channels // groups // unit.beats / unit.pe)


def _collect_bits(node, unit, width):
    """Bits of an MVU's collect registers (``hw.mvu``): every output fold of a beat but
    the last waits there for the beat's last input fold, ``PE`` channels of ``width``
    bits each. With one output fold there are none; a fully connected layer folded to
    one PE holds nearly its whole output twice (collect and output registers)."""
    return (_out_folds(node, unit) // unit.beats - 1) * unit.pe * width


def _packed_times(times, beats):
    """Times of the pixels a :class:`~groupnet_hw.hw.beats.BeatPack` collects from beats
    arriving at ``times``: a register after each pixel's last beat."""
    if beats == 1:
        return times
    return [times[p + beats - 1] + 1 for p in range(0, len(times), beats)]


def _pack_bits(g, parent, unit):
    """Flip-flops of the :class:`~groupnet_hw.hw.beats.BeatPack` in front of the unit
    (its collect and output registers: a pixel), 0 where the input is whole pixels."""
    if unit.input_beats(0) == 1:
        return 0
    return parent.channels * op_of(parent).lane_width(g, parent)


def _activation_table(g, node, unit):
    """The table the MVU of ``node`` applies (its one consumer's, ``Unit.activation``),
    or ``None``."""
    if not unit.activation:
        return None
    (consumer,) = g.consumers(node.name)
    return op_of(consumer).activation(consumer)


def _output_features(g, node, unit):
    """The MVU's output and collect registers (with one step per beat, the output
    register's skid, ``hw.skid``, as well), and with an activation (``Unit.activation``)
    its own features as the op whose work it does counts them
    (:meth:`~.base.Op.activation_features`): the activation's values, not the
    accumulator's, are what the collect and output registers hold."""
    lanes = node.channels // unit.beats
    one_step = op_of(node).vector_steps(node, unit) == unit.beats
    if not unit.activation:
        out_bits = lanes * node.bit_width
        return {"out_bits": out_bits, "skid_bits": out_bits if one_step else 0,
                "collect_bits": _collect_bits(node, unit, node.bit_width)}
    (consumer,) = g.consumers(node.name)
    width = consumer.bit_width       # its table's values: levels, or post-op values
    f = {"out_bits": lanes * width, "skid_bits": lanes * width if one_step else 0,
         "collect_bits": _collect_bits(node, unit, width), "act_level_bits": unit.pe * width}
    f.update(op_of(consumer).activation_features(consumer, op_of(node).lane_width(g, node),
                                                  _out_folds(node, unit), unit.pe))
    return f


@register
class MaxPoolOp(Op):
    """Max pooling over a k x k window (padding never wins).

    Attributes: ``kernel``, ``stride``, ``padding``.
    """

    name = "maxpool"

    def execute(self, node, ins):
        a = node.attrs
        x = ins[0]
        floor = int(x.min()) - 1 if x.numel() else -1
        p = window_patches(x, a["kernel"], a["stride"], 1, a["padding"], floor)
        n, ho, wo, _ = p.shape
        taps = p.reshape(n, ho, wo, a["kernel"] ** 2, x.shape[1])
        return _to_nchw(taps.max(dim=3).values)

    def value_range(self, node, ins):
        return ins[0].lo, ins[0].hi

    def stack(self, nodes):
        return same_attrs([n.attrs for n in nodes])

    def cycles(self, node, parent, unit):
        # one input pixel per cycle, and at most one pooled pixel per cycle
        return max(cyc.window_cycles(parent.height, parent.width), node.height * node.width)

    def timing(self, node, parent, ins, unit):
        # the window emits window_latency cycles after the last pixel a window uses; the
        # reduction register adds 1 (hw.maxpool.MaxPool)
        n_out, n_par = node.height * node.width, parent.height * parent.width
        out, prev = [], float("-inf")
        wait = cyc.window_latency("logic")
        for q in range(TIMING_FRAMES * n_out):
            f, ql = divmod(q, n_out)
            t = max(ins[0][f * n_par + _window_last_input(node, parent, ql)] + wait, prev + 1)
            prev = t
            out.append(t + 1)  # the reduction register
        return out, None

    def resource_features(self, g, node, parent, unit):
        f = _window_features(node, parent, unit)
        f["compare_bits"] = node.channels * parent.bit_width * (node.attrs["kernel"] ** 2 - 1)
        f["out_bits"] = node.channels * node.bit_width
        return f

    def build(self, ctx, node, unit):
        parent = ctx.parent(node)
        a = node.attrs
        u = ctx.add(node, MaxPool(ctx.tensor_shape(parent), parent.height, parent.width,
                                  kernel=a["kernel"], stride=a["stride"], padding=a["padding"]))
        return [u.i], [u.o]

