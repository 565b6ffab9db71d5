"""Move plain flip-flops around ECP5 multipliers into the MULT18X18D's own registers.

Yosys 0.70 maps every multiplier to an unregistered MULT18X18D (``dsp_map_18x18.v``) and,
unlike its flows for other families, has no pass that absorbs the registers around it.
On ECP5 a multiplier with a register on each side then costs a route into the DSP tile,
the multiplier (3.9 ns) and a route out of it in one cycle: 10.1-10.5 ns on the default
network, the last paths over 10 ns. Vendor tools put those registers inside the DSP
block; this pass does the same on Yosys's JSON netlist before nextpnr reads it.

Only flip-flops without a reset move, on a rising clock (the data registers around a
multiplier are such flip-flops: ``reset_less`` in the RTL), with or without a clock
enable. A register moved into the DSP block is the same D flip-flop, so the netlist's
behaviour is unchanged:

- the input groups (``A0``-``A17`` and ``B0``-``B17``) are registered when every pin of
  both is a constant 0 or the output of such a flip-flop on the one clock, each group's
  with one enable (one group alone is not moved: nextpnr would time the multiplier as
  unregistered); the pins are reconnected to those flip-flops' inputs, and a flip-flop
  that drives nothing else is removed (one that also drives other logic stays, its copy
  is in the DSP);
- the output (``P0``-``P35``) is registered when every used pin drives exactly one such
  flip-flop on the same clock and nothing else, all with the same enable; the pins take
  over the flip-flops' outputs and the flip-flops are removed.

Each registered group takes the enable on a clock-enable pin of its own (``CE0`` for
``A``, ``CE1`` for ``B``, ``CE2`` for the output). An enable Yosys inverted into the
flip-flops (``CEMUX = INV``) reaches the pin through one inverter (a ``LUT4``) per net:
the MVUs' pipeline registers all advance on one enable, so on the integer MVU every
multiplier's operands and product move in (the CIFAR-size network's first layer had 54
multipliers with registers on both sides outside, 12.8 ns on its late paths).
"""

from __future__ import annotations

from .netlist import NetlistIndex, top_module

__all__ = ["pack_mult_registers", "top_module"]

MULT = "MULT18X18D"

#: The clock-enable pin each registered group of a MULT18X18D takes.
CE_PINS = {"INPUTA": "CE0", "INPUTB": "CE1", "OUTPUT": "CE2"}


def pack_mult_registers(netlist):
    """Rewrite ``netlist`` (Yosys ``write_json``, flattened) in place.

    Returns ``{"multipliers", "inputs", "outputs", "flip_flops"}``: the MULT18X18D
    cells, how many of their input groups and outputs were registered, and the
    flip-flops removed.
    """
    index = NetlistIndex(netlist, "dsp")
    cells, drivers, sinks = index.cells, index.drivers, index.sinks
    stats = {"multipliers": 0, "inputs": 0, "outputs": 0, "flip_flops": 0}
    removed = set()

    def register(cell, group, clk, enable):
        ce = CE_PINS[group]
        cell["parameters"].update({f"REG_{group}_CLK": "CLK0", f"REG_{group}_CE": ce,
                                   f"REG_{group}_RST": "RST0"})
        cell["connections"].update({"CLK0": [clk], ce: [index.enable_net(enable)], "RST0": ["0"]})
        cell.setdefault("port_directions", {}).update({"CLK0": "input", ce: "input",
                                                       "RST0": "input"})

    for name, cell in list(cells.items()):
        if cell["type"] != MULT:
            continue
        stats["multipliers"] += 1
        params = cell.setdefault("parameters", {})
        if any(params.get(f"REG_{g}_CLK", "NONE") != "NONE"
               for g in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")):
            continue
        con = cell["connections"]
        clocks = set()
        plans = {}
        for group, prefix in (("INPUTA", "A"), ("INPUTB", "B")):
            pins = [f"{prefix}{i}" for i in range(18) if f"{prefix}{i}" in con]
            new, ffs, enables = {}, set(), set()
            for pin in pins:
                bit = con[pin][0]
                if bit == "0":
                    continue
                found = index.movable_driver(bit)
                if found is None:
                    new = None
                    break
                ff, (clock, enable) = found
                clocks.add(clock)
                enables.add(enable)
                new[pin] = cells[ff]["connections"]["DI"][0]
                ffs.add(ff)
            if new and len(enables) == 1:
                plans[group] = (new, ffs, enables.pop())
        out, enables = {}, set()
        for i in range(36):
            pin = f"P{i}"
            bit = con.get(pin, [None])[0]
            found = index.only_reader_ff(bit)
            if found == ():
                continue
            if found is None:
                out = None
                break
            ff, (clock, enable) = found
            clocks.add(clock)
            enables.add(enable)
            out[pin] = ff
        if out and len(enables) == 1:
            plans["OUTPUT"] = (out, enables.pop())
        if len({"INPUTA", "INPUTB"} & set(plans)) == 1:
            # nextpnr times a MULT18X18D with one operand registered as if neither were
            # (its timing classes are none, inputs, output, all): the path through the
            # register would be reported and placed as combinational
            plans.pop("INPUTA", None)
            plans.pop("INPUTB", None)
        if len(clocks) != 1 or not plans:
            continue
        clk = clocks.pop()
        for group in ("INPUTA", "INPUTB"):
            if group not in plans:
                continue
            new, ffs, enable = plans[group]
            for pin, d in new.items():
                q = con[pin][0]
                sinks[q] = [s for s in sinks[q] if s != (name, pin)]
                con[pin] = [d]
                sinks[d].append((name, pin))
            for ff in ffs:
                q = cells[ff]["connections"]["Q"][0]
                if not sinks[q] and ff not in removed:
                    removed.add(ff)
            register(cell, group, clk, enable)
            stats["inputs"] += 1
        if "OUTPUT" in plans:
            out, enable = plans["OUTPUT"]
            for pin, ff in out.items():
                con[pin] = list(cells[ff]["connections"]["Q"])
                drivers[con[pin][0]] = (name, pin)
                removed.add(ff)
            register(cell, "OUTPUT", clk, enable)
            stats["outputs"] += 1
    for ff in removed:
        # its data input may now feed only the DSP; its output net is the DSP's or unused
        del cells[ff]
    stats["flip_flops"] = len(removed)
    return stats
