"""benchmarks/results.py renders docs/results.md from the recorded JSON: a row for every
design on every board, each number the one its benchmark recorded."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def results():
    spec = importlib.util.spec_from_file_location("results_bench",
                                                  ROOT / "benchmarks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(results):
    return results.load(RESULTS)


def _rows(table):
    """Body rows of a markdown table, as lists of cells."""
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_a_row_per_design_and_board(results, data):
    assert data["missing"] == [], "no recorded schedule for " + ", ".join(
        f"{d} on {b}" for d, b in data["missing"])
    rows = _rows(results.results_table(data))
    keys = [(r[0], r[1]) for r in rows]
    expected = [(results.LABELS[d], results.BOARDS[b][0]) for d, b in results.EXPECTED]
    assert sorted(keys) == sorted(expected)
    assert len(set(keys)) == len(keys)
    # every design on every board, and FINN's folding beside the schedule's own
    assert {b for _, b in results.EXPECTED} == set(results.BOARDS)
    assert {d for d, _ in results.EXPECTED} == {d for d, *_ in results.DESIGNS}


def test_numbers_are_the_recorded_ones(results, data):
    rows = {(r[0], r[1]): r for r in _rows(results.results_table(data))}
    for rec in json.loads((RESULTS / "groupnet_boards.json").read_text()):
        row = rows[results.LABELS[f"{rec['arch']}-k{rec['K']}"],
                   results.BOARDS[rec["board"]][0]]
        assert row[-1] == ("yes" if rec["fits"] else "no")
        if rec["fits"]:
            assert row[2] == f"{rec['frame_cycles']:,}"
            assert row[3] == f"{rec['frames_per_second']:,.0f}"
            for key, limit in rec["budget"].items():
                assert f"{rec['resources'][key]:,}/{limit:,}" in row[4]
        else:
            assert row[2] == "-" and "fully folded" in row[4]
    finn = json.loads((RESULTS / "finn_cnv.json").read_text())
    row = rows["FINN's CNV, FINN's folding", "ULX3S"]
    assert row[2] == f"{finn['finn_folding']['frame_cycles']:,}"
    assert row[5].startswith(f"{finn['synthesis']['fmax_mhz']:.2f} MHz")
    assert row[6] == f"{finn['measured']['exact']}/{finn['measured']['images']}"


def test_fmax_and_bit_exact_only_where_recorded(results, data):
    synthesis = json.loads((RESULTS / "synthesis.json").read_text())["runs"]
    shown = {(r["design"], r["board"]) for r in synthesis
             if r["fmax_mhz"] and not r.get("alternative")}
    verified = {(v["design"], v["board"])
                for v in json.loads((RESULTS / "verified.json").read_text())["runs"]}
    for r in data["rows"]:
        key = r["design"], r["board"]
        cells = _rows(results.results_table(dict(data, rows=[r])))[0]
        assert (cells[5] != "-") == (key in shown or key == ("cnv-finn", "ulx3s"))
        assert (cells[6] != "-") == (key in verified or key == ("cnv-finn", "ulx3s"))
        if cells[5] != "-":
            assert r["board"] == "ulx3s"     # nextpnr Fmax is measured on ECP5 only


def test_headline_and_readme_block(results, data):
    rows = _rows(results.headline_table(data))
    assert len(rows) == len(results.HEADLINE)
    assert all("%" in r[4] or r[4].startswith("does not fit") for r in rows)
    text = f"intro\n{results.BEGIN}\nstale\n{results.END}\noutro\n"
    new = results.update_readme(text, data)
    assert new.startswith("intro\n") and new.endswith("\noutro\n") and "stale" not in new
    assert results.headline_table(data) in new
    assert results.update_readme("no markers", data) == "no markers"


def test_markdown_and_plot(results, data, tmp_path):
    md = results.markdown(data)
    assert results.results_table(data) in md
    assert not re.search(r"\b(None|nan|inf)\b", md)
    path = tmp_path / "results.png"
    results.plot(data, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
