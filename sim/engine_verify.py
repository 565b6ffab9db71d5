"""Bit-exact verification of the layer-sequential engine against PyTorch.

Each image is written into a copy of the program's memory image (the input region),
the engine's Verilog runs it on the fast Verilator path with the C++ DRAM model
(:mod:`.engine_rtl`), and the logits the engine wrote are compared with the model's
fixed-point forward; the compiler's integer graph must equal that forward too. On a
mismatch the program is re-run cut after each descriptor (its successor rewritten as
``END``) until the first descriptor whose output tensors in DRAM differ from the
integer graph's is found (:func:`~.engine_model.first_mismatch` names it).

The helpers (:func:`frame_image`, :func:`cut_after`, :func:`descriptor_outputs`,
:func:`read_logits`) are what the engine's tests and benchmarks use too.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .. import engine_registers as regs
from .. import engine_opcodes as eop
from ..compiler.engine.formats import TensorFormat
from ..compiler.engine.frames import frame_runs
from ..compiler.engine.program import DESCRIPTOR, job_table
from ..compiler.execute import execute
from .engine_model import _formats, first_mismatch
from .engine_rtl import run_engine_rtl
from .verify import VerifyResult, first_divergence

__all__ = ["frame_image", "cut_after", "descriptor_outputs", "read_logits", "run_program_rtl",
           "run_frames_rtl", "first_mismatching_descriptor", "verify_engine"]


def _input_format(h):
    return TensorFormat.from_code(h["in_fmt"], h["in_elem"], h["in_c"], h["in_h"], h["in_w"],
                                  h["port_bytes"])


def frame_image(program, frame, image=None, address=None):
    """A copy of ``image`` (default: the program's) with ``frame`` ([C, H, W] uint8)
    packed into the input region (or the one at ``address``: a slot of frames in
    flight)."""
    h = program.header
    image = bytearray(program.image if image is None else image)
    fmt = _input_format(h)
    lo = (h["in_addr"] if address is None else address) - h["base"]
    image[lo:lo + fmt.nbytes] = fmt.pack(torch.as_tensor(frame).to(torch.int64).numpy()).tobytes()
    return image


def cut_after(program, image, i):
    """``image`` with descriptor ``i + 1`` rewritten as ``END``: a run stops after ``i``."""
    h = program.header
    at = h["desc_addr"] - h["base"] + (i + 1) * DESCRIPTOR.itemsize
    image = bytearray(image)
    image[at:at + DESCRIPTOR.itemsize] = eop.end_descriptor(i + 1)
    return image


def descriptor_outputs(program, image, i):
    """Descriptor ``i``'s output tensors as they are in ``image`` ([1, C, H, W] each)."""
    h, d = program.header, program.descriptors[i]
    _, _, fmt = _formats(d, h)
    outs = []
    for e in job_table(image, h["base"], d, d["jobs"]):
        if e["out_addr"]:
            a = e["out_addr"] - h["base"]
            raw = np.frombuffer(bytes(image[a:a + fmt.nbytes]), dtype=np.uint8)
            outs.append(torch.from_numpy(fmt.unpack(raw)).unsqueeze(0))
    return outs


def read_logits(program, image):
    """The logits the program wrote into ``image`` (a 1-D int64 tensor)."""
    h = program.header
    fmt = TensorFormat.from_code(h["out_fmt"], h["out_elem"], h["classes"], 1, 1,
                                 h["port_bytes"])
    a = h["out_addr"] - h["base"]
    raw = np.frombuffer(bytes(image[a:a + fmt.nbytes]), dtype=np.uint8)
    return torch.from_numpy(fmt.unpack(raw)).reshape(-1)


def run_program_rtl(rtl, program, image, address=None, **kw):
    """Run ``image`` (a program image with its frame) on the engine ``rtl``
    (:func:`~.engine_rtl.build_engine_rtl`), the window the image's extent, from the
    one-frame program (or the program at ``address``)."""
    h = program.header
    kw.setdefault("max_cycles", 2_000_000_000)
    return run_engine_rtl(rtl, image, window=(h["base"], h["base"] + len(image)),
                          program_address=h["desc_addr"] if address is None else address,
                          base=h["base"], **kw)


def _finished(run, what):
    """``run``, which must have ended with DONE: else :class:`EngineRunError` naming
    ``what`` ran."""
    if not run.status & 2 or run.status & 4:
        raise EngineRunError(f"{what}: the engine stopped with STATUS {run.status:#x} "
                             f"({regs.decode_error(run.error_code)})")
    return run


def run_frames_rtl(rtl, program, frames, progress=None, **kw):
    """Run ``frames`` ([N, C, H, W] uint8) in flight on the engine ``rtl``, START after
    START as a host does (:func:`~groupnet_hw.compiler.engine.frames.frame_runs`: the
    next frame's stem detached beside each frame's rest), the image carried from run to
    run. Returns ``(logits, runs)``: each frame's logits (1-D int64) and every run
    (:class:`~.engine_rtl.EngineRTLRun`; the first computes frame 0's stem alone).
    ``progress(text)`` is called before each run.

    Raises
    ------
    EngineRunError
        A run stopped with an error status instead of DONE.
    """
    image = program.image
    logits, runs = [], []
    for address, frame, slot, done in frame_runs(program.header, len(frames)):
        if progress:
            progress(f"frame {0 if done is None else done + 1}/{len(frames)} on the engine")
        if frame is not None:
            image = frame_image(program, frames[frame], image, slot)
        run = _finished(run_program_rtl(rtl, program, image, address, **kw),
                        f"run {len(runs)} of frames in flight")
        image = run.image_after
        runs.append(run)
        if done is not None:
            logits.append(read_logits(program, image))
    return logits, runs


def first_mismatching_descriptor(rtl, program, image, values, **kw):
    """The first descriptor whose outputs, on the RTL, differ from the integer graph's
    ``values`` (of this one frame); ``None`` if all are equal. Runs the program cut
    after each descriptor."""
    got = []
    for i in range(len(program.descriptors)):
        run = run_program_rtl(rtl, program, cut_after(program, image, i), **kw)
        got.append(descriptor_outputs(program, run.image_after, i))
    return first_mismatch(program, got, values)


def verify_engine(model, graph, program, rtl, images, *, latency, bytes_per_cycle,
                  stall=0.0, seed=0, predicted_cycles=None, progress=None):
    """Check the engine's RTL against the model's fixed-point forward, image by image.

    Parameters
    ----------
    model : GroupNet
        Its ``forward_quantized`` is the reference.
    graph : Graph
        The integer graph ``program`` was compiled from.
    program : EngineProgram
    rtl : EngineRTLBuild
        The engine's Verilog on the fast path.
    images : uint8 tensor [N, H, W] or [N, C, H, W]
    latency, bytes_per_cycle : int, float
        The DRAM model's read latency and bandwidth (engine cycles).
    stall : float
        Probability of random wait states and read-data gaps on both ports.
    seed : int
    predicted_cycles : int, optional
        The cycle model's cycles per frame under the same DRAM, reported beside the
        measured mean (stall-free runs only): with frames in flight (the program's
        header names their programs), the model's ``frame_interval``, for the images
        run as a stream and each run after the first measured.
    progress : callable, optional
        ``progress(text)``.

    Returns
    -------
    VerifyResult
        ``first_mismatch`` names the image, the logit and the first descriptor whose
        output tensor in DRAM differs (the one-frame program, cut after each
        descriptor, on that image).
    """
    images = torch.as_tensor(images).to(torch.uint8)
    frames = images if images.dim() == 4 else images.unsqueeze(1)
    expected = model.forward_quantized(images)
    values = execute(graph, images)
    graph_ok = torch.equal(values[graph.output], expected.logits)
    divergence = None if graph_ok else (first_divergence(graph, model, images, values)
                                        or "only at the logits (head)")
    kw = dict(latency=latency, bytes_per_cycle=bytes_per_cycle, stall=stall)
    exact, first, first_idx, cycles, sim_s = 0, None, None, [], 0.0
    t0 = time.perf_counter()
    in_flight = bool(program.header["next_addr_a"])
    if in_flight:
        # a stream: a frame's cycles are a run's after the first (its stem alone)
        stream, runs = run_frames_rtl(rtl, program, frames, progress, seed=seed, **kw)
        sim_s = sum(r.sim_seconds for r in runs)
        cycles = [r.cycles for r in runs[1:]]
    for n in range(len(frames)):
        if in_flight:
            logits = stream[n]
        else:
            if progress:
                progress(f"image {n + 1}/{len(frames)} on the engine")
            run = _finished(run_program_rtl(rtl, program, frame_image(program, frames[n]),
                                            seed=seed + n, **kw), f"image {n}")
            sim_s += run.sim_seconds
            cycles.append(run.cycles)
            logits = read_logits(program, run.image_after)
        want = expected.logits[n].reshape(-1)
        if torch.equal(logits, want):
            exact += 1
            continue
        if first is None:
            c = int((logits != want).nonzero()[0])
            one = {k: (v[n:n + 1] if torch.is_tensor(v) else [t[n:n + 1] for t in v])
                   for k, v in values.items()}
            where = first_mismatching_descriptor(rtl, program, frame_image(program, frames[n]),
                                                 one, seed=seed + n, **kw)
            first = (f"image {n}, logit {c}: RTL {int(logits[c])}, PyTorch {int(want[c])}; "
                     f"first differing tensor in DRAM: {where or 'none before the logits'}")
            first_idx = n
    wall = time.perf_counter() - t0
    with torch.no_grad():
        agreement = float((model(images).argmax(dim=1) == expected.classes).float().mean())
    notes = [] if not stall else ["cycles per frame are measured only in stall-free runs"]
    if in_flight:
        notes.append("the images ran as a stream, frames in flight: a frame's cycles are a "
                     "START's after the first, which computes the first frame's stem alone")
    return VerifyResult(
        simulator="verilator", images=len(frames), exact=exact, first_mismatch=first,
        graph_equals_model=graph_ok, first_divergence=divergence,
        cycles_per_frame_measured=(sum(cycles) / len(cycles)) if cycles and not stall else None,
        cycles_per_frame_predicted=predicted_cycles, stall=stall, seed=seed,
        sim_seconds=round(sim_s, 3), build_seconds=round(rtl.build_seconds, 3),
        images_per_second=round(len(frames) / wall, 2) if wall else 0.0,
        float_quantized_agreement=agreement, mismatch_image=first_idx, notes=notes)


class EngineRunError(RuntimeError):
    """The engine stopped with an error status instead of DONE."""
