"""Binary weights in the two orders of a program (compiler/engine/params.py): tap-aligned
for the intended engine, whose window gatherer gives a tap's channels words of their
own, and the flat window's folds for the core as built. Each round-trips, takes the
bytes ``sections`` counts, is what the program's header says, and runs bit-exact on
the reference model; the core's programs keep the flat order and refuse the other.
Tap-aligned programs' binary convolutions carry their unit geometry (the numbers the
gatherer and fold issuer step by), flat programs none."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_model
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.gather import unit_geometry
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.params import (binary_in_folds, binary_weight_bytes,
                                                binary_weight_words, pack_binary_weights,
                                                sections, tap_aligned_weights,
                                                unpack_binary_weights)
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, FLAG_BITS, HEADER_FLAG_BITS,
                                                 OPCODE_CODES, STAGE_BITS, ProgramError,
                                                 encode, field_table)
from groupnet_hw.compiler.engine.target import CORE_PROGRAM, check_program, engine_target
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.sim.engine_model import run_program
from test_engine_program import assert_bit_exact, images_for, zoo_model


def spec_words(bits, pe, simd, tap_aligned):
    """The words the fold issuer reads, built lane by lane from the orders' definition
    (docs/architecture.md section 12): fold ``(o, s)`` at ``o * in_folds + s``, PE
    ``p``'s lane ``j`` at bit ``p * simd + j``; one group."""
    c_out, c_in, k, _ = bits.shape
    words = -(-c_in // simd)
    in_folds = k * k * words if tap_aligned else -(-k * k * c_in // simd)
    out = []
    for o in range(-(-c_out // pe)):
        for s in range(in_folds):
            word = 0
            for p in range(pe):
                if o * pe + p >= c_out:
                    continue                       # padded channels: 0 bits
                for j in range(simd):
                    if tap_aligned:                # tap t's channels of its word
                        t, c = divmod(s, words)
                        c = c * simd + j
                    else:                          # window lane s*simd + j, across taps
                        t, c = divmod(s * simd + j, c_in)
                    if c < c_in and t < k * k:
                        word |= int(bits[o * pe + p, c, t // k, t % k]) << (p * simd + j)
            out.append(word)
    return out


@settings(max_examples=60, deadline=None)
@given(c_out=st.integers(1, 20), c_in=st.integers(1, 21), k=st.sampled_from([1, 3]),
       pe=st.integers(1, 8), simd=st.sampled_from([1, 3, 8, 16, 40]),
       groups=st.sampled_from([1, 2, 3]), tap_aligned=st.booleans(),
       seed=st.integers(0, 2**31))
def test_both_orders_round_trip_in_the_bytes_sections_count(c_out, c_in, k, pe, simd, groups,
                                                           tap_aligned, seed):
    c_out *= groups
    bits = np.random.default_rng(seed).integers(0, 2, size=(c_out, c_in, k, k))
    buf = pack_binary_weights(bits, pe, simd, groups, tap_aligned=tap_aligned)
    assert buf.size == binary_weight_bytes(c_out, c_in, k, pe, simd, groups,
                                           tap_aligned=tap_aligned)
    back = unpack_binary_weights(buf, c_out, c_in, k, pe, simd, groups, tap_aligned=tap_aligned)
    assert np.array_equal(back, bits)
    # a descriptor of that convolution and a header of that order: the same section
    d = dict(opcode=OPCODE_CODES["CONV"], stages=0, flags=0, in_c=c_in * groups, out_c=c_out,
             kernel=k, groups=groups, const_bytes=4, weight_bytes=0)
    header = dict(port_bytes=16, pe=pe, simd=simd,
                  flags=HEADER_FLAG_BITS["tap_aligned_weights"] if tap_aligned else 0)
    assert sections(d, header)["weights"] == (0, buf.size)


@pytest.mark.parametrize("c_out, c_in, k, pe, simd", [
    (5, 13, 3, 2, 8),      # channels not a multiple of simd or pe: masked tails
    (3, 10, 5, 2, 8),      # 5x5
    (9, 16, 1, 4, 16),     # 1x1, channels a multiple of simd: the orders agree
    (4, 6, 3, 4, 6),       # a tap a word exactly
    (7, 3, 3, 3, 8),       # a tap's channels fill part of a word
])
@pytest.mark.parametrize("tap_aligned", [True, False])
def test_the_words_are_the_orders_definition(c_out, c_in, k, pe, simd, tap_aligned):
    bits = np.random.default_rng(c_out * c_in + k).integers(0, 2, size=(c_out, c_in, k, k))
    folds = -(-c_out // pe) * binary_in_folds(c_in, k, simd, tap_aligned)
    buf = pack_binary_weights(bits, pe, simd, tap_aligned=tap_aligned)
    assert binary_weight_words(buf, pe, simd, folds) == spec_words(bits, pe, simd, tap_aligned)


def test_tap_aligned_folds_by_hand():
    # a 2x2 window of 3 channels on 4 lanes: tap-aligned, a word a tap (lane 3 masked)
    bits = np.zeros((1, 3, 2, 2), dtype=np.int64)
    bits[0, 2, 0, 1] = 1                    # tap 1 (ky=0, kx=1), channel 2
    tapped = pack_binary_weights(bits, pe=1, simd=4, tap_aligned=True)
    flat = pack_binary_weights(bits, pe=1, simd=4)
    # tap-aligned: fold 1, lane 2 -> bit 6; flat: window lane 1*3 + 2 = 5
    assert list(tapped) == [1 << 6, 0] and list(flat) == [1 << 5, 0]
    assert binary_in_folds(3, 2, 4, True) == 4 and binary_in_folds(3, 2, 4, False) == 3


@pytest.fixture(scope="module")
def odd_graph():
    """Channels not a multiple of SIMD 8 (5, 7, 9), 3x3 windows, 2-bit activations."""
    return compile_model(random_model(2, image_size=8, stem_channels=5,
                                      stages=[[7, 1, 1], [9, 1, 2]], bases=2, act_bits=2))


SMALL = EngineConfig(arrays=2, pe=4, simd=8, input_buffer=4096, weight_buffer=64,
                     output_buffer=4096, port_bytes=16)


def test_the_header_records_the_order_and_the_model_runs_both(odd_graph):
    images = images_for(odd_graph, 2, 2)
    tapped = assert_bit_exact(odd_graph, images, SMALL)
    flat = assert_bit_exact(odd_graph, images, replace(SMALL, tap_aligned_weights=False))
    assert tap_aligned_weights(tapped.header) and not tap_aligned_weights(flat.header)
    assert tapped.header["flags"] == HEADER_FLAG_BITS["tap_aligned_weights"]
    # every binary convolution whose channels are not whole words takes more bytes so
    convs = [(a, b) for a, b in zip(tapped.descriptors, flat.descriptors)
             if a["opcode"] == OPCODE_CODES["CONV"] and not a["flags"] & FLAG_BITS["int_weights"]]
    assert convs and all(a["weight_tile_bytes"] >= b["weight_tile_bytes"] for a, b in convs)
    assert any(a["weight_tile_bytes"] > b["weight_tile_bytes"] for a, b in convs
               if a["kernel"] > 1 and a["in_c"] % 8)


def test_weight_chunks_fit_half_the_buffer_by_the_packings_count():
    """Weight streaming cuts whole PE folds of the order's bytes: 9 channels on 8 lanes
    take 18 words a 3x3 window tap-aligned (576 bits a PE fold of 4), so a half buffer
    of 2048 bits holds 3 folds, 12 channels (by the flat window's 81 lanes a channel it
    would take 24)."""
    g = compile_model(random_model(3, image_size=16, stem_channels=9,
                                   stages=[[9, 1, 1], [13, 1, 2]], bases=2))
    cfg = EngineConfig(arrays=2, pe=4, simd=8, input_buffer=2048, weight_buffer=512,
                       output_buffer=4096)
    program = assert_bit_exact(g, images_for(g, 1), cfg)
    streamed = [d for d in program.descriptors if d["flags"] & FLAG_BITS["weight_stream"]]
    assert max(d["chunk_c"] for d in streamed) == 12
    for d in streamed:
        fold_bits = binary_in_folds(d["in_c"], d["kernel"], cfg.simd, True) * cfg.pe * cfg.simd
        assert d["chunk_c"] % cfg.pe == 0
        assert d["chunk_c"] // cfg.pe * fold_bits <= 8 * cfg.weight_buffer // 2


def test_the_core_keeps_the_flat_order_and_refuses_the_other():
    g = compile_model(zoo_model("digits", 2))
    target = engine_target("de10nano")
    assert CORE_PROGRAM["tap_aligned_weights"] is False
    assert not target.config.tap_aligned_weights
    core = compile_engine(g, target.config)
    assert core.header["flags"] == 0
    check_program(core, target.core)
    intended = compile_engine(g, replace(target.config, tap_aligned_weights=True))
    with pytest.raises(ValueError, match="tap-aligned"):
        check_program(intended, target.core)


def test_the_choice_is_a_bool():
    assert EngineConfig().tap_aligned_weights is True
    with pytest.raises(ValueError, match="tap_aligned_weights"):
        EngineConfig(tap_aligned_weights=1)


#: the descriptor's unit geometry fields, ``words`` to ``windows`` (before ``reserved``)
_NAMES = [n for _, _, n, _ in field_table("descriptor")]
GEOMETRY = _NAMES[_NAMES.index("words"):_NAMES.index("reserved")]


@pytest.fixture(scope="module")
def geometry_graph():
    """9 channels on SIMD 8 (two words a pixel, the second of one lane), a base of
    dilation 2, a stride-2 3x3 layer, 2-bit activations, first layers thresholding
    8-bit maps."""
    return compile_model(random_model(2, image_size=8, stem_channels=5,
                                      stages=[[9, 1, 1], [11, 1, 2]], bases=2, act_bits=2,
                                      dilations=[[1, 2], [1, 1]]))


def _geometry(d):
    return {n: d[n] for n in GEOMETRY}


def _binary_conv(program, **match):
    """``(index, descriptor)`` of the one binary CONV descriptor with fields ``match``."""
    (found,) = [(i, d) for i, d in enumerate(program.descriptors)
                if d["opcode"] == OPCODE_CODES["CONV"]
                and not d["flags"] & FLAG_BITS["int_weights"]
                and all(d[k] == v for k, v in match.items())]
    return found


def test_binary_convs_carry_their_unit_geometry(geometry_graph):
    assert GEOMETRY[0] == "words" and GEOMETRY[-1] == "windows" and len(GEOMETRY) == 11
    # the model checks every descriptor's geometry as it runs it
    program = assert_bit_exact(geometry_graph, images_for(geometry_graph, 1), SMALL)
    ds = program.descriptors

    def one(**match):
        return _geometry(_binary_conv(program, **match)[1])

    # by hand, SIMD 8, PE 4, 8x8 maps: 9 channels are 2 words, the last of 1 lane; a
    # 2-bit pixel of 9 channels 3 bytes; 11 output channels 3 PE folds, 9 output 3
    assert one(stride=2) == dict(words=2, tail=1, span=2, in_folds=18, out_folds=3,
                                 pitch=16, x_step=4, dx_words=2, pad_words=2,
                                 pixel_bytes=3, windows=16)
    assert one(dilation=2, in_c=9) == dict(words=2, tail=1, span=4, in_folds=18,
                                           out_folds=3, pitch=16, x_step=2, dx_words=4,
                                           pad_words=4, pixel_bytes=3, windows=64)
    # a prologue's input: 5 channels of an 8-bit map, one word of 5 lanes, 5 bytes
    assert one(dilation=2, in_c=5) == dict(words=1, tail=5, span=4, in_folds=9,
                                           out_folds=3, pitch=8, x_step=1, dx_words=2,
                                           pad_words=2, pixel_bytes=5, windows=64)
    # every other opcode carries none
    assert all(not any(_geometry(d).values()) for d in ds if d["opcode"] != OPCODE_CODES["CONV"])
    # the stem (integer weights) carries the stem runner's: a pixel's channels one word
    # of byte lanes, the flat window in folds of stem_simd bytes, stem_pe channels a fold
    h = program.header
    for d in ds:
        if d["opcode"] == OPCODE_CODES["CONV"] and d["flags"] & FLAG_BITS["int_weights"]:
            conv_h = d["mid_h"] if d["stages"] & STAGE_BITS["maxpool"] else d["out_h"]
            conv_w = d["mid_w"] if d["stages"] & STAGE_BITS["maxpool"] else d["out_w"]
            assert _geometry(d) == dict(
                words=1, tail=d["in_c"], span=(d["kernel"] - 1) * d["dilation"],
                in_folds=-(-d["kernel"] ** 2 * d["in_c"] // h["stem_simd"]),
                out_folds=-(-d["out_c"] // h["stem_pe"]), pitch=d["in_w"],
                x_step=d["stride"], dx_words=d["dilation"], pad_words=d["padding"],
                pixel_bytes=d["in_c"], windows=conv_h * conv_w)
    # a fused pooling stage's windows are the convolution's pixels, not the pool's
    d = _binary_conv(program, stride=2)[1]
    pooled = dict(d, stages=d["stages"] | STAGE_BITS["maxpool"], mid_h=6, mid_w=5)
    assert unit_geometry(pooled, program.header)["windows"] == 30
    # flat programs (the core as built) leave the bytes zero
    flat = compile_engine(geometry_graph, replace(SMALL, tap_aligned_weights=False))
    assert all(not any(_geometry(d).values()) for d in flat.descriptors)
    assert all(unit_geometry(d, flat.header) == {} for d in flat.descriptors)


def test_the_model_refuses_a_descriptor_whose_geometry_is_not_its_own(geometry_graph):
    program = compile_engine(geometry_graph, SMALL)
    i, d = _binary_conv(program, stride=2)
    bad = bytearray(program.program_bytes())
    o = program.header["desc_addr"] - program.base + i * DESCRIPTOR.itemsize
    bad[o:o + DESCRIPTOR.itemsize] = encode(dict(d, pitch=d["pitch"] + 1), DESCRIPTOR)
    with pytest.raises(ProgramError, match=f"descriptor {i}: unit geometry pitch 17 != 16"):
        run_program(bytes(bad), bytearray(program.image), images_for(geometry_graph, 1))
