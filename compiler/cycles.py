"""Analytical cycle model of the stream components.

Each function returns the steady-state cycles one component spends per frame
when its inputs are always valid and its outputs always ready (its initiation
interval times the beats per frame). The dataflow pipeline's frame interval is
the maximum over its nodes; the hardware tests check every component against
the function here, and the accelerator test checks the pipeline against
:func:`pipeline_cycles`.

The latency and pipeline-depth formulas of the units (window, lanes, mixer, post-op,
head, MVU) are defined beside the hardware that realises them, in :mod:`..hw`, and
re-exported here, so that the model reads them from one place and the hardware imports
nothing from the compiler.
"""

from __future__ import annotations

from math import ceil

from ..hw.elementwise import POSTOP_LANE_LATENCY, postop_lane_latency
from ..hw.head import HEAD_PIPELINE
from ..hw.lanes import folded_interval, lane_folds
from ..hw.mixer import MIXER_LANE_LATENCY, mixer_latency, mixer_lane_latency
from ..hw.mvu import (ISSUE_MUX_SLICES, TREE_LAST_STAGE_TERMS, TREE_LEVELS_PER_STAGE,
                      mvu_latency, mvu_operand_stage, tree_stages)
from ..hw.window import window_latency, window_refill
from ..numerics import conv_out_size

__all__ = [
    "conv_out_size", "window_latency", "window_refill", "window_cycles", "mvu_cycles", "elementwise_cycles",
    "head_cycles", "HEAD_PIPELINE", "MIXER_LANE_LATENCY", "mixer_latency", "mixer_lane_latency",
    "POSTOP_LANE_LATENCY", "postop_lane_latency",
    "pipeline_cycles", "lane_folds",
    "folded_interval", "choose_lanes",
    "TREE_LEVELS_PER_STAGE", "TREE_LAST_STAGE_TERMS", "tree_stages", "ISSUE_MUX_SLICES",
    "mvu_operand_stage",
    "mvu_latency",
]


def window_cycles(height, width):
    """Sliding window: one input pixel per cycle; outputs never slower than inputs."""
    return height * width


def mvu_cycles(out_pixels, c_out, n_in, pe, simd):
    """Matrix-vector unit: ``ceil(c_out/pe) * ceil(n_in/simd)`` cycles per output pixel."""
    return out_pixels * ceil(c_out / pe) * ceil(n_in / simd)


def elementwise_cycles(height, width):
    """Per-pixel units (post-op, threshold, sign, add, mixer, subsample): one pixel per cycle."""
    return height * width


def head_cycles(height, width, n_classes, folds=1):
    """Pool + classifier + argmax: accumulation at one pixel per cycle, the
    classifier (``folds`` steps per class, then its pipeline) overlapping the next
    frame's accumulation (:class:`groupnet_hw.hw.head.ClassifierHead`)."""
    return max(height * width, n_classes * folds + HEAD_PIPELINE)


def pipeline_cycles(node_cycles):
    """Frame interval of a dataflow pipeline: its slowest node."""
    return max(node_cycles)


def choose_lanes(channels, pixels, target, lane_latency_of=lambda folds: 0):
    """Fewest lanes with which ``pixels`` pixels take at most ``target`` cycles, or
    ``None`` when only the full-rate unit (one pixel per cycle) is fast enough.
    ``lane_latency_of(steps)``: the lane's pipeline registers with that many steps."""
    budget = target // pixels       # cycles per pixel

    def interval(folds):
        lanes = -(-channels // folds)
        return folded_interval(channels, lanes, lane_latency_of(lane_folds(channels, lanes)))

    folds = min(channels, budget - 1)
    while folds >= 1 and interval(folds) > budget:
        folds -= 1
    if folds < 1:
        return None
    return -(-channels // folds)
