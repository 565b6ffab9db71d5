"""The engine core's element reader (``hw/engine/core.py``: ``_element``), which starts
most of the core's paths: every element width, alignment and signedness of a
scratchpad word against the integer definition, in the Amaranth simulator."""

import random

from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.core import _WIDTHS, _element

WORD = 128


def _reference(word, shift, width, is_signed):
    value = (word >> shift) & ((1 << width) - 1)
    if is_signed and value >> (width - 1):
        value -= 1 << width
    # the core's values are int64: an unsigned 64-bit element wraps
    return value - (1 << 64) if value >= 1 << 63 else value


def _cases(rng):
    for width in _WIDTHS:
        for shift in range(0, WORD, width):          # elements never straddle a word
            for is_signed in (0, 1):
                for word in (rng.getrandbits(WORD), 0, (1 << WORD) - 1,
                             1 << (shift + width - 1)):
                    yield word, shift, width, is_signed


def test_element_reader_matches_the_integer_definition():
    word, shift = Signal(WORD), Signal(7)
    width, is_signed, sign_at = Signal(7), Signal(), Signal(7)
    out, out_own_sign = Signal(signed(64)), Signal(signed(64))
    m = Module()
    # the sign bit's position both ways: a register set with the address (the core's
    # reads) and computed from the shift (the held weight word)
    m.d.comb += [out.eq(_element(word, shift, width, is_signed, sign_at)),
                 out_own_sign.eq(_element(word, shift, width, is_signed))]
    cases = list(_cases(random.Random(0)))
    seen = []

    async def tb(ctx):
        for w, sh, wd, sg in cases:
            ctx.set(word, w)
            ctx.set(shift, sh)
            ctx.set(width, wd)
            ctx.set(is_signed, sg)
            ctx.set(sign_at, sh + wd - 1)
            seen.append((ctx.get(out), ctx.get(out_own_sign)))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    expected = [_reference(*c) for c in cases]
    assert [a for a, _ in seen] == expected
    assert [b for _, b in seen] == expected
    assert len(cases) > 1500
