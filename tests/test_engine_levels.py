"""Fusion rule 7 (levels at the producer) and 24-bit map containers: the intended
engine's program choices that cut ResNet-18's DRAM traffic (docs/architecture.md
section 12). Each is checked bit-exact on the reference model, against the same
program without it, and kept away from the core as built."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from groupnet_hw.compiler.engine.config import DramModel, EngineConfig
from groupnet_hw.compiler.engine.cycles import descriptor_cycles, predict
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.program import (FLAG_BITS, JOB, OPCODE_CODES, STAGE_BITS,
                                                 ProgramError, decode, encode)
from groupnet_hw.compiler.engine.target import check_program, engine_target
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.sim.engine_model import run_program

from conftest import random_model
from test_engine_program import assert_bit_exact, images_for, zoo_model

LEVELS = FLAG_BITS["levels_out"]
ONLY = FLAG_BITS["levels_only"]


@pytest.fixture(scope="module")
def resnet18():
    """ResNet-18 K=5 at 32x32, compiled with and without the two choices."""
    g = compile_model(zoo_model("resnet18", 5, image_size=32))
    images = images_for(g, 1)
    plain = replace(EngineConfig(), levels_at_producer=False, fixed_containers=(8, 16, 32, 64))
    return g, images, assert_bit_exact(g, images), assert_bit_exact(g, images, plain)


def test_mixers_write_the_levels_their_readers_threshold(resnet18):
    g, _, program, plain = resnet18
    mixing = [(d, grp) for d, grp in zip(program.descriptors, program.groups)
              if d["stages"] & STAGE_BITS["mixer"] or d["opcode"] == OPCODE_CODES["MIXER"]]
    levels = [(d, grp) for d, grp in mixing if d["flags"] & LEVELS]
    # every gated mixer thresholds for its readers; the last block's aggregate feeds
    # the head and keeps its output
    assert len(levels) == len(mixing) - 1
    for d, grp in levels:
        readers = {c.op for ts in grp.levels for t in ts for c in g.consumers(t.name)}
        assert readers == {"bin_conv"}
        # a stage's first block reads its input through its shortcut's threshold and its
        # first convolution's, and nothing adds it: only the levels are written, one
        # level tensor an output for the two equal thresholds, which both read
        only = bool(d["flags"] & ONLY)
        assert d["aux_outputs"] == 1
        assert only == all(c.op == "threshold" for r in range(d["jobs"])
                           for c in g.consumers(grp.levels[r][0].inputs[0].split(":")[0]))
        if only:
            assert len(grp.merged) == d["jobs"]
            for t in grp.merged:
                (twin,) = [ts[0] for ts in grp.levels if ts[0].inputs == t.inputs]
                assert torch.equal(twin.attrs["T"], t.attrs["T"])
                readers = [j for gr in program.groups for j in gr.jobs
                           if j.twin is twin or (j.twin is None and j.core.op == "bin_conv"
                                                 and j.core.inputs[0] == twin.name)]
                assert sorted(j.core.attrs["kernel"] for j in readers) == [1, 3]
    # no binary convolution thresholds a mixer's output as it reads it any more
    for d, grp in zip(program.descriptors, program.groups):
        for job in grp.jobs:
            if job.prologue is not None:
                assert g.producer(job.prologue.inputs[0]).op != "mixer"
    # ... and the program without the rule had such prologues
    assert any(job.prologue is not None and g.producer(job.prologue.inputs[0]).op == "mixer"
               for grp in plain.groups for job in grp.jobs)


def test_the_two_choices_cut_the_traffic_the_model_counts(resnet18):
    _, _, program, plain = resnet18
    dram = DramModel.at_clock(100.0)
    fewer, more = predict(program, dram), predict(plain, dram)
    # at 32x32 the weights are most of a frame's bytes; the maps' share more than halves
    maps = [f.dram_bytes - p.header["param_bytes"] for f, p in ((fewer, program), (more, plain))]
    assert maps[0] < 0.5 * maps[1]
    assert fewer.cycles < more.cycles
    # the level-only descriptors write bits for every output, nothing wide
    for d, c in zip(program.descriptors, fewer.descriptors):
        if d["flags"] & ONLY:
            assert d["aux_fmt"] == 0 and c.bytes_written == d["jobs"] * d["aux_outputs"] * d["aux_bytes"]


def test_maps_take_24_bits_where_their_range_proves_it(resnet18):
    g, _, program, plain = resnet18
    narrow = {name: f.elem_bits for name, (_, f) in program.tensors.items()
              if f.kind == "fixed" and f.elem_bits == 24}
    assert narrow
    for name in narrow:
        assert 16 < g.producer(name.split(":")[0]).bit_width <= 24
        if name in plain.tensors:
            assert plain.tensors[name][1].elem_bits == 32


def test_level_outputs_the_map_buffer_does_not_hold_are_given_up(resnet18):
    """Fusion rule 6 on the units: with a map buffer of 4 KiB (205-byte regions), the
    streaming mixers' level outputs that do not fit are given up, each output's last
    first; their convolutions threshold the mixers' outputs as they read them again,
    from 8-, 16- or 32-bit containers (the prologue's), bit-exact. Every level output
    left fits the map buffer."""
    from groupnet_hw.compiler.engine.tiling import map_buffer_takes, map_region
    g, images, program, _ = resnet18
    small = replace(EngineConfig(), map_buffer=4096)
    fewer = assert_bit_exact(g, images, small)
    region = map_region(small)
    assert all(map_buffer_takes(d, region) for d in fewer.descriptors if d["flags"] & LEVELS)

    def levels(p):
        return sum(len(ts) for grp in p.groups for ts in grp.levels)
    assert levels(fewer) < levels(program)
    prologues = [j for grp in fewer.groups for j in grp.jobs if j.prologue is not None]
    assert any(g.producer(j.prologue.inputs[0]).op == "mixer" for j in prologues)
    for j in prologues:
        f = fewer.tensors[j.prologue.inputs[0]][1]
        assert f.kind != "fixed" or f.elem_bits in (8, 16, 32)
    # the default map buffer holds them all
    assert all(map_buffer_takes(d, map_region(EngineConfig())) for d in program.descriptors)


def test_a_standalone_mixer_writes_levels_too():
    """Buffers too small for the five bases' mixer on chip (rule 6 unfuses it): the
    MIXER descriptor thresholds for its readers instead."""
    g = compile_model(random_model(2, image_size=8, stem_channels=6,
                                   stages=[[6, 1, 1], [10, 1, 2]], bases=3, act_bits=2))
    small = EngineConfig(arrays=2, pe=4, simd=8, input_buffer=4096, weight_buffer=64,
                         output_buffer=4096, port_bytes=16)
    program = assert_bit_exact(g, images_for(g, 2, 2), small)
    mixers = [d for d in program.descriptors if d["opcode"] == OPCODE_CODES["MIXER"]]
    assert any(d["flags"] & LEVELS for d in mixers)
    # 2-bit activations: the levels are 2-bit elements of three thresholds
    assert {(d["aux_fmt"], d["aux_elem"], d["aux_levels"]) for d in mixers
            if d["flags"] & LEVELS} == {(1, 2, 3)}


def test_a_level_output_outside_the_image_is_refused(resnet18):
    g, images, program, _ = resnet18
    d = next(d for d in program.descriptors if d["flags"] & LEVELS)
    image = bytearray(program.image)
    entry = d["table_addr"] + d["jobs"] * JOB.itemsize - program.base   # first level entry
    e = decode(image[entry:entry + JOB.itemsize], JOB)
    e["out_addr"] = program.base + len(image) - 8
    image[entry:entry + JOB.itemsize] = encode(e, JOB)
    with pytest.raises(ProgramError, match=f"descriptor {d['index']} .*level output rows"):
        run_program(program, image, images)


def test_the_core_as_built_gets_neither_choice():
    g = compile_model(zoo_model("resnet18", 5, image_size=32))
    target = engine_target("de10nano")
    assert not target.config.levels_at_producer and 24 not in target.config.fixed_containers
    core = compile_engine(g, target.config)
    assert not any(d["flags"] & (LEVELS | ONLY) for d in core.descriptors)
    assert not any(f.elem_bits == 24 for _, f in core.tensors.values())
    # a program with level outputs is refused for the core, naming the reason
    intended = compile_engine(g, replace(target.config, levels_at_producer=True))
    with pytest.raises(ValueError, match="level outputs"):
        check_program(intended, target.core)


def test_cycle_model_counts_level_outputs_by_hand():
    """A level-only mixer descriptor: it writes each output's level tensors and no
    output; its job table holds them after the jobs."""
    cfg, dram = EngineConfig(), DramModel(latency=40, bytes_per_cycle=8.0)
    d = dict(index=3, opcode=OPCODE_CODES["CONV"], flags=LEVELS | ONLY, jobs=5, kernel=3,
             stride=1, dilation=1, padding=1, stages=STAGE_BITS["mixer"] | STAGE_BITS["gated"],
             in_h=8, in_w=8, in_c=64, out_h=8, out_w=8, out_c=64, groups=1, act_bits=0,
             in_pitch=64, in_bytes=512, side_pitch=0, out_pitch=2048, out_bytes=16384,
             rows_per_tile=8, n_tiles=1, param_bytes=4800, weight_tile_bytes=4608,
             aux_outputs=2, aux_pitch=64, aux_bytes=512, chunk_c=0)
    c = descriptor_cycles(d, {}, cfg, dram)
    assert c.bytes_written == 5 * 2 * 512
    assert c.bytes_read == 128 + (5 + 10) * 16 + 5 * 512 + 5 * 4800
    # the parameters before the rows: the table's read, each job's three constant
    # sections (the mixer's coefficients and two level outputs' thresholds) and the
    # weights, a read latency each; after the compute the last row's two level outputs
    setup = (1 + 5 * 3 + 1) * 40 + -(-5 * 4800 // 8)
    assert c.overhead == (40 + -(-(128 + 15 * 16) // 16)) + setup + 40 + 24 + \
        -(-2 * 64 * 5 // 8)
