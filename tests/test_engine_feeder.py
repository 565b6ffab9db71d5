# amaranth: UnusedElaboratable=no
"""The intended engine's epilogue feeder (hw/engine/feeder.py) behind the base arrays and
in front of the epilogue lanes: the layer datapath (hw/engine/layer.py: gatherer, fold
issuer, arrays, feeder and epilogue) computes the IR's chain ``bin_conv -> postop -> add -> relu -> threshold``
(each op's own ``execute``) bit-exact, per base."""

import numpy as np
import pytest
import torch
from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.layer import LayerDatapath
from groupnet_hw.sim.streams import run_streams, stream_put
from test_engine_gather import GEOMETRIES, Geometry, conv_weights


def _node(op, channels, **attrs):
    return Node("test", op, [], attrs, channels=channels)


def layer_run(geometry, c_out, pe, settings, *, lanes=None, rows_per_tile=2, stall=0.0,
              seed=0, folds=None):
    """... with ``folds = (first, count)``: one weight chunk of those output folds
    (the constants of every fold loaded, the feeder told the chunk's first fold)."""
    lanes = lanes or pe
    parts = pe // lanes
    g = Geometry(np.random.default_rng(seed + c_out), *geometry)
    rng = np.random.default_rng(seed)
    bits, weights, out_folds = conv_weights(rng, g, c_out, pe)
    first, count = folds or (0, out_folds)
    in_folds = g.kernel ** 2 * g.words
    # the chunk's words, from the half's first word on
    chunk_weights = [dict(w, addr=a) for a, w in
                     enumerate(weights[first * in_folds:(first + count) * in_folds])]
    levels = settings["levels"]
    channels = out_folds * pe
    a = rng.integers(-200, 200, (g.arrays, channels))
    b = rng.integers(-2000, 2000, (g.arrays, channels))
    t = np.sort(rng.integers(-300, 300, (g.arrays, channels, levels)), axis=2)
    inv = rng.integers(0, 2, (g.arrays, channels))
    side = rng.integers(-500, 500, (g.arrays, channels, g.oh, g.ow))
    dut = LayerDatapath(arrays=g.arrays, pe=pe, simd=g.simd, planes=g.planes,
                        ring_rows=g.ring_rows, ring_words=g.ring_rows * g.pitch, max_size=16,
                        max_words=4, max_kernel=5, max_weight_words=len(chunk_weights),
                        max_out_folds=out_folds, const_width=12, value_width=24,
                        max_levels=levels, lanes=lanes)

    def run(k, nf, p):
        """Job k's channels of output fold nf's part p (a beat's lanes)."""
        lo = nf * pe + p * lanes
        return slice(lo, lo + lanes)
    constants = []
    for k in range(g.arrays):
        for nf in range(out_folds):
            for p in range(parts):
                addr, lanes_of = (k * out_folds + nf) * parts + p, run(k, nf, p)
                constants += [
                    ("ab", {"addr": addr, "a": [int(v) for v in a[k, lanes_of]],
                            "b": [int(v) for v in b[k, lanes_of]]}),
                    ("thr", {"addr": addr,
                             "t": [[int(v) for v in row] for row in t[k, lanes_of]]}),
                    ("inv", {"addr": addr,
                             "invert": int(inv[k, lanes_of] @ (1 << np.arange(lanes)))})]
    # each job's post-op shift and ReLU flags are its own
    postops = [dict(shift=settings["shift"] + k % 3 if settings["postop"] else 0,
                    pre_relu=settings["pre_relu"] ^ (k % 2 if settings["postop"] else 0),
                    post_relu=settings["post_relu"] ^ ((k // 2) % 2 if settings["postop"] else 0))
               for k in range(g.arrays)]

    async def setup(ctx):
        ctx.set(dut.gather_settings, g.settings())
        ctx.set(dut.loaded, g.h)
        ctx.set(dut.out_folds, count)
        ctx.set(dut.job_folds, out_folds)
        ctx.set(dut.fold_base, first)
        ctx.set(dut.epilogue_settings, settings)
        ctx.set(dut.postops, postops)
        for word in g.ring():
            await stream_put(ctx, dut.rows, word)
        for word in chunk_weights:
            await stream_put(ctx, dut.weights, word)
        for name, word in constants:
            await stream_put(ctx, getattr(dut, name), word)
        assert ctx.get(dut.idle)
        chunk = dict(out_folds=count, in_folds=in_folds, windows=g.oh * g.ow)
        if g.planes > 1:
            chunk["levels"] = int(g.levels)
        await stream_put(ctx, dut.chunk, chunk)

    order = [(oy, ox, nf, k, p) for oy in range(g.oh) for ox in range(g.ow)
             for nf in range(first, first + count) for p in range(parts)
             for k in range(g.arrays)]
    sides = [[int(v) for v in side[k, run(k, nf, p), oy, ox]] for oy, ox, nf, k, p in order]
    expected = []
    ys = []
    for k in range(g.arrays):
        padded = np.zeros((channels, g.c, g.kernel, g.kernel), dtype=np.int64)
        padded[:c_out] = bits[k]
        conv = _node("bin_conv", channels, bits=torch.from_numpy(padded),
                     in_bits=g.planes if g.levels else 0, kernel=g.kernel, stride=g.stride,
                     dilation=g.dilation, padding=g.padding)
        y = op_of(conv).execute(conv, [torch.from_numpy(g.maps[k]).unsqueeze(0)])
        if settings["postop"]:
            post = _node("postop", channels, A=torch.from_numpy(a[k]), B=torch.from_numpy(b[k]),
                         shift=postops[k]["shift"], pre_relu=bool(postops[k]["pre_relu"]),
                         post_relu=bool(postops[k]["post_relu"]))
            y = op_of(post).execute(post, [y])
        if settings["add"]:
            y = op_of(_node("add", channels)).execute(
                _node("add", channels), [y, torch.from_numpy(side[k]).unsqueeze(0)])
        if settings["relu"]:
            y = y.clamp(min=0)
        if settings["threshold"]:
            thr = _node("threshold", channels, T=torch.from_numpy(t[k][:, :levels]),
                        invert=torch.from_numpy(inv[k]))
            y = op_of(thr).execute(thr, [y])
        ys.append(y[0])
    expected = [[int(v) for v in ys[k][run(k, nf, p), oy, ox]] for oy, ox, nf, k, p in order]
    inputs = {"tile": g.tiles(rows_per_tile)}
    if settings["add"]:
        inputs["side"] = sides
    result = run_streams(dut, inputs, {"o": len(expected)}, stall=stall, seed=seed,
                         setup=setup, max_cycles=40 * len(expected) * g.kernel ** 2 + 2000)
    return expected, result


SECOND_LAYER = dict(postop=1, pre_relu=0, post_relu=0, shift=4, add=1, relu=0, threshold=0,
                    levels=1)       # a Group-Net block's second convolution: BN, residual
FIRST_LAYER = dict(postop=0, pre_relu=0, post_relu=0, shift=0, add=0, relu=0, threshold=1,
                   levels=1)        # the next convolution's sign, fused
ALL = dict(postop=1, pre_relu=1, post_relu=1, shift=3, add=1, relu=1, threshold=1, levels=3)


@pytest.mark.parametrize("geometry, c_out, pe, settings", [
    (GEOMETRIES[1], 7, 3, SECOND_LAYER), (GEOMETRIES[2], 4, 4, FIRST_LAYER),
    (GEOMETRIES[3], 3, 2, ALL), (GEOMETRIES[4], 9, 4, SECOND_LAYER)])
def test_a_layer_equals_the_irs_chain(geometry, c_out, pe, settings):
    expected, result = layer_run(geometry, c_out, pe, settings)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("geometry, c_out, pe, settings", [
    (GEOMETRIES[1], 7, 3, ALL | dict(levels=1)), (GEOMETRIES[4], 9, 4, FIRST_LAYER)])
def test_a_layer_under_stalls(geometry, c_out, pe, settings):
    # the 1x1 layer's folds come every cycle, two jobs' beats each, and read no side
    # input, so the feeder's FIFO fills whenever the consumer stalls
    expected, result = layer_run(geometry, c_out, pe, settings, rows_per_tile=1,
                                 stall=0.4, seed=3)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("geometry, c_out, pe, lanes, settings", [
    (GEOMETRIES[1], 7, 4, 2, ALL | dict(levels=2)), (GEOMETRIES[2], 8, 8, 2, SECOND_LAYER),
    (GEOMETRIES[4], 9, 4, 1, FIRST_LAYER)])
def test_an_epilogue_narrower_than_pe(geometry, c_out, pe, lanes, settings):
    """The intended engine's epilogue has half its arrays' PE rows (section 15): each
    job's channels of an output fold go in pe / lanes beats, with their constants and
    side elements, under stalls (the 1x1 layer's folds come faster than the beats)."""
    expected, result = layer_run(geometry, c_out, pe, settings, lanes=lanes, stall=0.3,
                                 seed=lanes)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("geometry, c_out, pe, lanes, folds, settings", [
    (GEOMETRIES[1], 11, 3, 3, (1, 2), ALL), (GEOMETRIES[4], 9, 4, 2, (2, 1), SECOND_LAYER),
    (GEOMETRIES[2], 8, 2, 1, (1, 3), FIRST_LAYER)])
def test_a_weight_chunk_reads_its_folds_constants(geometry, c_out, pe, lanes, folds, settings):
    """A weight chunk of some of a job's output folds (weight streaming): the feeder
    reads its channels' constants among every fold's (``fold_base``, ``job_folds``), the
    chunk's last fold not the job's last, under stalls."""
    expected, result = layer_run(geometry, c_out, pe, settings, lanes=lanes, stall=0.3,
                                 seed=7, folds=folds)
    assert result.outputs["o"] == expected


def test_lanes_that_do_not_split_pe_evenly_are_refused():
    from groupnet_hw.hw.engine.feeder import EpilogueFeeder
    for pe, lanes in ((12, 5), (12, 4), (8, 16)):      # 12 / 4: three parts
        with pytest.raises(ValueError, match="lanes"):
            EpilogueFeeder(arrays=2, pe=pe, sum_width=8, lanes=lanes)
    assert EpilogueFeeder(arrays=2, pe=12, sum_width=8, lanes=3).parts == 4


def test_the_feeders_first_beat_after_the_stated_latency():
    from amaranth.sim import Simulator
    from groupnet_hw.hw.engine.feeder import EpilogueFeeder
    dut = EpilogueFeeder(arrays=2, pe=2, sum_width=8, const_width=8, value_width=8,
                         max_levels=1, max_out_folds=2)
    seen = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.out_folds, 1)
        ctx.set(dut.job_folds, 1)
        ctx.set(dut.settings, FIRST_LAYER)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.sums.payload, [1, 2, 3, 4])
        ctx.set(dut.sums.valid, 1)
        await ctx.tick()                       # the fold's sums are taken: cycle 0
        ctx.set(dut.sums.valid, 0)
        for cycle in range(1, 10):
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                seen.append((cycle, [int(v) for v in payload.x]))

    sim.add_testbench(bench)
    sim.run()
    latency = dut.latency
    assert seen == [(latency, [1, 2]), (latency + 1, [3, 4])]
