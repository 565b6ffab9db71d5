"""Small Yosys netlists recorded for the netlist-pass tests.

The ECP5 netlist passes (``toolchain.dsp_registers``, ``toolchain.bram_registers``) are
tested on what Yosys makes of small designs. Synthesizing each design in every run costs
seconds a test; the netlist of a design is recorded once, under ``tests/netlists/``,
keyed by the SHA-256 of its Verilog. A design that changed has another key, so it is
synthesized again (never tested against a stale netlist); ``GROUPNET_HW_RECORD_NETLISTS=1``
writes what was synthesized, to be committed. The toolchain tier checks that a fresh
synthesis still gives what is recorded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from amaranth.back import verilog

from groupnet_hw.toolchain.synth import synthesize

RECORDED = Path(__file__).with_name("netlists")


def design_verilog(design) -> str:
    # no source locations: the key must not depend on where the checkout is
    return verilog.convert(design, name="top", emit_src=False)


def recorded_path(text: str) -> Path:
    return RECORDED / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.json.gz"


def synthesized_netlist(text: str, tmp_path) -> dict:
    """Yosys's ECP5 netlist of the Verilog ``text`` (module ``top``), synthesized now."""
    path = Path(tmp_path) / "m.v"
    path.write_text(text)
    synthesize(path, "top", "ecp5", tmp_path, place_and_route=False)
    return json.loads((Path(tmp_path) / "synth-ecp5" / "netlist.json").read_text())


def netlist(tmp_path, design) -> dict:
    """The ECP5 netlist of ``design``: recorded, or synthesized (and recorded when
    ``GROUPNET_HW_RECORD_NETLISTS`` is set)."""
    text = design_verilog(design)
    recorded = recorded_path(text)
    if recorded.is_file():
        return json.loads(gzip.decompress(recorded.read_bytes()))
    result = synthesized_netlist(text, tmp_path)
    if os.environ.get("GROUPNET_HW_RECORD_NETLISTS"):
        RECORDED.mkdir(exist_ok=True)
        # mtime 0: the same netlist gives the same bytes
        recorded.write_bytes(gzip.compress(json.dumps(result, sort_keys=True).encode(),
                                           mtime=0))
    return result
