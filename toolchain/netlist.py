"""Reading and editing Yosys's JSON netlist of an ECP5 design, for the passes that move
plain flip-flops into a hard block's own registers before nextpnr reads it
(:mod:`.dsp_registers`, :mod:`.bram_registers`)."""

from __future__ import annotations

from collections import defaultdict

__all__ = ["FF", "top_module", "movable_ff", "NetlistIndex"]

FF = "TRELLIS_FF"


def top_module(netlist):
    """The top module of a Yosys JSON netlist."""
    for module in netlist["modules"].values():
        if str(module.get("attributes", {}).get("top", "0")).strip("0"):
            return module
    raise ValueError("the netlist has no top module")


def movable_ff(cell):
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


class NetlistIndex:
    """The top module of ``netlist`` with each net's driver and readers, and new nets.

    Attributes
    ----------
    cells : dict
        The top module's cells (edited in place).
    drivers : dict
        net -> ``(cell, port)`` that drives it.
    sinks : dict
        net -> list of ``(cell, port)`` that read it (``("<port>", "")`` for a module
        output).
    """

    def __init__(self, netlist, tag):
        top = top_module(netlist)
        self.cells = top["cells"]
        self._tag = tag
        self.drivers, self.sinks = {}, defaultdict(list)
        for name, cell in self.cells.items():
            dirs = cell.get("port_directions", {})
            for port, bits in cell["connections"].items():
                for bit in bits:
                    if isinstance(bit, int):
                        if dirs.get(port) == "output":
                            self.drivers[bit] = (name, port)
                        else:
                            self.sinks[bit].append((name, port))
        for port in top.get("ports", {}).values():
            for bit in port["bits"]:
                if isinstance(bit, int) and port["direction"] != "input":
                    self.sinks[bit].append(("<port>", ""))
        # a new net's number: one past every number the netlist uses (cells, ports, names)
        used = [b for n in top.get("netnames", {}).values() for b in n.get("bits", [])]
        used += [b for p in top.get("ports", {}).values() for b in p["bits"]]
        self._next_net = 1 + max([b for b in [*used, *self.drivers, *self.sinks]
                                  if isinstance(b, int)], default=1)
        self._inverted = {}     # enable net -> its inverter's output net

    def movable_driver(self, bit):
        """``(flip-flop name, (clock, enable))`` when ``bit`` is the output of a
        flip-flop :func:`movable_ff` accepts, else ``None``."""
        ff = self.drivers.get(bit) if isinstance(bit, int) else None
        if not ff or ff[0] not in self.cells or ff[1] != "Q":
            return None
        kind = movable_ff(self.cells[ff[0]])
        return (ff[0], kind) if kind else None

    def only_reader_ff(self, bit):
        """``(flip-flop name, (clock, enable))`` when the one reader of ``bit`` is the
        data input of a flip-flop :func:`movable_ff` accepts; ``None`` when something
        else reads it too; ``()`` when nothing reads it."""
        users = self.sinks.get(bit, []) if isinstance(bit, int) else []
        if not users:
            return ()
        if len(users) != 1 or users[0][1] != "DI" or users[0][0] not in self.cells:
            return None
        kind = movable_ff(self.cells[users[0][0]])
        return (users[0][0], kind) if kind else None

    def enable_net(self, enable):
        """The net a hard block's clock-enable pin takes for a flip-flop ``enable``:
        ``"1"``, the enable's own net, or an inverter's output (one ``LUT4`` per net,
        shared by every pin that needs it)."""
        if enable == "1":
            return "1"
        mux, net = enable
        if mux == "CE":
            return net
        if net not in self._inverted:
            out = self._next_net
            self._next_net += 1
            self._inverted[net] = out
            self.cells[f"${self._tag}_ce_inv_{net}"] = {
                "hide_name": 1, "type": "LUT4", "parameters": {"INIT": "0101010101010101"},
                "attributes": {}, "port_directions": {p: "input" for p in "ABCD"} | {"Z": "output"},
                "connections": {"A": [net], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [out]}}
            self.drivers[out] = (f"${self._tag}_ce_inv_{net}", "Z")
            self.sinks[net].append((f"${self._tag}_ce_inv_{net}", "A"))
        return self._inverted[net]
