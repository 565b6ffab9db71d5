"""Multiplication by a constant, built the cheapest way for a streaming unit.

Post-ops, base mixers and gates multiply every pixel by per-channel or per-base
constants of 8 to 12 bits. Written as ``Const(k) * x``, Yosys infers one DSP block
per product (545 on the default digits design, against 156 on the ECP5-85F and 112
on the Cyclone V of the DE10-Nano), or, with DSPs disabled, a generic array
multiplier of 100+ LUTs. A constant with few non-zero digits in canonical signed
digit (CSD) form is a handful of shifted adds instead: ``k = sum_i d_i 2**i`` with
``d_i`` in {-1, 0, +1} and no two adjacent non-zero digits, so an ``n``-bit constant
has at most ``ceil((n+1)/2)`` and on average ``n/3`` non-zero digits.

:func:`const_multiply` emits the shift-add form when the constant has at most
:data:`MAX_SHIFT_ADD_DIGITS` non-zero digits and a native ``*`` (a DSP block) otherwise;
:func:`multiplier_cost` is the same decision for the resource model, so the estimate
and the hardware never disagree about which one was built.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

from amaranth.hdl import Const, Mux, Signal, Value
from amaranth.hdl import signed as signed_shape
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..numerics import signed_width

__all__ = ["at_least", "compared_bits", "moved_in_stages", "csd_digits", "MAX_SHIFT_ADD_DIGITS", "uses_dsp", "const_multiply", "const_sum",
           "Term", "const_terms", "reduce_levels", "registered_levels", "sum_tree",
           "multiplier_cost", "MULT_PIECE", "multiplier_pieces", "registered_pieces",
           "multiplier_loan"]

#: Above this many non-zero CSD digits one DSP block is cheaper than the adders
#: (each adder costs one LUT per result bit on ECP5 and iCE40; 4 adders of ~25 bits
#: are ~100 LUTs, about what a DSP block replaces).
MAX_SHIFT_ADD_DIGITS = 4


def csd_digits(k: int) -> list[tuple[int, int]]:
    """Canonical signed digits of ``k``: ``[(shift, +1 or -1), ...]``, low to high,
    with ``k == sum(sign << shift)``."""
    k = int(k)
    digits, shift = [], 0
    while k:
        if k & 1:
            # k mod 4 == 3 -> digit -1 (and carry), so that runs of ones collapse.
            d = 2 - (k & 3)
            digits.append((shift, d))
            k -= d
        k >>= 1
        shift += 1
    return digits


def uses_dsp(k: int) -> bool:
    """Whether :func:`const_multiply` builds ``k * x`` as a DSP multiplication."""
    return len(csd_digits(k)) > MAX_SHIFT_ADD_DIGITS


class Term(NamedTuple):
    """A summand that enters its sum subtracted when ``negative``: a negated copy would
    be an adder of its own (``0 - x``), the subtraction it becomes is not."""

    value: Value
    negative: bool = False


def _terms(value, k):
    """Signed shifted copies of ``value`` summing to ``k * value`` (empty for 0)."""
    if uses_dsp(k):
        return [Term(Const(int(k)) * value)]
    return [Term(value << s, d < 0) for s, d in csd_digits(k)]


def _add(a, b):
    """One adder (or subtractor) for two :class:`Term`: ``-x + y`` is ``y - x``, and
    ``-x - y`` stays negative as ``-(x + y)``."""
    if a.negative == b.negative:
        return Term(a.value + b.value, a.negative)
    if b.negative:
        return Term(a.value - b.value)
    return Term(b.value - a.value)


def reduce_levels(terms, levels):
    """``levels`` levels of a balanced adder tree over ``terms`` (values, or
    :class:`Term` for summands to subtract): adjacent pairs summed, an odd last term
    passed on. Returns the terms left, values if every input was a value."""
    signed = any(isinstance(t, Term) for t in terms)
    terms = [t if isinstance(t, Term) else Term(t) for t in terms]
    for _ in range(levels):
        if len(terms) <= 1:
            break
        terms = [_add(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms if signed else [t.value for t in terms]


def sum_tree(terms):
    """Sum (values or :class:`Term`) as a balanced tree: log depth, so the adders chain
    no deeper than needed (``Const(0, 1)`` for no terms)."""
    terms = list(terms)
    if not terms:
        return Const(0, 1)
    root = reduce_levels([t if isinstance(t, Term) else Term(t) for t in terms],
                         len(terms).bit_length())[0]
    return -root.value if root.negative else root.value


def const_multiply(value, k):
    """``k * value`` for a Python int ``k`` and a signed Amaranth value."""
    return const_sum([(k, value)])


def const_terms(products, offset=0):
    """The shifted copies (:class:`Term`, some to subtract) whose sum is
    ``sum(k * value) + offset``: the leaves of :func:`const_sum`'s adder tree, for
    callers that pipeline the tree."""
    terms = [t for k, value in products for t in _terms(value, k)]
    if offset:
        terms.append(Term(Const(int(offset))))
    return terms


def const_sum(products, offset=0):
    """``sum(k * value for k, value in products) + offset`` as one adder tree.

    Assign the result to a signal of the exact width; the intermediate widths of the
    tree are Amaranth's (never narrower than the operands), so nothing overflows.
    """
    terms = const_terms(products, offset)
    return sum_tree(terms) if terms else Const(0)


def registered_levels(m, terms, levels, name):
    """``levels`` levels of a balanced adder tree over ``terms``, each resulting partial
    sum registered (free-running, one cycle): the first half of a pipelined sum, whose
    remaining terms the caller adds with :func:`sum_tree`."""
    registered = []
    for j, t in enumerate(reduce_levels(terms, levels)):
        t = t if isinstance(t, Term) else Term(t)
        r = Signal(Value.cast(t.value).shape(), name=f"{name}_{j}")
        m.d.sync += r.eq(t.value)
        registered.append(Term(r, t.negative))
    return registered



def const_product_width(width: int, k: int) -> int:
    """Signed width of ``k * x`` over every ``signed(width)`` ``x``."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return signed_width(min(k * lo, k * hi), max(k * lo, k * hi))


def multiplier_cost(in_bits: int, k: int) -> dict:
    """Resources of ``k * x`` for an ``in_bits``-wide ``x``, as built by
    :func:`const_multiply`: ``dict(adders=, adder_bits=, dsp=)`` where
    ``adder_bits`` is the summed width of the adders (LUTs on ECP5/iCE40)."""
    if uses_dsp(k):
        return dict(adders=0, adder_bits=0, dsp=1)
    digits = csd_digits(k)
    if not digits:
        return dict(adders=0, adder_bits=0, dsp=0)
    width = in_bits + digits[-1][0] + 1
    return dict(adders=len(digits) - 1, adder_bits=(len(digits) - 1) * width, dsp=0)


#: Bits of a wide operand each partial product takes: 17 unsigned bits (or the signed
#: top piece) times an operand of at most 18 bits fit one 18x18 signed multiplier (ECP5
#: MULT18X18D, the smallest DSP of the three families).
MULT_PIECE = 17


def multiplier_pieces(width: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the bit ranges of a signed ``width``-bit operand that
    :func:`registered_pieces` multiplies one by one (one range if it fits a multiplier)."""
    if width <= MULT_PIECE + 1:
        return [(0, width)]
    return [(lo, min(lo + MULT_PIECE, width)) for lo in range(0, width, MULT_PIECE)]


def registered_pieces(m, x, y, enable, name):
    """``x * y`` as partial products of one hardware multiplier each, every one
    registered (data registers without reset, loaded while ``enable``, every cycle if
    it is ``None``): ``[(register,
    shift), ...]`` whose shifted sum is the product a cycle later.

    ``y`` is the narrow operand (at most 18 bits); the signed ``x`` is cut by
    :func:`multiplier_pieces`, the low pieces unsigned, the top one signed. A product
    wider than one multiplier otherwise made Yosys add the multipliers' outputs behind
    the DSP blocks in the same cycle: DSP, route, carry chain, register was a critical
    path on ECP5 (the head's, 14 ns; the CIFAR-size stem's post-op, 13.5 ns), and a
    register straight after each multiplier can be its DSP block's own
    (``hw.dsp_registers``)."""
    x = Value.cast(x)
    pieces = multiplier_pieces(len(x))
    out = []
    for i, (lo, hi) in enumerate(pieces):
        part = x[lo:hi].as_signed() if hi == len(x) else x[lo:hi]
        width = len(Value.cast(y)) + (hi - lo) + 1
        r = Signal(signed_shape(width), name=f"{name}_{i}" if len(pieces) > 1 else name,
                   reset_less=True)
        if enable is None:
            m.d.sync += r.eq(y * part)
        else:
            with m.If(enable):
                m.d.sync += r.eq(y * part)
        out.append((r, lo))
    return out


def multiplier_loan(lanes, x_width, y_width):
    """The signature of ``lanes`` multipliers lent, from the borrower's side: while it
    holds ``on``, each lane's ``x`` (the wide operand, ``signed(x_width)``) and ``y``
    (``signed(y_width)``) go into the lender's operand registers, and two cycles later
    ``pieces`` holds their product as :func:`registered_pieces` leaves it: per lane, the
    partial products of :func:`multiplier_pieces` of ``x_width`` bits, each to be
    shifted by its range's low bit.

    A unit whose multipliers idle while another runs lends them (the mixer lanes to the
    classifier head: 2 DSP blocks a lane fewer)."""
    widest = max(hi - lo for lo, hi in multiplier_pieces(x_width))
    piece = data.ArrayLayout(signed_shape(y_width + widest + 1),
                             len(multiplier_pieces(x_width)))
    return wiring.Signature({
        "on": Out(1),
        "x": Out(data.ArrayLayout(signed_shape(x_width), lanes)),
        "y": Out(data.ArrayLayout(signed_shape(y_width), lanes)),
        "pieces": In(data.ArrayLayout(piece, lanes)),
    })


def at_least(x, t: int, width: int):
    """``x >= t`` for a ``signed(width)`` value ``x`` and a Python int ``t``, one bit.

    A threshold outside ``x``'s range is a constant bit. Otherwise only the bits of
    ``x`` above ``t``'s trailing zeros are compared (``x >= t'*2**z`` exactly when
    ``x >> z >= t'``), and ``x >= 0`` is the inverted sign bit: Yosys's ECP5 and iCE40
    flows find this themselves, its Cyclone V flow builds every comparison as a
    full-width subtraction on the carry chain (1.4 ALUTs per bit, measured).
    """
    lo = -(1 << (width - 1))
    if t <= lo:
        return Const(1, 1)
    bits = compared_bits(t, width)
    if not bits:
        # zero: the sign bit; above the range: never
        return ~Value.cast(x)[width - 1] if t == 0 else Const(0, 1)
    zeros = width - bits
    return Value.cast(x)[zeros:width].as_signed() >= Const(t >> zeros, signed_shape(bits))


def compared_bits(t: int, width: int) -> int:
    """Bits of ``x`` that :func:`at_least` compares against ``t`` (the comparator's
    width; 0 where it is a constant or the sign bit): the resource model's count of the
    same decision, as :func:`multiplier_cost` is :func:`const_multiply`'s."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if t == 0 or not lo < t <= hi:
        return 0
    return width - ((t & -t).bit_length() - 1)


def moved_in_stages(value, amount, move):
    """``value`` moved by a run-time ``amount`` of steps, a stage of two-way multiplexers
    a bit of ``amount``: ``move(v, n)`` moves ``v`` by ``n`` steps (a shift or a turn by
    ``n`` bytes, say). The LUTs merge the stages; a multiplexer of every amount took
    about twice the logic in the engine's byte shifts."""
    for i in range(len(amount)):
        value = Mux(amount[i], move(value, 1 << i), value)
    return value


def positive_int(name, value):
    """A positive integer parameter as a Python int (numpy scalars welcome); one line of
    ``TypeError`` or ``ValueError`` otherwise."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {value!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be positive, not {value}")
    return value
