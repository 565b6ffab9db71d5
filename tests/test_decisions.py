"""The schedule's implementation decisions as passes (:mod:`groupnet_hw.compiler.decisions`):
the pass list is the order its docstring documents, each pass changes only the fields
its docstring says it decides (and does decide them), the passes run in that order
make the candidate the search keeps, the search decides each candidate once, and the
options record has :func:`~groupnet_hw.compiler.schedule.schedule`'s defaults."""

import inspect
import random
import re
from dataclasses import fields

import pytest

from conftest import random_model
from groupnet_hw.compiler import decisions
from groupnet_hw.compiler.decisions import (DECISIONS, FIFO_MIN_DEPTH, Candidate, Unit,
                                            decide)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.resources import CELLS
from groupnet_hw.compiler.schedule import GraphSearch, ScheduleOptions, schedule

#: Fields of a candidate (not of its units) a pass may decide.
CANDIDATE_FIELDS = ("frame", "fifos", "fifo_rams", "cells", "usage")
UNIT_FIELDS = tuple(f.name for f in fields(Unit))


def documented_passes():
    """``[(pass name, {fields it decides})]`` from the module docstring's numbered list:
    the ``unit field``s and ``:attr:`Candidate.field```s each item names."""
    items = re.findall(r"^\s*\d+\. :func:`(\w+)`:(.*?)(?=^\s*\d+\. |\n\n)",
                       decisions.__doc__, re.S | re.M)
    return [(name, set(re.findall(r"``(\w+)``", text))
             | set(re.findall(r":attr:`Candidate\.(\w+)`", text))) for name, text in items]


def test_pass_list_is_the_documented_order():
    documented = documented_passes()
    assert [name for name, _ in documented] == [p.__name__ for p in DECISIONS]
    for name, owned in documented:
        assert owned, name
        assert owned <= set(UNIT_FIELDS) | set(CANDIDATE_FIELDS), (name, owned)


def _small_graph(seed):
    """A seeded random small Group-Net, as the beat-stream tests draw them."""
    rng = random.Random(seed)
    k = rng.choice([1, 2, 3])
    c1 = rng.choice([2, 4, 6])
    c2 = c1 + rng.choice([0, 2, 4])         # option A: channels never shrink
    size = rng.choice([5, 6, 7])
    cfg = dict(bases=k, stem_channels=c1, image_size=size, num_classes=3,
               stages=[[c1, 1, 1], [c2, 1, 2]], act_bits=rng.choice([1, 2]),
               dilations=[[rng.choice([1, 2]) for _ in range(k)], [1] * k])
    return compile_model(random_model(600 + seed, **cfg)), size


def _state(c):
    """Every field a pass may decide, by (unit name, field) and (None, candidate field)."""
    state = {(None, f): getattr(c, f) for f in CANDIDATE_FIELDS}
    for name, unit in c.units.items():
        for f in UNIT_FIELDS:
            state[(name, f)] = getattr(unit, f)
    return state


@pytest.mark.parametrize("seed", range(3))
def test_each_pass_changes_only_what_it_owns(seed):
    """On ECP5 (late block RAM reads, registered products) with serial line buffers, beat
    streams and every FIFO in block RAM, so that every pass has something to decide."""
    g, size = _small_graph(seed)
    options = ScheduleOptions(board="ulx3s", line_buffers="serial", streams="beats",
                              fifos="block", bases="parallel")
    context = GraphSearch(g, options).context
    c = Candidate(context, 48 * size * size, line_buffers="serial", streams="beats")
    owned = dict(documented_passes())
    for decision in DECISIONS:
        before = _state(c)
        assert decision(c) is None, decision.__name__
        after = _state(c)
        mine = owned[decision.__name__]
        if decision is decisions.folding:
            # new units: every field it does not decide is a new unit's
            for name, unit in c.units.items():
                fresh = Unit(name, unit.op, 0)
                assert all(getattr(unit, f) == getattr(fresh, f)
                           for f in UNIT_FIELDS if f not in mine), name
            continue
        changed = {f for key, f in after if before.get((key, f)) != after[(key, f)]}
        assert changed <= mine, (decision.__name__, changed - mine)
        _check_decided(decision, c, g)


def _check_decided(decision, c, g):
    """What ``decision`` must have set on ``c``."""
    units = c.units
    if decision is decisions.late_reads or decision is decisions.line_buffers:
        assert all(u.line_ram in ("logic", "block", "serial") for u in units.values())
    elif decision is decisions.unit_cycles:
        assert all(u.cycles > 0 for u in units.values())
        assert all(u.pe and u.simd for u in units.values() if u.op in ("bin_conv", "int_conv"))
    elif decision is decisions.beat_streams:
        assert any(u.beats > 1 for u in units.values())
        assert all(u.in_beats == tuple(units[g.producer(r).name].beats for r in g[n].inputs)
                   for n, u in units.items())
    elif decision is decisions.unit_resources:
        assert all(set(u.resources) == set(CELLS) for u in units.values())
    elif decision is decisions.fifo_sizes:
        joins = [n for n in g if len(n.inputs) >= 2 and n.name in c.fifos]
        assert joins and c.frame == max(u.cycles for u in units.values())
        assert all(d >= FIFO_MIN_DEPTH for refs in c.fifos.values() for d in refs.values())
    elif decision is decisions.fifo_memories:
        assert c.fifo_rams == {k: dict.fromkeys(v, "block") for k, v in c.fifos.items()}
    elif decision is decisions.registered_fifo_reads:
        # ECP5's block RAM reads late: the FIFOs marked for it register their reads
        assert any(u.registered_fifos for u in units.values())
        assert c.fifo_rams == {k: dict.fromkeys(v, "block") for k, v in c.fifos.items()}
    elif decision is decisions.resource_totals:
        assert set(c.usage) == set(c.limits)
        assert all(c.cells[k] >= sum(u.resources[k] for u in units.values()) for k in CELLS)


def test_beats_pass_declines_a_candidate_with_no_beats():
    """In pixels nothing is sent as beats; a beat candidate folded for the shortest
    interval (every MVU too wide for a beat) is no design of its own: :func:`decide`
    stops."""
    g, size = _small_graph(0)
    context = GraphSearch(g, ScheduleOptions(board="ulx3s", bases="parallel")).context
    pixels = decide(Candidate(context, 48 * size * size))
    assert pixels is not None and all(u.beats == 1 for u in pixels.units.values())
    fast = Candidate(context, 1, streams="beats")
    assert decide(fast) is None
    assert fast.frame is None               # the passes after it did not run


@pytest.mark.parametrize("streams", ["pixels", "beats"])
def test_passes_in_order_make_the_schedule(streams):
    """The candidate :data:`DECISIONS` decide at an interval is the schedule of that
    interval: same units, FIFOs, frame interval and estimate."""
    g, size = _small_graph(1)
    target = 48 * size * size
    kw = dict(board="ulx3s", target_cycles=target, line_buffers="block", streams=streams,
              bases="parallel")
    sched = schedule(g, **kw)
    c = decide(Candidate(GraphSearch(g, ScheduleOptions(**kw)).context, target,
                         line_buffers="block", streams=streams))
    assert c.units == sched.units
    assert (c.fifos, c.fifo_rams, c.frame, c.usage, c.cells) == (
        sched.fifos, sched.fifo_rams, sched.frame_cycles, sched.resources, sched.cells)


def test_search_decides_each_candidate_once():
    """An interval asked for again, and a line-buffer mode that puts no line buffer
    where another did not, get the candidate already decided."""
    g, size = _small_graph(2)
    search = GraphSearch(g, ScheduleOptions(board="de10nano", bases="parallel"))
    target = 16 * size * size
    logic = search.plan("logic", target)
    assert search.plan("logic", target) is logic
    for mode in ("block", "serial"):
        other = search.plan(mode, target)
        same_lines = [u.line_ram for u in other.units.values()] == \
            [u.line_ram for u in logic.units.values()]
        assert (other is logic) == same_lines
    # the digits-size rows are too short for an M10K each: "block" is "logic" here
    assert search.plan("block", target) is logic


def test_options_record_has_the_schedule_defaults():
    defaults = {name: p.default for name, p in inspect.signature(schedule).parameters.items()
                if p.default is not inspect.Parameter.empty}
    record = {f.name: f.default for f in fields(ScheduleOptions)}
    assert record == defaults


def test_options_record_checks_and_freezes():
    with pytest.raises(ValueError, match="bases must be one of"):
        ScheduleOptions(bases="sideways")
    with pytest.raises(ValueError, match="max_util must be in"):
        ScheduleOptions(max_util=0)
    with pytest.raises(ValueError, match="fps must be positive"):
        ScheduleOptions(fps=0)
    options = ScheduleOptions(folding={"conv1": [2, 3]})
    assert options.folding == (("conv1", (2, 3)),)
    with pytest.raises(AttributeError):
        options.board = "ulx3s"
    assert ScheduleOptions(fps=1000).frame_target(50) == 50_000
    assert ScheduleOptions(target_cycles=77).frame_target(50) == 77
