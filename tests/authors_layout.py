"""Test helper: files in the layout the Group-Net authors' code writes, and that code's
forward re-implemented from the documented facts (never copied), for the importer tests.

Geometry can be smaller than ImageNet's (channels, image size) so tests stay fast; the
state-dict names are exactly the documented ones.
"""

import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from peak_memory import TESTS

BN = ("weight", "bias", "running_mean", "running_var")


def _bn_params(gen, c, sd, prefix):
    sd[f"{prefix}.weight"] = torch.rand(c, generator=gen) * 1.5 + 0.25
    sd[f"{prefix}.bias"] = torch.randn(c, generator=gen) * 0.3
    sd[f"{prefix}.running_mean"] = torch.randn(c, generator=gen) * 0.5
    sd[f"{prefix}.running_var"] = torch.rand(c, generator=gen) + 0.5
    sd[f"{prefix}.num_batches_tracked"] = torch.tensor(100)


def authors_state_dict(seed, bases=2, stem=8, widths=(8, 16, 32, 64), blocks=(2, 2, 2, 2),
                       classes=10, learned_scales=True, stem_bias=False):
    """A random state dict in the authors' layout (without the ``module.`` prefix)."""
    gen = torch.Generator().manual_seed(seed)
    sd = {"conv1.weight": torch.randn(stem, 3, 7, 7, generator=gen) * 0.1}
    if stem_bias:
        sd["conv1.bias"] = torch.randn(stem, generator=gen) * 0.1
    _bn_params(gen, stem, sd, "bn1")
    prev = stem
    for s, (ch, count) in enumerate(zip(widths, blocks), 1):
        for b in range(count):
            p = f"layer{s}.{b}"
            c_in = prev if b == 0 else ch
            for i in range(bases):
                sd[f"{p}.conv1.{i}.weight"] = torch.randn(ch, c_in, 3, 3, generator=gen)
                sd[f"{p}.conv2.{i}.weight"] = torch.randn(ch, ch, 3, 3, generator=gen)
                _bn_params(gen, ch, sd, f"{p}.bn1.{i}")
                _bn_params(gen, ch, sd, f"{p}.bn2.{i}")
                if learned_scales:
                    sd[f"{p}.scales.{i}"] = torch.rand(1, generator=gen) + 0.2
            if s > 1 and b == 0:
                sd[f"{p}.downsample.conv.weight"] = torch.randn(ch, c_in, 1, 1, generator=gen)
                _bn_params(gen, ch, sd, f"{p}.downsample.batch_norm")
            if not (s == 1 and b == 0):
                sd[f"{p}.block_gate"] = torch.randn(1, generator=gen)
        prev = ch
    sd["fc.weight"] = torch.randn(classes, prev, generator=gen) * 0.1
    sd["fc.bias"] = torch.randn(classes, generator=gen) * 0.1
    return sd


def write_authors_file(path, state_dict):
    """torch.save the way the authors' training script does (DataParallel prefix)."""
    torch.save({"epoch": 90, "state_dict": {f"module.{k}": v for k, v in state_dict.items()},
                "optimizer": {"state": {}, "param_groups": [{"lr": 0.001, "params": [0]}]},
                "best_top1": 55.5, "learning_rate": 0.001}, path)


#: ResNet-18 and ResNet-34 blocks per stage
BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}


def full_size_authors_file(directory, arch="resnet18", *, bases, seed=7):
    """A file in the authors' layout at the paper's geometry (stem 64, widths 64-512,
    1000 classes, learned scales) written into ``directory``: its path."""
    from pathlib import Path
    src = Path(directory) / f"{arch}_k{bases}.pth.tar"
    write_authors_file(src, authors_state_dict(seed, bases=bases, stem=64,
                                               widths=(64, 128, 256, 512),
                                               blocks=BLOCKS[arch], classes=1000))
    return src


def narrow_authors_model(directory, arch="resnet18", *, bases, image_size, blocks=None,
                         learned_scales=True, seed=7, widths=(8, 16, 32, 64)):
    """A narrow file in the authors' layout (``arch``'s depth, ``widths``, 10 classes)
    written into ``directory`` and imported at ``image_size``: ``(model, report)``."""
    from pathlib import Path
    from groupnet_hw.models.authors import import_authors_checkpoint
    blocks = blocks or BLOCKS[arch]
    stages = [[w, n, 1 if i == 0 else 2] for i, (w, n) in enumerate(zip(widths, blocks))]
    src = Path(directory) / "model_best.pth.tar"
    write_authors_file(src, authors_state_dict(seed, bases=bases, widths=widths, blocks=blocks,
                                               learned_scales=learned_scales))
    return import_authors_checkpoint(src, arch, config_overrides=dict(
        image_size=image_size, stem_channels=8, stages=stages, num_classes=10))


def _bn(x, sd, p):
    return F.batch_norm(x, sd[f"{p}.running_mean"], sd[f"{p}.running_var"], sd[f"{p}.weight"],
                        sd[f"{p}.bias"], False, 0.0, 1e-5)


def _bconv(x, w, stride, padding):
    a = torch.sign(x)                                   # torch.sign: 0 stays 0
    a = F.pad(a, (padding,) * 4, value=1.0)             # +1 padding after the sign
    wb = torch.sign(w) * w.abs().mean()                 # one alpha per tensor
    return F.conv2d(a, wb, stride=stride)


def authors_forward(sd, x, bases, blocks=(2, 2, 2, 2), learned_scales=True):
    """The documented forward: Sign -> Conv -> ReLU -> BN with a shortcut around each
    binary conv, shared downsample, one gate theta per block, the in-place defect of the
    fixed-mean variant."""
    x = F.conv2d(x, sd["conv1.weight"], sd.get("conv1.bias"), stride=2, padding=3)
    x = _bn(F.max_pool2d(x, 3, 2, 1), sd, "bn1")
    outs, agg = [x] * bases, None
    for s, count in enumerate(blocks, 1):
        for b in range(count):
            p = f"layer{s}.{b}"
            xs = outs
            if f"{p}.block_gate" in sd:
                c = torch.sigmoid(sd[f"{p}.block_gate"])
                xs = [c * o + (1 - c) * agg for o in outs]
            stride = 2 if (s > 1 and b == 0) else 1
            new = []
            for i in range(bases):
                xi = xs[i]
                r = xi
                if f"{p}.downsample.conv.weight" in sd:
                    r = _bn(_bconv(xi, sd[f"{p}.downsample.conv.weight"], stride, 0), sd,
                            f"{p}.downsample.batch_norm")
                o1 = _bn(F.relu(_bconv(xi, sd[f"{p}.conv1.{i}.weight"], stride, 1)), sd,
                         f"{p}.bn1.{i}") + r
                o2 = _bn(F.relu(_bconv(o1, sd[f"{p}.conv2.{i}.weight"], 1, 1)), sd,
                         f"{p}.bn2.{i}") + o1
                new.append(o2)
            if learned_scales:
                agg = sum(sd[f"{p}.scales.{i}"] * new[i] for i in range(bases))
            else:
                total = new[0]
                for o in new[1:]:
                    total += o                          # in place: base 0 becomes the sum
                agg = total / bases
            outs = new
    return F.linear(agg.mean(dim=(2, 3)), sd["fc.weight"], sd["fc.bias"])


#: runs ``groupnet-hw`` and reports the process's own peak memory (KiB; not its
#: parent's size at the fork: :mod:`peak_memory`)
_MEASURED_CLI = ("import sys\n"
                 f"sys.path.insert(0, {TESTS!r})\n"
                 "from peak_memory import peak_rss_kib\n"
                 "from groupnet_hw.cli import main\n"
                 "try:\n"
                 "    main(sys.argv[1:], standalone_mode=False)\n"
                 "finally:\n"
                 "    print('peak_kib', peak_rss_kib(), file=sys.stderr)\n")


def run_cli_measured(*args):
    """``groupnet-hw ARGS`` in a fresh Python process, as a user runs it: ``(seconds,
    peak MiB)``, the peak being that process's own (a test session's or a benchmark's
    earlier work does not count). Raises ``RuntimeError`` with its output if it fails."""
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", _MEASURED_CLI, *map(str, args)],
                         capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if run.returncode:
        raise RuntimeError(f"groupnet-hw {' '.join(map(str, args))}: {run.stdout}{run.stderr}")
    peak = [line for line in run.stderr.splitlines() if line.startswith("peak_kib ")][-1]
    return seconds, int(peak.split()[1]) / 1024


def import_and_build_cold(src, arch, directory):
    """``groupnet-hw import`` of the authors' file ``src`` into ``directory/r.pt``, then
    ``groupnet-hw build --engine sequential`` into ``directory/out``, each measured by
    :func:`run_cli_measured` against an empty RTL cache (the build converts the engine's
    Verilog, as a user's first build does): ``(import s, build s, peak MiB)``."""
    from unittest import mock
    with tempfile.TemporaryDirectory() as cache, \
            mock.patch.dict(os.environ, GROUPNET_HW_RTL_CACHE=cache):
        import_s, import_mib = run_cli_measured("import", src, "--arch", arch, "-o",
                                                directory / "r.pt")
        build_s, build_mib = run_cli_measured("build", directory / "r.pt", "--engine",
                                              "sequential", "-o", directory / "out")
    return import_s, build_s, max(import_mib, build_mib)
