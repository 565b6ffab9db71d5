"""Hostile checkpoints: every one is refused fast, in one line, before it costs memory.

Each case starts from a small valid checkpoint and breaks one thing: a declared
architecture far larger than its weights, quant settings outside their meaning,
values of the wrong type, extreme or invalid weights, non-JSON metadata, and
archives that are not what torch.save writes (zip bombs, legacy pickles, huge
files). `groupnet-hw build` must exit 2 with a single `error:` line naming the
field, write nothing, and (in one real process) stay within 5 s and 1 GB per case.
"""

import json
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.models.checkpoint import (MAX_FILE_BYTES, CheckpointError, load_checkpoint,
                                           save_checkpoint)
from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig
from groupnet_hw.models.quantize import (QUANT_LIMITS, QuantConfig, quantize_affine,
                                         quantize_scalar, quantize_weights_pow2)
from conftest import random_model
from peak_memory import TESTS

MAX_SECONDS = 5.0
MAX_RSS_BYTES = 1024 ** 3


# -- building the hostile files ----------------------------------------------

def _edit(edit):
    """A payload mutation as a case builder: load the valid payload, edit, save."""
    def build(valid, path):
        payload = torch.load(valid, weights_only=True)
        edit(payload)
        torch.save(payload, path)
    return build


def _set(section, **values):
    return _edit(lambda p: p[section].update(values))


def _tensor(name, fn):
    def edit(payload):
        fn(payload["state_dict"][name])
    return _edit(edit)


def _extreme_bn(payload):
    # each value within the 1e6 bound, together a post-op offset B of ~2**60
    sd = payload["state_dict"]
    sd["blocks.0.bases.0.layer1.bn.running_var"].zero_()
    sd["blocks.0.bases.0.layer1.bn.weight"].fill_(1e6)
    sd["blocks.0.bases.0.layer1.bn.running_mean"].fill_(1e6)


def _broadcast_views(payload):
    # a large declared architecture whose "weights" are stride-0 views of one number:
    # names and shapes match, but the data is not in the file
    cfg = dict(payload["config"], stem_channels=512, stages=[[512, 1, 1]], bases=1,
               dilations=[[1]])
    payload["config"] = cfg
    with torch.device("meta"):
        ref = GroupNet(GroupNetConfig(**cfg)).state_dict()
    payload["state_dict"] = {k: torch.zeros(1, dtype=v.dtype).reshape([1] * v.dim()).expand(v.shape)
                             if v.dim() else torch.zeros((), dtype=v.dtype) for k, v in ref.items()}


def _deep_metrics(payload):
    deep = 1
    for _ in range(50):
        deep = [deep]
    payload["metrics"] = {"history": deep}


def _compressed(valid, path):
    """All entries deflated, plus a 64 MiB entry of zeros that compresses to ~64 kB."""
    with zipfile.ZipFile(valid) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        prefix = src.namelist()[0].split("/")[0]
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        with dst.open(f"{prefix}/data/bomb", "w") as bomb:
            chunk = bytes(1 << 20)
            for _ in range(64):
                bomb.write(chunk)


def _forged_size(valid, path):
    """Stored entries, but one central-directory record declares 2 GiB for 108 bytes."""
    with zipfile.ZipFile(valid) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        target = next(n for n in src.namelist() if n.endswith("/data/0")).encode()
    raw = bytearray(open(path, "rb").read())
    pos = raw.find(b"PK\x01\x02")
    while pos >= 0:
        name_len = int.from_bytes(raw[pos + 28:pos + 30], "little")
        if bytes(raw[pos + 46:pos + 46 + name_len]) == target:
            raw[pos + 24:pos + 28] = (2 ** 31).to_bytes(4, "little")  # uncompressed size
            break
        pos = raw.find(b"PK\x01\x02", pos + 4)
    else:
        raise AssertionError("central directory entry not found")
    open(path, "wb").write(bytes(raw))


def _storage_size_lie(valid, path):
    """The pickle claims 4 GiB for a storage whose zip record holds 108 bytes."""
    import pickletools
    with zipfile.ZipFile(valid) as src:
        names = src.namelist()
        entries = {n: src.read(n) for n in names}
    pkl = entries[names[0]]
    ops = list(pickletools.genops(pkl))
    # the storage size is the int pushed just before the first persistent id's TUPLE
    i = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
    op, arg, pos = next(o for o in reversed(ops[:i]) if o[0].name.startswith("BININT"))
    width = {"BININT1": 1, "BININT2": 2, "BININT": 4}[op.name]
    entries[names[0]] = pkl[:pos] + b"J" + (2 ** 32 - 1 >> 1).to_bytes(4, "little") + \
        pkl[pos + 1 + width:]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as dst:
        for name in names:
            dst.writestr(name, entries[name])


def _legacy(valid, path):
    torch.save(torch.load(valid, weights_only=True), path, _use_new_zipfile_serialization=False)


def _oversized(valid, path):
    # sparse: costs no disk, but its size is past the limit
    with open(path, "wb") as fp:
        fp.write(open(valid, "rb").read())
        fp.truncate(MAX_FILE_BYTES + 1)


# name -> (builder, text the single error line must contain)
CASES = {
    "huge_channels": (_set("config", stem_channels=300_000,
                           stages=[[300_000, 1, 1], [300_000, 1, 2]]),
                      "config.stem_channels = 300000 is out of range; allowed 1..1024"),
    "huge_block_channels": (_set("config", stages=[[3, 1, 1], [500_000, 1, 2]]),
                            "config.stages[1].channels = 500000 is out of range"),
    "huge_bases": (_set("config", bases=2_000_000),
                   "config.bases = 2000000 is out of range; allowed 1..8"),
    "huge_bases_with_dilations": (_set("config", bases=2_000_000, dilations=[1] * 2_000_000),
                                  "data.pkl' is 4"),
    "huge_image_size": (_set("config", image_size=10 ** 6),
                        "config.image_size = 1000000 is out of range; allowed 3..512"),
    "thousands_of_stages": (_set("config", stages=[[4, 1, 1]] * 5000),
                            "config.stages has 5000 entries"),
    "thousands_of_blocks": (_set("config", stages=[[4, 5000, 1]]),
                            "config.stages[0].blocks = 5000 is out of range"),
    "huge_dilation": (_set("config", dilations=[[1, 9], [1, 1]]), "config.dilations[0][1] = 9"),
    "bad_variant": (_set("config", variant="groupnet2"), "config.variant = 'groupnet2' is not one"),
    "bad_act_bits": (_set("config", act_bits=3), "config.act_bits = 3; allowed 1, 2 or 4"),
    "nan_beta": (_set("config", act_beta=float("nan")), "config.act_beta = nan"),
    "negative_act_frac": (_set("quant", act_frac=-3),
                          "quant.act_frac = -3 is out of range; allowed 0..16"),
    "huge_scale_bits": (_set("quant", scale_bits=1000),
                        "quant.scale_bits = 1000 is out of range; allowed 1..24"),
    "str_bases": (_set("config", bases="2"), "config.bases = '2' has type str"),
    "float_image_size": (_set("config", image_size=8.0), "config.image_size = 8.0 has type float"),
    "bool_in_channels": (_set("config", in_channels=True),
                         "config.in_channels = True has type bool"),
    "float_weight_bits": (_set("quant", weight_bits=8.5), "quant.weight_bits = 8.5 has type float"),
    "dilations_int": (_set("config", dilations=2), "config.dilations = 2; allowed one list"),
    "stages_junk": (_set("config", stages=[["a", {"x": [1]}, 1], 7]), "config.stages[0].channels"),
    "stages_not_triples": (_set("config", stages=[[3, 1]]), "config.stages[0] = [3, 1]"),
    "stages_dict": (_set("config", stages={"x": [[1, 2]]}), "config.stages = {'x': [[1, 2]]}"),
    "tensor_as_bases": (_set("config", bases=torch.tensor(2)), "config.bases = a tensor"),
    "unknown_config_key": (_set("config", evil=1), "config.evil is not a known field"),
    "missing_config_key": (_edit(lambda p: p["config"].pop("num_classes")),
                           "config.num_classes is missing"),
    "unknown_quant_key": (_set("quant", turbo=True), "quant.turbo is not a known field"),
    "config_not_dict": (_edit(lambda p: p.update(config=[1, 2])), "config = [1, 2] has type list"),
    "missing_quant": (_edit(lambda p: p.pop("quant")), "quant is missing"),
    "unknown_top_level": (_edit(lambda p: p.update(extra={})), "unknown top-level entry 'extra'"),
    "nan_weight": (_tensor("fc.weight", lambda t: t.view(-1)[0].fill_(float("nan"))),
                   "fc.weight contains NaN"),
    "huge_weight": (_tensor("stem.0.weight", lambda t: t.view(-1)[0].fill_(1e30)),
                    "stem.0.weight has a value of magnitude 1e+30"),
    "negative_running_var": (_tensor("blocks.1.bases.0.layer2.bn.running_var",
                                     lambda t: t.view(-1)[0].fill_(-0.5)),
                             "blocks.1.bases.0.layer2.bn.running_var has a negative variance"),
    "huge_out_frac": (_tensor("stem.1.out_frac", lambda t: t.fill_(900)),
                      "stem.1.out_frac = 900 is out of range; allowed 0..24"),
    "float16_weight": (_edit(lambda p: p["state_dict"].update(
        {"fc.bias": p["state_dict"]["fc.bias"].half()})), "fc.bias has dtype float16"),
    "overflowing_constant": (_edit(_extreme_bn), "blocks_0_bases_0_layer1_bn.B reaches 2**"),
    "int64_overflow": (_edit(lambda p: (p["state_dict"]["fc.weight"].fill_(1e-30),
                                        p["state_dict"]["fc.bias"].fill_(1.0))),
                       "fixed-point constants cannot be formed: fc: "),
    "broadcast_views": (_edit(_broadcast_views), "tensors must be stored, not broadcast views"),
    "tensor_in_metrics": (_set("metrics", accuracy=torch.tensor(0.9)),
                          "metrics.accuracy is a tensor"),
    "nan_in_metrics": (_set("metrics", loss=float("nan")), "metrics.loss = nan"),
    "huge_int_in_dataset": (_set("dataset", seed=10 ** 400), "dataset.seed is an integer of"),
    "deep_metrics": (_edit(_deep_metrics), "metrics.history[0][0][0][0][0][0][0] is nested deeper"),
    "compressed_zip_bomb": (_compressed, "is compressed"),
    "forged_zip_size": (_forged_size, "declares 2147483648 bytes but stores 108"),
    "storage_size_lie": (_storage_size_lie, "does not match expected size"),
    "legacy_format": (_legacy, "legacy (non-zip) torch.save format is refused"),
    "oversized_file": (_oversized, "a checkpoint may have at most"),
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """name -> path of every hostile checkpoint, and the valid one they derive from."""
    root = tmp_path_factory.mktemp("hostile")
    valid = root / "valid.pt"
    model = random_model(4, image_size=8, stem_channels=3, stages=[[3, 1, 1], [4, 1, 2]], bases=2)
    save_checkpoint(valid, model)
    files = {}
    for name, (build, _) in CASES.items():
        files[name] = root / f"{name}.pt"
        build(valid, files[name])
    return valid, files


def _single_error_line(output):
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_build_refuses_hostile_checkpoint(case, hostile, tmp_path):
    _, files = hostile
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(files[case]), "-o", str(out)])
    line = _single_error_line(result.output)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a handled error, not a crash
    assert line.startswith("error: ") and CASES[case][1] in line, line
    assert "Traceback" not in result.output
    assert not out.exists()


def test_valid_checkpoint_still_loads(hostile):
    valid, _ = hostile
    model, payload = load_checkpoint(valid)
    assert payload["config"]["bases"] == 2 and not model.training


def test_quant_limits_are_inclusive(hostile, tmp_path):
    """Each quant field at either end of its range still gives a usable model; only
    a combination whose constants exceed 2**40 is refused, naming the constant."""
    valid, _ = hostile
    path = tmp_path / "edge.pt"
    for field, (low, high) in QUANT_LIMITS.items():
        for value in (low, high):
            _set("quant", **{field: value})(valid, path)
            model, _ = load_checkpoint(path)
            assert getattr(model.quant, field) == value
    _set("quant", **{field: high for field, (_, high) in QUANT_LIMITS.items()})(valid, path)
    with pytest.raises(CheckpointError, match=r"fixed-point constant stem_1\.B reaches 2\*\*"):
        load_checkpoint(path)


def test_config_error_names_field_directly():
    with pytest.raises(ValueError, match=r"^bases = 0 is out of range; allowed 1\.\.8$"):
        GroupNetConfig(bases=0)
    with pytest.raises(ValueError, match=r"^scale_bits = 1000 is out of range"):
        QuantConfig(scale_bits=1000)
    with pytest.raises(ValueError, match="is missing"):
        QuantConfig.from_dict({"act_frac": 6})


def test_quantize_functions_refuse_extremes_quickly():
    a = torch.tensor([1.0, -2.0])
    for bad in (torch.tensor([float("inf"), 1.0]), torch.tensor([float("nan"), 1.0])):
        with pytest.raises(ValueError, match="NaN or infinite"):
            quantize_affine(bad, a, 0, 6, 11)
    with pytest.raises(ValueError, match="overflows int64"):
        quantize_affine(a, torch.tensor([1e300, 0.0], dtype=torch.float64), 0, 6, 11)
    with pytest.raises(ValueError, match="in_frac"):
        quantize_affine(a, a, 10 ** 9, 6, 11)
    with pytest.raises(ValueError, match="overflows int64"):
        quantize_scalar(torch.tensor([1.0]), 70)
    # subnormal weights: the scale is huge but finite, the integers stay in range
    w = torch.tensor([1e-310, -5e-311], dtype=torch.float64)
    w_q, frac = quantize_weights_pow2(w, 8)
    assert 64 <= w_q[0] <= 127 and w_q[1] < 0 and frac > 1000
    assert quantize_scalar(torch.tensor([3.0]), -900).tolist() == [0]
    # unchanged for ordinary inputs
    A, B, shift = quantize_affine(torch.tensor([0.75, -0.5]), torch.tensor([0.25, 1.0]), 2, 6, 11)
    assert shift == 7 and A.tolist() == [1536, -1024] and B.tolist() == [2048, 8192]


_RUNNER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
from peak_memory import peak_rss_kib   # this process image's own peak, not pytest's
import groupnet_hw.models.checkpoint  # import cost outside the per-case timing
from groupnet_hw.cli import main
for name, path, out in json.loads(sys.argv[1]):
    start = time.perf_counter()
    try:
        main(["build", path, "-o", out], standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"case": name, "seconds": time.perf_counter() - start, "code": code}),
          flush=True)
print(json.dumps({"maxrss_bytes": peak_rss_kib() * 1024}))
"""


def test_all_hostile_files_in_one_real_process(hostile, tmp_path):
    """Time and peak memory of refusing every case, in one process (ru_maxrss is per process)."""
    _, files = hostile
    jobs = [[name, str(path), str(tmp_path / f"out-{name}")] for name, path in files.items()]
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(jobs), TESTS],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    cases, peak = records[:-1], records[-1]["maxrss_bytes"]
    print("\n".join(f"{r['case']:24s} {r['seconds']:.3f} s" for r in cases))
    print(f"peak RSS {peak / 2 ** 20:.0f} MiB")
    assert [r["case"] for r in cases] == list(files)
    assert all(r["code"] == 2 for r in cases), cases
    slow = [r for r in cases if r["seconds"] > MAX_SECONDS]
    assert not slow, slow
    assert peak <= MAX_RSS_BYTES
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == len(cases) and all(e.startswith("error: ") for e in errors), errors
    assert not any((tmp_path / f"out-{name}").exists() for name in files)


def test_console_script_refuses_with_one_line(hostile, tmp_path):
    _, files = hostile
    exe = shutil.which("groupnet-hw")
    cmd = [exe] if exe else [sys.executable, "-m", "groupnet_hw.cli"]
    out = tmp_path / "out"
    proc = subprocess.run(cmd + ["build", str(files["huge_bases"]), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    line = _single_error_line(proc.stderr)
    assert line.startswith("error: ") and "config.bases = 2000000 is out of range" in line
    assert not out.exists()
