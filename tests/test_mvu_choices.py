# amaranth: UnusedElaboratable=no
# (the units refused are never elaborated)

"""Implementation choices as data: a matrix-vector unit takes its implementation choices
as one record (``hw.mvu.MVUChoices``), refused in one line when it is malformed or names a
choice the unit does not implement; a convolution op builds the record from its
schedule's ``Unit`` in one method (``mvu_choices``). The same for a convolution's sliding
window (``hw.window.WindowChoices``, ``window_choices``) and the FIFO in front of a join's
input (``hw.fifo.FIFOChoices``, ``Schedule.fifo_choices``)."""

import dataclasses

import numpy as np
import pytest

from groupnet_hw.compiler.ops import op_of
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.elementwise import AffineTable
from groupnet_hw.hw.fifo import FIFOChoices, StreamFIFO
from groupnet_hw.hw.multithreshold import ThresholdTable
from groupnet_hw.hw.mvu import BinaryMVU, BinaryWeightMVU, IntegerMVU, MVUChoices
from groupnet_hw.hw.window import SlidingWindow, WindowChoices
from conftest import random_model

CONFIG = dict(bases=2, stages=[[8, 1, 1]], stem_channels=8, image_size=4, num_classes=3)


@pytest.mark.parametrize("bad, message", [
    (dict(pe=0), "pe must be a positive integer, not 0"),
    (dict(simd=2.0), "simd must be a positive integer, not 2.0"),
    (dict(groups=True), "groups must be a positive integer, not True"),
    (dict(beats=-2), "beats must be a positive integer, not -2"),
    (dict(in_place=1), "in_place must be a bool, not 1"),
    (dict(registered_rom="yes"), "registered_rom must be a bool, not 'yes'"),
    (dict(registered_products=None), "registered_products must be a bool, not None"),
    (dict(activation=3), "activation must be a per-channel table with channels, out_shape"),
])
def test_choices_refuse_a_bad_record_in_one_line(bad, message):
    with pytest.raises(ValueError) as err:
        MVUChoices(**{"pe": 1, "simd": 1, **bad})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_choices_take_numpy_numbers_as_python_ones():
    choices = MVUChoices(np.int64(2), np.int32(3), beats=np.int64(1), in_place=np.bool_(True))
    assert choices == MVUChoices(2, 3, in_place=True)
    assert type(choices.pe) is int and type(choices.in_place) is bool


def test_units_refuse_choices_they_do_not_implement_and_what_contradicts_the_math():
    w = np.ones((4, 6), dtype=int)
    with pytest.raises(ValueError, match="BinaryMVU does not implement registered_products=True"):
        BinaryMVU(6, 4, w, MVUChoices(2, 2, registered_products=True))
    with pytest.raises(ValueError, match="BinaryWeightMVU does not implement registered_prod"):
        BinaryWeightMVU(6, 4, w, 2, MVUChoices(2, 2, registered_products=True))
    with pytest.raises(ValueError, match="IntegerMVU does not implement groups=2"):
        IntegerMVU(6, 4, w, 8, False, MVUChoices(1, 2, groups=2))
    with pytest.raises(ValueError, match="groups must divide c_out=4, not 3"):
        BinaryMVU(6, 4, w, MVUChoices(1, 2, groups=3))
    with pytest.raises(ValueError, match="choices must be an MVUChoices"):
        BinaryMVU(6, 4, w, {"pe": 2, "simd": 2})
    table = ThresholdTable([[0]] * 3, [0] * 3)
    with pytest.raises(ValueError, match="activation has 3 channels, expected 4"):
        BinaryMVU(6, 4, w, MVUChoices(2, 2, activation=table))
    unit = IntegerMVU(6, 4, w, 8, False, MVUChoices(2, 3, registered_products=True))
    assert unit.choices == MVUChoices(2, 3, registered_products=True) and unit.product_stage


def test_the_op_maps_a_units_fields_to_the_choices():
    """Every field of the record from the unit (or, ``groups``, the node): the schedule's
    own units (a grouped convolution of time-shared bases with a threshold, the stem
    with a post-op and registered products on ECP5), and the same units with every
    other field changed."""
    sched = schedule(compile_model(random_model(3, **CONFIG)), "ulx3s", bases="shared",
                     streams="pixels")
    g = sched.graph
    convs = [n for n in g if hasattr(op_of(n), "mvu_choices")]
    assert {n.attrs.get("groups", 1) for n in convs} == {1, 2}
    assert {sched.units[n.name].activation for n in convs} == {0, 1, 2}
    for node in convs:
        unit = sched.units[node.name]
        for u in (unit, dataclasses.replace(unit, pe=3, simd=5, in_place=not unit.in_place,
                                            beats=4, registered_rom=not unit.registered_rom,
                                            registered_products=not unit.registered_products,
                                            activation=0)):
            choices = op_of(node).mvu_choices(g, node, u)
            assert (choices.pe, choices.simd, choices.groups, choices.in_place, choices.beats,
                    choices.registered_rom, choices.registered_products) == \
                (u.pe, u.simd, node.attrs.get("groups", 1), u.in_place, u.beats,
                 u.registered_rom, u.registered_products)
            if not u.activation:
                assert choices.activation is None
                continue
            (consumer,) = g.consumers(node.name)
            kind = {"threshold": ThresholdTable, "postop": AffineTable}
            assert isinstance(choices.activation, kind[consumer.op])
            assert choices.activation.channels == node.channels
            assert choices.activation.stages == u.activation


@pytest.mark.parametrize("make, message", [
    (lambda: WindowChoices(line_ram="bram"), "line_ram must be one of logic, block, serial"),
    (lambda: WindowChoices(paced=1), "paced must be a bool, not 1"),
    (lambda: FIFOChoices(True), "depth must be a non-negative integer, not True"),
    (lambda: FIFOChoices(2.5), "depth must be a non-negative integer, not 2.5"),
    (lambda: FIFOChoices(4, ram="bram"), "ram must be one of auto, block"),
    (lambda: SlidingWindow(2, 4, 4, choices="serial"), "choices must be a WindowChoices"),
    (lambda: StreamFIFO(2, 8), "choices must be a FIFOChoices"),
])
def test_window_and_fifo_records_refuse_bad_input_in_one_line(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_wire_fifo_has_no_output_register():
    assert FIFOChoices(0, out_register=True).out_register is False
    assert StreamFIFO(2, FIFOChoices(5, "block", True)).latency == 3


@pytest.mark.parametrize("line_buffers", ["logic", "serial"])
def test_the_op_maps_a_units_line_buffer_and_its_mvus_rate_to_the_window_choices(line_buffers):
    sched = schedule(compile_model(random_model(3, **CONFIG)), "ulx3s", streams="pixels",
                     line_buffers=line_buffers)
    g = sched.graph
    convs = [n for n in g if hasattr(op_of(n), "window_choices")]
    assert convs
    for node in convs:
        unit = sched.units[node.name]
        for ii in (1, 2, 7):
            assert op_of(node).window_choices(unit, ii) == WindowChoices(unit.line_ram, ii >= 2)


def test_the_schedule_maps_its_fifo_decisions_to_one_record_per_join_input():
    """Depth, memory and output register come from three decisions
    (``decisions.fifo_sizes``, ``fifo_memories``, ``registered_fifo_reads``); the
    schedule's ``fifo_choices`` is where they meet: FIFOs forced into block RAM on ECP5
    (whose block RAM reads late) register their reads, on the DE10-Nano they do not."""
    g = compile_model(random_model(3, **CONFIG))
    for board, registered in (("ulx3s", True), ("de10nano", False)):
        sched = schedule(g, board, streams="pixels", fifos="block")
        joins = [(n.name, slot) for n in sched.graph for slot in range(len(n.inputs))
                 if sched.fifos.get(n.name, {}).get(n.inputs[slot])]
        assert joins
        for consumer, slot in joins:
            choices = sched.fifo_choices(consumer, slot)
            ref = sched.graph[consumer].inputs[slot]
            assert choices == FIFOChoices(sched.fifos[consumer][ref], "block", registered)
        wires = [(n.name, slot) for n in sched.graph for slot in range(len(n.inputs))
                 if not sched.fifos.get(n.name, {}).get(n.inputs[slot])]
        assert all(sched.fifo_choices(c, s) is None for c, s in wires)
