# amaranth: UnusedElaboratable=no
"""Board-level hardware: UART, serial host link, DE10-Nano project writer.

The host link is checked the way a host sees it: the testbench drives the
``rx`` pin bit by bit and decodes the ``tx`` pin bit by bit, with exact bit
timing, around a small fake accelerator core with the real core's interface.
"""

import random

import pytest
from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from groupnet_hw.hw.boards import BOARDS, get_board
from groupnet_hw.hw.boards.de10nano import DE10NanoTop
from groupnet_hw.hw.boards.host_link import (HostLink, decode_reply, encode_reply,
                                              reply_length)
from groupnet_hw.hw.boards.uart import (BITS_PER_BYTE, UARTReceiver, UARTTransmitter,
                                         baud_divisor)
from groupnet_hw.sim.streams import run_streams
from groupnet_hw.toolchain.board_project import write_board_project


# --------------------------------------------------------------------------- fakes

class FakeCore(wiring.Component):
    """Stand-in accelerator: logit j = sum_p w[j][p] * pixel[p], w in {-1, 0, 1}; cls = argmax.

    Same ports as the real core. It holds its result in an output register and
    takes no pixel while a result waits, like a pipeline under back-pressure.
    """

    def __init__(self, n_pixels=8, n_classes=3, logit_width=12):
        assert n_pixels * 255 < (1 << (logit_width - 1))
        self.n_pixels, self.n_classes, self.logit_width = n_pixels, n_classes, logit_width
        self.weights = [[((p + j) % 3) - 1 for p in range(n_pixels)] for j in range(n_classes)]
        cls_width = max(1, (n_classes - 1).bit_length())
        layout = data.StructLayout({
            "logits": data.ArrayLayout(signed(logit_width), n_classes),
            "cls": unsigned(cls_width),
        })
        super().__init__({
            "i": In(stream.Signature(unsigned(8))),
            "o": Out(stream.Signature(layout)),
        })

    def reference(self, image):
        logits = [sum(w * x for w, x in zip(row, image)) for row in self.weights]
        return logits.index(max(logits)), logits

    def elaborate(self, platform):
        m = Module()
        count = Signal(range(self.n_pixels))
        acc = [Signal(signed(self.logit_width), name=f"acc{j}") for j in range(self.n_classes)]
        nxt = [Signal(signed(self.logit_width), name=f"nxt{j}") for j in range(self.n_classes)]
        pix = self.i.payload
        with m.Switch(count):
            for p in range(self.n_pixels):
                with m.Case(p):
                    for j in range(self.n_classes):
                        w = self.weights[j][p]
                        m.d.comb += nxt[j].eq(acc[j] + pix if w > 0 else
                                              acc[j] - pix if w < 0 else acc[j])
        best, best_j = nxt[0], Const(0, self.o.payload.cls.shape())
        for j in range(1, self.n_classes):
            greater = nxt[j] > best
            best, best_j = Mux(greater, nxt[j], best), Mux(greater, j, best_j)

        m.d.comb += self.i.ready.eq(~self.o.valid)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            with m.If(count == self.n_pixels - 1):
                m.d.sync += [self.o.payload.logits[j].eq(nxt[j]) for j in range(self.n_classes)]
                m.d.sync += [self.o.payload.cls.eq(best_j), self.o.valid.eq(1), count.eq(0)]
                m.d.sync += [a.eq(0) for a in acc]
            with m.Else():
                m.d.sync += [a.eq(n) for a, n in zip(acc, nxt)]
                m.d.sync += count.eq(count + 1)
        return m


class Loopback(wiring.Component):
    """Transmitter wired to receiver through a serial line."""

    def __init__(self, divisor):
        self.divisor = divisor
        super().__init__({
            "i": In(stream.Signature(unsigned(8))),
            "o": Out(stream.Signature(unsigned(8))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = UARTTransmitter(self.divisor)
        m.submodules.rx = rx = UARTReceiver(self.divisor)
        wiring.connect(m, wiring.flipped(self.i), tx.i)
        wiring.connect(m, rx.o, wiring.flipped(self.o))
        m.d.comb += rx.rx.eq(tx.tx)
        return m


# --------------------------------------------------------------------------- line helpers

def line_bits(byte, stop=1):
    return [0] + [(byte >> k) & 1 for k in range(8)] + [stop]


async def drive_line(ctx, pin, bits, divisor):
    """Hold each bit on ``pin`` for ``divisor`` cycles."""
    for bit in bits:
        ctx.set(pin, bit)
        await ctx.tick().repeat(divisor)


def decode_line(samples, divisor):
    """Decode 8N1 characters from per-cycle line samples, insisting on exact bit timing.

    Returns a list of (start cycle, byte).
    """
    chars, t = [], 0
    while t < len(samples):
        if samples[t]:
            t += 1
            continue
        assert t + BITS_PER_BYTE * divisor <= len(samples), f"character at {t} truncated"
        bits = []
        for k in range(BITS_PER_BYTE):
            seg = samples[t + k * divisor:t + (k + 1) * divisor]
            assert len(set(seg)) == 1, f"bit {k} of the character at cycle {t} is not " \
                                       f"{divisor} cycles long: {seg}"
            bits.append(seg[0])
        assert bits[0] == 0 and bits[-1] == 1, f"bad framing at cycle {t}: {bits}"
        chars.append((t, sum(b << k for k, b in enumerate(bits[1:9]))))
        t += BITS_PER_BYTE * divisor
    return chars


# --------------------------------------------------------------------------- UART

@pytest.mark.parametrize("divisor", [2, 3, 4])
def test_uart_loopback_random_bytes(divisor):
    rng = random.Random(divisor)
    payload = [rng.randrange(256) for _ in range(40)]
    # Ready pauses of a few cycles stay well inside one character time, so no
    # byte may be lost; valid gaps exercise an idle line between characters.
    run = run_streams(Loopback(divisor), {"i": payload}, {"o": len(payload)},
                      stall=0.3, seed=divisor, max_cycles=40 * len(payload) * 10 * divisor)
    assert run.outputs["o"] == payload


@pytest.mark.parametrize("divisor", [2, 4])
def test_uart_loopback_line_rate(divisor):
    payload = list(range(0, 256, 17))
    run = run_streams(Loopback(divisor), {"i": payload}, {"o": len(payload)})
    assert run.outputs["o"] == payload
    char = BITS_PER_BYTE * divisor
    gaps = {b - a for a, b in zip(run.out_cycles["o"], run.out_cycles["o"][1:])}
    assert gaps == {char}, "bytes do not arrive at exactly one per character time"


def test_uart_transmitter_waveform():
    divisor = 3
    dut = UARTTransmitter(divisor)
    payload = [0x00, 0xFF, 0xA5, 0x5A, 0x01, 0x80]
    samples, accepted = [], []

    async def recorder(ctx):
        async for _, _, tx in ctx.tick().sample(dut.tx):
            samples.append(tx)

    async def bench(ctx):
        assert ctx.get(dut.tx) == 1
        ctx.set(dut.i.valid, 1)
        cycle = 0
        for byte in payload:
            ctx.set(dut.i.payload, byte)
            while True:
                _, _, ready = await ctx.tick().sample(dut.i.ready)
                cycle += 1
                if ready:
                    accepted.append(cycle - 1)
                    break
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(BITS_PER_BYTE * divisor + 5)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(recorder)
    sim.add_testbench(bench)
    sim.run()

    chars = decode_line(samples, divisor)
    assert [b for _, b in chars] == payload
    # Start bit 1 cycle after acceptance; characters back to back on the line.
    assert [t for t, _ in chars] == [a + 1 for a in accepted]
    starts = [t for t, _ in chars]
    assert {b - a for a, b in zip(starts, starts[1:])} == {BITS_PER_BYTE * divisor}
    assert all(samples[starts[-1] + BITS_PER_BYTE * divisor:])


def test_uart_receiver_glitch_framing_error_and_latency():
    divisor = 4
    dut = UARTReceiver(divisor)
    got, first_low = [], {}

    async def recorder(ctx):
        cycle = 0
        async for _, _, valid, payload in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append((cycle, payload))
            cycle += 1

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        await ctx.tick().repeat(5)
        # A one-cycle low glitch is not a start bit.
        await drive_line(ctx, dut.rx, [0], 1)
        await drive_line(ctx, dut.rx, [1] * 3, divisor)
        first_low["A"] = 5 + 1 + 3 * divisor
        await drive_line(ctx, dut.rx, line_bits(0x3C), divisor)
        # Stop bit 0 followed by a held-low line: dropped, then resynchronised.
        await drive_line(ctx, dut.rx, line_bits(0xE7, stop=0) + [0] * 12 + [1] * 2, divisor)
        await drive_line(ctx, dut.rx, line_bits(0x81) + line_bits(0x00), divisor)
        await ctx.tick().repeat(2 * BITS_PER_BYTE * divisor)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(recorder)
    sim.add_testbench(bench)
    sim.run()

    assert [b for _, b in got] == [0x3C, 0x81, 0x00]
    assert got[0][0] - first_low["A"] == divisor // 2 + 9 * divisor + 3


def test_uart_rejects_bad_divisor():
    with pytest.raises(ValueError):
        UARTReceiver(1)
    with pytest.raises(TypeError):
        UARTTransmitter(4.5)


# --------------------------------------------------------------------------- reply format

@pytest.mark.parametrize("logit_width", [1, 7, 8, 9, 12, 16, 17])
def test_reply_roundtrip(logit_width):
    rng = random.Random(logit_width)
    n_classes = 5
    lo, hi = -(1 << (logit_width - 1)), (1 << (logit_width - 1)) - 1
    logits = [lo, hi] + [rng.randint(lo, hi) for _ in range(n_classes - 2)]
    raw = encode_reply(3, logits, logit_width)
    assert len(raw) == reply_length(n_classes, logit_width) == \
        1 + n_classes * ((logit_width + 7) // 8)
    assert raw[0] == 3
    assert decode_reply(raw, n_classes, logit_width) == (3, logits)


def test_reply_format_is_little_endian_sign_extended():
    assert encode_reply(1, [-2, 300], 12) == bytes([1, 0xFE, 0xFF, 0x2C, 0x01])
    with pytest.raises(ValueError, match="bytes"):
        decode_reply(b"\x00\x01", 2, 12)
    with pytest.raises(ValueError, match="out of range"):
        decode_reply(bytes([7, 0, 0, 0, 0]), 2, 12)


# --------------------------------------------------------------------------- host link

def run_host_link(core, images, divisor, gap_rng=None):
    """Send ``images`` bit-serially into a HostLink; return (tx samples, leds samples)."""
    dut = HostLink(core, divisor)
    tx_samples, leds_samples = [], []

    async def recorder(ctx):
        async for _, _, tx, leds in ctx.tick().sample(dut.tx, dut.leds):
            tx_samples.append(tx)
            leds_samples.append(leds)

    async def host(ctx):
        await ctx.tick().repeat(3)
        for image in images:
            for pixel in image:
                await drive_line(ctx, dut.rx, line_bits(pixel), divisor)
                gap = gap_rng.randrange(3 * divisor) if gap_rng is not None else 0
                if gap:
                    await ctx.tick().repeat(gap)
        await ctx.tick().repeat((dut.reply_length + 3) * BITS_PER_BYTE * divisor)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(recorder)
    sim.add_testbench(host)
    sim.run()
    return dut, tx_samples, leds_samples


@pytest.mark.parametrize("gaps", [False, True], ids=["back_to_back", "idle_gaps"])
def test_host_link_end_to_end(gaps):
    divisor = 4
    core = FakeCore(n_pixels=8, n_classes=3, logit_width=12)
    rng = random.Random(1)
    images = []
    while len(images) < 2:
        image = [rng.randrange(256) for _ in range(core.n_pixels)]
        cls, _ = core.reference(image)
        # Distinct nonzero classes, so that the LEDs visibly change each time.
        if cls != 0 and all(core.reference(other)[0] != cls for other in images):
            images.append(image)
    expected = [core.reference(image) for image in images]

    dut, tx, leds = run_host_link(core, images, divisor,
                                  gap_rng=random.Random(2) if gaps else None)
    chars = decode_line(tx, divisor)
    n = dut.reply_length
    assert n == reply_length(3, 12) == 7
    assert len(chars) == 2 * n
    received = bytes(b for _, b in chars)
    for k, (cls, logits) in enumerate(expected):
        reply = received[k * n:(k + 1) * n]
        assert reply == encode_reply(cls, logits, 12)
        assert decode_reply(reply, 3, 12) == (cls, logits)
        # The class is on the LEDs by the time its reply starts.
        assert leds[chars[k * n][0]] == cls
    assert leds[0] == 0
    assert leds[-1] == expected[-1][0]
    # Every reply leaves as one burst at line rate.
    for k in range(2):
        starts = [t for t, _ in chars[k * n:(k + 1) * n]]
        assert {b - a for a, b in zip(starts, starts[1:])} == {BITS_PER_BYTE * divisor}


def test_host_link_rejects_wide_class():
    with pytest.raises(ValueError, match="classes"):
        HostLink(FakeCore(n_pixels=2, n_classes=300, logit_width=12), 4)


# --------------------------------------------------------------------------- boards

def test_write_board_project_de10nano(tmp_path, monkeypatch):
    # Make the "no Quartus here" path deterministic even on a machine that has it.
    platform_cls = BOARDS["de10nano"].platform
    monkeypatch.setattr(platform_cls, "has_required_tools", lambda self: False)

    result = write_board_project(FakeCore(n_pixels=6), tmp_path)

    project = tmp_path / "quartus"
    assert result["project_dir"] == project
    assert result["built"] is False and result["bitstream"] is None
    assert result["divisor"] == 434
    qsf = result["qsf"].read_text()
    assert "5CSEBA6U23I7" in qsf
    for pin in ("PIN_V11", "PIN_AG13", "PIN_AF13", "PIN_W15", "PIN_AH17"):
        assert pin in qsf, pin
    assert result["verilog"].parent == project
    assert "module groupnet_top" in result["verilog"].read_text()
    assert "create_clock" in result["sdc"].read_text()
    assert result["script"].name == "build_groupnet_top.sh" and result["script"].exists()
    assert set(result["files"]) >= {result["qsf"], result["sdc"], result["verilog"],
                                    result["script"]}
    message = result["message"]
    assert "\n" not in message
    assert f"cd {project} && sh build_groupnet_top.sh" in message


def test_baud_divisor():
    assert baud_divisor(50e6, 115200) == 434
    assert baud_divisor(50e6, 1_000_000) == 50
    with pytest.raises(ValueError, match="baud"):
        baud_divisor(50e6, 20_000_000)      # 2.5 cycles per bit
    with pytest.raises(ValueError, match="baud"):
        DE10NanoTop(FakeCore(n_pixels=2), baud=40_000_000)


def test_unknown_board():
    with pytest.raises(ValueError, match="de10nano"):
        get_board("de0nano")
    with pytest.raises(ValueError, match="known boards"):
        write_board_project(FakeCore(n_pixels=2), "/nonexistent", board="arty")
    assert get_board("de10nano").device == "5CSEBA6U23I7"


@pytest.mark.parametrize("channels,stall", [(3, 0.0), (3, 0.4), (2, 0.3)])
def test_pixel_packer_packs_bytes_into_pixels(channels, stall):
    """RGB host link: C bytes per pixel, channel c in bits 8c..8c+7, under back-pressure."""
    import random
    from groupnet_hw.hw.boards.host_link import PixelPacker
    from groupnet_hw.sim.streams import run_streams
    rng = random.Random(channels)
    data = [rng.randrange(256) for _ in range(channels * 17)]
    run = run_streams(PixelPacker(channels), {"i": data}, {"o": 17}, stall=stall, seed=5)
    want = [sum(b << (8 * c) for c, b in enumerate(data[p * channels:(p + 1) * channels]))
            for p in range(17)]
    assert [int(v) for v in run.outputs["o"]] == want
