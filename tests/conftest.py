import os

# The tiers run on two worker processes (pyproject's addopts), a core each on the
# 2-core machine the fast tier is sized for: each worker's torch and BLAS take one
# thread, or their thread pools spin against each other (paired runs of five
# torch-heavy modules on 2 cores: 12 % less CPU time, 9 % less wall time). Set before
# torch is imported: it reads this once.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig, randomize_eval_state


randomize_bn = randomize_eval_state


def random_model(seed, **overrides):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = GroupNet(GroupNetConfig(**overrides))
    return randomize_bn(model, gen, zero_gamma=seed % 2 == 0).eval()


def shortcut_thresholds_apart(g):
    """``g`` (an integer graph) with each 1x1 convolution's input threshold a level
    above its twin's (the first convolution's, of the same map), as a network whose
    shortcut quantizes its input apart would have: the mixer before them then writes
    two level outputs an output (fusion rule 7), not one both read. Returns ``g``."""
    for conv in g:
        if conv.op != "bin_conv" or conv.attrs["kernel"] != 1:
            continue
        t = g.producer(conv.inputs[0])
        if t.op != "threshold":
            continue
        twins = [u for u in g.consumers(g.source(t.inputs[0])) if u is not t
                 and u.op == "threshold" and u.inputs == t.inputs
                 and torch.equal(u.attrs["T"], t.attrs["T"])]
        if twins:
            t.attrs["T"] = t.attrs["T"] + 1
    return g


def pairwise(**axes):
    """pytest params of the grid ``axes`` (name -> values, in the test's argument order):
    a set that holds every pair of values of two axes in the default tier (greedily,
    in grid order: deterministic), the rest of the grid marked ``slow``."""
    import itertools
    grid = list(itertools.product(*axes.values()))

    def pairs(combo):
        return {(i, combo[i], j, combo[j])
                for i, j in itertools.combinations(range(len(axes)), 2)}

    left = set().union(*(pairs(c) for c in grid))
    fast = []
    while left:
        best = max(grid, key=lambda c: len(pairs(c) & left))
        fast.append(best)
        left -= pairs(best)
    return [pytest.param(*c, id="-".join(map(str, c)),
                         marks=() if c in fast else pytest.mark.slow) for c in grid]


def random_images(seed, n, size):
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randint(0, 256, (n, size, size), generator=gen, dtype=torch.uint8)


@pytest.fixture(scope="session", autouse=True)
def rtl_cache(tmp_path_factory, worker_id):
    """One content-keyed cache of compiled RTL for the whole run: a design that several
    tests simulate is compiled by Verilator once, also when the tests run on different
    xdist workers (the folder is their common parent; a build holds its entry's lock,
    so the second worker waits for the first's binary instead of compiling it again).
    Set as the default cache so that nothing reaches the user's own
    (``~/.cache/groupnet-hw/sim``)."""
    if worker_id == "master":
        root = tmp_path_factory.mktemp("rtl_cache")
    else:
        root = tmp_path_factory.getbasetemp().parent / "rtl_cache"
        root.mkdir(exist_ok=True)
    old = os.environ.get("GROUPNET_HW_RTL_CACHE")
    os.environ["GROUPNET_HW_RTL_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("GROUPNET_HW_RTL_CACHE", None)
    else:
        os.environ["GROUPNET_HW_RTL_CACHE"] = old


#: The small network that the build-directory tests (verify OUT, latency, the flow) share.
ARTIFACT_ARCH = dict(image_size=8, stem_channels=3, stages=[[3, 1, 1], [5, 1, 2]], bases=2,
                     dilations=[[1, 2], [1, 1]])


@pytest.fixture(scope="session")
def artifact_builds(tmp_path_factory):
    """``ARTIFACT_ARCH`` (seed 11) saved as ``model.pt`` and built by the flow twice, the
    default folding into ``out`` and ``target_cycles=1024`` into ``out1024``; the
    directory is shared read-only by the tests that verify build directories."""
    from groupnet_hw.flow import BuildConfig, build
    from groupnet_hw.models.checkpoint import save_checkpoint
    root = tmp_path_factory.mktemp("artifact")
    ckpt = root / "model.pt"
    save_checkpoint(ckpt, random_model(11, **ARTIFACT_ARCH))
    for name, config in (("out", BuildConfig()), ("out1024", BuildConfig(target_cycles=1024))):
        build(ckpt, config, out_dir=root / name)
    return root


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory):
    """A K=5 digits model trained briefly (the accuracy bar is tested in the slow tier)."""
    from groupnet_hw.models.checkpoint import save_checkpoint
    from groupnet_hw.models.train import TrainConfig, train_digits
    torch.set_num_threads(2)
    model, metrics = train_digits(GroupNetConfig(), TrainConfig(epochs=6, seed=0))
    path = tmp_path_factory.mktemp("ckpt") / "digits.pt"
    save_checkpoint(path, model, metrics=metrics)
    return path, model.eval(), metrics


def verify_on_verilator(model, sched, images, tmp_path, stalled):
    """Build ``sched``'s accelerator with Verilator and check it bit-exact on ``images``
    at the predicted cycles per frame, then on the first ``stalled`` of them under random
    input gaps and output stalls."""
    from amaranth.back import verilog

    from groupnet_hw.hw.accelerator import Accelerator
    from groupnet_hw.sim.verify import RTLDesign, port_widths, verify
    acc = Accelerator(sched)
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(acc, name="top"))
    design = RTLDesign(path, "top", *port_widths(acc))
    result = verify(model, sched, images, simulator="verilator", design=design)
    assert result.exact == len(images), result.first_mismatch
    assert result.cycles_per_frame_measured == sched.frame_cycles
    stalls = verify(model, sched, images[:stalled], simulator="verilator", design=design,
                    stall=0.3, seed=1)
    assert stalls.exact == stalled, stalls.first_mismatch
