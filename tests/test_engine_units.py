"""The recorded syntheses of the intended engine's units (``benchmarks/engine_units.py``)
are of the RTL as it is, and docs/architecture.md shows them as recorded."""

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import engine_units  # noqa: E402

RECORDS = json.loads(engine_units.OUT.read_text())
#: the sizes quick to elaborate (about a second each); the others in -m slow
QUICK = ("arrays-one", "epilogue")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow)
                                  for n in engine_units.SIZES])
def test_every_record_is_of_the_current_verilog(name):
    digest = hashlib.sha256(engine_units.verilog_of(name).encode()).hexdigest()[:16]
    flows = engine_units.SIZES[name][2]
    assert set(RECORDS[name]) == set(flows)
    stale = [f for f in flows if RECORDS[name][f]["verilog_sha256"] != digest]
    assert not stale, f"rerun: python3 benchmarks/engine_units.py --sizes {name}"


def test_docs_table_is_the_records():
    doc = engine_units.DOC.read_text()
    assert f"{engine_units.BEGIN}\n{engine_units.render(RECORDS)}\n{engine_units.END}" in doc


def test_the_intended_arrays_place_at_100_mhz_on_ecp5():
    # the point of the rebuild: units that close the clock the core does not
    for name in ("arrays-one", "arrays-intended"):
        assert RECORDS[name]["ecp5"]["fmax_mhz"] >= 100, name


def test_the_intended_engines_sizing_uses_the_measured_costs():
    from groupnet_hw.compiler.engine import sizing
    one, five = RECORDS["arrays-one"]["cyclonev"], RECORDS["arrays-intended"]["cyclonev"]
    per_lane = (five["alm"] - one["alm"]) / 4 / (16 * 48)
    assert sizing._ALM_PER_LANE == pytest.approx(per_lane, abs=0.005)
    epilogue = RECORDS["epilogue"]["cyclonev"]
    lanes = engine_units.SIZES["epilogue"][1]["lanes"]
    assert sizing._ALM_PER_VECTOR_LANE == round(epilogue["alm"] / lanes)
    assert sizing._DSP_PER_VECTOR_LANE == epilogue["cells"]["dsp"] / lanes
    mixer = RECORDS["mixer"]["cyclonev"]
    lanes = engine_units.SIZES["mixer"][1]["lanes"]
    assert sizing._ALM_PER_MIXER_LANE == round(mixer["alm"] / lanes)
    assert sizing._DSP_PER_MIXER_LANE == mixer["cells"]["dsp"] / lanes
    # the stem array a multiplier (the engines of the units have the 16 x 9 of
    # StemRunner's defaults)
    stem = RECORDS["stem-intended"]["cyclonev"]
    mults = engine_units.SIZES["stem-intended"][1]["pe"] * engine_units.SIZES["stem-intended"][1]["simd"]
    assert sizing._ALM_PER_STEM_MULT == round(stem["alm"] / mults)
    # the engine of the units at two sizes, less the lanes and the stem's array: an
    # array's cost and the rest
    beyond = {}
    for name in ("unit-engine-one", "unit-engine-intended"):
        p = engine_units.SIZES[name][1]
        beyond[name] = (RECORDS[name]["cyclonev"]["alm"]
                        - p["arrays"] * p["pe"] * p["simd"] * sizing._ALM_PER_LANE
                        - p["lanes"] * (sizing._ALM_PER_VECTOR_LANE + sizing._ALM_PER_MIXER_LANE)
                        - mults * sizing._ALM_PER_STEM_MULT)
    per_array = (beyond["unit-engine-intended"] - beyond["unit-engine-one"]) / 4
    assert sizing._ALM_PER_ARRAY == round(per_array)
    assert sizing._ALM_FIXED == round(beyond["unit-engine-one"] - per_array)
    # the three engines are built without the subsampler; it is measured alone
    assert all(engine_units.SIZES[n][1]["subsample"] is False for n in beyond)
    assert sizing._ALM_SUBSAMPLER == RECORDS["subsample"]["cyclonev"]["alm"]
    # DSP blocks: the engine of the units' beside its lanes and the stem's multipliers
    # (Yosys counts a cell a 9x9 multiplier; the sizing three a Cyclone V block) (the
    # head has none in it: it borrows the mixer's, which alone it has two a lane of)
    head = RECORDS["classifier-intended"]["cyclonev"]
    assert head["cells"]["dsp"] == 2 * engine_units.SIZES["classifier-intended"][1]["lanes"]
    assert stem["cells"]["dsp"] == mults
    per_vector_lane = sizing._DSP_PER_VECTOR_LANE + sizing._DSP_PER_MIXER_LANE
    for name in ("unit-engine-one", "unit-engine-intended", "unit-engine-narrow"):
        p = engine_units.SIZES[name][1]
        assert (RECORDS[name]["cyclonev"]["cells"]["dsp"]
                == sizing._DSP_FIXED + p["lanes"] * per_vector_lane + mults), name


@pytest.mark.parametrize("name", ["unit-engine-one", "unit-engine-intended", "unit-engine-narrow"])
def test_the_intended_engines_estimate_is_within_5_percent_of_yosys(name):
    """The sizing's estimate of each synthesized engine of the units against Yosys's
    Cyclone V count: two sizes fit it, the narrow one checks it."""
    from groupnet_hw.compiler.engine import sizing
    from groupnet_hw.compiler.engine.config import EngineConfig
    p = engine_units.SIZES[name][1]
    config = EngineConfig(arrays=p["arrays"], pe=p["pe"], simd=p["simd"], vector_lanes=p["lanes"])
    est = sizing.estimate(config)["logic"]
    assert est == pytest.approx(RECORDS[name]["cyclonev"]["alm"], rel=0.05)


def test_the_units_block_ram_is_counted_memory_by_memory():
    """The units' block RAM, counted memory by memory from the elaborated engine, is
    Yosys's M10K count of the DE10-Nano's engine (511: the sizing's buffers say 371),
    and a bounded target's estimate reports it. (After a change to the units' memories,
    synthesize it again: ``benchmarks/engine_units.py --sizes unit-engine-narrow
    --flows cyclonev``.)"""
    from groupnet_hw.compiler.engine.units import UnitsTarget, units_ram_blocks
    from groupnet_hw.compiler.engine.config import DramModel
    from groupnet_hw.compiler.engine.sizing import size_engine
    units = engine_units.SIZES["unit-engine-narrow"][1]
    blocks = units_ram_blocks(units)
    assert blocks == RECORDS["unit-engine-narrow"]["cyclonev"]["cells"]["bram"]
    config = size_engine("de10nano").config
    bounded = UnitsTarget("de10nano", dict(units), config, DramModel.at_clock(100.0))
    assert bounded.estimate()["cells"]["ram_bits"] == blocks * 10240
    # before a program bounds the sizes, the sizing's buffers
    unbounded = UnitsTarget("de10nano", {}, config, DramModel.at_clock(100.0))
    assert unbounded.estimate()["cells"]["ram_bits"] < blocks * 10240


def test_the_cores_records_are_keyed_by_the_cores_sources_alone():
    # the units beside the core in hw/engine must not make its records stale, and every
    # module the core elaborates from must be in its key
    import subprocess
    import engine_resources
    code = ("import sys, groupnet_hw.hw.engine.core; print(' '.join(sorted("
            "m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('groupnet_hw.hw.engine.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert {f"{m}.py" for m in loaded} | {"__init__.py"} == set(engine_resources.CORE_SOURCES)
