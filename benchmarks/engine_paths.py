"""Where the engine core's clock goes: a rough static timing estimate over Yosys's ECP5
netlist, without placement.

nextpnr reports the core's Fmax after placement (``engine_resources.py --place-only``)
but not which paths set it, and routing the core takes hours. This script walks the
synthesized netlist with a per-cell delay model (LUT4 0.45 ns, a multiplier 3.6 ns,
a block RAM's clock-to-out 4.3 ns, carry chains nearly free along the chain) and a
fixed 0.9 ns of routing per net, and ranks the registers and block-RAM inputs by the
latest arrival: a ranking to decide what to change, not a timing figure (it reads
about 20 % faster than nextpnr's estimate after placement).

    python3 benchmarks/engine_paths.py --size small            # synthesize, then rank
    python3 benchmarks/engine_paths.py --netlist netlist.json  # rank a netlist
    python3 benchmarks/engine_paths.py --netlist netlist.json --routes 12
        # and where each of the 12 latest ends' paths start and what they pass through

The routes list what a fix must break: one end's path names its start register and the
signals it passes, so that ends sharing a cause show it (a register after the element
reader, a table indexed by the job counter).

``--register NET`` ranks as if a register sat on a design signal (repeatable): what a
pipeline stage there would buy, before the control that waits for it is written.

    python3 benchmarks/engine_paths.py --netlist netlist.json \
        --register sequencer.ev --register sequencer.t     # the reader's, PCALC's product

``--cones N`` ranks where the logic goes instead (ECP5 or Cyclone V netlists): each
LUT counted for the register, block RAM or multiplier it feeds first, by design signal.

    python3 benchmarks/engine_paths.py --netlist netlist.json --cones 30
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path

from groupnet_hw.toolchain.synth import design_signal

#: routing delay charged to every net (ns)
ROUTE_NS = 0.9
#: cells a path starts at: their output port and its delay from the clock (ns)
STARTS = {"TRELLIS_FF": ("Q", 0.4), "DP16KD": ("DO", 4.3), "PDPW16KD": ("DO", 4.3)}
#: cells a path ends at (their data inputs)
ENDS = ("TRELLIS_FF", "DP16KD", "PDPW16KD")
#: a combinational cell's delay from an input to its output (ns)
CELL_NS = {"LUT4": 0.45, "CCU2C": 0.45, "PFUMX": 0.25, "L6MUX21": 0.25,
           "MULT18X18D": 3.6, "ALU54B": 3.0, "TRELLIS_DPR16X4": 0.8}
_CLOCKS = ("CLK", "CLKA", "CLKB")
_DPR_READ = ("RAD0", "RAD1", "RAD2", "RAD3")


#: logic cells a cone counts, in LUTs (a carry cell of ECP5 is two)
LOGIC_LUTS = {"LUT4": 1, "CCU2C": 2, "MISTRAL_ALUT6": 1, "MISTRAL_ALUT5": 1,
              "MISTRAL_ALUT4": 1, "MISTRAL_ALUT3": 1, "MISTRAL_ALUT2": 1, "MISTRAL_NOT": 1,
              "MISTRAL_ALUT_ARITH": 1}
#: cells a cone ends at: registers, then block RAM and multipliers (named by kind)
_REGISTERS = ("TRELLIS_FF", "MISTRAL_FF")
_CONE_ENDS = {"DP16KD": "block RAM", "PDPW16KD": "block RAM", "MISTRAL_M10K": "block RAM",
              "MULT18X18D": "multiplier", "ALU54B": "multiplier",
              "MISTRAL_MUL27X27": "multiplier", "MISTRAL_MUL18X18": "multiplier",
              "MISTRAL_MUL9X9": "multiplier", "TRELLIS_DPR16X4": "LUT RAM",
              "MISTRAL_MLAB": "LUT RAM"}


def _net_maps(netlist):
    """The top module's ``(cells, names, driver, readers)``: per net bit its most
    readable name (fewest ``$``), its driving ``(cell, port)`` and the cells reading it."""
    top = _top(netlist)
    cells = top["cells"]
    names, driver, readers = {}, {}, {}
    for n, net in top["netnames"].items():
        for b in net["bits"]:
            if isinstance(b, int) and (b not in names or n.count("$") < names[b].count("$")):
                names[b] = n
    for cn, c in cells.items():
        for p, bits in c["connections"].items():
            output = c["port_directions"].get(p) == "output"
            for b in bits:
                if not isinstance(b, int):
                    continue
                if output:
                    driver[b] = (cn, p)
                elif c["port_directions"].get(p) == "input":
                    readers.setdefault(b, []).append(cn)
    return cells, names, driver, readers


def _top(netlist):
    return next(m for m in netlist["modules"].values() if m.get("attributes", {}).get("top"))


def arrivals(netlist, registers=()):
    """Rank the path ends of a Yosys JSON ``netlist`` (a dict) by arrival time.

    Returns ``(ends, worst_path)``: ``ends`` maps ``"design.signal:PORT"`` to ``(ns,
    bits)``, latest first; ``worst_path`` lists ``(ns, cell type, net name)`` from the
    start of the latest path to its end. ``registers``: see :func:`end_routes`."""
    ranked, routes = end_routes(netlist, registers)
    return ranked, routes[next(iter(ranked))] if ranked else []


def what_if_bits(netlist, registers):
    """The net bits of the design signals ``registers`` (net names of the top module,
    as the routes print them) that a register would cut; a name that no net carries
    raises ``ValueError`` (synthesis kept none of its bits as a net of that name)."""
    nets = _top(netlist)["netnames"]
    bits = set()
    for name in registers:
        if name not in nets:
            raise ValueError(f"no net named {name!r} in the netlist")
        bits.update(b for b in nets[name]["bits"] if isinstance(b, int))
    return bits


def end_routes(netlist, registers=()):
    """:func:`arrivals`' ranking and, per end, its latest path: ``(ends, routes)``,
    ``routes`` mapping each key of ``ends`` to ``(ns, cell type, net name)`` from the
    path's start to the end's latest bit.

    ``registers`` names nets to rank as if a register sat on each of their bits (a
    what-if for pipelining before the control exists): a path into such a bit ends
    there (``"net:what-if"``), and its readers start at a register's clock-to-out.
    Logic that synthesis merged across the net is not cut, so the what-if can only
    understate the gain."""
    cells, names, driver, _ = _net_maps(netlist)
    cut = what_if_bits(netlist, registers)
    ff_start = STARTS["TRELLIS_FF"][1]

    def source(b):
        """The arrival at net bit b, where a cell reads it (a what-if register's
        clock-to-out on a cut bit)."""
        if b in cut:
            return ff_start
        return out_time(driver[b]) if b in driver else 0.0

    def inputs(cn, port):
        """(bit, delay to the output) of each input of cell cn's output port."""
        c = cells[cn]
        t = c["type"]
        for p, bits in c["connections"].items():
            if c["port_directions"].get(p) != "input":
                continue
            if t == "TRELLIS_DPR16X4" and p not in _DPR_READ:
                continue
            for b in bits:
                if not isinstance(b, int):
                    continue
                if t == "CCU2C" and p == "CIN":
                    # along the carry chain
                    yield b, 0.06 if port == "COUT" else 0.3
                else:
                    yield b, ROUTE_NS + CELL_NS.get(t, 0.5)

    arrival, via = {}, {}

    def out_time(key):
        """The arrival at a cell output (iteratively: the core's cones are deep)."""
        stack = [key]
        while stack:
            k = stack[-1]
            if k in arrival:
                stack.pop()
                continue
            cn, port = k
            t = cells[cn]["type"]
            if t in STARTS:
                arrival[k], via[k] = STARTS[t][1], None
                stack.pop()
                continue
            pending = [driver[b] for b, _ in inputs(cn, port)
                       if b in driver and b not in cut and driver[b] not in arrival]
            if pending:
                stack.extend(pending)
                continue
            best, best_bit = 0.0, None
            for b, d in inputs(cn, port):
                a = source(b) + d
                if a > best:
                    best, best_bit = a, b
            arrival[k], via[k] = best, best_bit
            stack.pop()
        return arrival[key]

    ends = []
    for cn, c in cells.items():
        if c["type"] not in ENDS:
            continue
        for p, bits in c["connections"].items():
            if c["port_directions"].get(p) != "input" or p in _CLOCKS:
                continue
            for b in bits:
                if isinstance(b, int):
                    ends.append((source(b) + ROUTE_NS + 0.1, cn, p, b))
    for b in cut:
        if b in driver:
            ends.append((out_time(driver[b]) + ROUTE_NS + 0.1, None, names[b], b))
    ends.sort(key=lambda e: -e[0])
    ranked, latest_bit = OrderedDict(), {}
    for a, cn, p, b in ends:
        key = (f"{design_signal(cn)}:{p.rstrip('0123456789')}" if cn is not None
               else f"{p}:what-if")
        worst, n = ranked.get(key, (a, 0))
        ranked[key] = (worst, n + 1)
        latest_bit.setdefault(key, b)

    def route(b):
        path = []
        first = True
        while b is not None and b in driver and (first or b not in cut):
            k = driver[b]
            path.append((arrival[k], cells[k[0]]["type"], names.get(b, "?")))
            b = via[k]
            first = False
        return list(reversed(path))

    return ranked, {key: route(b) for key, b in latest_bit.items()}


def logic_cones(netlist):
    """Where the logic of a Yosys JSON ``netlist`` (ECP5 or Cyclone V) goes: each logic
    cell counted (:data:`LOGIC_LUTS`) for the register, block RAM or multiplier that
    its fan-out reaches first (breadth first, so logic shared by several cones counts
    once, for the nearest), by design signal. Returns ``[(name, luts)]``, largest
    first; a register is named by its output's design signal, a block RAM or
    multiplier by its cell and kind."""
    cells, names, _, readers = _net_maps(netlist)

    def outputs(cn):
        c = cells[cn]
        return [b for p, bits in c["connections"].items()
                if c["port_directions"].get(p) == "output" for b in bits if isinstance(b, int)]

    def end_name(cn):
        c = cells[cn]
        if c["type"] in _REGISTERS:
            q = outputs(cn)
            return _cell_signal(names.get(q[0], cn) if q else cn)
        return f"{_cell_signal(cn)} ({_CONE_ENDS[c['type']]})"

    counts = {}
    for cn, c in cells.items():
        if c["type"] not in LOGIC_LUTS:
            continue
        seen, frontier, end = {cn}, [cn], None
        while frontier and end is None:
            step = []
            for x in frontier:
                for b in outputs(x):
                    for y in readers.get(b, ()):
                        if cells[y]["type"] in _REGISTERS or cells[y]["type"] in _CONE_ENDS:
                            end = end or end_name(y)
                        elif y not in seen:
                            seen.add(y)
                            step.append(y)
            frontier = step
        key = end or "(no register)"
        counts[key] = counts.get(key, 0) + LOGIC_LUTS[c["type"]]
    return sorted(counts.items(), key=lambda kv: -kv[1])


def _cell_signal(name):
    """:func:`design_signal` of a net or cell name of either family (Cyclone V's cells
    carry ``_MISTRAL_`` suffixes, escaped names a backslash; a memory's block RAMs
    their position), or the name itself for an unnamed signal (``$signal$12``)."""
    raw = name.lstrip("\\").split("_MISTRAL_")[0]
    sig = re.sub(r"(\.\d+)+$", "", design_signal(raw))
    return raw if sig.endswith(".") or not sig else sig


#: parts of the names Yosys and ABC give cells' outputs after a register they feed
_DERIVED = ("$", "_TRELLIS", "_LUT4", "_CCU2C", "_PFUMX", "_L6MUX", "_MULT", "_DP16KD")


def _signal(net):
    """The design signal a net is (None for a net named after a cell: logic that may
    be shared with other cones)."""
    return None if net == "?" or any(d in net for d in _DERIVED) else net


def route_summary(path):
    """A path as the design signals it passes, from its start, in order."""
    seen = []
    for _, _, net in path:
        sig = _signal(net)
        if sig and (not seen or seen[-1] != sig):
            seen.append(sig)
    return seen


def synthesized_netlist(size, work):
    """Yosys's ECP5 netlist of the engine core at ``size`` (engine_resources' sizes),
    synthesized without resource sharing (its shared operators add paths no cycle
    uses)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import engine_resources as er
    er.synth_size(size, "ecp5", work, share=False)
    return json.loads((Path(work) / f"{size}-ecp5" / "synth-ecp5" / "netlist.json").read_text())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--netlist", type=Path, help="a Yosys JSON netlist (synth_ecp5)")
    src.add_argument("--size", help="synthesize the core at this size of "
                                    "engine_resources.py first (about 2 minutes)")
    ap.add_argument("--top", type=int, default=30, help="path ends to list")
    ap.add_argument("--cones", type=int, default=0, metavar="N",
                    help="rank where the logic goes instead: the N registers, block RAMs "
                         "and multipliers fed by the most LUTs")
    ap.add_argument("--register", action="append", default=[], metavar="NET",
                    help="rank as if a register sat on this net (a design signal as the "
                         "routes name it, e.g. sequencer.ev): a what-if for pipelining; "
                         "repeat for more nets")
    ap.add_argument("--routes", type=int, default=0,
                    help="also list the signals on the latest path of this many ends")
    args = ap.parse_args(argv)
    if args.netlist:
        netlist = json.loads(args.netlist.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="engine_paths_") as tmp:
            netlist = synthesized_netlist(args.size, tmp)
    if args.cones:
        cones = logic_cones(netlist)
        total = sum(n for _, n in cones)
        print(f"{total} LUTs; the {args.cones} largest cones:")
        for name, n in cones[:args.cones]:
            print(f"{n:8d} {100 * n / total:5.1f} %  {name}")
        return 0
    try:
        ranked, routes = end_routes(netlist, args.register)
    except ValueError as exc:
        print(f"error: {exc}; the routes name the nets synthesis kept", file=sys.stderr)
        return 2
    if not ranked:
        print("no register or block-RAM inputs in this netlist")
        return 1
    path = routes[next(iter(ranked))]
    worst = next(iter(ranked.values()))[0]
    print(f"latest arrival {worst:.1f} ns (about {1000 / worst:.1f} MHz before placement)")
    for key, (a, n) in list(ranked.items())[:args.top]:
        print(f"{a:7.1f} ns {n:5d} bits  {key}")
    if args.routes:
        # ends whose latest paths pass the same signals share a cause: listed once
        print(f"the design signals on the latest paths of the {args.routes} latest ends:")
        groups = OrderedDict()
        for key in list(ranked)[:args.routes]:
            groups.setdefault(tuple(route_summary(routes[key])), []).append(key)
        for signals, keys in groups.items():
            more = f" (and {len(keys) - 1} more ends)" if len(keys) > 1 else ""
            print(f"{ranked[keys[0]][0]:7.1f} ns {keys[0]}{more}: {' -> '.join(signals)}")
    print("the latest path:")
    last = None
    for a, kind, net in path:
        if net != last:
            print(f"  {a:6.1f} {kind:10s} {net[:100]}")
        last = net
    return 0


if __name__ == "__main__":
    sys.exit(main())
