"""The intended engine's base arrays: K_hw XNOR-popcount arrays that run a block's bases
side by side, pipelined for the 100 MHz target (docs/architecture.md section 15).

The core of section 13 folds one array through a state machine whose paths (52 ns on
ECP5's estimate) no tuning brings to 10 ns. The intended engine is built instead from
stream units, each pipelined on its own; this is its compute heart. It does no
addressing: a feeder offers one *fold* a beat (every array's window word and weight
word, in lockstep, because a descriptor's bases share their geometry) and says which
beat starts and which ends an output fold. The same unit therefore serves every
geometry the compiler tiles for (any kernel, stride, dilation and channel count) with
fold counts that change at run time, from one descriptor to the next.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...numerics import signed_width
from ..arith import positive_int, reduce_levels, sum_tree
from ..mvu import POPCOUNT_CHUNK, TREE_LEVELS_PER_STAGE, chunk_counts, tree_stages
from ..skid import skid_outputs

__all__ = ["BaseArrays", "fold_layout"]


def fold_layout(arrays, pe, simd, planes):
    """The payload of one fold: what every array takes in one cycle.

    ``x[k]``: array ``k``'s window word, ``simd`` lanes of ``planes`` bit planes, plane
    ``b`` at bits ``[b*simd, (b+1)*simd)``; ``w[k]``: its ``pe`` rows of ``simd`` weight
    bits (bit 1 is +1), row ``p`` at ``[p*simd, (p+1)*simd)``; ``mask``: the lanes that
    hold a window element (a tap's or a window's tail is 0; padding taps are not: the
    gatherer writes the padding value there); ``first`` and ``last``: the fold starts
    and ends its output fold's sum; with more than one plane, ``levels``: the lanes hold
    n-bit levels (unsigned, one bit per plane) rather than binary activations (plane 0,
    bit 1 is +1). One plane takes binary activations only, so that no mode bit fans out
    to every lane (on ECP5 that fan-out was the critical path: 7.4 ns, 5.4 of it
    routing).
    """
    fields = {
        "x": data.ArrayLayout(unsigned(simd * planes), arrays),
        "w": data.ArrayLayout(unsigned(pe * simd), arrays),
        "mask": unsigned(simd),
        "first": unsigned(1),
        "last": unsigned(1),
    }
    if planes > 1:
        fields["levels"] = unsigned(1)
    return data.StructLayout(fields)


class BaseArrays(wiring.Component):
    """``arrays`` XNOR-popcount arrays of ``pe x simd`` lanes, one fold a cycle each.

    Each array's PE ``p`` sums, over the folds from ``first`` to ``last``, the signed
    products of its weight row (+1 or -1) with the window's lanes that ``mask`` keeps,
    and emits the sums when ``last`` enters the accumulator:

    - binary activations (``levels`` 0, plane 0; bit 1 is +1):
      ``2 * popcount(~(x ^ w) & mask) - popcount(mask)``, the XNOR dot product;
    - n-bit levels (``levels`` 1, ``planes`` planes): ``sum_b 2**b * (2 *
      popcount(x_b & w & mask) - popcount(x_b & mask))``, the levels' dot product with
      the weights, the executor's ``p @ w - p @ (1 - w)``.

    Both are ``2 * A - S``: the PEs accumulate ``A`` and each array the ``S`` its PEs
    share (one popcount per plane an array, not per PE). The pipeline: the operands are
    registered; each 6-lane chunk's count is a table lookup, summed in pairs and
    registered; the adder tree runs ``TREE_LEVELS_PER_STAGE`` levels a register stage
    (``hw.mvu.tree_stages``, the dataflow MVUs' rule that met 100 MHz on ECP5) until
    two terms are left, which the accumulator adds; an output fold's ``A`` and ``S`` are
    registered, and ``2 * A - S`` goes to the output register, which has a one-beat
    skid (``hw.skid``), so no stage waits on ``o.ready`` combinationally.

    Parameters
    ----------
    arrays : int
        K_hw, the arrays side by side (a descriptor's bases; more bases take rounds).
    pe, simd : int
        Output channels and window lanes of one array's fold.
    planes : int
        Bit planes of a lane: 1 takes binary activations only; more take n-bit levels
        of up to ``planes`` bits too (``levels``).
    max_window : int
        The most lanes one output sums (kernel taps x input channels); sizes the
        accumulators. A longer window's sums wrap.

    Ports
    -----
    i : ``In(stream.Signature(fold_layout(arrays, pe, simd, planes)))``
        One fold a beat.
    o : ``Out(stream.Signature(data.ArrayLayout(signed(w), arrays * pe)))``
        An output fold's sums: array ``k``'s PE ``p`` at ``k * pe + p``; ``w`` is
        :attr:`sum_width`.

    Attributes
    ----------
    stages : int
        Register stages from an accepted fold to its terms' last tree stage: the
        operand register and ``hw.mvu.tree_stages`` of the terms.
    latency : int
        Cycles from the acceptance of an output fold's ``last`` beat to its sums on
        ``o`` (valid), with ``o.ready`` held high.

    Latency
    -------
    :attr:`latency`: ``stages + 2`` (the operand register, the terms' and the tree's
    stages, the result register, the output register); 4 for ``simd`` up to 24 lanes of
    one plane, 5 for 48 lanes or 16 lanes of 4 planes.

    Throughput
    ----------
    One fold a cycle and array (``arrays * pe * simd`` lanes a cycle), one output fold a
    cycle. ``i.ready`` is a register: a consumer that stalls stops the arrays one
    output fold later.
    """

    def __init__(self, *, arrays, pe, simd, planes=1, max_window=4608):
        for name, value in (("arrays", arrays), ("pe", pe), ("simd", simd),
                            ("planes", planes), ("max_window", max_window)):
            positive_int(f"BaseArrays: {name}", value)
        self.arrays, self.pe, self.simd, self.planes = arrays, pe, simd, planes
        self.max_window = max_window
        most = max_window * ((1 << planes) - 1)
        self.acc_width = most.bit_length()
        self.sum_width = signed_width(-most, most)
        chunks = -(-simd // POPCOUNT_CHUNK)
        self.terms = planes * -(-chunks // 2)
        self.stages = 1 + tree_stages(self.terms)
        self.latency = self.stages + 2
        super().__init__({
            "i": In(stream.Signature(fold_layout(arrays, pe, simd, planes))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(self.sum_width),
                                                       arrays * pe))),
        })

    def _terms(self, m, bits_of_plane, name):
        """A popcount's first terms over the planes: each chunk's count (a lookup),
        shifted by its plane's weight, summed in pairs."""
        terms = []
        for b in range(self.planes):
            counts = chunk_counts(m, bits_of_plane(b), name=f"{name}_b{b}")
            terms += [c if b == 0 else Cat(Const(0, b), c)
                      for c in reduce_levels(counts, 1)]
        return terms

    def elaborate(self, platform):
        m = Module()
        arrays, pe, simd, planes = self.arrays, self.pe, self.simd, self.planes
        adv = Signal()                 # every stage moves on it (the skid's room)
        m.d.comb += self.i.ready.eq(adv)

        # Operand stage: the XNORs and masks sit by these registers, not by the feeder.
        op = Signal(self.i.payload.shape(), name="op")
        op_valid = Signal()
        with m.If(adv):
            m.d.sync += [op.eq(self.i.payload), op_valid.eq(self.i.valid)]

        def plane(k, b):
            return op.x[k][b * simd:(b + 1) * simd]

        def by_mode(level_bits, binary_bits):
            return Mux(op.levels, level_bits, binary_bits) if planes > 1 else binary_bits

        groups = []                    # per array: its PEs' terms, then the shared ones
        for k in range(arrays):
            for p in range(pe):
                row = op.w[k][p * simd:(p + 1) * simd]

                def pe_bits(b, k=k, row=row):
                    level_bits = plane(k, b) & row
                    if b > 0:
                        return by_mode(level_bits, 0) & op.mask
                    return by_mode(level_bits, ~(plane(k, 0) ^ row)) & op.mask
                groups.append(self._terms(m, pe_bits, f"a{k}_pe{p}"))

            def shared_bits(b, k=k):
                if b > 0:
                    return by_mode(plane(k, b), 0) & op.mask
                return by_mode(plane(k, 0), ~0) & op.mask
            groups.append(self._terms(m, shared_bits, f"a{k}_s"))

        # The terms registered, then TREE_LEVELS_PER_STAGE levels a stage.
        valid, first, last = op_valid, op.first, op.last
        for depth in range(self.stages - 1):
            regs = []
            for g, terms in enumerate(groups):
                row_regs = []
                for j, t in enumerate(terms if depth == 0 else
                                      reduce_levels(terms, TREE_LEVELS_PER_STAGE)):
                    r = Signal(t.shape(), name=f"t{depth}_{g}_{j}", reset_less=True)
                    with m.If(adv):
                        m.d.sync += r.eq(t)
                    row_regs.append(r)
                regs.append(row_regs)
            groups = regs
            nv, nf, nl = (Signal(name=f"t{depth}_valid"), Signal(name=f"t{depth}_first"),
                          Signal(name=f"t{depth}_last"))
            with m.If(adv):
                m.d.sync += [nv.eq(valid), nf.eq(first), nl.eq(last)]
            valid, first, last = nv, nf, nl

        # Accumulate: the last stage's two terms and the accumulator, two adders.
        accs = [Signal(unsigned(self.acc_width), name=f"acc{g}", reset_less=True)
                for g in range(len(groups))]
        results = [Signal(unsigned(self.acc_width), name=f"result{g}", reset_less=True)
                   for g in range(len(groups))]
        r_valid = Signal()
        with m.If(adv):
            m.d.sync += r_valid.eq(valid & last)
            for acc, res, terms in zip(accs, results, groups):
                total = sum_tree(terms) + Mux(first, 0, acc)
                with m.If(valid):
                    m.d.sync += acc.eq(total)
                with m.If(valid & last):
                    m.d.sync += res.eq(total)

        sums = []
        for k in range(arrays):
            shared = results[k * (pe + 1) + pe]
            sums += [(results[k * (pe + 1) + p] << 1) - shared for p in range(pe)]
        m.d.comb += adv.eq(skid_outputs(m, [self.o], [sums], adv & r_valid, name="out"))
        return m
