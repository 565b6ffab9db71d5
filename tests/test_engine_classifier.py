"""The classifier head (hw/engine/classifier.py) runs a HEAD descriptor, DRAM to DRAM,
behind the read and write DMAs and the Avalon-MM memory model of the DMA tests: the
memory after it equals, byte for byte, the memory after the reference model ran the
same descriptor (sim/engine_model.py); a descriptor it cannot run is refused with
memory untouched."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import random_model
from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.compiler.engine.params import pack_consts, sections
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, DESCRIPTOR_MAGIC, JOB, OPCODE_CODES,
                                                 encode)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.engine_registers import ERROR_CAUSES
from groupnet_hw.hw.engine.classifier import PooledClassifier
from groupnet_hw.hw.engine.mixer import MixerLanes
from groupnet_hw.sim.engine_model import _Memory, run_descriptor
from test_engine_runner import BASE, CONFIG, program_steps, run_runner_in_turn, units_take

PORT = 16
HEADER = dict(port_bytes=PORT, pe=CONFIG.pe, simd=CONFIG.simd, stem_pe=CONFIG.stem_pe,
              stem_simd=CONFIG.stem_simd, flags=1)
FAKE_PROGRAM = SimpleNamespace(config=CONFIG)
IMAGE_BYTES = 0x8000       # every case's image (the runs of one simulation share a size)


def head_case(rng, *, in_c, h, w, classes, in_elem, weight_bytes, const_bytes, out_elem):
    """A HEAD descriptor and its image: random map elements, weights and biases of the
    widths given, placed at random whole-word offsets."""
    in_f = TensorFormat.from_code(2, in_elem, in_c, h, w, PORT)
    out_f = TensorFormat.from_code(2, out_elem, classes, 1, 1, PORT)
    d = {name: 0 for name in DESCRIPTOR.names if name != "reserved"}
    d.update(opcode=OPCODE_CODES["HEAD"], flags=2, jobs=1, kernel=1, stride=1, dilation=1,
             in_h=h, in_w=w, in_c=in_c, out_h=1, out_w=1, out_c=classes, groups=1,
             in_fmt=2, in_elem=in_elem, out_fmt=2, out_elem=out_elem,
             const_bytes=const_bytes, weight_bytes=weight_bytes, rows_per_tile=1,
             n_tiles=1, in_pitch=in_f.row_bytes, out_pitch=out_f.row_bytes,
             in_bytes=in_f.nbytes, out_bytes=out_f.nbytes,
             weight_tile_bytes=classes * in_c * weight_bytes, index=7,
             magic=DESCRIPTOR_MAGIC)
    secs = sections(d, HEADER)
    d["param_bytes"] = max(o + n for o, n in secs.values())
    d["param_bytes"] += -d["param_bytes"] % PORT
    # a logit's range: the map's elements and the weights are scaled so that it fits
    wbits = 8 * weight_bytes - 1
    x = np.array([rng.randrange(-(1 << (in_elem - 1)), 1 << (in_elem - 1))
                  for _ in range(in_c * h * w)], dtype=np.int64).reshape(in_c, h, w)
    weights = np.array([rng.randrange(-(1 << wbits), 1 << wbits)
                        for _ in range(classes * in_c)], dtype=np.int64)
    bias = np.array([rng.randrange(-(1 << (8 * const_bytes - 2)), 1 << (8 * const_bytes - 2))
                     for _ in range(classes)], dtype=np.int64)
    if out_elem < 64:
        # a logit within its element: weights of -1, 0 and 1, small biases, the map's
        # elements scaled so that their sum over the pixels and channels fits
        weights = weights % 3 - 1
        bias = bias % 64
        x = x >> max(0, in_elem - (out_elem - 3 - (in_c * h * w).bit_length()))
    table, params = 0x100, 0x200
    in_addr = params + d["param_bytes"] + PORT * rng.randrange(0, 3)
    out_addr = in_addr + in_f.nbytes + PORT * rng.randrange(0, 3)
    assert out_addr + out_f.nbytes <= IMAGE_BYTES
    image = bytearray(IMAGE_BYTES)
    d["table_addr"] = BASE + table + PORT * rng.randrange(0, 2)
    entry = {"in_addr": BASE + in_addr, "side_addr": 0, "out_addr": BASE + out_addr,
             "param_addr": BASE + params}
    t = d["table_addr"] - BASE
    image[t:t + JOB.itemsize] = encode(entry, JOB)
    o, n = secs["weights"]
    image[params + o:params + o + n] = bytes(pack_consts(weights, weight_bytes))
    o, n = secs["head"]
    image[params + o:params + o + n] = bytes(pack_consts(bias, const_bytes))
    image[in_addr:in_addr + in_f.nbytes] = bytes(in_f.pack(x))
    # random bytes in the rows' padding and the logits' old place
    for a in range(in_addr, in_addr + in_f.nbytes, in_f.row_bytes):
        for k in range(in_f.row_bytes - w * in_c * in_elem // 8):
            image[a + in_f.row_bytes - 1 - k] = rng.randrange(256)
    image[out_addr:out_addr + out_f.nbytes] = bytes(rng.randrange(256) for _ in range(out_f.nbytes))
    return d, bytes(image)


def model_after(d, image):
    mem = _Memory(bytearray(image), BASE)
    run_descriptor(d, HEADER, mem)
    return bytes(mem.image)


def classifier(acc_width=64, lanes=8, value_width=32, loan_widths=None):
    return PooledClassifier(lanes=lanes, data_width=8 * PORT, max_channels=64, max_classes=64,
                            max_size=6, value_width=value_width, acc_width=acc_width,
                            loan_widths=loan_widths)


def mixer_lender(lanes=8):
    """Mixer lanes as the engine of the units has them, lending their multipliers."""
    return MixerLanes(lanes=lanes, value_width=32, max_jobs=5)


CASES = [
    dict(in_c=16, h=2, w=3, classes=10, in_elem=16, weight_bytes=1, const_bytes=4, out_elem=64),
    dict(in_c=24, h=3, w=3, classes=7, in_elem=24, weight_bytes=1, const_bytes=4, out_elem=64),
    dict(in_c=8, h=1, w=1, classes=37, in_elem=32, weight_bytes=2, const_bytes=8, out_elem=64),
    dict(in_c=40, h=5, w=2, classes=3, in_elem=8, weight_bytes=2, const_bytes=4, out_elem=32),
    dict(in_c=64, h=1, w=2, classes=5, in_elem=24, weight_bytes=1, const_bytes=8, out_elem=32),
    dict(in_c=8, h=6, w=6, classes=1, in_elem=8, weight_bytes=1, const_bytes=4, out_elem=64),
    # logits of 24 bits (a logit across two bus words), 16 and 8
    dict(in_c=16, h=2, w=2, classes=11, in_elem=16, weight_bytes=1, const_bytes=4, out_elem=24),
    dict(in_c=8, h=3, w=3, classes=9, in_elem=24, weight_bytes=2, const_bytes=4, out_elem=16),
    dict(in_c=8, h=1, w=2, classes=20, in_elem=8, weight_bytes=1, const_bytes=4, out_elem=8),
]


@pytest.mark.parametrize("p_wait", [0.0, 0.3])
def test_head_descriptors_leave_the_models_memory(p_wait):
    """Every element width of the map (8 to 32 bits: 24-bit elements cross bus words),
    1- and 2-byte weights, 4- and 8-byte biases, 32- and 64-bit logits, one channel
    group a word to five, one class to 37 (a class a cycle at 8 channels), rows padded
    with random bytes, and each descriptor after the one before on one unit."""
    rng = random.Random(5)
    runs = [head_case(rng, **case) for case in CASES]
    outcomes = run_runner_in_turn(FAKE_PROGRAM, runs, unit=classifier(), p_wait=p_wait,
                                  latency=(1, 6), seed=3)
    for (d, before), (got, result), case in zip(runs, outcomes, CASES):
        assert result == "done", (case, result)
        want = model_after(d, before)
        assert want != before
        assert got == want, case


@pytest.mark.parametrize("p_wait", [0.0, 0.3])
def test_on_the_mixer_lanes_multipliers(p_wait):
    """The head's products on a mixer's multipliers (its own none), as the engine of the
    units builds it (maps of up to 24-bit elements, sums of 30 bits on 32-bit
    multipliers): the same memory as the model's, the cases of the test above."""
    rng = random.Random(5)
    cases = [case for case in CASES if case["in_elem"] <= 24]
    runs = [head_case(rng, **case) for case in cases]
    unit = classifier(value_width=24, loan_widths=(32, 18))
    outcomes = run_runner_in_turn(FAKE_PROGRAM, runs, unit=unit, lender=mixer_lender(),
                                  p_wait=p_wait, latency=(1, 6), seed=3)
    for (d, before), (got, result), case in zip(runs, outcomes, cases):
        assert result == "done", (case, result)
        assert got == model_after(d, before), case


def test_borrowed_multipliers_too_narrow_are_refused():
    with pytest.raises(ValueError, match="cannot take its 30-bit sums"):
        classifier(value_width=24, loan_widths=(24, 18))
    with pytest.raises(ValueError, match="16-bit weights"):
        classifier(value_width=24, loan_widths=(32, 12))


@pytest.mark.parametrize("lanes", [4, 8])
def test_seeded_random_heads(lanes):
    """Random widths and sizes; with 4 lanes, maps of 4 channels among them (a channel's
    sum read again 4 elements after it was read, the pooling's closest)."""
    rng = random.Random(11 + lanes)
    cases = []
    for k in range(6):
        in_c = 4 if k == 0 and lanes == 4 else lanes * rng.randrange(1, 64 // lanes + 1)
        cases.append(dict(in_c=in_c, h=rng.randrange(1, 7),
                          w=rng.randrange(1, 7), classes=rng.randrange(1, 65),
                          in_elem=rng.choice((8, 16, 24, 32)),
                          weight_bytes=rng.choice((1, 2)), const_bytes=rng.choice((4, 8)),
                          out_elem=64))
    runs = [head_case(rng, **case) for case in cases]
    outcomes = run_runner_in_turn(FAKE_PROGRAM, runs, unit=classifier(lanes=lanes),
                                  p_wait=0.2, latency=(1, 4), seed=9)
    for (d, before), (got, result), case in zip(runs, outcomes, cases):
        assert result == "done", (case, result)
        assert got == model_after(d, before), case


def test_a_networks_head_runs_as_the_model_runs_it():
    """The HEAD descriptor a compiled network's program ends with (its map the last
    mixer's aggregate, its weights and biases as the compiler packs them)."""
    g = compile_model(random_model(3, image_size=8, stem_channels=16,
                                   stages=[[16, 1, 1], [24, 1, 2]], bases=2))
    program, descs, steps = program_steps(
        g, CONFIG, which=lambda d: d["opcode"] == OPCODE_CODES["HEAD"])
    assert len(steps) == 1
    (i, before, after), = steps
    (got, result), = run_runner_in_turn(program, [(descs[i], before)], unit=classifier(),
                                        p_wait=0.3)
    assert result == "done"
    assert got == after and got != before


def test_logits_whose_bound_passes_the_arithmetic_are_refused():
    """At 40 bits: a 24-bit map of 6 pixels (3 bits), 1-byte weights and 16 channels
    (4 bits) bound a logit at 24 + 3 + 8 + 4 + 1 = 40 bits and run exactly; 32-bit
    elements (48) and 8-byte biases are refused with memory untouched."""
    rng = random.Random(2)
    base = dict(CASES[0], in_elem=24, out_elem=64)
    runs = [head_case(rng, **base), head_case(rng, **dict(base, in_elem=32)),
            head_case(rng, **dict(base, const_bytes=8))]
    outcomes = run_runner_in_turn(FAKE_PROGRAM, runs, unit=classifier(acc_width=40))
    (d, before), (got, result) = runs[0], outcomes[0]
    assert result == "done" and got == model_after(d, before)
    for (d, before), (got, result) in zip(runs[1:], outcomes[1:]):
        assert result == ("error", ERROR_CAUSES["unsupported"]) and got == before


def refused(**change):
    rng = random.Random(1)
    d, image = head_case(rng, **CASES[0])
    d.update(change)
    return d, image


@pytest.mark.parametrize("change", [
    dict(opcode=OPCODE_CODES["CONV"]), dict(jobs=2), dict(in_c=12), dict(in_elem=12),
    dict(in_fmt=1), dict(out_elem=48), dict(weight_bytes=4), dict(const_bytes=2),
    dict(in_h=7), dict(out_c=65), dict(in_pitch=32), dict(weight_tile_bytes=96),
    dict(out_bytes=64),
], ids=lambda c: next(iter(c)))
def test_a_descriptor_it_cannot_run_is_refused_with_memory_untouched(change):
    d, image = refused(**change)
    (got, result), = run_runner_in_turn(FAKE_PROGRAM, [(d, image)], unit=classifier())
    assert result == ("error", ERROR_CAUSES["unsupported"])
    assert got == image


@pytest.mark.parametrize("arch", ["resnet18", pytest.param("resnet34", marks=pytest.mark.slow)])
def test_the_intended_head_takes_the_paper_networks_heads_at_224(arch):
    """The head as the engine of the units builds it at the DE10-Nano's size (8 lanes,
    512 channels, 1,024 classes, 7 x 7 maps of up to 24 bits, 48-bit logits) takes the
    HEAD descriptor of ResNet-18 and ResNet-34 K=5 at 224x224: 24-bit maps of 7 x 7 x
    512, 1-byte weights, 1,000 classes, a logit bound of 24 + 6 + 8 + 9 + 1 = 48 bits."""
    from groupnet_hw.compiler.engine.layout import compile_engine
    from groupnet_hw.sim.engine_model import read_program
    from test_engine_program import zoo_model
    from test_engine_unit_engine import RESNET_CONFIG, RESNET_SIZES
    from groupnet_hw.hw.engine.unit_engine import classifier_head
    head = classifier_head(lanes=RESNET_SIZES["lanes"], pe=RESNET_SIZES["pe"],
                           max_out_folds=RESNET_SIZES["max_out_folds"],
                           data_width=8 * RESNET_CONFIG.port_bytes)
    descs = read_program(compile_engine(compile_model(zoo_model(arch, 5, image_size=224)),
                                        RESNET_CONFIG, base=BASE))[1]
    d, = [d for d in descs if d["opcode"] == OPCODE_CODES["HEAD"]]
    assert (d["in_h"], d["in_w"], d["in_c"], d["out_c"], d["in_elem"]) == (7, 7, 512, 1000, 24)
    assert units_take(head, [d]) == [True]
