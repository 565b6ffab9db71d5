"""Move the plain flip-flops behind an ECP5 block RAM's read data into the DP16KD's own
output register (``REGMODE = OUTREG``).

Yosys 0.70 maps every memory to a DP16KD without its output register
(``brams_map_16kd.v``: ``REGMODE_A = REGMODE_B = "NOREG"``) and has no pass that absorbs
the register the design puts behind the read data. A DP16KD's data then arrives 5.6 ns
after the clock, and the route to that register fills most of the rest of a 10 ns cycle:
the CIFAR-size network's last paths over 10 ns on ECP5 were exactly these (skip FIFOs'
and line memories' read data into their registers). In OUTREG mode the same data leaves
a register inside the block.

The two modes hold the same registers: in ``NOREG`` the read data is latched on the clock
edge while ``CE`` is high and holds otherwise (the read port's enable, as Yosys maps it);
``OUTREG`` adds a register behind that latch, loaded while ``OCE`` is high. A flip-flop
behind the data, loaded on its own enable, is that register, so moving it in keeps the
behaviour exactly. A port's data moves when every used read-data pin drives exactly one
flip-flop without a reset, on the port's own clock edge, and nothing else, all with one
enable; that enable goes on the port's ``OCE`` pin (an inverted one through one LUT4
inverter). A flip-flop with a reset stays outside: the DP16KD's ``RST`` also resets the
latch, so it is not the same register; for the same reason a port whose ``RST`` is
used keeps its register outside. The designs give their block RAM data registers
no reset for that reason (``hw.window``, ``hw.fifo``, the MVUs' weight operands).

In 36-bit mode (``DATA_WIDTH_A = 36``, Yosys's pseudo-dual-port mapping) all 36 data
pins are port B's read data: nextpnr then takes ``REGMODE_A`` and ``REGMODE_B`` together
and the output register's enable from ``OCEB``.
"""

from __future__ import annotations

from .netlist import NetlistIndex

__all__ = ["pack_bram_output_registers"]

BRAM = "DP16KD"


def _int_param(value):
    """An integer parameter as Yosys's JSON writes it (a string of 32 binary digits)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text, 2) if len(text) == 32 and set(text) <= {"0", "1"} else int(text)


def _read_ports(cell):
    """``[(REGMODE parameters, reset pins, clock pin, OCE pin, data pins)]`` of a
    DP16KD's read ports."""
    if _int_param(cell.get("parameters", {}).get("DATA_WIDTH_A", 18)) == 36:
        pins = [f"DOA{i}" for i in range(18)] + [f"DOB{i}" for i in range(18)]
        return [(("REGMODE_A", "REGMODE_B"), ("RSTA", "RSTB"), "CLKB", "OCEB", pins)]
    return [((f"REGMODE_{p}",), (f"RST{p}",), f"CLK{p}", f"OCE{p}",
             [f"DO{p}{i}" for i in range(18)]) for p in "AB"]


def pack_bram_output_registers(netlist):
    """Rewrite ``netlist`` (Yosys ``write_json``, flattened) in place.

    Returns ``{"block_rams", "ports", "flip_flops"}``: the DP16KD cells, how many of their
    read ports now use the output register, and the flip-flops removed.
    """
    index = NetlistIndex(netlist, "bram")
    cells = index.cells
    stats = {"block_rams": 0, "ports": 0, "flip_flops": 0}
    removed = []
    for name, cell in list(cells.items()):
        if cell["type"] != BRAM:
            continue
        stats["block_rams"] += 1
        params, con = cell.setdefault("parameters", {}), cell["connections"]
        for modes, resets, clock_pin, oce_pin, pins in _read_ports(cell):
            if any(params.get(mode, "NOREG") != "NOREG" for mode in modes):
                continue
            if any(con.get(pin, ["0"]) != ["0"] for pin in resets):
                continue        # a port reset would reset the moved register as well
            if params.get(f"{clock_pin}MUX", clock_pin) == "INV":
                continue        # the flip-flops it could take are on the rising edge
            clock = con.get(clock_pin, [None])[0]
            moves, enables = {}, set()
            for pin in pins:
                found = index.only_reader_ff(con.get(pin, [None])[0])
                if found == ():
                    continue
                if found is None or found[1][0] != clock:
                    moves = None
                    break
                moves[pin] = found[0]
                enables.add(found[1][1])
            if not moves or len(enables) != 1:
                continue
            for pin, ff in moves.items():
                q = cells[ff]["connections"]["Q"][0]
                index.sinks[con[pin][0]] = []
                con[pin] = [q]
                index.drivers[q] = (name, pin)
                removed.append(ff)
            params.update({mode: "OUTREG" for mode in modes})
            con[oce_pin] = [index.enable_net(enables.pop())]
            cell.setdefault("port_directions", {})[oce_pin] = "input"
            stats["ports"] += 1
    for ff in removed:
        del cells[ff]
    stats["flip_flops"] = len(removed)
    return stats
