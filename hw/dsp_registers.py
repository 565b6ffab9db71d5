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

from collections import defaultdict

__all__ = ["pack_mult_registers", "top_module"]

MULT = "MULT18X18D"
FF = "TRELLIS_FF"


def top_module(netlist):
    """The top module of a Yosys JSON netlist."""
    for module in netlist["modules"].values():
        if str(module.get("attributes", {}).get("top", "0")).strip("0"):
            return module
    raise ValueError("the netlist has no top module")


#: The clock-enable pin each registered group of a MULT18X18D takes.
CE_PINS = {"INPUTA": "CE0", "INPUTB": "CE1", "OUTPUT": "CE2"}


def _movable_ff(cell):
    """``(clock net, enable)`` of a flip-flop without reset on a rising clock, else
    ``None``. The enable is ``"1"`` (always), ``("CE", net)`` or ``("INV", net)``
    (enabled while ``net`` is 0)."""
    if cell["type"] != FF:
        return None
    p, c = cell.get("parameters", {}), cell["connections"]
    if p.get("CLKMUX", "CLK") != "CLK" or p.get("GSR", "DISABLED") != "DISABLED":
        return None
    no_reset = p.get("LSRMUX", "LSR") == "LSR" and c.get("LSR", ["0"]) == ["0"]
    if not (no_reset and {"DI", "Q", "CLK"} <= set(c)):
        return None
    mux, ce = p.get("CEMUX", "1").strip(), c.get("CE", ["1"])[0]
    if mux == "1" or (mux == "CE" and ce == "1") or (mux == "INV" and ce == "0"):
        enable = "1"
    elif mux in ("CE", "INV") and isinstance(ce, int):
        enable = (mux, ce)
    else:
        return None
    return c["CLK"][0], enable


def pack_mult_registers(netlist):
    """Rewrite ``netlist`` (Yosys ``write_json``, flattened) in place.

    Returns ``{"multipliers", "inputs", "outputs", "flip_flops"}``: the MULT18X18D
    cells, how many of their input groups and outputs were registered, and the
    flip-flops removed.
    """
    top = top_module(netlist)
    cells = top["cells"]
    drivers, sinks = {}, defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for bit in bits:
                if isinstance(bit, int):
                    if dirs.get(port) == "output":
                        drivers[bit] = (name, port)
                    else:
                        sinks[bit].append((name, port))
    for port in top.get("ports", {}).values():
        for bit in port["bits"]:
            if isinstance(bit, int) and port["direction"] != "input":
                sinks[bit].append(("<port>", ""))

    stats = {"multipliers": 0, "inputs": 0, "outputs": 0, "flip_flops": 0}
    removed = set()
    inverted = {}           # enable net -> its inverter's output net
    # a new net's number: one past every number the netlist uses (cells, ports, names)
    used = [b for n in top.get("netnames", {}).values() for b in n.get("bits", [])]
    used += [b for p in top.get("ports", {}).values() for b in p["bits"]]
    next_net = 1 + max([b for b in [*used, *drivers, *sinks] if isinstance(b, int)], default=1)

    def enable_net(enable):
        nonlocal next_net
        if enable == "1":
            return "1"
        mux, net = enable
        if mux == "CE":
            return net
        if net not in inverted:
            inverted[net] = next_net
            cells[f"$dsp_ce_inv_{net}"] = {
                "hide_name": 1, "type": "LUT4", "parameters": {"INIT": "0101010101010101"},
                "attributes": {}, "port_directions": {p: "input" for p in "ABCD"} | {"Z": "output"},
                "connections": {"A": [net], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [next_net]}}
            next_net += 1
        return inverted[net]

    def register(cell, group, clk, enable):
        ce = CE_PINS[group]
        cell["parameters"].update({f"REG_{group}_CLK": "CLK0", f"REG_{group}_CE": ce,
                                   f"REG_{group}_RST": "RST0"})
        cell["connections"].update({"CLK0": [clk], ce: [enable_net(enable)], "RST0": ["0"]})
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
                ff = drivers.get(bit) if isinstance(bit, int) else None
                kind = _movable_ff(cells[ff[0]]) if ff and ff[0] in cells and ff[1] == "Q" else None
                if kind is None:
                    new = None
                    break
                clocks.add(kind[0])
                enables.add(kind[1])
                new[pin] = cells[ff[0]]["connections"]["DI"][0]
                ffs.add(ff[0])
            if new and len(enables) == 1:
                plans[group] = (new, ffs, enables.pop())
        out, enables = {}, set()
        for i in range(36):
            pin = f"P{i}"
            bit = con.get(pin, [None])[0]
            users = sinks.get(bit, []) if isinstance(bit, int) else []
            if not users:
                continue
            ff = users[0][0] if len(users) == 1 and users[0][1] == "DI" else None
            kind = _movable_ff(cells[ff]) if ff in cells else None
            if kind is None:
                out = None
                break
            clocks.add(kind[0])
            enables.add(kind[1])
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


def main(argv=None):
    """``python -m groupnet_hw.hw.dsp_registers NETLIST.json``: rewrite the netlist in
    place (the board project's build script runs it between Yosys and nextpnr)."""
    import json
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m groupnet_hw.hw.dsp_registers NETLIST.json", file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            netlist = json.load(f)
        stats = pack_mult_registers(netlist)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args[0]}: not a Yosys JSON netlist ({exc})", file=sys.stderr)
        return 1
    with open(args[0], "w") as f:
        json.dump(netlist, f)
    print(f"{stats['flip_flops']} flip-flops moved into {stats['multipliers']} MULT18X18D "
          f"({stats['inputs']} operand and {stats['outputs']} product registers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
