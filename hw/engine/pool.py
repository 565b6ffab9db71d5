"""The intended engine's pooling rows: max pooling of a convolution's sums on their way
to the epilogue, a fold a cycle (docs/architecture.md section 15).

The ResNet stem pools its 7x7/2 convolution's 32-bit sums (3x3 windows, stride 2,
padding 1) on chip, so that its result never reaches DRAM (fusion rule 2). The sums
arrive pixel by pixel, a pixel's channel groups (folds) one after the other, as the
base arrays emit them; the unit pools them as they pass, separably: each row's windows
are pooled along the row into partial maxima by fold, and each row's window maxima
into the rows' windows by column and fold. Padded taps never win (the reference model's
``_pool_rows``): a window's max is over its taps inside the map.

Every window position is a counter stepped by one (``(c + padding) // stride`` and its
remainder kept beside the column and row): no product or division at run time.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from ..skid import skid_outputs, staged

__all__ = ["PoolRows", "pool_settings"]


def pool_settings(max_size, max_folds, max_kernel):
    """A map's pooling, held while its folds are in the unit: the convolution's result
    ``mid_h x mid_w`` of ``folds`` folds a pixel, the window ``kernel``, ``stride`` and
    ``padding``, and the pooled map's ``out_h x out_w`` (``(mid + 2 * padding - kernel)
    // stride + 1``, PyTorch's floor mode, from the caller: no division here)."""
    size, small = range(max_size + 1), range(max_kernel + 1)
    return data.StructLayout({
        "mid_h": size, "mid_w": size, "folds": range(max_folds + 1),
        "kernel": small, "stride": small, "padding": small,
        "out_h": size, "out_w": size,
    })


def _banks(phase, hi, first, last, kernel, stride, count):
    """One axis's windows at a position ``c``: per bank (window parity), whether ``c``
    is in that bank's window, starts it and ends it.

    ``hi = (c + padding) // stride`` is the last window that may hold ``c``, at tap
    ``phase``, the remainder; ``hi - 1`` may hold it at tap ``phase + stride``
    (``kernel <= 2 * stride``: no third). A window starts at its first tap or at the
    map's first position, ends at its last tap or at the map's last position; with
    ``padding < stride`` two windows never end at one position."""
    hi_in = (phase < kernel) & (hi < count)
    lo_in = (phase + stride < kernel) & (hi != 0) & (hi <= count)
    hi_end = hi_in & ((phase == kernel - 1) | last)
    lo_end = lo_in & ((phase + stride == kernel - 1) | last)
    hi_start = hi_in & ((phase == 0) | first)
    banks = []
    for b in (0, 1):
        is_hi = hi[0] == b
        banks.append((Mux(is_hi, hi_in, lo_in), is_hi & hi_start,
                      Mux(is_hi, hi_end, lo_end)))
    return banks


def _max(a, b):
    return Mux(a > b, a, b)


class PoolRows(wiring.Component):
    """Max pooling of a map's folds as they stream in, one fold a cycle.

    Two stages, each a read-modify-write of partial maxima in two banks by window
    parity (an axis's position is in at most two windows, of consecutive indices):

    - along the row: per fold, the max of the window's columns so far, in a memory of
      ``max_folds`` words a bank (address: the fold); a window that ends at this column
      (at most one) passes its max on;
    - across the rows: per column window and fold, the max of the window's rows so far,
      in a memory of ``max_out * max_folds`` words a bank (address: a count of the
      row's passed maxima, which come in ``(px, f)`` order: ``px * folds + f`` without
      a product); a window that ends at this row goes to the output register.

    Each read is synchronous and transparent to its bank's write port, so a word written
    by one fold is read by the next at the same address (one fold a pixel: the same
    address every cycle) with no forwarding logic of the unit's own. A window's first
    tap writes its value without reading, so nothing survives from a previous map or a
    reset.

    Supported geometries: ``kernel <= 2 * stride``, ``padding < stride`` and ``padding
    < kernel`` (the stem's 3x3/2/1 and 2x2/2 among them, not 3x3/1/1): every position is
    in at most two windows, at most one window ends at a position, every window holds a
    position of the map, and ``out <= mid``. Positions in no window (``kernel <
    stride``) are consumed and dropped. The unit does not check the settings: others
    pool wrongly.

    Parameters
    ----------
    lanes : int
        Channels a fold.
    width : int
        The sums' width (signed).
    max_size : int
        The largest ``mid_h`` and ``mid_w``.
    max_folds : int
        The most folds a pixel.
    max_kernel : int
        The largest ``kernel``, ``stride`` and ``padding``.
    max_out : int, optional
        The largest ``out_w`` (default ``max_size``): the column stage's banks hold
        ``max_out * max_folds`` words.

    Ports
    -----
    i : ``In(stream.Signature(ArrayLayout(signed(width), lanes)))``
        The convolution's folds in ``(cy, cx, f)`` order (:class:`~.arrays.BaseArrays`'
        ``o`` with one array of ``lanes`` PEs); after a map's last fold the next map's
        first.
    settings : ``In(pool_settings(max_size, max_folds, max_kernel))``
        Held while a map's folds are in the unit.
    o : ``Out(stream.Signature(ArrayLayout(signed(width), lanes)))``
        The pooled folds in ``(py, px, f)`` order, ``out_h * out_w * folds`` a map.

    Attributes
    ----------
    latency : int
        Cycles from the acceptance of a window's last fold to its max on ``o``
        (valid), with ``o.ready`` held high.

    Latency
    -------
    :attr:`latency` = 3: the input register (with the row stage's read), the row
    stage's result register (with the column stage's read), the output register.

    Throughput
    ----------
    One fold a cycle in, with no bubble between rows or maps; at most one pooled fold a
    cycle out. ``i.ready`` is a register (the output skid's room): a consumer that
    stalls stops the unit one pooled fold later.
    """

    latency = 3

    def __init__(self, *, lanes, width, max_size, max_folds, max_kernel=3, max_out=None):
        max_out = max_size if max_out is None else max_out
        for name, value in (("lanes", lanes), ("width", width), ("max_size", max_size),
                            ("max_folds", max_folds), ("max_kernel", max_kernel),
                            ("max_out", max_out)):
            positive_int(f"PoolRows: {name}", value)
        self.lanes, self.width = lanes, width
        self.max_size, self.max_folds, self.max_kernel = max_size, max_folds, max_kernel
        self.max_out = max_out
        self.fold = data.ArrayLayout(signed(width), lanes)
        super().__init__({
            "i": In(stream.Signature(self.fold)),
            "settings": In(pool_settings(max_size, max_folds, max_kernel)),
            "o": Out(stream.Signature(self.fold)),
        })

    def elaborate(self, platform):
        m = Module()
        st, lanes, fold = self.settings, self.lanes, self.fold
        adv = Signal()                 # every stage moves on it (the skid's room)
        take = Signal()
        m.d.comb += [self.i.ready.eq(adv), take.eq(adv & self.i.valid)]

        # --- the position: (cy, cx, f) and each axis's window counters
        f = Signal(range(self.max_folds))
        cx, cy = Signal(range(self.max_size)), Signal(range(self.max_size))
        hi_range = range(self.max_size + self.max_kernel + 1)
        ph_x, ph_y = Signal(range(self.max_kernel)), Signal(range(self.max_kernel))
        hi_x, hi_y = Signal(hi_range), Signal(hi_range)
        f_last, x_last, y_last = f == st.folds - 1, cx == st.mid_w - 1, cy == st.mid_h - 1
        x_first, y_first = cx == 0, cy == 0
        # an axis's first position is at tap `padding`: taken from the setting there
        # rather than loaded at the row's end, so that a reset leaves it right too
        phase_x = Mux(x_first, st.padding, ph_x)
        phase_y = Mux(y_first, st.padding, ph_y)

        def step(ph, hi, phase):
            wrap = phase == st.stride - 1
            return [ph.eq(Mux(wrap, 0, phase + 1)), hi.eq(hi + wrap)]

        with m.If(take):
            m.d.sync += f.eq(Mux(f_last, 0, f + 1))
            with m.If(f_last):
                m.d.sync += [cx.eq(cx + 1), *step(ph_x, hi_x, phase_x)]
                with m.If(x_last):
                    m.d.sync += [cx.eq(0), hi_x.eq(0),
                                 cy.eq(cy + 1), *step(ph_y, hi_y, phase_y)]
                    with m.If(y_last):
                        m.d.sync += [cy.eq(0), hi_y.eq(0)]
        h_banks = _banks(phase_x, hi_x, x_first, x_last, st.kernel, st.stride, st.out_w)
        v_banks = _banks(phase_y, hi_y, y_first, y_last, st.kernel, st.stride, st.out_h)

        stage = staged(m, adv)

        def flags(banks, name):
            # with their fold's valid bit only: reset-less
            return [tuple(stage(s, f"{name}_{b}_{n}", False)
                          for n, s in zip(("use", "start", "end"), bank))
                    for b, bank in enumerate(banks)]

        def bank_rmw(name, depth, read_addr, write_addr, write, value, banks):
            """Two banks of partial maxima: per bank, the max of ``value`` and the word
            read (``value`` alone on a window's first tap), written back when ``value``
            is in the bank's window; returns the max of the bank whose window ends."""
            news = []
            for b, (use, start, _) in enumerate(banks):
                mem = Memory(shape=fold, depth=depth, init=[])
                m.submodules[f"{name}{b}"] = mem
                wp = mem.write_port()
                rp = mem.read_port(transparent_for=(wp,))
                new = [Mux(start, value[j], _max(rp.data[j], value[j])) for j in range(lanes)]
                m.d.comb += [rp.addr.eq(read_addr), rp.en.eq(adv),
                             wp.addr.eq(write_addr), wp.data.eq(Cat(*new)),
                             wp.en.eq(adv & write & use)]
                news.append(new)
            return [Mux(banks[0][2], a, b) for a, b in zip(*news)]

        # --- stage 1: the fold and its flags; the row stage's banks read at its fold
        v1 = stage(take, "v1", True)
        x1 = stage(self.i.payload, "x1", False)
        f1 = stage(f, "f1", False)
        row_end1 = stage(f_last & x_last, "row_end1", False)
        cols1, rows1 = flags(h_banks, "cols1"), flags(v_banks, "rows1")
        row_max = bank_rmw("cols", self.max_folds, f, f1, v1, x1, cols1)
        passed = v1 & (cols1[0][2] | cols1[1][2])

        # the passed maxima of a row come in (px, f) order: their count is the address
        addr = Signal(range(self.max_out * self.max_folds))
        with m.If(adv & v1):
            with m.If(row_end1):
                m.d.sync += addr.eq(0)
            with m.Elif(passed):
                m.d.sync += addr.eq(addr + 1)

        # --- stage 2: a window's max along the row; the column stage's banks read at it
        v2 = stage(passed, "v2", True)
        x2 = [stage(v, f"x2_{j}", False) for j, v in enumerate(row_max)]
        addr2 = stage(addr, "addr2", False)
        rows2 = flags(rows1, "rows2")
        pooled = bank_rmw("rows", self.max_out * self.max_folds, addr, addr2, v2, x2, rows2)
        ends = v2 & (rows2[0][2] | rows2[1][2])
        m.d.comb += adv.eq(skid_outputs(m, [self.o], [pooled], adv & ends, name="out",
                                        advance=adv))
        return m
