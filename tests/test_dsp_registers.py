"""The ECP5 flow moves plain flip-flops around a multiplier into the MULT18X18D
(`toolchain.dsp_registers`), and only those."""

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from groupnet_hw.toolchain.dsp_registers import pack_mult_registers, top_module as _top
from groupnet_hw.toolchain.synth import have_tools, synthesize
import recorded_netlists

pytestmark = pytest.mark.skipif(not have_tools("ecp5"), reason="YoWASP tools not installed")


class RegisteredMultiply(wiring.Component):
    """Two operand registers and a product register around one multiplier; with
    ``reset`` the operand registers have a reset, with ``enable`` an enable (``en``, or
    with ``inverted`` ``~en``); with ``reset_b`` only ``b`` has a reset."""

    a: In(signed(10))
    b: In(signed(12))
    en: In(1)
    y: Out(signed(22))

    def __init__(self, reset=False, enable=False, inverted=False, reset_b=False):
        self.reset, self.enable, self.inverted = reset, enable, inverted
        self.reset_b = reset_b
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        a = Signal(signed(10), reset_less=not self.reset)
        b = Signal(signed(12), reset_less=not (self.reset or self.reset_b))
        p = Signal(signed(22), reset_less=True)
        load = [a.eq(self.a), b.eq(self.b)]
        if self.enable:
            with m.If(~self.en if self.inverted else self.en):
                m.d.sync += load
        else:
            m.d.sync += load
        m.d.sync += [p.eq(a * b), self.y.eq(p)]
        return m


def _netlist(tmp_path, design):
    """Yosys's ECP5 netlist of ``design``, recorded in tests/netlists/ (:mod:`recorded_netlists`)."""
    return recorded_netlists.netlist(tmp_path, design)


def test_plain_registers_move_into_the_multiplier(tmp_path):
    netlist = _netlist(tmp_path, RegisteredMultiply())
    n_ffs = sum(c["type"] == "TRELLIS_FF" for c in _top(netlist)["cells"].values())
    stats = pack_mult_registers(netlist)
    assert stats == {"multipliers": 1, "inputs": 2, "outputs": 1, "flip_flops": 10 + 12 + 22}
    top = _top(netlist)
    cells = top["cells"]
    dsp = next(c for c in cells.values() if c["type"] == "MULT18X18D")
    assert all(dsp["parameters"][f"REG_{g}_CLK"] == "CLK0"
               for g in ("INPUTA", "INPUTB", "OUTPUT"))
    assert dsp["connections"]["CLK0"] == top["ports"]["clk"]["bits"]
    ffs = [c for c in cells.values() if c["type"] == "TRELLIS_FF"]
    assert len(ffs) == n_ffs - 44 == 22            # only the output port's register is left
    # the operand pins read what the operand registers read: the input ports
    operands = {dsp["connections"][f"{g}{i}"][0] for g in "AB" for i in range(18)} - {"0"}
    assert operands == set(top["ports"]["a"]["bits"]) | set(top["ports"]["b"]["bits"])
    # the port's register reads the product straight from the DSP's output register
    products = {dsp["connections"][f"P{i}"][0] for i in range(36)}
    assert {c["connections"]["DI"][0] for c in ffs} <= products


def test_registers_with_reset_stay_outside(tmp_path):
    netlist = _netlist(tmp_path, RegisteredMultiply(reset=True))
    stats = pack_mult_registers(netlist)
    # the operand registers keep their reset in the fabric; the plain product register
    # still moves in
    assert stats["inputs"] == 0 and stats["outputs"] == 1


def test_one_movable_operand_alone_stays_outside(tmp_path):
    """With one operand register movable and the other not (it has a reset), neither
    moves: nextpnr times a MULT18X18D with one input register as unregistered, so the
    moved register's path would be reported through the multiplier."""
    netlist = _netlist(tmp_path, RegisteredMultiply(reset_b=True))
    stats = pack_mult_registers(netlist)
    assert stats["inputs"] == 0 and stats["outputs"] == 1
    dsp = next(c for c in _top(netlist)["cells"].values() if c["type"] == "MULT18X18D")
    assert "REG_INPUTA_CLK" not in dsp["parameters"]


@pytest.mark.parametrize("inverted", [False, True])
def test_registers_with_an_enable_move_in_with_it(tmp_path, inverted):
    """Operand registers on an enable move into the DSP block with the enable on their
    groups' clock-enable pins; an enable Yosys inverted into the flip-flops (an enable
    on ``~en``) reaches both pins through one inverter."""
    netlist = _netlist(tmp_path, RegisteredMultiply(enable=True, inverted=inverted))
    top = _top(netlist)
    cells = top["cells"]
    # the operand registers' enable before the move: (CEMUX, net)
    enables = {(c["parameters"]["CEMUX"], c["connections"]["CE"][0]) for c in cells.values()
               if c["type"] == "TRELLIS_FF" and c["connections"].get("CE", ["1"]) != ["1"]}
    assert len(enables) == 1
    ((mux, net),) = enables
    assert pack_mult_registers(netlist) == {"multipliers": 1, "inputs": 2, "outputs": 1,
                                            "flip_flops": 10 + 12 + 22}
    dsp = next(c for c in cells.values() if c["type"] == "MULT18X18D")
    assert (dsp["parameters"]["REG_INPUTA_CE"], dsp["parameters"]["REG_INPUTB_CE"],
            dsp["parameters"]["REG_OUTPUT_CE"]) == ("CE0", "CE1", "CE2")
    assert dsp["connections"]["CE2"] == ["1"]          # the product register: no enable
    ce0, ce1 = dsp["connections"]["CE0"], dsp["connections"]["CE1"]
    assert ce0 == ce1
    if mux == "CE":
        assert ce0 == [net]
    else:
        assert mux == "INV"     # the flip-flops loaded while `net` was 0
        (inverter,) = [c for c in cells.values()
                       if c["type"] == "LUT4" and c["connections"]["Z"] == ce0]
        assert inverter["parameters"]["INIT"] == "0101010101010101"   # Z = ~A
        assert inverter["connections"]["A"] == [net]
        # a net of its own: nothing else drives it
        drivers = [c for c in cells.values() for port, bits in c["connections"].items()
                   if c["port_directions"].get(port) == "output" and ce0[0] in bits]
        assert drivers == [inverter]


def test_the_classifier_heads_multipliers_take_all_their_registers(tmp_path):
    """The head's operand and product registers have no reset, so every multiplier of
    it is registered on both sides inside its DSP block (outside, an operand register
    through the multiplier into a product register was a 10.48 ns path on ECP5)."""
    import numpy as np

    from groupnet_hw.hw.head import ClassifierHead
    rng = np.random.default_rng(0)
    head = ClassifierHead(16, 14, 2, 2, rng.integers(-200, 200, (10, 16)).tolist(),
                          rng.integers(-3000, 3000, 10).tolist(), lanes=4)
    stats = pack_mult_registers(_netlist(tmp_path, head))
    assert stats["multipliers"] >= 4
    assert stats["inputs"] == 2 * stats["multipliers"]
    assert stats["outputs"] == stats["multipliers"]


@pytest.mark.toolchain
def test_place_and_route_packs_and_the_multiplier_path_is_gone(tmp_path):
    path = tmp_path / "m.v"
    path.write_text(verilog.convert(RegisteredMultiply(), name="top"))
    r = synthesize(path, "top", "ecp5", tmp_path, freq_mhz=200)
    assert r["dsp_registers"]["flip_flops"] == 44
    # register, routes and the 3.9 ns multiplier in one cycle before; now the DSP's own
    assert r["fmax_mhz"] > 200, r.get("critical_path")


@pytest.mark.toolchain
def test_recorded_netlists_are_what_yosys_makes_now(tmp_path):
    """The netlists the pass tests read from tests/netlists/ are this Yosys's: a fresh
    synthesis of a recorded design gives the same cells."""
    for design in (RegisteredMultiply(), RegisteredMultiply(enable=True, inverted=True)):
        text = recorded_netlists.design_verilog(design)
        recorded = recorded_netlists.netlist(tmp_path, design)
        assert recorded_netlists.recorded_path(text).is_file()
        fresh = recorded_netlists.synthesized_netlist(text, tmp_path)
        cells = [{name: c["type"] for name, c in _top(n)["cells"].items()}
                 for n in (recorded, fresh)]
        assert cells[0] == cells[1]
