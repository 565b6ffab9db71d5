"""The op interface: everything the compiler knows about an IR op, in one class.

Each op of the graph IR is one subclass of :class:`Op`, registered by name in
:data:`OPS`, owning (as FINN's ``HWCustomOp`` does)

- ``execute``: its integer semantics in the executor (independent of the model's
  fixed-point forward: popcount on bits, comparisons against thresholds);
- ``value_range``: its range rule, from which hardware widths follow;
- ``folding`` and ``cycles``: its cycle model (cycles per frame, exact);
- ``timing``: when each output beat appears in the ideal (never-full-FIFO) schedule,
  from its latency, used to size FIFOs;
- ``resource_features``: the structural features its calibrated resource estimate
  is computed from (:mod:`..resources`);
- ``build``: its hardware unit(s).

Adding an op = one subclass here plus one lowering rule in :mod:`..frontend`.
"""

from __future__ import annotations

from .. import cycles as cyc

__all__ = ["Op", "OPS", "register", "op_of", "TIMING_FRAMES", "same_attrs"]

#: Registered ops, by IR name.
OPS: dict[str, "Op"] = {}

#: Frames of the timing model: the second and third frames see the steady state.
TIMING_FRAMES = 3


def register(cls):
    """Class decorator: make ``cls`` the definition of IR op ``cls.name``."""
    if cls.name in OPS:
        raise ValueError(f"IR op {cls.name!r} is defined twice")
    OPS[cls.name] = cls()
    return cls


def op_of(node) -> "Op":
    try:
        return OPS[node.op]
    except KeyError:
        raise ValueError(f"{node.name}: unknown IR op {node.op!r}") from None


def same_attrs(attrs):
    """``stack`` of an op whose attributes are not per channel: given the nodes'
    attribute dicts, the attributes if every node has the same, else ``None``."""
    a = attrs[0]
    for b in attrs[1:]:
        if b.keys() != a.keys() or any(not _equal(b[k], a[k]) for k in a):
            return None
    return dict(a)


def _equal(x, y):
    import torch
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                and x.shape == y.shape and torch.equal(x, y))
    return x == y


class Op:
    """Base class of IR op definitions; the defaults describe a per-pixel unit
    (one pixel per cycle, one register of latency)."""

    name = ""
    #: Joins branches of a fork: its inputs get compiler-sized FIFOs.
    join = False
    #: A per-pixel unit that can run channel-serially (:mod:`groupnet_hw.hw.lanes`):
    #: its folding is a lane count (``unit.pe``), ``None`` for the full-rate unit.
    lane_foldable = False
    #: Pipeline registers inside a lane of the lane-folded unit (adds to its latency).
    lane_latency = 0
    #: A full-rate unit that can run at one pixel every two cycles with its enables
    #: independent of its consumer's ``ready`` (``docs/hw-conventions.md``).
    paceable = False

    def lane_latency_of(self, node, folds):
        """Pipeline registers in a lane of the unit folded to ``folds`` steps."""
        return self.lane_latency

    # -- beat streams (:mod:`..beats`) --------------------------------------------
    def beat_source(self, node, unit):
        """Whether the unit can send its output as beats (an MVU: a beat as soon as its
        folds are done, :class:`groupnet_hw.hw.mvu.BinaryMVU` ``beats``). Default: no."""
        return False

    def beat_input(self, node, unit):
        """How the unit takes inputs that travel as beats: ``"through"`` (a per-pixel
        unit working beat by beat; its output has its inputs' beats), ``"pack"`` (it
        collects them into pixels first: a window, the head) or ``None``: only whole
        pixels (the default)."""
        return None

    def beat_groups(self, node, in_groups):
        """Groups of the output tensor's beat layout (:func:`groupnet_hw.hw.beats.beat_order`)
        given the inputs': the K bases of a time-shared chain side by side. Default: the
        first input's."""
        return in_groups[0] if in_groups else 1

    # -- integer semantics ---------------------------------------------------
    def execute(self, node, ins):
        """Value of ``node`` (int64 NCHW tensor, or a list for several outputs)."""
        raise NotImplementedError(f"{self.name}: no executor rule")

    def value_range(self, node, ins):
        """``(lo, hi)`` bounds of every value ``node`` can produce given its inputs'
        bounds (``ins`` are the input nodes); may record inner ranges in ``node.attrs``."""
        raise NotImplementedError(f"{self.name}: no range rule")

    def stack(self, nodes):
        """Attributes of one node doing the work of ``nodes`` (the isomorphic nodes of a
        block's K bases, in base order) on their channels concatenated: what
        time-sharing the bases needs of the op (:mod:`..sharing`). ``None``: the op
        cannot be time-shared (the default)."""
        return None

    def line_memory(self, node, parent, kind="block"):
        """``(depth, width, copies)`` of the unit's line buffer when built in block RAM
        as ``kind`` (:data:`groupnet_hw.hw.window.LINE_RAM_KINDS`); ``None``: the unit
        has no line buffer that can be (the default)."""
        return None

    def reads_in_place(self, node, unit, target):
        """Whether the unit reads its input where its producer holds it instead of
        copying it into a buffer, at ``unit``'s folding for a frame interval of
        ``target`` cycles (the default: no)."""
        return False

    def registers_rom(self, node, unit, family):
        """Whether the unit's weight ROM, at ``unit``'s folding, is block RAM whose read
        ``family`` registers once more before it is used (``Unit.registered_rom``;
        :func:`..resources.rom_read_register`; the default: no ROM)."""
        return False

    def registers_products(self, node, unit, family):
        """Whether the unit registers its multipliers' products once more in the fabric
        on ``family`` (``Unit.registered_products``; the default: no multipliers)."""
        return False

    #: An MVU that can apply its consumer's thresholds (:meth:`activation`) to its results.
    takes_activation = False

    def activation(self, node):
        """The per-channel table an MVU in front of the unit can apply instead of it
        (``Unit.fused``; :class:`~groupnet_hw.hw.multithreshold.ThresholdTable`,
        :class:`~groupnet_hw.hw.elementwise.AffineTable`), or ``None`` where the unit's
        work is not that (the default)."""
        return None

    def activation_features(self, node, acc_width, folds, pe):
        """Resource features of the unit's work done in an MVU of ``pe`` PEs and
        ``folds`` output folds on accumulators of ``acc_width`` bits (beside that MVU's,
        :mod:`..resources`): an MVU's threshold or post-op ROM is ``act_rom_depth`` x
        ``act_rom_width``."""
        raise NotImplementedError(f"{self.name}: no activation in an MVU")

    def block_line_ram(self, node, parent, unit, family, serial=False):
        """How the unit's line buffer goes to ``family``'s block RAM at ``unit``'s
        folding (a :data:`groupnet_hw.hw.window.LINE_RAM_KINDS` kind; ``serial``: as a
        serial memory where that costs no cycle), or ``None`` where it does not (the
        default: no line buffer)."""
        return None

    # -- cycle model ---------------------------------------------------------
    def lane_channels(self, node):
        """Channels a lane-folded unit sequences (its output's, by default)."""
        return node.channels

    def folding(self, node, parent, target, beats=1):
        """``(pe, simd, n_in)`` of a matrix-vector unit meeting ``target`` cycles per
        frame, ``(lanes, None, None)`` for a lane-foldable unit (taking ``beats`` beats
        per pixel), or ``(None, None, None)`` for units without folding."""
        if self.lane_foldable:
            return (cyc.choose_lanes(self.lane_channels(node) // beats,
                                     node.height * node.width * beats, target,
                                     lambda folds: self.lane_latency_of(node, folds)),
                    None, None)
        return None, None, None

    def paced(self, node, target, beats=1):
        """Whether the unit runs paced (``Unit.paced``) in a schedule of ``target``
        cycles per frame: where it can, and two cycles per beat meet the target."""
        return self.paceable and target >= 2 * node.height * node.width * beats

    def interval(self, node, unit):
        """Cycles between accepted pixels at full speed (none for a unit fused into its
        producer: it is wiring)."""
        if unit is not None and unit.fused:
            return 0
        if unit is not None and unit.paced:
            return 2
        if self.lane_foldable and unit is not None and unit.pe:
            channels = self.lane_channels(node) // unit.beats
            folds = cyc.lane_folds(channels, unit.pe)
            return cyc.folded_interval(channels, unit.pe, self.lane_latency_of(node, folds))
        return 1

    def cycles(self, node, parent, unit):
        """Cycles per frame with inputs always valid and outputs always ready."""
        return node.height * node.width * unit.beats * self.interval(node, unit)

    def latency(self, node, unit=None):
        """Cycles from accepting a beat to its result on the output."""
        if unit is not None and unit.fused:
            return 0
        if self.lane_foldable and unit is not None and unit.pe:
            folds = cyc.lane_folds(self.lane_channels(node) // unit.beats, unit.pe)
            return folds + 1 + self.lane_latency_of(node, folds)
        return self.full_rate_latency(node)

    def full_rate_latency(self, node):
        """Latency of the full-rate (not lane-folded) unit."""
        return 1

    def timing(self, node, parent, ins, unit):
        """``(out, accepted)``: the ideal time of every output beat over
        :data:`TIMING_FRAMES` frames, and of every input beat's acceptance (``None``
        when the unit buffers its input at arrival, as a line buffer does).
        ``ins`` are the producers' output times."""
        latency, interval = self.latency(node, unit), self.interval(node, unit)
        out, acc, prev = [], [], float("-inf")
        for q in range(TIMING_FRAMES * node.height * node.width * unit.beats):
            t = max(max(x[q] for x in ins), prev + interval)
            acc.append(t)
            out.append(t + latency)
            prev = t
        return out, acc

    # -- resources and hardware ----------------------------------------------
    def lane_width(self, g, node):
        """Width of each channel on the unit's output stream: the range's, except where
        the hardware is wider (a matrix-vector unit's accumulator)."""
        return node.bit_width

    def channel_sources(self, g, node):
        """One key per channel of the unit's output stream; channels with equal keys
        carry the same wires (a ``repeat`` is only wiring), and Yosys merges the logic
        that reads them with the same constants (a time-shared block's K copies of
        its input compare against equal thresholds once)."""
        return [(node.name, c) for c in range(node.channels)]

    def resource_features(self, g, node, parent, unit):
        """Structural features of the unit (:mod:`..resources`): the calibrated
        model counts each cell type as a non-negative combination of these."""
        return {"one": 1, "out_bits": node.channels // unit.beats * node.bit_width}

    def build(self, ctx, node, unit):
        """Instantiate the hardware in ``ctx`` (:class:`groupnet_hw.hw.accelerator.BuildContext`);
        returns ``(input streams, output streams)``."""
        raise NotImplementedError(f"{node.name}: op {self.name!r} has no hardware unit")
