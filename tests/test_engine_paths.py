"""The rough path ranking of ``benchmarks/engine_paths.py`` on a netlist small enough
to check by hand: a register-to-register path through a multiplier against a direct
one and one along a carry chain."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import engine_paths  # noqa: E402


def _cell(kind, inputs, outputs):
    conns = {**inputs, **outputs}
    dirs = {**{p: "input" for p in inputs}, **{p: "output" for p in outputs}}
    return {"type": kind, "connections": conns, "port_directions": dirs}


def _netlist():
    # nets: 2 a.Q, 3 lut out, 4 mult out, 5 c.Q, 6 carry0 COUT, 7 carry1 S0, 9 clock
    cells = {
        "a_TRELLIS_FF_Q": _cell("TRELLIS_FF", {"CLK": [9], "DI": [1]}, {"Q": [2]}),
        "lut0": _cell("LUT4", {"A": [2]}, {"Z": [3]}),
        "mul": _cell("MULT18X18D", {"A0": [3]}, {"P0": [4]}),
        "b_TRELLIS_FF_Q": _cell("TRELLIS_FF", {"CLK": [9], "DI": [4]}, {"Q": [1]}),
        "c_TRELLIS_FF_Q": _cell("TRELLIS_FF", {"CLK": [9], "DI": [8]}, {"Q": [5]}),
        "d_TRELLIS_FF_Q": _cell("TRELLIS_FF", {"CLK": [9], "DI": [5]}, {"Q": [10]}),
        "carry0": _cell("CCU2C", {"A0": [5]}, {"COUT": [6]}),
        "carry1": _cell("CCU2C", {"CIN": [6]}, {"S0": [7]}),
        "e_TRELLIS_FF_Q": _cell("TRELLIS_FF", {"CLK": [9], "DI": [7]}, {"Q": [8]}),
    }
    netnames = {"a": {"bits": [2]}, "prod": {"bits": [4]}, "c": {"bits": [5]}}
    return {"modules": {"top": {"attributes": {"top": 1}, "cells": cells,
                                "netnames": netnames}}}


def test_a_path_through_a_multiplier_ranks_first_and_is_named():
    ranked, path = engine_paths.arrivals(_netlist())
    keys = list(ranked)
    assert keys[0] == "b:DI"
    r = engine_paths.ROUTE_NS
    # a.Q, a net and a LUT, a net and the multiplier, the net into b
    expected = 0.4 + (r + 0.45) + (r + 3.6) + r + 0.1
    assert ranked["b:DI"][0] == pytest.approx(expected)
    assert ranked["d:DI"][0] == pytest.approx(0.4 + r + 0.1)
    # along the carry chain: no routing and no cell delay between CCU2C cells but 0.3
    assert ranked["e:DI"][0] == pytest.approx(0.4 + (r + 0.45) + 0.3 + r + 0.1)
    assert [kind for _, kind, _ in path] == ["TRELLIS_FF", "LUT4", "MULT18X18D"]
    assert path[-1][2] == "prod"


def test_each_end_has_its_own_route_through_the_named_signals():
    ranked, routes = engine_paths.end_routes(_netlist())
    assert set(routes) == set(ranked)
    # b's latest path: from register a through the unnamed LUT output to the product
    assert engine_paths.route_summary(routes["b:DI"]) == ["a", "prod"]
    assert engine_paths.route_summary(routes["e:DI"]) == ["c"]
    # a net named after a cell (logic another cone may share) is not a design signal
    assert engine_paths.route_summary(
        [(1.0, "LUT4", "acc_TRELLIS_FF_Q_3_DI_LUT4_Z"), (2.0, "LUT4", "gl")]) == ["gl"]


def test_logic_is_counted_for_the_register_or_multiplier_it_feeds_first():
    # lut0 feeds the multiplier; the two carry cells (two LUTs each) feed register e
    cones = dict(engine_paths.logic_cones(_netlist()))
    assert cones == {"e": 4, "mul (multiplier)": 1}


def test_cyclone_v_cells_count_and_name_their_register():
    cells = {
        "\\x_MISTRAL_FF_Q": _cell("MISTRAL_FF", {"CLK": [9], "DATAIN": [3]}, {"Q": [2]}),
        "l0": _cell("MISTRAL_ALUT6", {"A": [2]}, {"Q": [4]}),
        "l1": _cell("MISTRAL_ALUT_ARITH", {"A": [4]}, {"SO": [3]}),
        "ram": _cell("MISTRAL_M10K", {"A1DATA": [4]}, {"B1DATA": [5]}),
    }
    netlist = {"modules": {"top": {"attributes": {"top": 1}, "cells": cells,
                                   "netnames": {"unit.x": {"bits": [2]}}}}}
    # l0 reaches the block RAM and (through l1) the register: the block RAM is nearer
    assert dict(engine_paths.logic_cones(netlist)) == {"ram (block RAM)": 1, "unit.x": 1}


def test_a_what_if_register_cuts_the_path_at_its_net():
    """``registers``: the product's net as if registered, so b's path starts there and
    the path into it ends at a what-if end of the same length as b's before."""
    r = engine_paths.ROUTE_NS
    before, _ = engine_paths.end_routes(_netlist())
    ranked, routes = engine_paths.end_routes(_netlist(), registers=["prod"])
    assert ranked["prod:what-if"][0] == pytest.approx(before["b:DI"][0])
    assert ranked["b:DI"][0] == pytest.approx(0.4 + r + 0.1)
    assert engine_paths.route_summary(routes["prod:what-if"]) == ["a", "prod"]
    # the other ends are as they were
    assert ranked["e:DI"] == before["e:DI"] and ranked["d:DI"] == before["d:DI"]
    with pytest.raises(ValueError, match="no net named 'nothing'"):
        engine_paths.end_routes(_netlist(), registers=["nothing"])


def test_the_command_line_refuses_an_unknown_net_in_one_line(tmp_path, capsys):
    import json
    path = tmp_path / "netlist.json"
    path.write_text(json.dumps(_netlist()))
    assert engine_paths.main(["--netlist", str(path), "--register", "nothing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no net named 'nothing'") and err.count("\n") == 1
    assert engine_paths.main(["--netlist", str(path), "--register", "prod"]) == 0
    assert "prod:what-if" in capsys.readouterr().out
