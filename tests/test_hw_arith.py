"""Constant multiplication and pipelined sums (hw/arith.py): exact values, and no
negation built as an adder of its own."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.hdl._ast import Operator
from amaranth.sim import Simulator

from groupnet_hw.hw.arith import (Term, at_least, const_sum, const_terms, csd_digits,
                                  multiplier_pieces, registered_levels, registered_pieces,
                                  sum_tree)


def test_csd_digits_reconstruct_and_are_canonical():
    for k in range(-3000, 3001):
        digits = csd_digits(k)
        assert sum(d << s for s, d in digits) == k
        shifts = [s for s, _ in digits]
        assert all(b - a >= 2 for a, b in zip(shifts, shifts[1:]))


def _unary_negations(value):
    """Unary minus operators anywhere in an expression tree."""
    if not isinstance(value, Operator):
        return 0
    own = value.operator == "-" and len(value.operands) == 1
    return int(own) + sum(_unary_negations(v) for v in value.operands)


@pytest.mark.parametrize("k", [7, -7, 23, 119, -45, 3, 1000])
def test_negative_digits_become_subtractions(k):
    """``7x = 8x - x`` is one subtractor, not an adder fed by a negation (on ECP5 the
    negated terms were an adder level each, in the gate's critical lane)."""
    x = Signal(signed(8))
    positive = any(d > 0 for _, d in csd_digits(k))
    assert _unary_negations(const_sum([(k, x)])) == (0 if positive else 1)
    assert _unary_negations(const_sum([(k, x), (5, x)], 3)) == 0


def _evaluate(m, inputs, outputs, values, clocked=False):
    """Outputs of ``m`` for every assignment in ``values`` (one cycle apart if clocked)."""
    sim = Simulator(m)
    got = []
    if clocked:
        sim.add_clock(1e-8)

    async def bench(ctx):
        for row in values:
            for s, v in zip(inputs, row):
                ctx.set(s, v)
            if clocked:
                await ctx.tick()
                await ctx.tick()
            got.append([ctx.get(o) for o in outputs])

    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("seed", range(4))
def test_const_sum_and_pipelined_sum_are_exact(seed):
    rng = np.random.default_rng(seed)
    ks = [int(v) for v in rng.integers(-700, 700, size=3)]
    ks[0] = -int(rng.integers(1, 64))     # a negative constant among them
    offset = int(rng.integers(-999, 999))
    xs = [Signal(signed(7), name=f"x{i}") for i in range(3)]
    m = Module()
    whole = Signal(signed(24))
    m.d.comb += whole.eq(const_sum(list(zip(ks, xs)), offset))
    # the same sum with its first two adder levels registered, as the mixer lanes do
    piped = Signal(signed(24))
    m.d.comb += piped.eq(sum_tree(registered_levels(m, const_terms(list(zip(ks, xs)), offset),
                                                    2, "r")))
    values = [[int(v) for v in row] for row in rng.integers(-64, 64, size=(40, 3))]
    values += [[-64] * 3, [63] * 3, [-64, 63, -64]]
    got = _evaluate(m, xs, [whole, piped], values, clocked=True)
    for row, (w, p) in zip(values, got):
        exact = sum(k * v for k, v in zip(ks, row)) + offset
        assert w == p == exact


def test_all_negative_sum_is_negated_once():
    x, y = Signal(signed(6)), Signal(signed(6))
    terms = [Term(x, True), Term(y, True)]
    total = sum_tree(terms)
    assert _unary_negations(total) == 1
    m = Module()
    out = Signal(signed(9))
    m.d.comb += out.eq(total)
    got = _evaluate(m, [x, y], [out], [[-32, -32], [31, -5], [0, 0]])
    assert [g[0] for g in got] == [64, -26, 0]


@pytest.mark.parametrize("width", [1, 2, 5])
def test_at_least_is_exact_for_every_value_and_threshold(width):
    """Every input against every threshold of the range and beyond it: zero (the sign
    bit), powers of two and their negatives (only the bits above the trailing zeros are
    compared), odd thresholds (all bits) and constants outside the range."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    thresholds = list(range(lo - 2, hi + 3))
    x = Signal(signed(width), name="x")
    m = Module()
    outs = []
    for t in thresholds:
        o = Signal(name=f"ge_{t}".replace("-", "m"))
        m.d.comb += o.eq(at_least(x, t, width))
        outs.append(o)
    values = [[v] for v in range(lo, hi + 1)]
    got = _evaluate(m, [x], outs, values)
    for (v,), row in zip(values, got):
        assert list(row) == [int(v >= t) for t in thresholds], v


def test_at_least_compares_only_the_live_bits():
    """``x >= 0`` is the inverted sign bit; ``x >= 12`` (0b1100) reads ``x[2:]``."""
    x = Signal(signed(8))
    assert at_least(x, 0, 8).shape().width == 1
    assert str(at_least(x, 0, 8)) == str(~x[7])
    ge = at_least(x, 12, 8)
    assert "(slice (sig x) 2:8)" in str(ge)


@pytest.mark.parametrize("x_width,y_width", [(8, 8), (18, 12), (19, 12), (21, 12), (35, 18),
                                             (40, 5)])
def test_registered_pieces_multiply_exactly(x_width, y_width):
    """A wide operand in pieces of at most 18 signed bits (17 unsigned low pieces, the
    signed top one), each times the narrow operand in its own register: their shifted
    sum is the product a cycle later, at the operands' extremes too."""
    pieces = multiplier_pieces(x_width)
    assert pieces[0][0] == 0 and pieces[-1][1] == x_width
    assert all(hi - lo <= 18 for lo, hi in pieces)
    assert len(pieces) == (1 if x_width <= 18 else -(-x_width // 17))
    x, y = Signal(signed(x_width), name="x"), Signal(signed(y_width), name="y")
    m = Module()
    product = Signal(signed(x_width + y_width))
    regs = registered_pieces(m, x, y, None, "p")
    assert len(regs) == len(pieces)
    m.d.comb += product.eq(sum(r << lo for r, lo in regs))
    rng = np.random.default_rng(x_width)
    xl, xh = -(1 << (x_width - 1)), (1 << (x_width - 1)) - 1
    yl, yh = -(1 << (y_width - 1)), (1 << (y_width - 1)) - 1
    values = [[int(rng.integers(xl, xh + 1)), int(rng.integers(yl, yh + 1))] for _ in range(30)]
    values += [[xl, yl], [xl, yh], [xh, yl], [xh, yh], [0, yl], [-1, -1]]
    got = _evaluate(m, [x, y], [product], values, clocked=True)
    assert [g[0] for g in got] == [a * b for a, b in values]
