"""Bit-exact verification of the accelerator against PyTorch.

The same uint8 images go through the model's quantized eval (PyTorch), the
compiler's integer graph, and the RTL (Amaranth simulator, or cocotb on the
generated Verilog with Verilator or Icarus). Every logit and every class must be
equal; the first mismatching image and output is reported. Frames are streamed
back to back with the output always ready, so the interval between result beats
is the measured cycles per frame.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from ..compiler.execute import execute
from ..hw.accelerator import Accelerator

__all__ = ["VerifyResult", "run_hardware", "verify", "SIMULATORS"]

SIMULATORS = ("amaranth", "verilator", "icarus")


@dataclass
class VerifyResult:
    simulator: str
    images: int
    exact: int
    first_mismatch: str | None
    graph_equals_model: bool
    cycles_per_frame_measured: float | None
    cycles_per_frame_predicted: int
    sim_seconds: float
    build_seconds: float
    images_per_second: float
    float_quantized_agreement: float | None = None
    notes: list = field(default_factory=list)

    @property
    def ok(self):
        return self.exact == self.images and self.graph_equals_model

    def to_dict(self):
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _decode(word, n_classes, logit_width):
    mask = (1 << logit_width) - 1
    logits = []
    for c in range(n_classes):
        v = (word >> (c * logit_width)) & mask
        logits.append(v - (1 << logit_width) if v >> (logit_width - 1) else v)
    return logits, word >> (n_classes * logit_width)


def run_hardware(acc: Accelerator, images, simulator="amaranth", build_dir=None, verilog=None):
    """Stream ``images`` (uint8 [N, H, W]) through the RTL; returns
    (logits list, classes list, output cycle stamps, build seconds, run seconds)."""
    beats = [int(p) for p in images.reshape(-1).tolist()]
    n = int(images.shape[0])
    if simulator == "amaranth":
        from .streams import run_streams
        t0 = time.perf_counter()
        run = run_streams(acc, {"i": beats}, {"o": n}, max_cycles=200 * len(beats) + 10_000)
        wall = time.perf_counter() - t0
        outs = run.outputs["o"]
        return ([o["logits"] for o in outs], [o["cls"] for o in outs], run.out_cycles["o"],
                0.0, wall)
    from .cocotb_runner import run_stream_rtl
    if verilog is None:
        raise ValueError("an RTL simulator needs the generated Verilog")
    width = acc.n_classes * acc.logit_width + max(1, (acc.n_classes - 1).bit_length())
    rtl = run_stream_rtl(verilog, "top", beats, n, width, simulator=simulator,
                         build_dir=build_dir)
    logits, classes = [], []
    for word in rtl.outputs:
        lg, cls = _decode(word, acc.n_classes, acc.logit_width)
        logits.append(lg)
        classes.append(cls)
    return logits, classes, rtl.out_cycles, rtl.build_seconds, rtl.wall_seconds


def verify(model, sched, images, simulator="amaranth", build_dir=None, verilog_path=None):
    """Check the RTL against the model's quantized eval, image by image."""
    if simulator not in SIMULATORS:
        raise ValueError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)}")
    images = torch.as_tensor(images).to(torch.uint8)
    expected = model.forward_quantized(images)
    graph_values = execute(sched.graph, images)
    graph_ok = (torch.equal(graph_values["head"], expected.logits)
                and torch.equal(graph_values["classes"], expected.classes))
    acc = Accelerator(sched)
    if simulator != "amaranth":
        acc._MustUse__silence = True  # only its port widths are used; the RTL is the Verilog
    logits, classes, stamps, build_s, run_s = run_hardware(
        acc, images, simulator, build_dir=build_dir, verilog=verilog_path)
    exact, first = 0, None
    for idx in range(len(images)):
        want_l = expected.logits[idx].tolist()
        want_c = int(expected.classes[idx])
        if logits[idx] == want_l and classes[idx] == want_c:
            exact += 1
        elif first is None:
            diff = [c for c in range(len(want_l)) if logits[idx][c] != want_l[c]]
            what = (f"logit {diff[0]}: RTL {logits[idx][diff[0]]}, PyTorch {want_l[diff[0]]}"
                    if diff else f"class: RTL {classes[idx]}, PyTorch {want_c}")
            first = f"image {idx}, {what}"
    measured = None
    if len(stamps) >= 2:
        measured = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    with torch.no_grad():
        float_pred = model(images).argmax(dim=1)
    agreement = float((float_pred == expected.classes).float().mean())
    return VerifyResult(simulator=simulator, images=len(images), exact=exact,
                        first_mismatch=first, graph_equals_model=graph_ok,
                        cycles_per_frame_measured=measured,
                        cycles_per_frame_predicted=sched.frame_cycles,
                        sim_seconds=round(run_s, 3), build_seconds=round(build_s, 3),
                        images_per_second=round(len(images) / run_s, 2) if run_s else 0.0,
                        float_quantized_agreement=agreement)
