"""What the intended engine's window gatherer (``hw/engine/gather.py``) is told of a
binary convolution: its geometry in words, computed here once a descriptor so that the
gatherer steps its addresses by constants and multiplies nothing at run time
(docs/architecture.md section 15).

A pixel's channels are ``words = ceil(C_in/simd)`` words of ``simd`` lanes, a row slot
``pitch = in_w * words`` words; a window's taps are ``dx_words = dilation * words``
apart in a row, neighbouring output pixels' windows ``x_step = stride * words``, and the
padding is ``pad_words = padding * words`` words before a row's first pixel. The same
``words`` are the weights' tap-aligned folds (:mod:`.params`).

:func:`unit_geometry` is what the layout writes into a tap-aligned program's binary CONV
descriptors (docs/architecture.md section 12), and what the reference model checks them
against: the hardware reads those numbers, so a wrong one is a wrong window.
"""

from __future__ import annotations

from .params import binary_in_folds, tap_aligned_weights
from .program import FLAG_BITS, OPCODE_CODES, STAGE_BITS

__all__ = ["gather_geometry", "unit_geometry", "tile_first_row"]


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


def unit_geometry(d, header):
    """The unit geometry fields of a descriptor (``words`` to ``windows`` of
    ``DESCRIPTOR_FIELDS``).

    Parameters
    ----------
    d : dict
        A descriptor's fields (decoded, or the layout's before encoding).
    header : dict
        The program header's fields (``flags``, ``pe``, ``simd``).

    Returns
    -------
    dict
        ``words``, ``tail`` (lanes, not :func:`gather_geometry`'s mask), ``span``,
        ``in_folds``, ``out_folds``, ``pitch``, ``x_step``, ``dx_words``,
        ``pad_words``, ``pixel_bytes`` and ``windows`` of a CONV descriptor with one
        channel group in a tap-aligned program; empty for any other descriptor, whose
        fields stay zero (the core as built reads none of them, and its programs stay
        what they were). A CONV of integer weights (the stem) is gathered a pixel a word
        (``words`` 1: its channels are a word of byte lanes) and folded over the flat
        window in ``stem_simd`` elements, ``stem_pe`` output channels a fold.
    """
    if (d["opcode"] != OPCODE_CODES["CONV"] or d["groups"] != 1
            or not tap_aligned_weights(header)):
        return {}
    integer = d["flags"] & FLAG_BITS["int_weights"]
    simd = d["in_c"] if integer else header["simd"]
    g = gather_geometry(d, simd)
    # the fold issuer's windows are the convolution's output pixels: a fused pooling
    # stage's input, not its output (gather_geometry's out_w already is)
    out_h = d["mid_h"] if d["stages"] & STAGE_BITS["maxpool"] else d["out_h"]
    if integer:
        in_folds = -(-d["kernel"] ** 2 * d["in_c"] // header["stem_simd"])
        out_folds = -(-d["out_c"] // header["stem_pe"])
    else:
        in_folds = binary_in_folds(d["in_c"], d["kernel"], simd, True)
        out_folds = -(-d["out_c"] // header["pe"])
    return dict(words=g["words"], tail=g["tail"].bit_length(), span=g["span"],
                in_folds=in_folds, out_folds=out_folds, pitch=g["pitch"],
                x_step=g["x_step"], dx_words=g["dx_words"], pad_words=g["pad_words"],
                # the loader's pixel: ceil(C/8) bytes of a bit map (in_elem 1), ceil(C*b/8)
                # of b-bit elements
                pixel_bytes=-(-d["in_c"] * d["in_elem"] // 8), windows=out_h * g["out_w"])


def tile_first_row(d, oy):
    """The input row of output row ``oy``'s first window row (negative in the padding):
    a tile's ``iy0``."""
    return oy * d["stride"] - d["padding"]
