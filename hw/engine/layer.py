"""The intended engine's layer datapath: gatherer, fold issuer, base arrays, epilogue feeder
and epilogue lanes, connected (docs/architecture.md section 15).

Input rows, weights and constants on chip in; each output pixel's channels of every job
out, after the descriptor's epilogue stages. What drives it (the row loader, the
weight and constant transfers, the output packer and the sequencer) is not built yet;
this composite is what they will drive, and what the benchmark synthesizes as one
design.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring

from .arrays import BaseArrays
from .epilogue import EpilogueLanes
from .feeder import EpilogueFeeder
from .folds import FoldIssuer
from .gather import WindowGather

__all__ = ["LayerDatapath"]


class LayerDatapath(wiring.Component):
    """A binary convolution and its epilogue, for ``arrays`` jobs side by side.

    Parameters
    ----------
    arrays, pe, simd, planes : int
        The base arrays (:class:`~.arrays.BaseArrays`).
    lanes : int, optional
        The epilogue's lanes: ``pe`` (default) or ``pe`` divided by a power of two (the
        feeder splits each job's channels of an output fold into ``pe / lanes`` beats).
    ring_rows, ring_words, max_size, max_words, max_kernel : int
        The gatherer's (:class:`~.gather.WindowGather`).
    max_weight_words : int
        Each half of the fold issuer's weight buffer (:class:`~.folds.FoldIssuer`); its
        window buffers hold ``max_kernel**2 * max_words`` words, and a chunk is issued
        for at most ``max_size**2`` windows.
    max_out_folds : int
        The feeder's constant buffer (:class:`~.feeder.EpilogueFeeder`).
    const_width, value_width, max_levels : int
        The epilogue's (:class:`~.epilogue.EpilogueLanes`).

    Ports
    -----
    Those of the parts that are not connected to each other: ``gather_settings``,
    ``rows``, ``tile``, ``loaded``, ``release`` (the gatherer's ``settings``, ``rows``,
    ``tile``, ``loaded``, ``release``: a :class:`~.loader.RowLoader` connects there);
    ``weights``, ``chunk``, ``weights_free`` (the fold issuer's ``weights``, ``chunk``
    and ``free``: a chunk's words are written while ``weights_free`` and committed with
    its geometry, the next while one is issued); ``out_folds``, ``job_folds``,
    ``fold_base``, ``ab``, ``thr``, ``inv``, ``postops``,
    ``epilogue_settings``, ``side`` (the feeder's; its ``out_folds`` is the chunk's);
    ``o`` (the epilogue's); ``idle``: the gatherer, the fold issuer and the feeder hold
    nothing (no chunk is committed; the arrays and the epilogue may still hold a
    descriptor's last outputs, so its successor's constants wait until they have left
    ``o``).

    Latency
    -------
    ``WindowGather.latency + FoldIssuer.latency + BaseArrays.latency + 2 +
    EpilogueLanes.latency`` cycles and the window's words and folds in between.

    Throughput
    ----------
    One fold a cycle on every array while the gatherer keeps ahead (a window's words
    in at most ``out_folds x in_folds`` cycles) and the feeder does (an output fold at
    most every ``arrays * pe / lanes`` cycles).
    """

    def __init__(self, *, arrays, pe, simd, lanes=None, planes=1, ring_rows=4, ring_words=4096,
                 max_size=256, max_words=16, max_kernel=3, max_weight_words=3072,
                 max_out_folds=32, const_width=32, value_width=32, max_levels=1):
        self.gather = WindowGather(arrays=arrays, simd=simd, planes=planes,
                                   ring_rows=ring_rows, ring_words=ring_words,
                                   max_size=max_size, max_words=max_words,
                                   max_kernel=max_kernel)
        self.issuer = FoldIssuer(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_in_folds=max_kernel ** 2 * max_words,
                                 max_weight_words=max_weight_words,
                                 max_windows=max_size ** 2)
        self.arrays = BaseArrays(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_window=max_kernel ** 2 * max_words * simd)
        width = self.arrays.sum_width
        self.feeder = EpilogueFeeder(arrays=arrays, pe=pe, sum_width=width, lanes=lanes,
                                     const_width=const_width, value_width=value_width,
                                     max_levels=max_levels, max_out_folds=max_out_folds)
        self.epilogue = EpilogueLanes(lanes=self.feeder.lanes, x_width=width,
                                      const_width=const_width,
                                      value_width=value_width, max_levels=max_levels)
        members = {
            "gather_settings": self.gather.signature.members["settings"],
            "rows": self.gather.signature.members["rows"],
            "tile": self.gather.signature.members["tile"],
            "loaded": self.gather.signature.members["loaded"],
            "release": self.gather.signature.members["release"],
            "weights": self.issuer.signature.members["weights"],
            "chunk": self.issuer.signature.members["chunk"],
            "weights_free": self.issuer.signature.members["free"],
            "out_folds": self.feeder.signature.members["out_folds"],
            "job_folds": self.feeder.signature.members["job_folds"],
            "fold_base": self.feeder.signature.members["fold_base"],
            "ab": self.feeder.signature.members["ab"],
            "thr": self.feeder.signature.members["thr"],
            "inv": self.feeder.signature.members["inv"],
            "postops": self.feeder.signature.members["postops"],
            "epilogue_settings": self.feeder.signature.members["settings"],
            "side": self.feeder.signature.members["side"],
            "o": self.epilogue.signature.members["o"],
            "idle": wiring.Out(1),
        }
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gather, m.submodules.issuer = self.gather, self.issuer
        m.submodules.arrays, m.submodules.feeder = self.arrays, self.feeder
        m.submodules.epilogue = self.epilogue
        wiring.connect(m, self.gather.window, self.issuer.window)
        wiring.connect(m, self.issuer.o, self.arrays.i)
        wiring.connect(m, self.arrays.o, self.feeder.sums)
        wiring.connect(m, self.feeder.o, self.epilogue.i)
        for outer, inner in ((self.rows, self.gather.rows), (self.tile, self.gather.tile),
                             (self.weights, self.issuer.weights),
                             (self.chunk, self.issuer.chunk),
                             (self.ab, self.feeder.ab), (self.thr, self.feeder.thr),
                             (self.inv, self.feeder.inv),
                             (self.side, self.feeder.side)):
            wiring.connect(m, wiring.flipped(outer), inner)
        wiring.connect(m, self.epilogue.o, wiring.flipped(self.o))
        m.d.comb += [self.gather.settings.eq(self.gather_settings),
                     self.gather.loaded.eq(self.loaded), self.release.eq(self.gather.release),
                     self.weights_free.eq(self.issuer.free),
                     self.feeder.out_folds.eq(self.out_folds),
                     self.feeder.job_folds.eq(self.job_folds),
                     self.feeder.fold_base.eq(self.fold_base),
                     self.feeder.settings.eq(self.epilogue_settings),
                     self.feeder.postops.eq(self.postops),
                     self.idle.eq(self.gather.idle & self.issuer.idle & self.feeder.idle)]
        return m
