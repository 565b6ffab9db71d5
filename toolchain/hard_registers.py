"""The ECP5 netlist step between Yosys and nextpnr: plain flip-flops move into the hard
blocks' own registers, around multipliers (:mod:`.dsp_registers`) and behind block RAM
read data (:mod:`.bram_registers`). ``groupnet-hw synth --flow ecp5`` runs it before it
measures Fmax, and the ULX3S build script runs it as
``python3 -m groupnet_hw.toolchain.hard_registers NETLIST.json``."""

from __future__ import annotations

from .bram_registers import pack_bram_output_registers
from .dsp_registers import pack_mult_registers

__all__ = ["pack_hard_registers", "main"]


def pack_hard_registers(netlist):
    """Rewrite ``netlist`` in place; returns ``{"dsp_registers": ..., "bram_registers":
    ...}``, what each pass moved."""
    return {"dsp_registers": pack_mult_registers(netlist),
            "bram_registers": pack_bram_output_registers(netlist)}


def main(argv=None):
    """``python -m groupnet_hw.toolchain.hard_registers NETLIST.json``: rewrite the netlist in
    place; one line of what moved, or of why the file was not rewritten (exit 1)."""
    import json
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m groupnet_hw.toolchain.hard_registers NETLIST.json", file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            netlist = json.load(f)
        stats = pack_hard_registers(netlist)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args[0]}: not a Yosys JSON netlist ({exc})", file=sys.stderr)
        return 1
    with open(args[0], "w") as f:
        json.dump(netlist, f)
    dsp, bram = stats["dsp_registers"], stats["bram_registers"]
    print(f"{dsp['flip_flops']} flip-flops moved into {dsp['multipliers']} MULT18X18D "
          f"({dsp['inputs']} operand and {dsp['outputs']} product registers); "
          f"{bram['flip_flops']} into the output registers of {bram['ports']} DP16KD read "
          f"ports (of {bram['block_rams']} DP16KD)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
