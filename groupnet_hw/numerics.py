"""Integer facts both the compiler and the hardware units compute: the width of a
value range, the output size of a window.

The compiler sizes a tensor from its range and a unit builds its signals from the same
rule; defined once here, below both (``hw`` imports nothing from ``compiler``), neither
can drift from the other. The models use :func:`conv_out_size` too, so that the layers'
fixed-point forward, the graph and the window agree on every output size.
"""

from __future__ import annotations

__all__ = ["signed_width", "conv_out_size"]


def signed_width(lo: int, hi: int) -> int:
    """Bits of the smallest signed two's-complement type holding ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : int
        The range's ends (anything ``int()`` takes, e.g. a 0-d tensor).

    Returns
    -------
    int
        At least 1; ``signed_width(0, 0) == 1``.
    """
    def bits(v):
        return (v if v >= 0 else ~v).bit_length() + 1
    return max(bits(int(lo)), bits(int(hi)))


def conv_out_size(size, kernel, stride, dilation, padding):
    """Output height (or width) of a convolution or pooling window, as
    ``torch.nn.functional.conv2d`` computes it (floor mode).

    Parameters
    ----------
    size : int
        Input height (or width).
    kernel, stride, dilation, padding : int
        The window's, per side.

    Returns
    -------
    int
        Below 1 when the window does not fit the padded input.
    """
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
