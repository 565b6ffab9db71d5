"""Move plain flip-flops around ECP5 multipliers into the MULT18X18D's own registers.

Yosys 0.70 maps every multiplier to an unregistered MULT18X18D (``dsp_map_18x18.v``) and,
unlike its flows for other families, has no pass that absorbs the registers around it.
On ECP5 a multiplier with a register on each side then costs a route into the DSP tile,
the multiplier (3.9 ns) and a route out of it in one cycle: 10.1-10.5 ns on the default
network, the last paths over 10 ns. Vendor tools put those registers inside the DSP
block; this pass does the same on Yosys's JSON netlist before nextpnr reads it.

Only *plain* flip-flops move: no clock enable, no reset, rising clock (the data
registers of a lane-folded post-op are such flip-flops: ``reset_less`` in the RTL). A
register moved into the DSP block is the same D flip-flop, so the netlist's behaviour is
unchanged:

- an input group (``A0``-``A17`` or ``B0``-``B17``) is registered when every pin is a
  constant 0 or the output of a plain flip-flop on the one clock; the pins are
  reconnected to those flip-flops' inputs, and a flip-flop that drives nothing else is
  removed (one that also drives other logic stays, its copy is in the DSP);
- the output (``P0``-``P35``) is registered when every used pin drives exactly one plain
  flip-flop on the same clock and nothing else; the pins take over the flip-flops'
  outputs and the flip-flops are removed.
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


def _plain_ff(cell):
    """The clock net of a flip-flop without enable or reset, else ``None``."""
    if cell["type"] != FF:
        return None
    p, c = cell.get("parameters", {}), cell["connections"]
    if p.get("CLKMUX", "CLK") != "CLK" or p.get("GSR", "DISABLED") != "DISABLED":
        return None
    always = p.get("CEMUX", "1").strip() == "1" or (
        p.get("CEMUX") == "CE" and c.get("CE") == ["1"])
    no_reset = p.get("LSRMUX", "LSR") == "LSR" and c.get("LSR", ["0"]) == ["0"]
    if not (always and no_reset and {"DI", "Q", "CLK"} <= set(c)):
        return None
    return c["CLK"][0]


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

    def register(cell, group, clk):
        cell["parameters"].update({f"REG_{group}_CLK": "CLK0", f"REG_{group}_CE": "CE0",
                                   f"REG_{group}_RST": "RST0"})
        cell["connections"].update(CLK0=[clk], CE0=["1"], RST0=["0"])
        cell.setdefault("port_directions", {}).update(CLK0="input", CE0="input",
                                                      RST0="input")

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
            new, ffs = {}, set()
            for pin in pins:
                bit = con[pin][0]
                if bit == "0":
                    continue
                ff = drivers.get(bit) if isinstance(bit, int) else None
                clk = _plain_ff(cells[ff[0]]) if ff and ff[0] in cells and ff[1] == "Q" else None
                if clk is None:
                    new = None
                    break
                clocks.add(clk)
                new[pin] = cells[ff[0]]["connections"]["DI"][0]
                ffs.add(ff[0])
            if new:
                plans[group] = (new, ffs)
        out = {}
        for i in range(36):
            pin = f"P{i}"
            bit = con.get(pin, [None])[0]
            users = sinks.get(bit, []) if isinstance(bit, int) else []
            if not users:
                continue
            ff = users[0][0] if len(users) == 1 and users[0][1] == "DI" else None
            clk = _plain_ff(cells[ff]) if ff in cells else None
            if clk is None:
                out = None
                break
            clocks.add(clk)
            out[pin] = ff
        if out:
            plans["OUTPUT"] = out
        if len(clocks) != 1 or not plans:
            continue
        clk = clocks.pop()
        for group in ("INPUTA", "INPUTB"):
            if group not in plans:
                continue
            new, ffs = plans[group]
            for pin, d in new.items():
                q = con[pin][0]
                sinks[q] = [s for s in sinks[q] if s != (name, pin)]
                con[pin] = [d]
                sinks[d].append((name, pin))
            for ff in ffs:
                q = cells[ff]["connections"]["Q"][0]
                if not sinks[q] and ff not in removed:
                    removed.add(ff)
            register(cell, group, clk)
            stats["inputs"] += 1
        if "OUTPUT" in plans:
            for pin, ff in plans["OUTPUT"].items():
                con[pin] = list(cells[ff]["connections"]["Q"])
                drivers[con[pin][0]] = (name, pin)
                removed.add(ff)
            register(cell, "OUTPUT", clk)
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
