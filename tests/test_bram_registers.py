"""The ECP5 flow moves the plain flip-flops behind a block RAM's read data into the
DP16KD's output register (`toolchain.bram_registers`), and only those; the board build step
(`toolchain.hard_registers`) runs both netlist passes."""

import json

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from groupnet_hw.toolchain.bram_registers import pack_bram_output_registers
from groupnet_hw.hw.fifo import FIFOChoices, StreamFIFO
from groupnet_hw.toolchain.netlist import top_module
from groupnet_hw.toolchain.synth import have_tools, synthesize
from test_dsp_registers import RegisteredMultiply, _netlist

pytestmark = pytest.mark.skipif(not have_tools("ecp5"), reason="YoWASP tools not installed")


class RegisteredRead(wiring.Component):
    """A block RAM whose read data is registered: ``reset`` gives the register a reset,
    ``enable`` loads it on ``en`` (``inverted``: on ``~en``), ``tap`` lets logic read the
    data beside the register, ``again`` registers it once more before the port."""

    def __init__(self, width=16, reset=False, enable=False, inverted=False, tap=False,
                 again=False):
        self.width, self.reset, self.enable, self.inverted, self.tap_ = width, reset, enable, inverted, tap
        self.again = again
        super().__init__({"addr": In(9), "wdata": In(width), "we": In(1), "re": In(1),
                          "en": In(1), "q": Out(width), "tap": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=unsigned(self.width), depth=512, init=[],
                                        attrs={"ram_style": "block", "no_rw_check": 1})
        wr, rd = mem.write_port(), mem.read_port()
        m.d.comb += [wr.addr.eq(self.addr), wr.data.eq(self.wdata), wr.en.eq(self.we),
                     rd.addr.eq(self.addr), rd.en.eq(self.re)]
        data = Signal(self.width, reset_less=not self.reset)
        if self.enable:
            with m.If(~self.en if self.inverted else self.en):
                m.d.sync += data.eq(rd.data)
        else:
            m.d.sync += data.eq(rd.data)
        if self.again:          # a fabric register behind it, for a timed path
            m.d.sync += self.q.eq(data)
        else:
            m.d.comb += self.q.eq(data)
        if self.tap_:
            m.d.comb += self.tap.eq(rd.data.xor())
        return m


def _brams(netlist):
    return [c for c in top_module(netlist)["cells"].values() if c["type"] == "DP16KD"]


def _ffs(netlist):
    return [c for c in top_module(netlist)["cells"].values() if c["type"] == "TRELLIS_FF"]


@pytest.mark.parametrize("enable,inverted", [(False, False), (True, False), (True, True)])
def test_the_data_register_becomes_the_output_register(tmp_path, enable, inverted):
    netlist = _netlist(tmp_path, RegisteredRead(enable=enable, inverted=inverted))
    top = top_module(netlist)
    (bram,) = _brams(netlist)
    assert bram["parameters"]["REGMODE_A"] == bram["parameters"]["REGMODE_B"] == "NOREG"
    enables = {(c["parameters"].get("CEMUX"), c["connections"].get("CE", ["1"])[0])
               for c in _ffs(netlist)}
    n_ffs = len(_ffs(netlist))
    assert pack_bram_output_registers(netlist) == {"block_rams": 1, "ports": 1,
                                                   "flip_flops": 16}
    assert len(_ffs(netlist)) == n_ffs - 16 == 0
    # the read port is the one whose data pins drive the output port now
    q = top["ports"]["q"]["bits"]
    read = next(p for p in "AB" if bram["connections"][f"DO{p}0"][0] in q)
    assert bram["parameters"][f"REGMODE_{read}"] == "OUTREG"
    assert {bram["connections"][f"DO{read}{i}"][0] for i in range(16)} == set(q)
    oce = bram["connections"][f"OCE{read}"]
    if not enable:
        assert oce == ["1"]
    else:
        ((mux, net),) = enables
        if mux == "CE":
            assert oce == [net]
        else:                           # loaded while `net` is 0: through one inverter
            (inverter,) = [c for c in top["cells"].values()
                           if c["type"] == "LUT4" and c["connections"]["Z"] == oce]
            assert inverter["parameters"]["INIT"] == "0101010101010101"
            assert inverter["connections"]["A"] == [net]


def test_a_data_register_with_reset_stays_outside(tmp_path):
    """The DP16KD's RST resets its read latch as well, so a register with a reset is not
    its output register."""
    netlist = _netlist(tmp_path, RegisteredRead(reset=True))
    assert pack_bram_output_registers(netlist)["ports"] == 0
    assert all(b["parameters"]["REGMODE_B"] == "NOREG" for b in _brams(netlist))


def test_data_read_by_logic_as_well_stays_outside(tmp_path):
    netlist = _netlist(tmp_path, RegisteredRead(tap=True))
    assert pack_bram_output_registers(netlist) == {"block_rams": 1, "ports": 0,
                                                   "flip_flops": 0}


def test_36_bit_words_move_both_halves_on_the_read_port(tmp_path):
    """In Yosys's 36-bit mapping all 36 data pins are the read port's: both REGMODEs are
    set together and the enable goes on OCEB."""
    netlist = _netlist(tmp_path, RegisteredRead(width=36, enable=True))
    (bram,) = _brams(netlist)
    assert int(bram["parameters"]["DATA_WIDTH_A"], 2) == 36
    assert pack_bram_output_registers(netlist) == {"block_rams": 1, "ports": 1,
                                                   "flip_flops": 36}
    assert bram["parameters"]["REGMODE_A"] == bram["parameters"]["REGMODE_B"] == "OUTREG"
    assert bram["connections"]["OCEB"] != ["0"]
    assert not _ffs(netlist)


def test_a_skip_fifos_block_ram_read_leaves_from_its_output_register(tmp_path):
    """A FIFO that Yosys puts in block RAM without being told (``ram="auto"``, deep
    enough): no collision logic behind its data (``no_rw_check`` on every FIFO memory),
    so its registered output is the DP16KD's own register, and nothing is left between
    the block RAM and the FIFO's port."""
    netlist = _netlist(tmp_path, StreamFIFO(unsigned(28), FIFOChoices(600, out_register=True)))
    brams = _brams(netlist)
    assert brams
    stats = pack_bram_output_registers(netlist)
    assert stats["ports"] == len(brams) and stats["flip_flops"] == 28
    top = top_module(netlist)
    out = set(top["ports"]["o__payload"]["bits"])
    driven = {b["connections"][pin][0] for b in brams for pin in b["connections"]
              if pin.startswith("DO")}
    assert out <= driven


@pytest.mark.toolchain
def test_place_and_route_times_the_block_rams_own_register(tmp_path):
    """nextpnr times an OUTREG DP16KD from its output register: the read data into a
    fabric register was 5.6 ns of clock-to-output plus the route; now it leaves a
    register."""
    path = tmp_path / "m.v"
    design = RegisteredRead(enable=True, again=True)
    path.write_text(verilog.convert(design, name="top"))
    r = synthesize(path, "top", "ecp5", tmp_path, freq_mhz=200)
    assert r["bram_registers"] == {"block_rams": 1, "ports": 1, "flip_flops": 16}
    pnr = json.loads((tmp_path / "synth-ecp5" / "netlist_pnr.json").read_text())
    (bram,) = _brams(pnr)
    assert "OUTREG" in (bram["parameters"]["REGMODE_A"], bram["parameters"]["REGMODE_B"])
    # the block RAM's register into the fabric one: below the 5.6 ns a NOREG DP16KD's
    # read data alone takes (2.02 ns when this was written)
    path = r["critical_path"]
    assert path["start"].startswith("mem") and path["delay_ns"] < 4.0, path
    assert r["fmax_mhz"] > 250, path


def test_the_board_build_step_rewrites_the_file_or_says_why_not(tmp_path, capsys):
    from groupnet_hw.toolchain.hard_registers import main
    netlist = _netlist(tmp_path, RegisteredMultiply())
    path = tmp_path / "n.json"
    path.write_text(json.dumps(netlist))
    assert main([str(path)]) == 0
    assert "44 flip-flops moved into 1 MULT18X18D" in capsys.readouterr().out
    assert main([str(path)]) == 0          # once packed, nothing more moves
    assert "0 flip-flops moved" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_port_with_its_reset_used_keeps_its_register_outside(tmp_path):
    """A DP16KD's RST resets its output register too, which the fabric register had no
    reset for: such a port is left as it is."""
    netlist = _netlist(tmp_path, RegisteredRead())
    (bram,) = _brams(netlist)
    q = set(top_module(netlist)["ports"]["q"]["bits"])
    some_net = next(iter(top_module(netlist)["ports"]["en"]["bits"]))
    for port in "AB":
        bram["connections"][f"RST{port}"] = [some_net]
    assert pack_bram_output_registers(netlist)["ports"] == 0
    assert bram["parameters"]["REGMODE_A"] == bram["parameters"]["REGMODE_B"] == "NOREG"
    assert len(_ffs(netlist)) == len(q) == 16
