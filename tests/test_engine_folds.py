# amaranth: UnusedElaboratable=no
"""The intended engine's fold issuer (hw/engine/folds.py) feeding its base arrays: every
output channel of every pixel equals numpy's dot product of the window with the channel's
weights, for odd geometries, under stalls on both sides, with the arrays never idle
while windows keep coming, also from one weight chunk to the next (the chunk loaded into
the weight buffer's other half while the one before is issued)."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.arrays import BaseArrays
from groupnet_hw.hw.engine.folds import FoldIssuer
from groupnet_hw.sim.streams import run_streams, stream_get, stream_put


class Pipe(Elaboratable):
    """A FoldIssuer whose folds go to a BaseArrays; ``window`` in, ``o`` out."""

    def __init__(self, arrays, pe, simd, planes, max_in_folds, max_weight_words):
        self.issuer = FoldIssuer(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_in_folds=max_in_folds, max_weight_words=max_weight_words)
        self.arrays = BaseArrays(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_window=max_in_folds * simd)
        self.window, self.o = self.issuer.window, self.arrays.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.issuer, m.submodules.arrays = self.issuer, self.arrays
        wiring.connect(m, self.issuer.o, self.arrays.i)
        return m


def pack(bits):
    return int(sum(int(b) << j for j, b in enumerate(bits)))


def conv_case(rng, arrays, pe, simd, planes, lanes, c_out, pixels, levels):
    """Random windows (``lanes`` elements a pixel and array) and weights (``c_out``
    channels), packed as the issuer takes them, and the expected sums."""
    in_folds, out_folds = -(-lanes // simd), -(-c_out // pe)
    if levels:
        x = rng.integers(0, 1 << planes, (pixels, arrays, lanes))
    else:
        x = rng.integers(0, 2, (pixels, arrays, lanes))
    w = np.zeros((arrays, out_folds * pe, in_folds * simd), dtype=np.int64)
    w[:, :c_out, :lanes] = rng.integers(0, 2, (arrays, c_out, lanes))
    windows = []
    for pix in range(pixels):
        for sf in range(in_folds):
            words = []
            for k in range(arrays):
                seg = np.zeros(simd, dtype=np.int64)
                part = x[pix, k, sf * simd:(sf + 1) * simd]
                seg[:len(part)] = part
                words.append(sum(pack((seg >> b) & 1) << (b * simd) for b in range(planes)))
            mask = (1 << min(simd, lanes - sf * simd)) - 1
            windows.append({"x": words, "mask": mask, "last": int(sf == in_folds - 1)})
    weights = [{"addr": nf * in_folds + sf,
                "w": [pack(w[k, nf * pe:(nf + 1) * pe, sf * simd:(sf + 1) * simd].reshape(-1))
                      for k in range(arrays)], "en": (1 << arrays) - 1}
               for nf in range(out_folds) for sf in range(in_folds)]
    xs = x if levels else 2 * x - 1
    ws = 2 * w[:, :, :lanes] - 1          # padded channels have weights of -1
    expected = [[int(v) for v in np.einsum("kl,kcl->kc", xs[pix],
                                           ws[:, nf * pe:(nf + 1) * pe]).reshape(-1)]
                for pix in range(pixels) for nf in range(out_folds)]
    chunk = dict(out_folds=out_folds, in_folds=in_folds, windows=pixels)
    if planes > 1:
        chunk["levels"] = int(levels)
    return windows, weights, expected, chunk


def base_after_base(rng, weights, arrays, pe, simd):
    """``weights`` written one base after another, as the bases' DRAM sections arrive:
    each word with one array's bit of ``en`` and random bits in the other arrays' words,
    which must not land."""
    return [{"addr": word["addr"], "en": 1 << k,
             "w": [word["w"][j] if j == k else int.from_bytes(rng.bytes(pe * simd // 8 + 1)) % (1 << (pe * simd))
                   for j in range(arrays)]}
            for k in range(arrays) for word in weights]


def run(arrays, pe, simd, planes, lanes, c_out, *, pixels=5, levels=False, stall=0.0,
        seed=0, per_base=False):
    rng = np.random.default_rng(seed)
    windows, weights, expected, config = conv_case(rng, arrays, pe, simd, planes, lanes,
                                                   c_out, pixels, levels)
    if per_base:
        weights = base_after_base(rng, weights, arrays, pe, simd)
    in_folds = -(-lanes // simd)
    dut = Pipe(arrays, pe, simd, planes, max_in_folds=in_folds + 1,
               max_weight_words=len(weights) + 3)
    issuer = dut.issuer

    async def load(ctx):
        for word in weights:
            await stream_put(ctx, issuer.weights, word)
        await stream_put(ctx, issuer.chunk, config)

    result = run_streams(dut, {"window": windows}, {"o": len(expected)}, stall=stall,
                         seed=seed, max_cycles=20 * len(expected) * in_folds + 400,
                         setup=load)
    return dut, windows, expected, result


# arrays, pe, simd, planes, lanes (taps x channels), output channels: K = 1, lanes not a
# multiple of simd, channels not a multiple of pe, one fold a window, 4 planes
CASES = [(1, 2, 8, 1, 27, 5), (3, 4, 16, 1, 40, 7), (2, 3, 13, 1, 13, 3),
         (2, 2, 6, 4, 20, 4), (5, 1, 9, 1, 30, 2)]


@pytest.mark.parametrize("arrays, pe, simd, planes, lanes, c_out", CASES)
def test_every_channel_of_every_pixel(arrays, pe, simd, planes, lanes, c_out):
    *_, expected, result = run(arrays, pe, simd, planes, lanes, c_out, levels=planes > 1,
                               seed=lanes)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("seed", [1, 2])
def test_under_stalls_on_both_sides(seed):
    *_, expected, result = run(3, 4, 16, 1, 40, 7, pixels=6, stall=0.4, seed=seed)
    assert result.outputs["o"] == expected


def test_each_base_writes_its_own_weights():
    *_, expected, result = run(3, 4, 16, 1, 40, 7, seed=3, per_base=True)
    assert result.outputs["o"] == expected


def test_the_arrays_take_a_fold_every_cycle():
    # windows offered without gaps: after the first window, a fold every cycle, so the
    # output folds (3 folds each) leave exactly 3 cycles apart, and the first one the
    # stated latencies after the first window's last word
    dut, windows, expected, result = run(2, 4, 16, 1, 48, 16, pixels=8)
    assert result.outputs["o"] == expected
    shown = result.out_cycles["o"]
    assert [b - a for a, b in zip(shown, shown[1:])] == [3] * (len(shown) - 1)
    first_fold_in = 3 + dut.issuer.latency          # three window words, then the issuer
    assert result.cycles == first_fold_in + 3 * len(expected) - 1 + dut.arrays.latency


def test_a_second_descriptor_after_idle():
    # Two convolutions of different geometry through the same units, one buffer's way:
    # the second's weights and chunk are written once `idle` says the first is done.
    rng = np.random.default_rng(4)
    cases = [conv_case(rng, 2, 3, 8, 1, 20, 5, 3, False),
             conv_case(rng, 2, 3, 8, 1, 9, 7, 4, False)]
    dut = Pipe(2, 3, 8, 1, max_in_folds=4, max_weight_words=12)
    issuer, got = dut.issuer, []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def feed(ctx):
        for windows, weights, expected, config in cases:
            while not ctx.get(issuer.idle):
                await ctx.tick()
            for word in weights:
                await stream_put(ctx, issuer.weights, word)
            await stream_put(ctx, issuer.chunk, config)
            for word in windows:
                await stream_put(ctx, dut.window, word)

    async def collect(ctx):
        total = sum(len(c[2]) for c in cases)
        while len(got) < total:
            got.append(await stream_get(ctx, dut.o))

    async def deadline(ctx):
        for _ in range(2000):            # not `repeat`: see sim.streams._idle
            await ctx.tick()
        raise TimeoutError("no progress")

    sim.add_testbench(feed, background=True)
    sim.add_testbench(deadline, background=True)
    sim.add_testbench(collect)
    sim.run()
    assert got == cases[0][2] + cases[1][2]


# Weight chunks one after another (a descriptor's chunks of output channels, or one
# descriptor after another): each chunk's weights are written into the half that is not
# issued, then committed, while the windows of the chunks before keep coming.

def chunk_cases(rng, arrays, pe, simd, planes, geometries):
    """A chunk (``conv_case``'s windows, weights, expected sums and chunk beat) a
    ``(lanes, c_out, pixels, levels)``."""
    return [conv_case(rng, arrays, pe, simd, planes, lanes, c_out, pixels, levels)
            for lanes, c_out, pixels, levels in geometries]


def chunks_run(shape, cases, *, stall=0.0, seed=0, hold=None, prelude=None,
               max_cycles=20000):
    """Runs ``cases`` as chunks through one issuer and its arrays: a loader writes each
    chunk's weights and commits it as soon as ``free`` lets it (chunk ``k`` not before
    the arrays have taken ``hold[k]`` folds), a producer offers every window in order, a
    consumer takes the arrays' outputs; each waits 1-4 cycles before a beat with
    probability ``stall``. ``prelude(ctx, dut, reset)`` runs first, on a design with a
    reset input. Returns the issuer and a log of edges (cycle numbers of the clock edges
    at which something was taken): ``folds`` (a fold into the arrays), ``words`` (a
    weight word), ``commit`` (a chunk), ``out`` (an output fold), ``free[c]`` (``free``
    just before edge ``c``), ``got`` (the outputs)."""
    arrays, pe, simd, planes = shape
    dut = Pipe(arrays, pe, simd, planes,
               max_in_folds=max(c[3]["in_folds"] for c in cases),
               max_weight_words=max(len(c[1]) for c in cases))
    issuer, reset = dut.issuer, Signal()
    hold = hold or [0] * len(cases)
    rng = np.random.default_rng(seed)
    gaps = {name: [int(rng.integers(1, 5)) if rng.random() < stall else 0
                   for _ in range(4096)] for name in ("window", "o", "weights")}
    log = dict(cycle=0, started=prelude is None)
    keys = ("folds", "words", "commit", "out", "free", "got")

    def clear():
        log.update({key: [] for key in keys})
        log["free"].append(None)                   # edges count from 1
    clear()
    sim = Simulator(ResetInserter(reset)(dut))
    sim.add_clock(1e-8)

    async def clock(ctx):
        async for _, _, *seen in ctx.tick().sample(
                issuer.o.valid, issuer.o.ready, issuer.weights.valid, issuer.weights.ready,
                issuer.chunk.valid, issuer.chunk.ready, issuer.free):
            o_valid, o_ready, w_valid, w_ready, c_valid, c_ready, free = seen
            log["cycle"] += 1
            edge = log["cycle"]
            log["free"].append(free)
            for key, taken in (("folds", o_valid and o_ready),
                               ("words", w_valid and w_ready),
                               ("commit", c_valid and c_ready)):
                if taken:
                    log[key].append(edge)
            assert edge < max_cycles, "no progress"

    async def start(ctx):
        if prelude is not None:
            await prelude(ctx, dut, reset)
            log["cycle"] = 0
            clear()
            log["started"] = True

    async def wait(ctx, name, index):
        while not log["started"]:
            await ctx.tick()
        for _ in range(gaps[name][index % len(gaps[name])]):
            await ctx.tick()

    async def load(ctx):
        index = 0
        for k, (_, weights, _, chunk) in enumerate(cases):
            while len(log["folds"]) < hold[k] or not log["started"]:
                await ctx.tick()
            for word in weights:
                await wait(ctx, "weights", index)
                index += 1
                await stream_put(ctx, issuer.weights, word)
            await stream_put(ctx, issuer.chunk, chunk)

    async def windows(ctx):
        for index, word in enumerate(w for c in cases for w in c[0]):
            await wait(ctx, "window", index)
            await stream_put(ctx, dut.window, word)

    async def collect(ctx):
        total = sum(len(c[2]) for c in cases)
        while len(log["got"]) < total:
            await wait(ctx, "o", len(log["got"]))
            log["got"].append(await stream_get(ctx, dut.o))
            log["out"].append(log["cycle"])

    sim.add_process(clock)
    sim.add_testbench(start, background=True)
    sim.add_testbench(load, background=True)
    sim.add_testbench(windows, background=True)
    sim.add_testbench(collect)
    sim.run()
    return issuer, log


def folds_of(cases):
    """Each chunk's folds: windows x out_folds x in_folds."""
    return [c[3]["windows"] * c[3]["out_folds"] * c[3]["in_folds"] for c in cases]


def test_the_next_chunk_loads_while_one_is_issued():
    # Two chunks of 4 output folds of a 3-word window (weight streaming's chunks of one
    # layer): the second's 12 words are written after the arrays have taken the first
    # window's folds, while the first chunk's other 5 windows are issued, and the arrays
    # take a fold every cycle from the first fold to the last, across the chunk
    # boundary: no gap at all (the bound: 0 cycles, when a chunk is committed no later
    # than the cycle the last fold of the one before is read).
    rng = np.random.default_rng(7)
    cases = chunk_cases(rng, 2, 4, 16, 1, [(48, 16, 6, False), (48, 13, 5, False)])
    issuer, log = chunks_run((2, 4, 16, 1), cases, hold=[0, 12])
    assert log["got"] == cases[0][2] + cases[1][2]
    folds, words, commits = log["folds"], log["words"], log["commit"]
    first = folds_of(cases)[0]
    last_read = folds[first - 1] - 3      # the FIFO's write and output registers behind
    assert folds[11] < words[12] and commits[1] < last_read   # written while issued
    assert folds == list(range(folds[0], folds[0] + len(folds)))
    # so the arrays' output folds (3 folds each) leave exactly 3 cycles apart
    assert np.all(np.diff(log["out"]) == 3)
    # and the first fold the stated latency after the first chunk's commit (its
    # window is held by then)
    assert folds[0] == commits[0] + issuer.latency


def test_a_late_chunk_costs_its_latency_and_no_more():
    # The second chunk's weights are written only after the first chunk's folds are all
    # taken: its first window waits in a window buffer, and its first fold reaches the
    # arrays the stated latency after its commit.
    rng = np.random.default_rng(8)
    cases = chunk_cases(rng, 1, 2, 8, 1, [(20, 3, 1, False), (20, 12, 4, False)])
    first = folds_of(cases)[0]
    issuer, log = chunks_run((1, 2, 8, 1), cases, hold=[0, first])
    assert log["got"] == cases[0][2] + cases[1][2]
    assert log["commit"][1] > log["folds"][first - 1]
    assert log["folds"][first] == log["commit"][1] + issuer.latency


GEOMETRIES = [
    # shape and chunks as (lanes, c_out, pixels, levels): window words 3, 2, 4, 1 and
    # PE folds 2, 3, 2, 2; at least as many folds a window as the next window's words and
    # a chunk's issue longer than the next chunk's weights, so the arrays keep busy
    ((2, 3, 8, 1), [(20, 5, 3, False), (9, 7, 4, False), (30, 4, 2, False),
                    (8, 6, 3, False)]),
    # four planes: levels, binary activations, levels (words 4, 2, 1; PE folds 2, 2, 3)
    ((2, 2, 6, 4), [(20, 4, 3, True), (11, 3, 3, False), (6, 5, 2, True)]),
]


@pytest.mark.parametrize("shape, geometries", GEOMETRIES)
def test_chunks_of_different_geometry(shape, geometries):
    # one descriptor after another: each chunk's geometry (and whether its windows hold
    # levels) goes with it, the next written while one is issued; a fold every cycle
    # from the first to the last
    cases = chunk_cases(np.random.default_rng(9), *shape, geometries)
    _, log = chunks_run(shape, cases)
    assert log["got"] == [e for c in cases for e in c[2]]
    folds = log["folds"]
    assert folds == list(range(folds[0], folds[0] + len(folds)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chunks_under_stalls_on_every_side(seed):
    shape, geometries = GEOMETRIES[seed % 2]
    cases = chunk_cases(np.random.default_rng(seed), *shape, geometries)
    _, log = chunks_run(shape, cases, stall=0.4, seed=seed)
    assert log["got"] == [e for c in cases for e in c[2]]


def test_a_loaded_half_refuses_weights_until_its_chunk_is_issued():
    # Chunks A and B are committed before their windows come (the windows wait for
    # nothing, but A's folds take 18 cycles): both halves hold a chunk, so `free`,
    # `weights.ready` and `chunk.ready` are low and C's words wait. The first is taken
    # in the cycle after A's last fold is read (C's words overwrite A's half: taken
    # earlier, A's sums would be wrong), while B is still issued.
    rng = np.random.default_rng(10)
    cases = chunk_cases(rng, 2, 3, 8, 1, [(20, 5, 3, False), (9, 7, 2, False),
                                          (20, 6, 2, False)])
    issuer, log = chunks_run((2, 3, 8, 1), cases)
    assert log["got"] == [e for c in cases for e in c[2]]
    a_folds, b_folds, _ = folds_of(cases)
    a_read = log["folds"][a_folds - 1] - (issuer.latency - 1)  # the edge of A's last read
    b_commit = log["commit"][1]
    c_word = log["words"][len(cases[0][1]) + len(cases[1][1])]
    free = log["free"]
    assert free[log["commit"][0] + 1]          # A committed, B's half still free
    assert b_commit < a_read - 1
    assert not any(free[b_commit + 1:a_read + 1]) and free[a_read + 1]
    assert c_word == a_read + 1
    assert log["commit"][2] < log["folds"][a_folds + b_folds - 1]       # B still issued


def test_a_reset_inside_a_chunk():
    # A and B committed, half of A's windows in, folds on their way to a stalled
    # consumer: a reset empties both halves (`free` and `idle` rise), and the chunks
    # then run from the start as if nothing had been.
    rng = np.random.default_rng(11)
    shape = (2, 3, 8, 1)
    cases = chunk_cases(rng, *shape, [(20, 5, 3, False), (9, 7, 4, False)])

    async def prelude(ctx, dut, reset):
        issuer = dut.issuer
        for windows, weights, _, chunk in cases:
            for word in weights:
                await stream_put(ctx, issuer.weights, word)
            await stream_put(ctx, issuer.chunk, chunk)
        # both halves hold a chunk and no window is in: not idle, nothing accepted
        assert not ctx.get(issuer.free) and not ctx.get(issuer.weights.ready)
        assert not ctx.get(issuer.chunk.ready) and not ctx.get(issuer.idle)
        for word in cases[0][0][:4]:
            await stream_put(ctx, dut.window, word)
        await ctx.tick().repeat(12)                        # the arrays' output stalls
        assert not ctx.get(issuer.idle) and ctx.get(dut.o.valid)
        ctx.set(reset, 1)
        await ctx.tick()
        ctx.set(reset, 0)
        assert ctx.get(issuer.free) and ctx.get(issuer.idle)

    _, log = chunks_run(shape, cases, prelude=prelude)
    assert log["got"] == cases[0][2] + cases[1][2]
    assert log["folds"] == list(range(log["folds"][0], log["folds"][0] + len(log["folds"])))
