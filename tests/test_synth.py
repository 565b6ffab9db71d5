"""Real synthesis from the CLI (`groupnet-hw synth`): YoWASP Yosys, nextpnr."""

import json

import pytest
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.toolchain.synth import (FLOWS, SynthError, critical_path_summary, critical_path_text,
                                   late_endpoints, late_endpoints_text, parse_seeds,
                                   synthesize)
from groupnet_hw.models.checkpoint import save_checkpoint
from conftest import random_model


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    ckpt = root / "tiny.pt"
    save_checkpoint(ckpt, random_model(7, image_size=5, stem_channels=2, stages=[[2, 1, 1]],
                                       bases=1, num_classes=2))
    out = root / "out"
    r = CliRunner().invoke(main, ["build", str(ckpt), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("flow", [
    # one flow in the default tier (the ECP5 flow's netlist the other synth tests read too)
    f if f == "ecp5" else pytest.param(f, marks=pytest.mark.slow) for f in FLOWS])
def test_synthesis_counts_every_flow(tiny_build, flow):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", flow, "--no-pnr"])
    assert r.exit_code == 0, r.output
    report = json.loads((tiny_build / "report.json").read_text())
    cells = report["synthesis"][flow]["cells"]
    assert cells["lut"] > 50 and cells["ff"] > 20     # a real netlist, not an empty one
    estimate = report["synthesis"][flow]["estimate"]  # the estimate stays beside it
    assert estimate["lut"] > 0 and set(cells) >= {"lut", "ff", "dsp"}
    assert (tiny_build / f"synth-{flow}" / "netlist.json").is_file()
    # report.txt: the build's table, then Yosys's counts beside the estimate, once per flow
    text = (tiny_build / "report.txt").read_text()
    assert text.count("synthesis (groupnet-hw synth") == 1 and "cycles/frame" in text
    assert f"{flow} (" in text and f"lut {cells['lut']:,} (est. {estimate['lut']:,})" in text


def test_synth_refuses_what_is_not_a_build(tmp_path):
    r = CliRunner().invoke(main, ["synth", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "build.json" in r.output
    with pytest.raises(SynthError, match="unknown flow"):
        synthesize(tmp_path / "x.v", "top", "virtex", tmp_path)


@pytest.mark.toolchain
def test_ecp5_place_and_route_reports_fmax(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--seed", "3"])
    assert r.exit_code == 0, r.output
    ecp5 = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    assert ecp5["fmax_mhz"] > 10 and ecp5["frames_per_second_at_fmax"] > 0
    assert ecp5["seed"] == 3
    assert ecp5["utilization"]["TRELLIS_FF"]["used"] > 0
    path = ecp5["critical_path"]   # named by its registers, not by nextpnr's cells
    assert path["delay_ns"] > 0 and path["start"] and path["end"] and path["units"]
    assert "critical path " + path["start"] in r.output
    late = ecp5["late_endpoints"]     # every register input's arrival, against the period
    assert late["period_ns"] == 10.0 and late["count"] >= 0
    assert "register input" in r.output


def _segment(kind, delay, src, dst):
    return {"type": kind, "delay": delay, "from": {"cell": src, "port": "Q"},
            "to": {"cell": dst, "port": "A"}}


def test_critical_path_is_named_by_design_signals():
    # the shape of nextpnr's --report JSON (from a real ECP5 run of the K=5 core)
    ff, add = "blocks_1_gate.agg_r0_TRELLIS_FF_Q_2", "blocks_1_gate.$31_CCU2C_S0_A0_LUT4_Z_12"
    out = "blocks_2_mixer.o__2__payload_TRELLIS_FF_Q_254"
    path = {"from": "posedge clk", "to": "posedge clk", "path": [
        _segment("clk-to-q", 0.5, ff, ff), _segment("routing", 1.5, ff, add),
        _segment("logic", 0.25, add, add), _segment("routing", 4.0, add, out),
        _segment("setup", 0.0, out, out)]}
    s = critical_path_summary(path)
    assert (s["start"], s["end"]) == ("blocks_1_gate.agg_r0", "blocks_2_mixer.o__2__payload")
    assert s["units"] == ["blocks_1_gate", "blocks_2_mixer"]
    assert (s["delay_ns"], s["logic_ns"], s["routing_ns"]) == (6.25, 0.75, 5.5)
    assert critical_path_text(s) == ("critical path blocks_1_gate.agg_r0 -> "
                                     "blocks_2_mixer.o__2__payload: 6.25 ns "
                                     "(0.75 logic, 5.5 routing)")


def test_late_endpoints_are_counted_per_unit_and_port():
    # the shape of nextpnr's --detailed-timing-report (delay: [min, max] arrival, ns)
    def net(endpoints):
        return {"net": "n", "endpoints": [{"cell": c, "port": p, "delay": d, "event": "posedge clk"}
                                           for c, p, d in endpoints]}
    report = {"detailed_net_timings": [
        net([("blocks_1_gate.held0_TRELLIS_FF_Q_1", "CE", [2.0, 11.4]),
             ("blocks_1_gate.held0_TRELLIS_FF_Q_2", "CE", [2.0, 10.2]),
             ("blocks_1_gate.result0_TRELLIS_FF_Q", "DI", [1.0, 9.9])]),
        net([("fifo_x.fifo.r_TRELLIS_FF_Q", "CE", 10.4), ("stem_0_mvu.t0_FF", "M0", [1.0, 10.7])]),
    ]}
    late = late_endpoints(report, 10.0)
    assert late["count"] == 4 and late["period_ns"] == 10.0
    assert late["units"][0] == {"unit": "blocks_1_gate", "port": "CE", "endpoints": 2,
                                "worst_ns": 11.4}
    assert {(g["unit"], g["port"]) for g in late["units"]} == {
        ("blocks_1_gate", "CE"), ("fifo_x", "CE"), ("stem_0_mvu", "M")}
    text = late_endpoints_text(late)
    assert text.startswith("4 register inputs arrive later than the 10 ns period")
    assert "blocks_1_gate CE 2 (worst 11.4 ns)" in text
    assert "no register input" in late_endpoints_text(late_endpoints(report, 12.0))


def test_multipliers_in_logic_on_request(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--no-pnr"])
    with_dsp = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--no-pnr",
                                  "--no-dsp"])
    assert r.exit_code == 0, r.output
    logic = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    assert with_dsp["cells"]["dsp"] > 0 and logic["cells"]["dsp"] == 0
    assert logic["cells"]["lut"] > with_dsp["cells"]["lut"]
    assert logic["multipliers"] == "logic (-nodsp)"


def test_a_silent_tool_failure_is_explained_from_its_own_log(tmp_path):
    """yosys -q dies without a word on stdout: the error line comes from its own log."""
    from groupnet_hw.toolchain.synth import SynthError, _run
    cmd = ["sh", "-c", "echo 'Executing ABC.' > tool.log; echo 'End of script.' >> tool.log; exit 3"]
    with pytest.raises(SynthError, match=r"yosys failed \(exit 3\): End of script\."):
        _run(cmd, tmp_path / "stdout.log", 60, "yosys", tmp_path, tool_log=tmp_path / "tool.log")
    with pytest.raises(SynthError, match="without a message"):
        _run(["sh", "-c", "exit 2"], tmp_path / "stdout.log", 60, "yosys", tmp_path)


def test_seeds_parse_from_ranges_and_lists():
    assert parse_seeds("3") == [3]
    assert parse_seeds("1-4") == [1, 2, 3, 4]
    assert parse_seeds("7,1-2,2") == [1, 2, 7]
    for bad in ("0", "4-2", "x", "1-"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_synth_refuses_a_bad_seed_in_one_line(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--seed", "4-2"])
    assert r.exit_code == 2 and r.output.startswith("error: --seed ")
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.toolchain
def test_several_seeds_keep_the_fastest_placement(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--seed", "1,2",
                                  "--jobs", "2"])
    assert r.exit_code == 0, r.output
    ecp5 = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    runs = ecp5["seeds"]
    assert [s["seed"] for s in runs] == [1, 2]
    assert all(s["fmax_mhz"] > 10 and s["pnr_seconds"] > 0 and "late_count" in s for s in runs)
    best = max(runs, key=lambda s: (s["fmax_mhz"], -s["seed"]))
    assert ecp5["seed"] == best["seed"] and ecp5["fmax_mhz"] == best["fmax_mhz"]
    assert ecp5["critical_path"] == best["critical_path"]
    # the kept placement's report is the one under the single-run name
    work = tiny_build / "synth-ecp5"
    kept = json.loads((work / "pnr.json").read_text())
    assert kept == json.loads((work / f"pnr-seed{best['seed']}.json").read_text())
    assert f"kept seed {best['seed']} of seed 1: " in r.output


def test_without_sharing_each_state_keeps_its_multiplier(tmp_path):
    """Two 16 x 16 products in states that are never active together: Yosys's default
    merges them into one DSP block behind multiplexers (a path from either state's
    operands to either state's result); ``share=False`` keeps one block each, and
    flows without that script refuse the option."""
    verilog = tmp_path / "two.v"
    verilog.write_text("""
module top(input clk, input sel_i, input [15:0] a_i, b_i, c_i, d_i, output reg [31:0] y);
  reg sel; reg [15:0] a, b, c, d;   // registered: a path from register to register to time
  always @(posedge clk) begin
    {sel, a, b, c, d} <= {sel_i, a_i, b_i, c_i, d_i};
    y <= sel ? a * b : c * d;
  end
endmodule
""")
    dsp = {}
    for share in (True, False):
        r = synthesize(verilog, "top", "ecp5", tmp_path / str(share), share=share,
                       route=False)
        dsp[share] = r["cells"]["dsp"]
        # placed, not routed: nextpnr's estimate after placement stands in for Fmax
        assert r["fmax_mhz"] is None and r["placed_fmax_estimate_mhz"] > 10
    assert dsp == {True: 1, False: 2}
    with pytest.raises(SynthError, match="no synthesis without resource sharing"):
        synthesize(verilog, "top", "cyclonev", tmp_path / "cv", share=False)
