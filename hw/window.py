"""Sliding-window generator: turns a raster pixel stream into convolution windows."""

from dataclasses import dataclass
from typing import NamedTuple

from amaranth.hdl import Array, Cat, Const, Module, Mux, Shape, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..numerics import conv_out_size

__all__ = ["SlidingWindow", "WindowChoices", "WindowGeometry", "LINE_RAM_KINDS", "BLOCK_LINE_ATTRS",
           "window_latency", "window_refill"]

#: How the line buffer is built: ``"logic"``, one memory with ``kernel`` read ports and
#: a write lane per ring row, which Yosys maps to flip-flops (Cyclone V, iCE40) or
#: duplicated distributed RAM (ECP5); ``"block"``, one memory per ring row and window
#: column (one read port, whole-word writes), marked ``ram_style = "block"``, which
#: Yosys maps to block RAM (its block RAM mappings take one read port, and Cyclone V's
#: M10K no write lanes narrower than its data width); ``"serial"``, the whole ring in one
#: memory of pixel-wide words marked ``ram_style = "block"``, read one tap per cycle into
#: the window register (for a consumer that takes a window at most every
#: :func:`window_refill` cycles: a folded MVU), which block
#: RAM takes even for the short rows that ``"block"``'s one-row memories are too small for.
LINE_RAM_KINDS = ("logic", "block", "serial")

#: Attributes of a line memory meant for block RAM. ``no_rw_check``: Yosys otherwise
#: keeps the simulation's read-before-write result for a read of the word written in
#: the same cycle, by delaying the write a cycle and adding a compare and a
#: multiplexer behind the block RAM's data, which on ECP5 put that data past the
#: 10 ns period. A window never reads a word in the cycle it is written: it reads
#: complete rows, and columns of the row being written left of the writer's column;
#: a pad tap's read, whatever its address, is replaced by the pad pixel.
BLOCK_LINE_ATTRS = {"ram_style": "block", "no_rw_check": 1}


def window_latency(line_ram="logic", kernel=1):
    """Cycles from accepting the last pixel a window needs to the window on the output
    (:class:`SlidingWindow`): see the pixel, read the line buffer, register the window
    (``line_ram`` "logic" or "block": 3, the same); "serial" reads the ``kernel**2``
    taps one per cycle, registers each as it leaves the block RAM and then in the
    window register: ``kernel**2 + 3``."""
    return kernel * kernel + 3 if line_ram == "serial" else 3


def window_refill(line_ram="logic", kernel=1):
    """Fewest cycles from the cycle a window is taken to the next window on the output:
    1 (the next is read while the consumer holds this one), or with "serial" line
    buffers ``kernel**2 + 3`` (the output register is refilled tap by tap once it is
    empty). A consumer slower than this never waits for the window."""
    return kernel * kernel + 3 if line_ram == "serial" else 1


class WindowGeometry(NamedTuple):
    """Which input pixels each window of a :class:`SlidingWindow` reaches and how many
    image rows its line buffer holds, without building the window (the compiler sizes
    line buffers from :meth:`ring_rows`). Parameters as :class:`SlidingWindow`'s."""

    height: int
    width: int
    kernel: int
    stride: int
    dilation: int
    padding: int

    @property
    def out_height(self):
        return conv_out_size(self.height, self.kernel, self.stride, self.dilation, self.padding)

    @property
    def out_width(self):
        return conv_out_size(self.width, self.kernel, self.stride, self.dilation, self.padding)

    def reach(self, r, c):
        """Row offset from the base, column, and rows freed for window ``(r, c)``."""
        span = (self.kernel - 1) * self.dilation + 1
        top = r * self.stride - self.padding
        left = c * self.stride - self.padding
        base = min(max(top, 0), self.height)
        need_row = min(top + span - 1, self.height - 1) - base
        need_col = min(left + span - 1, self.width - 1)
        if c != self.out_width - 1:
            release = 0
        elif r == self.out_height - 1:
            release = self.height - base
        else:
            release = min(max(top + self.stride, 0), self.height) - base
        return need_row, need_col, release

    def ring_rows(self, line_ram="logic"):
        """Image rows the line buffer of a window built as ``line_ram``
        (:data:`LINE_RAM_KINDS`) holds: :attr:`SlidingWindow.ring_rows`."""
        # Correctness: before a window the reader needs `need_row + 1` complete rows from
        # its base, and before it frees rows at the end of an output row it needs them all
        # written (with stride > span, or unused rows at the bottom, it frees rows no
        # window reads). One row more lets the writer fill a row while the reader catches
        # up. That is not always enough for full throughput: after a frame's last row the
        # reader still holds the frame's bottom rows while it emits the bottom-padding
        # windows, and the writer is already filling the next frame. The peak row count is
        # found by running the writer/reader counters at full rate over a few frames with
        # an unbounded ring (the same rules as the hardware below).
        need = 1
        for r in range(self.out_height):
            for c in range(self.out_width):
                need_row, _, release = self.reach(r, c)
                need = max(need, need_row + 1, release)
        rows = need + 1
        # A consumer slower than one window per cycle (a folded MVU) is still reading the
        # frame's last output row when the next frame arrives. For the next frame's first
        # window to be ready when the last one is taken, the ring holds both the rows the
        # last output row reads and those the first output row needs. With "same"
        # padding that is within the count above; a valid (padding 0) window needs more
        # (6 rows instead of 4 at 3x3), else its MVU idles at every frame boundary.
        if self.padding == 0:
            last_held = self.reach(self.out_height - 1, self.out_width - 1)[2]
            first_rows = self.reach(0, 0)[0] + 1
            rows = max(rows, last_held + first_rows)
        if line_ram == "serial":
            # A serial window frees rows after its last tap's read, up to two windows
            # later than the others (which read a window while the consumer still holds
            # the one before): one row more keeps the writer from waiting on that.
            rows += 1
        if self.out_height * self.out_width > self.height * self.width:
            return rows     # output-bound: the writer has to wait anyway
        H, W = self.height, self.width
        geometry = [self.reach(r, c) for r in range(self.out_height)
                    for c in range(self.out_width)]
        frames = 4
        fed = wx = complete = out = 0
        while out < frames * len(geometry):
            accept = fed < frames * H * W
            if accept:
                rows = max(rows, complete + 1)
            need_row, need_col, release = geometry[out % len(geometry)]
            issue = ((need_row < complete or (need_row == complete and wx > need_col))
                     and complete >= release)
            row_done = accept and wx == W - 1
            if accept:
                fed += 1
                wx = 0 if wx == W - 1 else wx + 1
            if issue:
                out += 1
            complete += row_done - (release if issue else 0)
        return rows


@dataclass(frozen=True)
class WindowChoices:
    """How a sliding window is built, as opposed to what it computes: the implementation
    choices the schedule makes for it, handed to :class:`SlidingWindow` whole. Neither
    changes a window; they change the memory, the latency and the read decision.

    Parameters
    ----------
    line_ram : {"logic", "block", "serial"}
        How the line buffer is built (:data:`LINE_RAM_KINDS`): one memory with
        ``kernel`` read ports, or ``kernel * ring_rows`` one-port memories of ``width``
        pixels for block RAM, both with the same behaviour and timing; or ``"serial"``,
        one block-RAM memory of ``ring_rows`` rows (each ``2**ceil(log2(width))`` words,
        so that an address is the ring row and the column side by side) read one tap
        per cycle: the same windows, ``kernel**2 + 3`` cycles after the last pixel a
        window needs and at most one per ``kernel**2 + 3`` cycles (the register is filled
        only once the consumer has taken the previous window).
    paced : bool
        The consumer takes at most one window every two cycles (a folded MVU,
        ``ii >= 2``). The next window is then read once the output register is
        empty rather than in the cycle it is taken: the read enables, which fan out
        to the whole line buffer's read registers, depend on the window's own
        registers only, never on ``o.ready``; and the next read waits until the one
        before is registered, so the decision to read may be a cycle old (no lookup of
        the next window in front of it). At such a consumer's rate this costs no
        cycle; at one window per cycle it would halve the rate.

    Raises
    ------
    ValueError
        An unknown ``line_ram`` or a ``paced`` that is not a bool: one line.
    """

    line_ram: str = "logic"
    paced: bool = False

    def __post_init__(self):
        if self.line_ram not in LINE_RAM_KINDS:
            raise ValueError(f"line_ram must be one of {', '.join(LINE_RAM_KINDS)}, "
                             f"not {self.line_ram!r}")
        if not isinstance(self.paced, bool):
            raise ValueError(f"paced must be a bool, not {self.paced!r}")


class SlidingWindow(wiring.Component):
    """Sliding window over a raster pixel stream (the im2col of one convolution).

    Input pixels arrive in raster order, frame after frame with no marker. For every output
    position ``(r, c)`` (raster order, ``out_height`` x ``out_width`` per frame) one beat
    carries the whole ``kernel`` x ``kernel`` window: tap ``t = ky*kernel + kx`` is input
    pixel ``(r*stride - padding + ky*dilation, c*stride - padding + kx*dilation)``, or the
    pad pixel when that position lies outside the image. The taps are what
    ``torch.nn.functional.unfold`` gathers, with an arbitrary pad pixel instead of zero.

    The line buffer is one :class:`~amaranth.lib.memory.Memory` of ``width`` words, each
    word holding one column of a ring of ``ring_rows`` image rows (written with per-row
    granularity). ``kernel`` synchronous read ports fetch the ``kernel`` window columns; a
    multiplexer picks the ``kernel`` window rows out of each column, so one full window
    leaves per cycle. The writer (input side) and the reader (output side) are decoupled:
    the writer only waits when its next ring row is still held by the reader, the reader
    only waits until the last input pixel a window needs has been written.

    Parameters
    ----------
    pixel_shape : shape-like
        Shape of one pixel, e.g. ``unsigned(C)`` (binary),
        ``data.ArrayLayout(signed(w), C)`` (fixed point),
        ``data.ArrayLayout(unsigned(n), C)`` (n-bit activation levels) or
        ``data.ArrayLayout(unsigned(8), 3)`` (RGB). The window only moves raw pixel bits.
    height, width : int
        Input image size.
    kernel : int
        Window size (square). ``kernel = 1`` (a 1x1 convolution) gives one-tap windows:
        the input pixels at multiples of ``stride``, through the same line buffer.
    stride : int
        Output step in input pixels.
    dilation : int
        Distance between neighbouring taps in input pixels.
    padding : int
        Pad pixels added on each side.
    pad_value : int
        Raw bits of the pad pixel (the whole pixel, not one lane); negative values are
        two's complement over the pixel width, so ``-1`` is all-ones (+1 for binary
        pixels) and ``0`` is the zero of a fixed-point layer.
    choices : WindowChoices
        How its line buffer is built and whether its consumer is paced (the default:
        in logic, not paced).

    Attributes
    ----------
    i : ``In(stream.Signature(pixel_shape))``
        Input pixels, raster order.
    o : ``Out(stream.Signature(data.ArrayLayout(pixel_shape, kernel*kernel)))``
        Windows, raster order over output positions.
    out_height, out_width : int
        Output size, ``conv_out_size(size, kernel, stride, dilation, padding)``.
    geometry : WindowGeometry
        The pixels each window reaches, from which ``ring_rows`` follows.
    ring_rows : int
        Image rows the line buffer holds: the rows one window reaches (the span
        ``(kernel-1)*dilation + 1``, less any rows outside the image), plus one so the
        writer fills a row while the reader still uses the oldest, plus what the
        bottom-padding windows at a frame's end keep held while the next frame arrives
        (found at construction by running the writer/reader counters at full rate).
        Without padding, at least the rows of the last output row plus those of the
        first (6 at 3x3), so a slow consumer finds the next frame's first window ready.
        Memory: ``ring_rows * width`` pixels (``kernel`` times that with ``line_ram="block"``;
        ``ring_rows * 2**ceil(log2(width))`` words with ``"serial"``).

    Latency
    -------
    A window is on ``o`` ``latency`` cycles after the last input pixel it uses is
    accepted, if the output side is idle: 3 (one cycle to see the pixel, one synchronous
    memory read, the output register: the taps picked from the read data with
    ``line_ram="logic"``, the block RAM's data as it comes with ``"block"``); with
    ``"serial"``, ``kernel**2 + 3`` (one read per tap, the last tap's data registered
    twice: as it leaves the block RAM, then in the output register).
    The last window of every frame also waits for the frame's last pixel (the reader frees
    the frame's rows with it). Windows that only need rows below the last input row (bottom
    padding) leave one per cycle after the frame's last pixel: with ``padding`` = the usual
    ``(kernel-1)*dilation // 2`` and stride 1 the frame's tail is ``padding*out_width +
    padding + latency`` cycles.

    Throughput
    ----------
    One input pixel per cycle and one window per cycle (``"serial"``: one window per
    ``kernel**2 + 3`` cycles, counted from the cycle the previous one was taken). In
    steady state over back-to-back frames (input always valid, output always ready) a
    frame takes exactly
    ``window_cycles(height, width) = height*width`` cycles as long as there are no more
    windows than pixels (``out_height*out_width <= height*width``, true whenever
    ``2*padding <= (kernel-1)*dilation``); otherwise ``out_height*out_width``.
    """

    def __init__(self, pixel_shape, height, width, kernel=3, stride=1, dilation=1,
                 padding=1, pad_value=0, choices=WindowChoices()):
        for name, value, low in (("height", height, 1), ("width", width, 1),
                                 ("kernel", kernel, 1), ("stride", stride, 1),
                                 ("dilation", dilation, 1), ("padding", padding, 0)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
        self.pixel_shape = pixel_shape
        self.height = height
        self.width = width
        self.kernel = kernel
        self.stride = stride
        self.dilation = dilation
        self.padding = padding
        self.out_height = conv_out_size(height, kernel, stride, dilation, padding)
        self.out_width = conv_out_size(width, kernel, stride, dilation, padding)
        if self.out_height < 1 or self.out_width < 1:
            raise ValueError(f"a {kernel}x{kernel} window (dilation {dilation}, padding "
                             f"{padding}) does not fit a {height}x{width} image")
        self._pixel_width = Shape.cast(pixel_shape).width
        limit = 1 << self._pixel_width
        if not isinstance(pad_value, int) or not -limit <= pad_value < limit:
            raise ValueError(f"pad_value must be an integer fitting {self._pixel_width} bits, "
                             f"not {pad_value!r}")
        self.pad_value = pad_value
        if not isinstance(choices, WindowChoices):
            raise ValueError(f"choices must be a WindowChoices, not {choices!r}")
        self.choices = choices
        self.line_ram = line_ram = choices.line_ram
        self.paced = choices.paced
        self.latency = window_latency(line_ram, kernel)
        self.geometry = WindowGeometry(height, width, kernel, stride, dilation, padding)
        self.ring_rows = self.geometry.ring_rows(line_ram)
        super().__init__({
            "i": In(stream.Signature(pixel_shape)),
            "o": Out(stream.Signature(data.ArrayLayout(pixel_shape, kernel * kernel))),
        })

    def _row_entry(self, r):
        """Per output row: the last row it needs and the rows freed after its last
        window (both counted from the oldest held row), and per tap row whether it is
        inside the image and its offset from the oldest held row."""
        k, d, H = self.kernel, self.dilation, self.height
        need_row, _, _ = self.geometry.reach(r, 0)
        _, _, release = self.geometry.reach(r, self.out_width - 1)
        top = r * self.stride - self.padding
        base = min(max(top, 0), H)
        valid = [0 <= top + ky * d < H for ky in range(k)]
        offset = [top + ky * d - base if v else 0 for ky, v in enumerate(valid)]
        return dict(need_row=need_row, release=release, valid=valid, offset=offset)

    def _col_entry(self, c):
        """Per output column: the last column it needs, and per tap column whether it
        is inside the image and its line-buffer address."""
        k, d, W = self.kernel, self.dilation, self.width
        _, need_col, _ = self.geometry.reach(0, c)
        left = c * self.stride - self.padding
        valid = [0 <= left + kx * d < W for kx in range(k)]
        addr = [left + kx * d if v else 0 for kx, v in enumerate(valid)]
        return dict(need_col=need_col, valid=valid, addr=addr)

    def _table_layout(self, entries, index_limit):
        """Struct layout of one table entry (unsigned fields wide enough for every entry)."""
        fields = {}
        for name, value in entries[0].items():
            if name == "valid":
                fields[name] = unsigned(self.kernel)
            elif isinstance(value, list):
                top = max(max(e[name]) for e in entries)
                fields[name] = data.ArrayLayout(range(max(top, index_limit) + 1), self.kernel)
            else:
                # need_row / need_col are negative for windows wholly in the padding.
                lo = min(min(e[name] for e in entries), 0)
                hi = max(max(e[name] for e in entries), index_limit)
                fields[name] = range(lo, hi + 1)
        return data.StructLayout(fields)

    @staticmethod
    def _table_init(entry):
        """``entry`` as a constant initializer of its layout."""
        return {name: sum(1 << i for i, v in enumerate(value) if v) if name == "valid"
                else value for name, value in entry.items()}

    def elaborate(self, platform):
        m = Module()

        W = self.width
        k = self.kernel
        H_out, W_out = self.out_height, self.out_width
        R = self.ring_rows
        pw = self._pixel_width

        # `columns[kx]` reads window column kx: a word of R lanes, one per ring row.
        if self.line_ram == "logic":
            # One word per image column, one `pw`-bit lane per ring row: a read port
            # then returns a whole window column whatever rows the window covers.
            m.submodules.lines = lines = Memory(shape=unsigned(R * pw), depth=W, init=[])
            wr = lines.write_port(granularity=pw)
            columns = [[lines.read_port()] for _ in range(k)]
            row_writes = [(wr, None)]
        elif self.line_ram == "serial":
            # The ring in one memory: the address is the ring row above the column bits,
            # so that no multiplier sits in front of the read address.
            col_bits = max(1, (W - 1).bit_length())
            m.submodules.lines = lines = Memory(shape=unsigned(pw), depth=R << col_bits,
                                                init=[], attrs=BLOCK_LINE_ATTRS)
            serial_read = lines.read_port()
            columns = [[] for _ in range(k)]
            row_writes = [(lines.write_port(), "serial")]
        else:
            # Block RAM takes one read port and no partial writes: one memory per ring
            # row and window column, written alike, so each needs only a write enable.
            columns, row_writes = [], []
            for kx in range(k):
                ports = []
                for row in range(R):
                    mem = Memory(shape=unsigned(pw), depth=W, init=[], attrs=BLOCK_LINE_ATTRS)
                    m.submodules[f"lines{kx}_{row}"] = mem
                    row_writes.append((mem.write_port(), row))
                    ports.append(mem.read_port())
                columns.append(ports)

        # --- writer -------------------------------------------------------------------
        wx = Signal(range(W))             # column of the next input pixel
        wslot = Signal(range(R))          # ring row it goes to
        complete = Signal(range(R + 1))   # complete rows held, counted from the reader's base

        # Named signals, not expressions: an expression used in several places is
        # emitted again at every use, which multiplies the generated Verilog.
        accept = Signal()
        row_done = Signal()
        m.d.comb += [accept.eq(self.i.valid & self.i.ready), row_done.eq(accept & (wx == W - 1))]
        m.d.comb += self.i.ready.eq(complete < R)
        for wr, row in row_writes:
            m.d.comb += wr.addr.eq(wx)
            if row == "serial":
                m.d.comb += [wr.addr.eq((wslot << col_bits) | wx),
                             wr.data.eq(Value.cast(self.i.payload)), wr.en.eq(accept)]
            elif row is None:
                m.d.comb += [wr.data.eq(Value.cast(self.i.payload).replicate(R)),
                             wr.en.eq(Mux(accept, Const(1, R) << wslot, 0))]
            else:
                m.d.comb += [wr.data.eq(Value.cast(self.i.payload)),
                             wr.en.eq(accept & (wslot == row))]
        with m.If(accept & (wx == W - 1)):
            m.d.sync += wslot.eq(Mux(wslot == R - 1, 0, wslot + 1))

        # --- reader: picks the next window and issues its reads -------------------------
        # Everything about a window that depends only on its row or only on its column
        # (which rows and columns it needs, which taps are padding, where they sit in the
        # ring) comes from small constant tables, looked up for the *next* window and
        # registered when the current one issues. The decision to issue is then only a
        # few comparisons of small registers: no clamping arithmetic on the path that
        # ends in `o.valid` and the read enables (it limited Fmax to ~54 MHz on ECP5).
        rows = [self._row_entry(r) for r in range(H_out)]
        cols = [self._col_entry(c) for c in range(W_out)]
        orow = Signal(range(H_out))
        ocol = Signal(range(W_out))
        next_orow = Signal(range(H_out))
        next_ocol = Signal(range(W_out))
        last_col = Signal()
        last_row = Signal()
        m.d.comb += [
            last_col.eq(ocol == W_out - 1),
            last_row.eq(orow == H_out - 1),
            next_ocol.eq(Mux(last_col, 0, ocol + 1)),
            next_orow.eq(Mux(last_col, Mux(last_row, 0, orow + 1), orow)),
        ]

        row_fields = self._table_layout(rows, R)
        col_fields = self._table_layout(cols, W)
        cur_row = Signal(row_fields, init=self._table_init(rows[0]))
        cur_col = Signal(col_fields, init=self._table_init(cols[0]))
        row_table = Array(Value.cast(row_fields.const(self._table_init(e))) for e in rows)
        col_table = Array(Value.cast(col_fields.const(self._table_init(e))) for e in cols)

        base_slot = Signal(range(R))   # ring row of the oldest row the reader holds
        issue = Signal()
        release = Signal(range(R + 1))
        m.d.comb += release.eq(Mux(issue & last_col, cur_row.release, 0))

        # The next state of everything the issue decision reads, so that the decision
        # (`available`) is a register, computed a cycle ahead: `issue` enables every read
        # port's data register (on ECP5, with line buffers in logic, close to a thousand
        # flip-flops) and the comparisons in front of that fan-out limited Fmax.
        complete_next = Signal.like(complete)
        wx_step = Signal.like(wx)          # the writer's column after an accepted pixel
        wx_next = Signal.like(wx)
        cur_row_next = Signal(row_fields)
        cur_col_next = Signal(col_fields)
        ocol_next = Signal.like(ocol)
        m.d.comb += [
            complete_next.eq(complete + row_done - release),
            wx_step.eq(Mux(wx == W - 1, 0, wx + 1)),
            wx_next.eq(Mux(accept, wx_step, wx)),
            Value.cast(cur_row_next).eq(Mux(issue, row_table[next_orow], Value.cast(cur_row))),
            Value.cast(cur_col_next).eq(Mux(issue, col_table[next_ocol], Value.cast(cur_col))),
            ocol_next.eq(Mux(issue, next_ocol, ocol)),
        ]

        def available_in(row, col, complete, wx, last_col):
            # The window's last pixel has been written...
            return (((row.need_row < complete)
                     | ((row.need_row == complete) & (wx > col.need_col)))
                    # ...and the rows freed after an output row's last window, too.
                    & (~last_col | (complete >= row.release)))

        available = Signal(init=0)     # nothing is available from reset: no row is written
        # A serial window issues nothing in the three cycles after an issue (its last
        # taps' data, then the full output register), a paced one nothing in the cycle
        # after (its read is not registered yet), so the reader's side of the decision
        # may be a cycle old: its registers rather than their next state. That takes the
        # next window's table lookup (`ocol` + 1, the column table, the compare) off the
        # path into `available`, the ECP5 critical path of the CIFAR-size network
        # (11.3 ns). The writer's side stays current, and so does the latency; a release
        # a cycle old only matters in the cycle after the issue.
        #
        # The writer's side is decided both ways from its registers, a pixel accepted
        # this cycle or not, and `accept` only picks one: it comes from the producer's
        # `valid`, and through the writer's column increment and the compare it was the
        # CIFAR-size stem window's path into `available` on ECP5 (10.34 ns). Same
        # decision, same cycle.
        complete_if_accepted, complete_if_not = Signal.like(complete), Signal.like(complete)
        if self.line_ram == "serial" or self.paced:
            row, col, last = cur_row, cur_col, last_col
            m.d.comb += [complete_if_accepted.eq(complete + (wx == W - 1)),
                         complete_if_not.eq(complete)]
        else:
            row, col, last = cur_row_next, cur_col_next, ocol_next == W_out - 1
            m.d.comb += [complete_if_accepted.eq(complete + (wx == W - 1) - release),
                         complete_if_not.eq(complete - release)]
        if_accepted, if_not = Signal(), Signal()
        m.d.comb += [if_accepted.eq(available_in(row, col, complete_if_accepted, wx_step, last)),
                     if_not.eq(available_in(row, col, complete_if_not, wx, last))]
        m.d.sync += available.eq(Mux(accept, if_accepted, if_not))

        col_ok = Signal(k)
        row_ok = Signal(k)
        row_slot = [Signal(range(R), name=f"row_slot{ky}") for ky in range(k)]
        for kx in range(k):
            for port in columns[kx]:
                m.d.comb += [port.addr.eq(cur_col.addr[kx]), port.en.eq(issue)]
        m.d.sync += [cur_row.eq(cur_row_next), cur_col.eq(cur_col_next), ocol.eq(ocol_next),
                     wx.eq(wx_next)]
        with m.If(issue):
            m.d.sync += [
                col_ok.eq(cur_col.valid),
                row_ok.eq(cur_row.valid),
                orow.eq(next_orow),
            ]
            for ky in range(k):
                slot = base_slot + cur_row.offset[ky]
                m.d.sync += row_slot[ky].eq(Mux(slot >= R, slot - R, slot))
            with m.If(last_col):
                slot = base_slot + cur_row.release
                m.d.sync += base_slot.eq(Mux(slot >= R, slot - R, slot))
        m.d.sync += complete.eq(complete_next)

        # --- output: the read data, with pad pixels outside the image --------------------
        pad = Const(self.pad_value & ((1 << pw) - 1), pw)

        def window_of(column_data, slots, rows_ok, cols_ok):
            taps = []
            for ky in range(k):
                for kx in range(k):
                    pixel = column_data[kx].word_select(slots[ky], pw)
                    taps.append(Mux(rows_ok[ky] & cols_ok[kx], pixel, pad))
            return Cat(*taps)

        if self.line_ram == "serial":
            self._serial_output(m, serial_read, col_bits, available, issue, base_slot,
                                cur_row, cur_col, pad)
            return m

        read_data = [Cat(p.data for p in columns[kx]) for kx in range(k)]
        # Room on the output: the register is empty or, unless paced, being taken.
        room = Signal()
        m.d.comb += room.eq(~self.o.valid if self.paced else ~self.o.valid | self.o.ready)
        # Two stages: the read ports (which only update on `issue`, so their data holds
        # while it waits) and an output register, loaded on `move`.
        read = Signal()              # the read ports hold a window not yet registered
        move = Signal()
        # Paced, the next read waits until this one is registered (at most one window
        # every two cycles, the consumer's rate anyway): `available` may be a cycle old.
        m.d.comb += [move.eq(read & room),
                     issue.eq(available & (~read if self.paced else ~read | move))]
        with m.If(issue):
            m.d.sync += read.eq(1)
        with m.Elif(move):
            m.d.sync += read.eq(0)
        with m.If(move):
            m.d.sync += self.o.valid.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        if self.line_ram == "logic":
            # The taps are picked from the read data and registered: the consumer (an
            # MVU's input multiplexers) starts from a register, not after the row
            # multiplexers (on ECP5 that path into the MVU limited Fmax).
            window_r = Signal(len(self.o.payload.as_value()), name="window_r")
            with m.If(move):
                m.d.sync += window_r.eq(window_of(read_data, row_slot, row_ok, col_ok))
            m.d.comb += self.o.payload.eq(window_r)
        else:
            # A block RAM's data comes late in the cycle (5.8 ns after the clock on ECP5,
            # the Fmax-limiting path into the MVU): it is registered as it comes, with the
            # tap selection that goes with it, and the window is picked from the registers.
            # No reset on the data (the flags say what it holds): on ECP5 these are then
            # the DP16KDs' own output registers (hw.bram_registers).
            data_r = [Signal(len(d), name=f"column{kx}_r", reset_less=True)
                      for kx, d in enumerate(read_data)]
            slot_r = [Signal.like(slot, name=f"row_slot{ky}_r") for ky, slot in enumerate(row_slot)]
            row_ok_r, col_ok_r = Signal(k), Signal(k)
            with m.If(move):
                m.d.sync += [*(r.eq(d) for r, d in zip(data_r, read_data)),
                             *(r.eq(v) for r, v in zip(slot_r, row_slot)),
                             row_ok_r.eq(row_ok), col_ok_r.eq(col_ok)]
            m.d.comb += self.o.payload.eq(window_of(data_r, slot_r, row_ok_r, col_ok_r))

        return m

    def _serial_output(self, m, port, col_bits, available, issue, base_slot, cur_row,
                       cur_col, pad):
        """``"serial"``: read the current window's taps one per cycle, in tap order,
        into the output register, and issue (advance to the next window, free rows) with
        the last read, so that no row is freed while it is still being read.

        A window is read only while the output register is empty and no earlier read is
        in flight: its enables depend on the window's own registers, never on
        ``o.ready``."""
        k, R, pw = self.kernel, self.ring_rows, self._pixel_width
        taps = k * k
        busy = Signal()                       # a window's taps are being read
        tap = Signal(range(taps))             # the tap read this cycle (while reading)
        ky = Signal(range(k))
        kx = Signal(range(k))
        reading = Signal()
        # A read's data comes out of the block RAM the next cycle (stage D) and is
        # registered as it comes, with nothing in front (stage E), before the pad
        # multiplexer and the tap registers: from the block RAM (5.6 ns clock-to-output
        # on ECP5) through the multiplexer to the nine tap registers was the CIFAR-size
        # network's most common late path.
        data_valid, e_valid = Signal(), Signal()
        data_tap, e_tap = Signal(range(taps)), Signal(range(taps))
        data_ok, e_ok = Signal(), Signal()
        # no reset: on ECP5 it is then the DP16KD's own output register (hw.bram_registers)
        e_data = Signal(pw, reset_less=True)
        last_d, last_e = Signal(), Signal()   # a window's last tap is in stage D / E
        m.d.comb += [
            last_d.eq(data_valid & (data_tap == taps - 1)),
            last_e.eq(e_valid & (e_tap == taps - 1)),
            reading.eq(busy | (available & ~self.o.valid & ~last_d & ~last_e)),
            issue.eq(reading & (tap == taps - 1)),
        ]
        slot = Signal(range(2 * R))
        m.d.comb += slot.eq(base_slot + cur_row.offset[ky])
        row = Signal(range(R))
        m.d.comb += row.eq(Mux(slot >= R, slot - R, slot))
        m.d.comb += [port.en.eq(reading),
                     port.addr.eq((row << col_bits) | cur_col.addr[kx])]
        with m.If(reading):
            m.d.sync += busy.eq(~issue)
            with m.If(issue):
                m.d.sync += [tap.eq(0), ky.eq(0), kx.eq(0)]
            with m.Else():
                m.d.sync += tap.eq(tap + 1)
                with m.If(kx == k - 1):
                    m.d.sync += [kx.eq(0), ky.eq(ky + 1)]
                with m.Else():
                    m.d.sync += kx.eq(kx + 1)
        m.d.sync += [data_valid.eq(reading), data_tap.eq(tap),
                     data_ok.eq(cur_row.valid.bit_select(ky, 1)
                                & cur_col.valid.bit_select(kx, 1)),
                     e_valid.eq(data_valid), e_tap.eq(data_tap), e_ok.eq(data_ok),
                     e_data.eq(port.data)]

        window_r = Signal(taps * pw, name="window_r")
        tap_value = Signal(pw)
        m.d.comb += tap_value.eq(Mux(e_ok, e_data, pad))
        with m.If(e_valid):
            for t in range(taps):
                with m.If(e_tap == t):
                    m.d.sync += window_r.word_select(t, pw).eq(tap_value)
        with m.If(last_e):
            m.d.sync += self.o.valid.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        m.d.comb += self.o.payload.eq(window_r)
