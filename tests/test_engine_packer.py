# amaranth: UnusedElaboratable=no
"""The intended engine's output packer (hw/engine/packer.py): each job's beats, in the
epilogue feeder's order, become exactly the DRAM rows the compiler's own format writes
(``TensorFormat.pack``: bits, 2- and 4-bit levels, 8- to 32-bit fixed point, 24 bits
among them), for channels not a multiple of the lanes, of ``pe`` or of a byte, rows
that do and do not fill their bus words, beats of fewer or more bytes than a bus word,
fewer jobs than arrays, stalls, a reset inside a row, and a beat a cycle."""

import numpy as np
import pytest

from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.hw.engine.packer import OutputPacker
from groupnet_hw.sim.streams import first_output_cycle, run_streams

KINDS = {1: "bits", 2: "uint", 4: "uint", 8: "fixed", 16: "fixed", 24: "fixed", 32: "fixed"}


class Case:
    """Random maps of ``jobs`` bases and the beats that carry them."""

    def __init__(self, seed, arrays, pe, lanes, channels, height, width, elem, data_width,
                 jobs=None, value_width=24, port_bytes=None):
        rng = np.random.default_rng(seed)
        self.arrays, self.pe, self.lanes = arrays, pe, lanes
        self.jobs = arrays if jobs is None else jobs
        self.elem, self.data_width, self.value_width = elem, data_width, value_width
        kind = KINDS[elem]
        # rows are padded to the port, which may be wider than the packer's bus word
        self.fmt = TensorFormat(kind, elem, channels, height, width,
                                port_bytes or data_width // 8)
        if kind == "fixed":
            bits = min(elem, value_width)
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        else:
            lo, hi = 0, (1 << elem) - 1
        self.maps = rng.integers(lo, hi + 1, (self.jobs, channels, height, width))
        out_folds = -(-channels // pe)
        garbage = (-(1 << (value_width - 1)), 1 << (value_width - 1))
        self.beats = []
        for y in range(height):
            for x in range(width):
                for nf in range(out_folds):
                    for p in range(pe // lanes):
                        for k in range(arrays):
                            c = nf * pe + p * lanes + np.arange(lanes)
                            beat = rng.integers(*garbage, lanes)   # not ours: any value
                            if k < self.jobs:
                                ours = c < channels
                                beat[ours] = self.maps[k, c[ours], y, x]
                            self.beats.append([int(v) for v in beat])
        self.settings = dict(elem_bits=elem, channels=channels, width=width,
                             out_folds=out_folds, jobs=self.jobs,
                             row_beats=self.fmt.row_bytes // (data_width // 8))
        self.words = self.jobs * height * self.settings["row_beats"]

    def dut(self):
        return OutputPacker(arrays=self.arrays, pe=self.pe, lanes=self.lanes,
                            value_width=self.value_width, data_width=self.data_width,
                            max_size=32, max_channels=128, max_out_folds=8, max_beats=64)

    def run(self, dut=None, **kw):
        dut = dut or self.dut()

        async def setup(ctx):
            ctx.set(dut.settings, self.settings)

        return run_streams(dut, {"i": self.beats}, {"o": self.words}, setup=setup,
                           max_cycles=40 * (len(self.beats) + self.words) + 200, **kw)

    def check(self, words):
        """Each job's words, in order, are its map's DRAM bytes; ``last`` ends a row."""
        port, row_beats = self.data_width // 8, self.settings["row_beats"]
        for k in range(self.jobs):
            mine = [w for w in words if w["job"] == k]
            assert len(mine) == self.fmt.height * row_beats
            got = b"".join(w["data"].to_bytes(port, "little") for w in mine)
            assert np.array_equal(np.frombuffer(got, np.uint8), self.fmt.pack(self.maps[k])), \
                f"job {k}'s bytes differ from TensorFormat.pack"
            assert [w["last"] for w in mine] == ([0] * (row_beats - 1) + [1]) * self.fmt.height
        assert {w["job"] for w in words} == set(range(self.jobs))


@pytest.mark.parametrize("arrays, pe, lanes, channels, width, elem, data_width", [
    (2, 16, 8, 64, 5, 1, 128),      # ResNet's 64 channels: 8 bytes a pixel, two a word
    (3, 16, 8, 13, 7, 1, 64),       # 13 channels: two bytes a pixel, a fold's tail empty
    (2, 8, 8, 21, 4, 2, 32),        # 2-bit levels of 21 channels: 6 bytes a pixel
    (1, 16, 16, 40, 3, 4, 128),     # 4-bit levels, a pixel of 20 bytes
    (2, 16, 8, 20, 3, 8, 64),       # bytes; the second fold's second part holds nothing
    (2, 16, 8, 24, 5, 16, 128),     # 16-bit values: a beat a bus word
    (5, 16, 8, 64, 3, 24, 128),     # the intended engine's 24-bit maps: 24-byte beats
    (2, 8, 8, 9, 4, 32, 64),        # 32 bits of 24-bit values, sign-extended; 32-byte beats
    (2, 16, 16, 32, 2, 24, 256),    # a bus word of 256 bits
])
def test_each_jobs_rows_are_the_formats_bytes(arrays, pe, lanes, channels, width, elem,
                                              data_width):
    case = Case(channels + elem, arrays, pe, lanes, channels, 3, width, elem, data_width)
    case.check(case.run().outputs["o"])


def random_case(seed):
    """A seeded random geometry: lanes, rows, arrays, jobs, channels, width, element and
    bus widths."""
    rng = np.random.default_rng(seed)
    lanes = int(rng.choice([8, 16]))
    pe = lanes * int(rng.choice([1, 2]))
    arrays = int(rng.integers(1, 4))
    return Case(seed, arrays, pe, lanes, int(rng.integers(1, 40)), 2, int(rng.integers(1, 6)),
                int(rng.choice([1, 2, 4, 8, 16, 24, 32])), int(rng.choice([32, 64, 128])),
                jobs=int(rng.integers(1, arrays + 1)))


@pytest.mark.parametrize("seed", range(4))
def test_random_configurations_under_stalls(seed):
    case = random_case(100 + seed)
    case.check(case.run(stall=0.3, seed=seed).outputs["o"])


@pytest.mark.parametrize("width", [4, 5])
def test_rows_padded_to_a_port_wider_than_the_bus_word(width):
    # 16 binary channels: 2 bytes a pixel; 4 pixels fill a 64-bit word exactly and the
    # 32-byte port pads the row with zero words; 5 pixels end inside a word
    case = Case(9, 2, 16, 8, 16, 2, width, 1, 64, port_bytes=32)
    assert case.settings["row_beats"] == 4
    case.check(case.run(stall=0.2).outputs["o"])


def test_fewer_jobs_than_arrays_drop_the_others_beats():
    case = Case(7, 4, 16, 8, 24, 2, 3, 8, 64, jobs=2)
    case.check(case.run(stall=0.2).outputs["o"])


def test_a_reset_inside_a_row_starts_clean():
    case = Case(3, 2, 16, 8, 40, 2, 4, 24, 128)
    case.check(case.run(reset_at=37).outputs["o"])


def test_a_beat_a_cycle_when_beats_are_narrower_than_words():
    # 64 binary channels on 2 arrays: 8 beats a pixel, 1 byte each; 3 rows of 8 pixels
    case = Case(1, 2, 16, 8, 64, 3, 8, 1, 128)
    run = case.run()
    case.check(run.outputs["o"])
    assert run.cycles <= len(case.beats) + OutputPacker.latency + 2


def test_wide_beats_take_a_cycle_a_word():
    # 32-bit values, 8 lanes: 32 bytes a beat, two 128-bit words
    case = Case(2, 1, 8, 8, 16, 1, 6, 32, 128)
    run = case.run()
    case.check(run.outputs["o"])
    assert run.cycles <= case.words + OutputPacker.latency + 4


def test_idle_after_the_last_row():
    case = Case(5, 2, 16, 8, 13, 1, 3, 4, 64)
    dut = case.dut()
    seen = {}

    async def setup(ctx):
        ctx.set(dut.settings, case.settings)
        seen["before"] = ctx.get(dut.idle)

    run = run_streams(dut, {"i": case.beats}, {"o": case.words}, setup=setup,
                      max_cycles=2000)
    case.check(run.outputs["o"])
    assert seen["before"] == 1


@pytest.mark.parametrize("bad, message", [
    (dict(lanes=12), "multiple of 8"),
    (dict(lanes=16, pe=24), "divides pe"),
    (dict(data_width=60), "whole bytes"),
    (dict(elems=(1, 3)), "elems"),
    (dict(arrays=0), "arrays"),
])
def test_bad_sizes_are_refused(bad, message):
    kw = dict(arrays=2, pe=16, lanes=8) | bad
    with pytest.raises(ValueError, match=message):
        OutputPacker(**kw)


def test_a_word_after_the_stated_latency():
    # 16-bit values on 8 lanes: one beat is one 128-bit word
    case = Case(4, 1, 8, 8, 8, 1, 1, 16, 128)
    dut = case.dut()
    cycles = first_output_cycle(dut, case.beats[0],
                                setup=lambda ctx: ctx.set(dut.settings, case.settings))
    assert cycles == OutputPacker.latency
