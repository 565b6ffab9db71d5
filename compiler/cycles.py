"""Analytical cycle model of the stream components.

Each function returns the steady-state cycles one component spends per frame
when its inputs are always valid and its outputs always ready (its initiation
interval times the beats per frame). The dataflow pipeline's frame interval is
the maximum over its nodes; the hardware tests check every component against
the function here, and the accelerator test checks the pipeline against
:func:`pipeline_cycles`.
"""

from __future__ import annotations

from math import ceil

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


def conv_out_size(size, kernel, stride, dilation, padding):
    """Output height (or width) of a convolution, as ``torch.nn.functional.conv2d``."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def window_latency(line_ram="logic", kernel=1):
    """Cycles from accepting the last pixel a window needs to the window on the output
    (:class:`groupnet_hw.hw.window.SlidingWindow`): see the pixel, read the line buffer,
    register the window (``line_ram`` "logic" or "block": 3, the same); "serial" reads
    the ``kernel**2`` taps one per cycle, registers each as it leaves the block RAM and
    then in the window register: ``kernel**2 + 3``."""
    return kernel * kernel + 3 if line_ram == "serial" else 3


def window_refill(line_ram="logic", kernel=1):
    """Fewest cycles from the cycle a window is taken to the next window on the output:
    1 (the next is read while the consumer holds this one), or with "serial" line
    buffers ``kernel**2 + 3`` (the output register is refilled tap by tap once it is
    empty). A consumer slower than this never waits for the window."""
    return kernel * kernel + 3 if line_ram == "serial" else 1


def window_cycles(height, width):
    """Sliding window: one input pixel per cycle; outputs never slower than inputs."""
    return height * width


def mvu_cycles(out_pixels, c_out, n_in, pe, simd):
    """Matrix-vector unit: ``ceil(c_out/pe) * ceil(n_in/simd)`` cycles per output pixel."""
    return out_pixels * ceil(c_out / pe) * ceil(n_in / simd)


def elementwise_cycles(height, width):
    """Per-pixel units (post-op, threshold, sign, add, mixer, subsample): one pixel per cycle."""
    return height * width


#: Cycles of the classifier head beyond its MAC steps: the ROM word, the split
#: products, their sum, the accumulator, the argmax step and the output register
#: (:class:`groupnet_hw.hw.head.ClassifierHead`).
HEAD_PIPELINE = 6

def mixer_latency(gated):
    """Cycles from the full-rate base mixer taking a pixel to its output
    (:class:`groupnet_hw.hw.mixer.BaseMixer`): the constant products, the aggregate, and
    with gates the aggregate's share of each gate and the gated sums, each registered."""
    return 4 if gated else 2


#: Pipeline registers in a lane of the channel-serial base mixer
#: (:class:`groupnet_hw.hw.mixer.BaseMixer`) with few steps: the K constant products,
#: their sum (the aggregate), then the gates into the output register. Products and
#: sum in one cycle were the ECP5 critical path of the time-shared K=5 design (11.9 ns).
MIXER_LANE_LATENCY = 2


def mixer_lane_latency(folds, gated):
    """Pipeline registers in a base mixer's lane with ``folds`` steps. With enough steps
    a deeper pipeline costs no cycle (:func:`folded_interval`), no adder chain is more
    than two levels deep and a product's DSP block has registers on both sides with
    nothing else: the operands, the products, half the sum, the aggregate (4), then half
    of each gate's sum (5 with gates); below that, :data:`MIXER_LANE_LATENCY`."""
    deep = 5 if gated else 4
    return deep if folds >= deep + 1 else MIXER_LANE_LATENCY


#: Pipeline registers in a lane of the channel-serial post-op
#: (:class:`groupnet_hw.hw.elementwise.PostOp`) with few steps: the per-channel constants
#: with the input, then the product.
POSTOP_LANE_LATENCY = 2


def postop_lane_latency(folds):
    """Pipeline registers in a post-op's lane with ``folds`` steps. With enough steps
    (no cycle lost: :func:`folded_interval`) the multiplier's operands and its product
    are registered once more, so that registers can sit beside the DSP block: on ECP5
    the route to and from a MULT18X18D was the critical path (7.0 ns of 11.4)."""
    deep = POSTOP_LANE_LATENCY + 2
    return deep if folds >= deep + 1 else POSTOP_LANE_LATENCY


def head_cycles(height, width, n_classes, folds=1):
    """Pool + classifier + argmax: accumulation at one pixel per cycle, the
    classifier (``folds`` steps per class, then its pipeline) overlapping the next
    frame's accumulation (:class:`groupnet_hw.hw.head.ClassifierHead`)."""
    return max(height * width, n_classes * folds + HEAD_PIPELINE)


def pipeline_cycles(node_cycles):
    """Frame interval of a dataflow pipeline: its slowest node."""
    return max(node_cycles)


def lane_folds(channels, lanes):
    """Steps of a channel-serial per-pixel unit: ``ceil(channels / lanes)``."""
    return -(-channels // lanes)


def folded_interval(channels, lanes, lane_latency=0):
    """Cycles per pixel of a channel-serial per-pixel unit (:mod:`groupnet_hw.hw.lanes`)
    with ``lane_latency`` registers in its lanes: one cycle to take the pixel and one per
    step; the last step waits for the previous pixel's results to have passed the lanes'
    pipeline and left the output register (``lane_latency + 2`` cycles after its own
    last step). With one step that wait is every step's: ``lane_latency + 1``. Its
    latency is ``lane_folds + 1 + lane_latency``."""
    folds = lane_folds(channels, lanes)
    if folds == 1:
        return 1 + 1 + max(0, lane_latency - 1)
    return max(folds + 1, lane_latency + 2)


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


#: Adder-tree levels between two pipeline registers in a matrix-vector unit: two
#: levels of small adders plus routing stay under 10 ns on ECP5.
TREE_LEVELS_PER_STAGE = 2


#: Terms the adder tree's last register stage may hold: their sum and the accumulator's
#: add are the only adders after it.
TREE_LAST_STAGE_TERMS = 2


def tree_stages(terms):
    """Pipeline stages of a matrix-vector unit's adder tree over ``terms`` terms: one
    register for the terms themselves, then one per :data:`TREE_LEVELS_PER_STAGE`
    levels until at most :data:`TREE_LAST_STAGE_TERMS` are left; their sum feeds the
    accumulator. (When the last stage summed four terms and the accumulator added a
    third carry chain, that was the ECP5 critical path: 10.5 ns, 7.5 of it routing.)"""
    stages, n = 1, terms
    while n > TREE_LAST_STAGE_TERMS:
        for _ in range(TREE_LEVELS_PER_STAGE):
            n = -(-n // 2) if n > 1 else n
        stages += 1
    return stages


#: A binary MVU whose issue multiplexer picks from more input slices than this registers
#: its operands once more (:func:`mvu_operand_stage`).
ISSUE_MUX_SLICES = 4


def mvu_operand_stage(slices, integer=False, registered_rom=False):
    """Whether an MVU registers its operands once more before the terms: the integer MVU
    always (its multipliers are DSP blocks, with registers on both sides), a binary one
    whose issue multiplexer picks the step's slice from more than
    :data:`ISSUE_MUX_SLICES` (``groups * ceil(n_in/simd)``): the multiplexer sits by
    the input buffer, the XNORs by the weights, and on ECP5 the route between them
    (9 ns of 10.4 for a 15-way multiplexer) was the critical path; and one whose weight
    ROM is block RAM where its read is late (``registered_rom``,
    ``compiler.resources.rom_read_register``): on ECP5 a DP16KD's read data into the
    XNORs and popcount was the critical path (13.2 ns, 5.6 of it the block's
    clock-to-output)."""
    return integer or slices > ISSUE_MUX_SLICES or bool(registered_rom)


def mvu_latency(ii, terms, operand_stage=False, activation_stages=0, product_stage=False):
    """Cycles from accepting an input vector to its result on the MVU's output: its
    ``ii`` steps, the weight ROM read, the multipliers' operand register
    (``operand_stage``: the integer MVU's), the adder tree's pipeline stages, with
    ``product_stage`` one more for the products (registered in the DSP block, then
    again in the fabric), the result register after the accumulator and an
    activation's registers (thresholds in the MVU: 1, the level; a post-op: 2, the
    product and the value)."""
    return (ii + 2 + int(operand_stage) + int(product_stage) + tree_stages(terms)
            + activation_stages)
