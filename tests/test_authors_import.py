"""Import of the authors' checkpoints (`groupnet-hw import`)."""

import pytest
import torch

from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.models.authors import ImportError_, import_authors_checkpoint
from authors_layout import authors_forward, authors_state_dict, write_authors_file

SMALL = dict(image_size=32, stem_channels=8,
             stages=[[8, 2, 1], [16, 2, 2], [32, 2, 2], [64, 2, 2]], num_classes=10)


def _images(n=6):
    return torch.randint(0, 256, (n, 3, 32, 32), generator=torch.Generator().manual_seed(3),
                         dtype=torch.uint8)


@pytest.mark.parametrize("learned,defect", [(True, "auto"), (False, "auto"), (False, "fix")])
def test_imported_float_forward_equals_the_authors_forward(tmp_path, learned, defect):
    sd = authors_state_dict(0, bases=2, learned_scales=learned, stem_bias=not learned)
    path = tmp_path / "model_best.pth.tar"
    write_authors_file(path, sd)
    model, report = import_authors_checkpoint(path, "resnet18", inplace_defect=defect,
                                              normalization="none", config_overrides=SMALL)
    assert report.bases == 2 and report.learned_scales == learned
    text = "\n".join(report.lines())
    for topic in ("sign(0)", "alpha", "in-place defect", "dilation rates", "input normalization"):
        assert topic in text
    pixels = _images()
    x = pixels.float() / 256                      # what our model computes from the pixels
    ref_sd = dict(sd)
    if not learned and defect == "fix":
        # the intended eq. 7: the reference without the defect = with learned scales 1/K
        for s, count in enumerate((2, 2, 2, 2), 1):
            for b in range(count):
                for i in range(2):
                    ref_sd[f"layer{s}.{b}.scales.{i}"] = torch.tensor([0.5])
    want = authors_forward(ref_sd, x, 2, learned_scales=learned or defect == "fix")
    with torch.no_grad():
        got = model(pixels)
    # float32 against float32 through ~40 layers with identical weights: equal up to
    # summation order; no pre-activation is exactly 0 on these inputs (sign(0) is the one
    # documented semantic difference), so the predictions and logits agree to rounding.
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3)
    assert torch.equal(got.argmax(1), want.argmax(1))


def test_imported_resnet_runs_exactly_in_the_integer_graph(tmp_path):
    sd = authors_state_dict(1, bases=2, learned_scales=False)
    path = tmp_path / "checkpoint.pth.tar"
    write_authors_file(path, sd)
    model, report = import_authors_checkpoint(path, "resnet18", config_overrides=SMALL)
    assert any("EMULATED" in line for line in report.lines())
    graph = compile_model(model)
    assert "gate" in graph.ops()      # the defect's gate input is not its own base: unfused
    pixels = _images()
    assert torch.equal(execute(graph, pixels)[graph.output], model.forward_quantized(pixels).logits)


def _bad(tmp_path, edit):
    sd = authors_state_dict(2, bases=2)
    edit(sd)
    path = tmp_path / "bad.pth.tar"
    write_authors_file(path, sd)
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda sd: sd.pop("layer2.0.downsample.conv.weight"), "is missing"),
    (lambda sd: sd.update(extra=torch.zeros(1)), "unexpected key 'extra'"),
    (lambda sd: sd.update({"fc.bias": torch.zeros(3)}), "fc.bias has shape [3]"),
    (lambda sd: sd["layer1.0.conv1.0.weight"].view(-1)[0].fill_(float("nan")), "NaN"),
    (lambda sd: [sd.pop(k) for k in list(sd) if ".conv1." in k and k.startswith("layer1.0")],
     "found 0 bases"),
])
def test_bad_files_are_refused_with_one_line(tmp_path, edit, message):
    with pytest.raises(ImportError_, match=message.replace("[", r"\[").replace("]", r"\]")) as exc:
        import_authors_checkpoint(_bad(tmp_path, edit), "resnet18", config_overrides=SMALL)
    assert "\n" not in str(exc.value)


def test_pickled_objects_and_foreign_files_are_refused(tmp_path):
    evil = tmp_path / "evil.pth"
    torch.save({"state_dict": {"x": object()}}, evil)
    with pytest.raises(ImportError_, match="pickled Python objects"):
        import_authors_checkpoint(evil, "resnet18", config_overrides=SMALL)
    foreign = tmp_path / "foreign.pth"
    torch.save({"state_dict": {"weight": torch.zeros(2)}}, foreign)
    with pytest.raises(ImportError_, match="found 0 bases"):
        import_authors_checkpoint(foreign, "resnet18")


def test_full_size_resnet18_imports_and_runs(tmp_path):
    sd = authors_state_dict(4, bases=5, stem=64, widths=(64, 128, 256, 512), classes=1000)
    path = tmp_path / "r18.pth.tar"
    write_authors_file(path, sd)
    model, report = import_authors_checkpoint(path, "resnet18")
    assert model.config.image_size == 224 and report.bases == 5
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 224, 224, dtype=torch.uint8)).shape == (1, 1000)


def test_import_and_info_commands(tmp_path):
    from click.testing import CliRunner
    from groupnet_hw.cli import main
    sd = authors_state_dict(5, bases=1, stem=64, widths=(64, 128, 256, 512), classes=1000,
                            learned_scales=False)
    src, out = tmp_path / "model_best.pth.tar", tmp_path / "r18.pt"
    write_authors_file(src, sd)
    runner = CliRunner()
    r = runner.invoke(main, ["import", str(src), "--arch", "resnet18", "-o", str(out),
                             "--no-calibrate"])
    assert r.exit_code == 0, r.output
    assert "in-place defect: EMULATED" in r.output and out.exists()
    r = runner.invoke(main, ["info", str(out)])
    assert r.exit_code == 0 and "eq. 4 speed-up" in r.output
    # the dataflow design does not fit the DE10-Nano: auto takes the engine, whose core
    # runs the emulated defect's GATE descriptors and streams the 1000-class head's
    # 512 KB of weights through its 256 KiB scratchpad: the build's check accepts the
    # full-size network (stopped after the schedule to stay cheap: the Verilog of the
    # engine does not depend on the network)
    r = runner.invoke(main, ["build", str(out), "-o", str(tmp_path / "o"),
                             "--stop-after", "schedule"])
    assert r.exit_code == 0, r.output
    assert "layer-sequential engine for de10nano" in r.output
    rows = r.output.splitlines()
    assert any(" GATE " in line for line in rows)
    assert any(" HEAD " in line and line.endswith("fc  (weights streamed)") for line in rows)
    r = runner.invoke(main, ["import", str(src), "--arch", "resnet34", "-o", str(tmp_path / "x.pt")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and len(r.output.splitlines()) == 1
    assert not (tmp_path / "x.pt").exists()


def test_a_commands_measured_peak_is_its_own_not_its_parents():
    """The done-when's memory figure (``run_cli_measured``): a command run by a process
    holding 600 MB reports its own peak, not the parent's size at the fork."""
    from authors_layout import run_cli_measured
    held = torch.ones(600 * 1024 * 1024 // 4)      # touched pages: resident in this process
    _, peak_mib = run_cli_measured("--help")
    assert peak_mib < 500, peak_mib
    del held
