"""What the intended engine's window gatherer (``hw/engine/gather.py``) is told of a
binary convolution: its geometry in words, computed here once a descriptor so that the
gatherer steps its addresses by constants and multiplies nothing at run time
(docs/architecture.md section 15).

A pixel's channels are ``words = ceil(C_in/simd)`` words of ``simd`` lanes, a row slot
``pitch = in_w * words`` words; a window's taps are ``dx_words = dilation * words``
apart in a row, neighbouring output pixels' windows ``x_step = stride * words``, and the
padding is ``pad_words = padding * words`` words before a row's first pixel. The same
``words`` are the weights' tap-aligned folds (:mod:`.params`).
"""

from __future__ import annotations

from .program import STAGE_BITS

__all__ = ["gather_geometry", "tile_first_row"]


def gather_geometry(d, simd):
    """A binary convolution descriptor's gatherer settings.

    Parameters
    ----------
    d : dict
        A decoded CONV descriptor with binary weights (one channel group).
    simd : int
        Lanes of a word (the program header's ``simd``).

    Returns
    -------
    dict
        The fields of ``hw.engine.gather.gather_settings``: ``height``, ``width``,
        ``words``, ``tail`` (the lanes of a pixel's last word that hold channels, a
        mask), ``kernel``, ``stride``, ``dilation``, ``padding``, ``out_w``, ``pitch``,
        ``x_step``, ``dx_words``, ``pad_words``, ``pad_ones`` (binary activations pad
        with +1, levels with 0) and ``span``.
    """
    if d["groups"] != 1:
        raise ValueError(f"descriptor {d['index']}: the gatherer reads one channel group, "
                         f"not {d['groups']}")
    words = -(-d["in_c"] // simd)
    tail = (d["in_c"] - 1) % simd + 1
    # a fused pooling stage's windows are the convolution's: its width, not the output's
    out_w = d["mid_w"] if d["stages"] & STAGE_BITS["maxpool"] else d["out_w"]
    return dict(height=d["in_h"], width=d["in_w"], words=words, tail=(1 << tail) - 1,
                kernel=d["kernel"], stride=d["stride"], dilation=d["dilation"],
                padding=d["padding"], out_w=out_w, pitch=d["in_w"] * words,
                x_step=d["stride"] * words, dx_words=d["dilation"] * words,
                pad_words=d["padding"] * words, pad_ones=int(d["act_bits"] == 0),
                span=(d["kernel"] - 1) * d["dilation"])


def tile_first_row(d, oy):
    """The input row of output row ``oy``'s first window row (negative in the padding):
    a tile's ``iy0``."""
    return oy * d["stride"] - d["padding"]
