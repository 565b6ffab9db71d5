"""The engine back end end to end: program, layout and packing proven bit-exact by the
reference model (sim.engine_model) against the integer executor, every intermediate
tensor read back from DRAM (docs/architecture.md section 12)."""

import copy
from pathlib import Path

import pytest
import torch

from conftest import random_model
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.fusion import fuse
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, HEADER, JOB, STAGE_BITS,
                                                 ProgramError, decode, encode, field_table)
from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.graph import Graph
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.engine_opcodes import END
from groupnet_hw.models.groupnet import VARIANTS, GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config
from groupnet_hw.sim.engine_model import first_mismatch, run_program


def zoo_model(arch, bases, seed=1, variant="groupnet", **overrides):
    cfg = arch_config(arch, bases=bases, variant=variant)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg.validate()
    torch.manual_seed(seed)       # the weights' initialisation: not the test order's
    return randomize_eval_state(GroupNet(cfg), torch.Generator().manual_seed(seed)).eval()


def images_for(g, n, seed=0):
    x = g[g.input]
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, x.channels, x.height, x.width), dtype=torch.uint8, generator=gen)


def assert_bit_exact(g, images, config=None):
    """Logits and every descriptor's output tensor in DRAM equal the executor's."""
    program = compile_engine(g, config)
    values = execute(g, images)
    logits, outputs = run_program(program, bytearray(program.image), images)
    assert torch.equal(logits, values[g.output])
    assert first_mismatch(program, outputs, values) is None
    # every descriptor wrote something that was checked
    assert len(outputs) == len(program.descriptors)
    return program


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("bases", [1, 2, 3])
def test_digits_variants_bit_exact(variant, bases):
    g = compile_model(zoo_model("digits", bases, seed=bases, variant=variant))
    assert_bit_exact(g, images_for(g, 2))


# odd channel counts (not multiples of PE or SIMD), K=1, stride 2, BPAC dilation,
# n-bit activations, option-A and conv shortcuts, stem pooling
RANDOM_CONFIGS = [
    dict(image_size=9, stem_channels=5, stages=[[7, 1, 1], [9, 1, 2]], bases=1),
    dict(image_size=8, stem_channels=3, stages=[[5, 1, 1], [11, 1, 2]], bases=2,
         dilations=[[1, 2], [2, 1]]),
    dict(image_size=8, stem_channels=6, stages=[[6, 1, 1], [10, 1, 2]], bases=3, act_bits=2),
    dict(image_size=10, stem_channels=4, stages=[[5, 2, 2]], bases=2, act_bits=4,
         variant="groupnet-star"),
    dict(image_size=12, in_channels=3, stem_channels=8, stem_kernel=5, stem_stride=2,
         stem_pool=True, stages=[[8, 1, 1], [13, 1, 2]], bases=2, shortcut="conv"),
    dict(image_size=8, stem_channels=7, stages=[[7, 1, 1], [9, 1, 2]], bases=4, variant="lbd",
         act_bits=2),
]


@pytest.mark.parametrize("seed,overrides", list(enumerate(RANDOM_CONFIGS)))
def test_random_configs_bit_exact(seed, overrides):
    g = compile_model(random_model(seed, **overrides))
    # small buffers force several row tiles and weight streaming on these small maps
    small = EngineConfig(arrays=2, pe=4, simd=8, input_buffer=4096, weight_buffer=64,
                         output_buffer=4096, port_bytes=16)
    assert_bit_exact(g, images_for(g, 2, seed), small)
    assert_bit_exact(g, images_for(g, 1, seed))


def test_small_buffers_tile_and_stream():
    """The tiling paths the default-size tests would not take: several row tiles, and
    weight streaming in channel chunks."""
    g = compile_model(random_model(3, image_size=16, stem_channels=8,
                                   stages=[[16, 1, 1], [32, 1, 2]], bases=2))
    cfg = EngineConfig(arrays=2, pe=4, simd=8, input_buffer=2048, weight_buffer=128,
                       output_buffer=4096)
    program = assert_bit_exact(g, images_for(g, 1), cfg)
    tiles = [d["n_tiles"] for d in program.descriptors if not d["flags"] & 8]
    streamed = [d for d in program.descriptors if d["flags"] & 8]
    assert max(tiles) > 1 and streamed


def test_cifar_small_k5_bit_exact():
    g = compile_model(zoo_model("cifar-small", 5))
    assert_bit_exact(g, images_for(g, 1))


def test_resnet18_k5_reduced_bit_exact():
    g = compile_model(zoo_model("resnet18", 5, image_size=32))
    program = assert_bit_exact(g, images_for(g, 1))
    # the K=5 bases of a block run as one descriptor on the five arrays
    assert max(d["jobs"] for d in program.descriptors) == 5


@pytest.mark.slow
def test_resnet18_k5_224_bit_exact():
    g = compile_model(zoo_model("resnet18", 5))
    assert_bit_exact(g, images_for(g, 1))


@pytest.mark.slow
def test_resnet34_k5_reduced_bit_exact():
    g = compile_model(zoo_model("resnet34", 5, image_size=32))
    assert_bit_exact(g, images_for(g, 2))


def test_every_node_in_one_descriptor_and_groups():
    g = compile_model(zoo_model("digits", 3))
    groups = fuse(g, arrays=5)
    names = [n.name for grp in groups for n in grp.nodes]
    assert sorted(names) == sorted(n.name for n in g)
    # the three bases' convolutions are one descriptor each layer
    assert [len(grp.jobs) for grp in groups if grp.opcode == "CONV"] == [1, 3, 3, 3, 3]


def _renamed(g):
    """The same graph with every node renamed (names must carry no meaning)."""
    new = {n.name: f"zz{i}_{n.op}" for i, n in enumerate(reversed(g.nodes))}

    def ref(r):
        name, sep, k = r.partition(":")
        return new[name] + sep + k
    nodes = []
    for n in g:
        m = copy.copy(n)
        m.name, m.inputs = new[n.name], [ref(r) for r in n.inputs]
        m.attrs = {k: v for k, v in n.attrs.items() if k != "folded_from"}
        nodes.append(m)
    return Graph(nodes, input=new[g.input], output=new[g.output])


def test_no_node_name_carries_meaning():
    g = compile_model(zoo_model("digits", 2, variant="groupnet-star"))
    a, b = compile_engine(g), compile_engine(_renamed(g))
    assert a.image == b.image


def test_descriptor_round_trip():
    g = compile_model(zoo_model("digits", 2))
    program = compile_engine(g)
    for d in program.descriptors:
        assert decode(encode(d, DESCRIPTOR), DESCRIPTOR) == d
    assert decode(encode(program.header, HEADER), HEADER) == program.header
    entry = dict(in_addr=1, side_addr=2, out_addr=0xFFFF_FFFF, param_addr=4)
    assert decode(encode(entry, JOB), JOB) == entry
    with pytest.raises(ProgramError):
        encode(dict(kernel=256), DESCRIPTOR)
    offsets = [o for o, *_ in field_table("descriptor")]
    assert offsets == sorted(offsets) and offsets[-1] == 126


@pytest.mark.parametrize("which, title", [("header", "Header (`program.HEADER`):"),
                                          ("descriptor", "Descriptor (`program.DESCRIPTOR`):"),
                                          ("job", "Job-table entry (`program.JOB`)")])
def test_the_documented_tables_are_the_records(which, title):
    """docs/architecture.md section 12's tables list the records' offsets, types and
    names as ``field_table`` has them (the wording of a meaning is the document's)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    lines = text[text.index(title):].split("\n")
    first = next(k for k, line in enumerate(lines) if line.startswith("| offset")) + 2
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append(tuple(c.strip() for c in line.strip("|").split("|"))[:3])
    types = {"u1": "u8", "<u2": "u16", "<u4": "u32", "S4": "char[4]"}
    assert rows == [(str(o), types.get(t, f"bytes[{t[1:]}]"), f"`{n}`")
                    for o, t, n, _ in field_table(which)]


def _table_entry_offset(program, index):
    d = program.descriptors[index]
    return d["table_addr"] - program.base


def test_descriptor_outside_image_is_refused():
    g = compile_model(zoo_model("digits", 2))
    program = compile_engine(g)
    image = bytearray(program.image)
    conv = next(i for i, d in enumerate(program.descriptors) if d["opcode"] == 2 and d["jobs"] == 2)
    at = _table_entry_offset(program, conv)
    entry = decode(image[at:at + 16], JOB)
    entry["in_addr"] = program.base + len(image) + 4096
    image[at:at + 16] = encode(entry, JOB)
    with pytest.raises(ProgramError, match=f"descriptor {conv} .*outside the image"):
        run_program(program, image, images_for(g, 1))
    # a table address below the base
    bad = bytearray(program.program_bytes())
    d = dict(program.descriptors[conv], table_addr=program.base - 64)
    o = program.header["desc_addr"] - program.base + conv * 128
    bad[o:o + 128] = encode(d, DESCRIPTOR)
    with pytest.raises(ProgramError, match="outside the image"):
        run_program(bytes(bad), bytearray(program.image), images_for(g, 1))
    # a descriptor that is not one
    bad[o + 126:o + 128] = b"\0\0"
    with pytest.raises(ProgramError, match="bad magic"):
        run_program(bytes(bad), bytearray(program.image), images_for(g, 1))
    # a program without its END
    raw = bytearray(program.program_bytes())
    end = program.header["desc_addr"] - program.base + len(program.descriptors) * 128
    assert raw[end] == END and len(raw) == end + 128
    raw[end] = 0x7F
    with pytest.raises(ProgramError, match="unknown opcode"):
        run_program(bytes(raw), bytearray(program.image), images_for(g, 1))
    header = decode(raw[:128], HEADER)
    raw[:128] = encode(dict(header, n_desc=header["n_desc"] - 1), HEADER)
    with pytest.raises(ProgramError, match="no END"):
        run_program(bytes(raw[:end]), bytearray(program.image), images_for(g, 1))
    # a program in another format version (version 1 kept a post-op's A and B apart)
    old = bytearray(program.program_bytes())
    old[:128] = encode(dict(program.header, version=1), HEADER)
    with pytest.raises(ProgramError, match="format version 1, this engine reads 2"):
        run_program(bytes(old), bytearray(program.image), images_for(g, 1))


def test_first_mismatch_names_the_corrupted_descriptor():
    g = compile_model(zoo_model("digits", 2))
    program = compile_engine(g)
    images = images_for(g, 2)
    values = execute(g, images)
    conv = next(i for i, d in enumerate(program.descriptors) if d["jobs"] == 2 and d["opcode"] == 2)
    at = _table_entry_offset(program, conv)
    entry = decode(program.image[at:at + 16], JOB)
    image = bytearray(program.image)
    o = entry["param_addr"] - program.base + program.descriptors[conv]["param_bytes"] // 2
    image[o] ^= 0xFF                       # a weight or constant of base 0
    _, outputs = run_program(program, image, images)
    m = first_mismatch(program, outputs, values)
    assert m is not None and m.index == conv and m.count > 0
    assert str(m).startswith(f"descriptor {conv} (CONV")


def test_standalone_gate_bit_exact():
    """A soft gate that fuse_gates did not merge into its mixer runs as a GATE
    descriptor (the pass list without fuse_gates)."""
    from groupnet_hw.compiler.frontend import lower
    from groupnet_hw.compiler.passes import analyze_ranges, fold_relu, fold_thresholds
    g = lower(zoo_model("digits", 3, seed=2))
    for graph_pass in (fold_relu, analyze_ranges, fold_thresholds, analyze_ranges):
        g = graph_pass(g)
    program = assert_bit_exact(g, images_for(g, 2))
    assert "GATE" in [grp.opcode for grp in program.groups]


def test_gate_inputs_from_different_descriptors_share_one_format(tmp_path):
    """The authors' fixed-mean variant (the emulated in-place defect): a GATE gates a
    block's bases (16-bit containers) with the previous block's sum, a MIXER's output
    of 17 bits (a 32-bit container). The descriptor reads its inputs through one
    format, so the compiler widens the tensors tied that way to one container:
    bit-exact."""
    from authors_layout import narrow_authors_model
    model, _ = narrow_authors_model(tmp_path, bases=3, image_size=32, learned_scales=False)
    g = compile_model(model)
    program = assert_bit_exact(g, images_for(g, 2))
    gates = [i for i, grp in enumerate(program.groups) if grp.opcode == "GATE"]
    assert gates
    for i in gates:
        refs = [g.source(r) if g.producer(r).outputs == 1 else r
                for r in program.groups[i].jobs[0].core.inputs]
        assert {program.tensors[r][1].elem_bits for r in refs} \
            == {program.descriptors[i]["in_elem"]}


def _opcodes(program):
    return [grp.opcode for grp in program.groups]


def test_an_overlapping_pooling_is_fused_only_where_it_is_not_recomputed():
    """The stem's 3x3/2 max pooling pools on chip on the intended engine; the core as
    built would evaluate the convolution once per pooling tap, so for it the stem
    writes its result and a MAXPOOL descriptor pools it. Bit-exact both ways."""
    from dataclasses import replace
    g = compile_model(random_model(4, **RANDOM_CONFIGS[4]))
    assert [(n.attrs["kernel"], n.attrs["stride"]) for n in g if n.op == "maxpool"] == [(3, 2)]
    images = images_for(g, 2, seed=4)
    fused = assert_bit_exact(g, images, EngineConfig())
    unfused = assert_bit_exact(g, images, replace(EngineConfig(), fuse_overlapping_pools=False))
    assert "MAXPOOL" not in _opcodes(fused)
    assert _opcodes(unfused).count("MAXPOOL") == 1
    assert len(unfused.groups) == len(fused.groups) + 1


def test_a_non_overlapping_pooling_stays_fused_on_the_core():
    """A 2x2/2 pooling recomputes nothing: fusion pools it on chip for the core too
    (the rule reads the pooling's kernel and stride only)."""
    g = copy.deepcopy(compile_model(random_model(4, **RANDOM_CONFIGS[4])))
    (pool,) = [n for n in g if n.op == "maxpool"]
    pool.attrs.update(kernel=2, stride=2)
    for overlapping in (True, False):
        groups = fuse(g, arrays=5, overlapping_pools=overlapping)
        assert [j.pool for grp in groups for j in grp.jobs if j.pool is not None] == [pool]


def test_bases_that_do_not_fit_the_scratchpad_together_take_turns(tmp_path):
    """Fusion rule 6 on the 64 KiB core: a block's five bases of 64 channels over
    16x16 maps do not fit one tile together, so the block's mixer runs as its own
    descriptor and the bases as consecutive descriptors of as many as fit.
    Bit-exact in the reference model, every descriptor checked."""
    from authors_layout import narrow_authors_model
    from groupnet_hw.compiler.engine.target import engine_target
    model, _ = narrow_authors_model(tmp_path, bases=5, image_size=64, widths=(64, 64),
                                    blocks=(1, 1))
    g = compile_model(model)
    config = engine_target("de10nano", buffer_bytes=64 * 1024).config
    program = assert_bit_exact(g, images_for(g, 1), config)
    conv_jobs = [len(grp.jobs) for grp in program.groups if grp.opcode == "CONV"]
    assert "MIXER" in _opcodes(program)
    assert any(1 < n < 5 for n in conv_jobs)
    assert sum(conv_jobs) == len([n for n in g if n.op in ("int_conv", "bin_conv")])


@pytest.mark.parametrize("seed,overrides", list(enumerate(RANDOM_CONFIGS)))
def test_random_configs_without_prologue_thresholds_bit_exact(seed, overrides):
    """The other way of rule 3 (the core's choice for wide maps): every threshold a
    3x3 convolution would apply as it reads becomes a PIXEL job writing levels (a 1x1
    convolution keeps its prologue), and the programs stay bit-exact (odd channels,
    K=1..4, stride 2, dilation, n-bit)."""
    from dataclasses import replace
    g = compile_model(random_model(seed, **overrides))
    with_prologues = compile_engine(g, EngineConfig())
    without = assert_bit_exact(g, images_for(g, 2, seed),
                               replace(EngineConfig(), prologue_thresholds=False))
    prologue_bit = STAGE_BITS["prologue_threshold"]
    assert all(d["kernel"] == 1 for d in without.descriptors if d["stages"] & prologue_bit)
    if any(d["stages"] & prologue_bit for d in with_prologues.descriptors):
        assert _opcodes(without).count("PIXEL") > _opcodes(with_prologues).count("PIXEL")
