"""The layer-sequential engine's reference model: it executes a program on a memory image.

It is the golden model the engine's RTL is compared with, descriptor by descriptor:
it decodes each descriptor from the program bytes, reads the job table, the parameter
blocks and the input rows of each tile from the image by address and format, computes,
and writes each tile's output rows back by address and format. Only the arithmetic of
a fused node is delegated to its op's ``execute`` (the integer executor's); everything
the hardware must get right -- the program, the formats, the parameter packing, the
allocation, the tiling and its halo rows -- is taken from the bytes alone.

Any address outside the image (a corrupted descriptor or table) raises
:class:`~groupnet_hw.compiler.engine.program.ProgramError` naming the descriptor, as
the engine stops with an error status; so does a binary convolution whose unit geometry
(``compiler/engine/gather.py``, ``unit_geometry``) is not its other fields'.
"""

from __future__ import annotations

import numpy as np
import torch

from ..compiler.engine.formats import TensorFormat
from ..compiler.engine.gather import unit_geometry
from ..compiler.engine.params import (level_block_bytes, sections, tap_aligned_weights,
                                      unpack_binary_weights, unpack_bitvec, unpack_consts,
                                      unpack_int_weights)
from ..compiler.engine.program import (DESCRIPTOR, DESCRIPTOR_MAGIC, END_OPCODE, FLAG_BITS,
                                       HEADER, JOB, MAGIC, OPCODE_CODES, STAGE_BITS,
                                       VERSION, ProgramError, decode, table_entries)
from ..engine_opcodes import WAIT
from ..compiler.graph import Node
from ..compiler.ops import op_of

__all__ = ["run_program", "run_frames_in_flight", "first_mismatch", "Mismatch",
           "read_program", "read_descriptors"]

_OPCODES = {v: k for k, v in OPCODE_CODES.items()}


class _Memory:
    """The image seen through the DMA window [base, base + len(image))."""

    def __init__(self, image, base):
        self.image, self.base = image, base
        self.where = "the program header"

    def _range(self, addr, n, what):
        lo = addr - self.base
        if addr < self.base or lo + n > len(self.image) or n < 0:
            raise ProgramError(f"{self.where}: {what} [{addr:#x}, {addr + n:#x}) is outside the "
                               f"image [{self.base:#x}, {self.base + len(self.image):#x})")
        return lo

    def read(self, addr, n, what):
        lo = self._range(addr, n, what)
        return np.frombuffer(bytes(self.image[lo:lo + n]), dtype=np.uint8)

    def write(self, addr, data, what):
        data = np.asarray(data, dtype=np.uint8).reshape(-1)
        lo = self._range(addr, data.size, what)
        self.image[lo:lo + data.size] = data.tobytes()

    def read_rows(self, addr, fmt, y0, y1, what):
        """Rows [y0, y1) of a tensor -> [C, y1-y0, W] int64."""
        if y1 <= y0:
            return torch.zeros(fmt.channels, 0, fmt.width, dtype=torch.int64)
        sub = TensorFormat(fmt.kind, fmt.elem_bits, fmt.channels, y1 - y0, fmt.width, fmt.port_bytes)
        buf = self.read(addr + y0 * fmt.row_bytes, sub.nbytes, what)
        return torch.from_numpy(sub.unpack(buf))

    def write_rows(self, addr, fmt, y0, values, what):
        sub = TensorFormat(fmt.kind, fmt.elem_bits, fmt.channels, values.shape[1], fmt.width,
                           fmt.port_bytes)
        try:
            data = sub.pack(values.numpy())
        except ValueError as e:
            raise ProgramError(f"{self.where}: {what}: {e}") from None
        self.write(addr + y0 * fmt.row_bytes, data, what)


def read_program(program):
    """``(header, descriptors)`` decoded from program bytes (or an EngineProgram): the
    compute descriptors up to the ``END`` that every program ends with."""
    raw = program.program_bytes() if hasattr(program, "program_bytes") else bytes(program)
    if len(raw) < HEADER.itemsize:
        raise ProgramError("the program is shorter than its header")
    header = decode(raw[:HEADER.itemsize], HEADER)
    if header["magic"] != MAGIC:
        raise ProgramError(f"bad program magic {header['magic']!r}")
    if header["version"] != VERSION:
        raise ProgramError(f"program format version {header['version']}, this engine reads "
                           f"{VERSION}: build the network again")
    off = header["desc_addr"] - header["base"]
    descs = []
    for i in range(header["n_desc"]):
        chunk = raw[off + i * DESCRIPTOR.itemsize: off + (i + 1) * DESCRIPTOR.itemsize]
        if len(chunk) != DESCRIPTOR.itemsize:
            raise ProgramError(f"descriptor {i} lies beyond the program bytes")
        d = decode(chunk, DESCRIPTOR)
        if d["magic"] != DESCRIPTOR_MAGIC or d["index"] != i:
            raise ProgramError(f"descriptor {i}: bad magic {d['magic']:#x} or index {d['index']}")
        if d["opcode"] == END_OPCODE:
            return header, descs
        if d["opcode"] not in _OPCODES:
            raise ProgramError(f"descriptor {i}: unknown opcode {d['opcode']}")
        descs.append(d)
    raise ProgramError(f"the program's {header['n_desc']} descriptors have no END")


def _fmt(code, elem, c, h, w, port):
    try:
        return TensorFormat.from_code(code, elem, c, h, w, port)
    except ValueError as e:
        raise ProgramError(str(e)) from None


def _formats(d, header):
    port = header["port_bytes"]
    in_f = _fmt(d["in_fmt"], d["in_elem"], d["in_c"], d["in_h"], d["in_w"], port)
    out_f = _fmt(d["out_fmt"], d["out_elem"], d["out_c"], d["out_h"], d["out_w"], port)
    side_f = _fmt(d["side_fmt"], d["side_elem"], d["side_c"], d["out_h"], d["out_w"], port) \
        if d["stages"] & STAGE_BITS["add"] else None
    for name, f in (("in", in_f), ("out", out_f), ("side", side_f)):
        if f is not None and d[f"{name}_pitch"] != f.row_bytes:
            raise ProgramError(f"descriptor {d['index']}: {name}_pitch {d[f'{name}_pitch']} "
                               f"!= {f.row_bytes} of its format")
    return in_f, side_f, out_f


def _node(op, channels, **attrs):
    return Node("engine", op, [], attrs, channels=channels)


class _Params:
    """A job's parameter block, decoded section by section."""

    def __init__(self, d, header, mem, addr):
        self.d, self.header = d, header
        self.secs = sections(d, header)
        self.buf = mem.read(addr, d["param_bytes"], "parameter block") if d["param_bytes"] else None

    def raw(self, name):
        if name not in self.secs:
            raise ProgramError(f"descriptor {self.d['index']}: no {name} section")
        o, n = self.secs[name]
        return self.buf[o:o + n]

    def consts(self, name, count, skip=0):
        cb = self.d["const_bytes"]
        return torch.from_numpy(unpack_consts(self.raw(name)[skip * cb:], count, cb))

    def threshold(self, name, channels, levels):
        return _threshold(self.raw(name), channels, levels, self.d["const_bytes"])


def _threshold(raw, channels, levels, const_bytes):
    """A threshold node from its section's bytes: ``T[C][L]`` constants, then the
    invert bits."""
    T = torch.from_numpy(unpack_consts(raw, channels * levels, const_bytes))
    inv = unpack_bitvec(raw[channels * levels * const_bytes:], channels)
    return _node("threshold", channels, T=T.reshape(channels, levels),
                 invert=torch.from_numpy(inv))


def _core_node(d, header, p, in_c):
    """The descriptor's core op as a node (window padding 0: the model pads tiles)."""
    op = _OPCODES[d["opcode"]]
    win = dict(kernel=d["kernel"], stride=d["stride"], dilation=d["dilation"], padding=0)
    if op == "CONV":
        if d["flags"] & FLAG_BITS["int_weights"]:
            w = unpack_int_weights(p.raw("weights"), d["out_c"], in_c, d["kernel"],
                                   header["stem_pe"], header["stem_simd"], d["weight_bytes"])
            return _node("int_conv", d["out_c"], weight=torch.from_numpy(w), **win)
        if in_c % d["groups"] or d["out_c"] % d["groups"]:
            raise ProgramError(f"descriptor {d['index']}: {d['groups']} groups do not divide "
                               "the channels")
        bits = unpack_binary_weights(p.raw("weights"), d["out_c"], in_c // d["groups"],
                                     d["kernel"], header["pe"], header["simd"], d["groups"],
                                     tap_aligned_weights(header))
        extra = dict(groups=d["groups"]) if d["groups"] > 1 else {}
        return _node("bin_conv", d["out_c"], bits=torch.from_numpy(bits), in_bits=d["act_bits"],
                     **win, **extra)
    if op == "MAXPOOL":
        return _node("maxpool", d["out_c"], kernel=d["kernel"], stride=d["stride"], padding=0)
    if op == "SUBSAMPLE":
        return _node("subsample", d["out_c"], stride=d["stride"])
    if op == "REPEAT":
        return _node("repeat", d["out_c"], times=d["groups"])
    if op == "MIXER":
        k = d["jobs"]
        head = p.consts("mixer", 2)
        gates = p.consts("mixer", k, 2 + k) if d["stages"] & STAGE_BITS["gated"] else None
        return _node("mixer", d["out_c"], lambdas=p.consts("mixer", k, 2),
                     lambda_frac=int(head[0]), gates=gates, gate_frac=int(head[1]))
    if op == "GATE":
        head = p.consts("mixer", 2)
        return _node("gate", d["out_c"], gates=p.consts("mixer", d["jobs"] - 1, 2),
                     gate_frac=int(head[1]))
    return None     # PIXEL: the identity


def _epilogue(d, p, y, side):
    st, c = d["stages"], d["out_c"]
    if st & STAGE_BITS["postop"]:
        head = p.consts("postop", 2)
        pairs = p.consts("postop", 2 * c, 2).reshape(c, 2)      # A[c], B[c] side by side
        node = _node("postop", c, A=pairs[:, 0].contiguous(), B=pairs[:, 1].contiguous(),
                     shift=int(head[0]), pre_relu=bool(int(head[1]) & 1),
                     post_relu=bool(int(head[1]) & 2))
        y = op_of(node).execute(node, [y])
    if st & STAGE_BITS["add"]:
        ins = [side, y] if d["flags"] & FLAG_BITS["side_first"] else [y, side]
        y = op_of(_node("add", c)).execute(_node("add", c), ins)
    if st & STAGE_BITS["relu"]:
        y = y.clamp(min=0)
    if st & STAGE_BITS["threshold"]:
        node = p.threshold("thr", c, d["out_levels"])
        y = op_of(node).execute(node, [y])
    return y


def _pad_value(d, core, x):
    if core is not None and core.op == "bin_conv":
        return 0 if d["act_bits"] else 1     # binary convs pad with +1 (bit 1)
    if core is not None and core.op == "maxpool":
        return int(x.min()) - 1 if x.numel() else -1   # padded taps never win
    return 0


def _run_tiled(d, header, mem, entries, in_f, side_f, out_f, levels=(), level_f=None,
               thresholds=()):
    """CONV, MAXPOOL, PIXEL, SUBSAMPLE, REPEAT, MIXER, GATE: tile by tile. ``levels``:
    the level outputs' entries (fusion rule 7), ``aux_outputs`` for each output, with
    their format and thresholds (:func:`_level_outputs`)."""
    k, s, dil, pad = d["kernel"], d["stride"], d["dilation"], d["padding"]
    multi = _OPCODES[d["opcode"]] in ("MIXER", "GATE")
    jobs = [entries] if multi else [[e] for e in entries]
    rpt = d["rows_per_tile"]
    # weight streaming adds an outer loop over chunks of output channels; it changes
    # the order of the work, not its values, so the model runs the row tiles alone
    if d["flags"] & FLAG_BITS["weight_stream"] and not 1 <= d["chunk_c"] <= d["out_c"]:
        raise ProgramError(f"descriptor {d['index']}: weight chunks of {d['chunk_c']} channels")
    if rpt < 1 or d["n_tiles"] != -(-d["out_h"] // rpt):
        raise ProgramError(f"descriptor {d['index']}: {d['n_tiles']} tiles of {rpt} rows "
                           f"do not cover {d['out_h']} rows")
    # the jobs' parameters, decoded once (the arrays hold them for the whole descriptor)
    prepared = []
    for job in jobs:
        p = _Params(d, header, mem, job[0]["param_addr"])
        pro = p.threshold("in_thr", d["in_c"], d["in_levels"]) \
            if d["stages"] & STAGE_BITS["prologue_threshold"] else None
        prepared.append((job, p, _core_node(d, header, p, d["in_c"]), pro))
    mixer = _onchip_mixer(d, [p for _, p, _, _ in prepared]) \
        if d["stages"] & STAGE_BITS["mixer"] else None
    pool = _node("maxpool", d["out_c"], kernel=d["pool_kernel"], stride=d["pool_stride"],
                 padding=0) if d["stages"] & STAGE_BITS["maxpool"] else None
    if pool is not None and (d["pool_kernel"] < 1 or d["pool_stride"] < 1):
        raise ProgramError(f"descriptor {d['index']}: maxpool stage without a window")
    for t in range(d["n_tiles"]):
        r0, r1 = t * rpt, min(d["out_h"], (t + 1) * rpt)
        c0, c1 = r0, r1                            # rows of the core's result
        if pool is not None:
            c0 = max(0, r0 * pool.attrs["stride"] - d["pool_padding"])
            c1 = min(d["mid_h"], (r1 - 1) * pool.attrs["stride"] - d["pool_padding"]
                     + pool.attrs["kernel"])
        y0 = c0 * s - pad                          # first input row (padded frame)
        y1 = (c1 - 1) * s - pad + dil * (k - 1) + 1
        results = []                               # (entry, value) per job output
        for job, p, core, pro in prepared:
            xs = []
            for e in job:
                x = mem.read_rows(e["in_addr"], in_f, max(y0, 0), min(y1, d["in_h"]),
                                  "input rows").unsqueeze(0)
                if pro is not None:
                    x = op_of(pro).execute(pro, [x])
                if k > 1 or pad:
                    full = torch.full((1, x.shape[1], y1 - y0, d["in_w"] + 2 * pad),
                                      _pad_value(d, core, x), dtype=torch.int64)
                    top = max(y0, 0) - y0
                    full[:, :, top:top + x.shape[2], pad:pad + d["in_w"]] = x
                    x = full
                xs.append(x)
            y = xs[0] if core is None else op_of(core).execute(core, xs)
            if pool is not None:
                y = _pool_rows(d, pool, y, r0, r1, c0, c1)
            outs = y if isinstance(y, list) else [y]
            for j, o in enumerate(outs):
                e = job[j] if multi else job[0]
                if o.shape[2] != r1 - r0 or o.shape[3] != d["out_w"]:
                    raise ProgramError(f"descriptor {d['index']}: tile {t} computes "
                                       f"{tuple(o.shape[2:])} instead of ({r1 - r0}, {d['out_w']})")
                side = None
                if side_f is not None:
                    side = mem.read_rows(job[0]["side_addr"], side_f, r0, r1, "side rows").unsqueeze(0)
                results.append((e, _epilogue(d, p, o, side)))
        if mixer is not None:
            # the arrays' results meet in the mixer; only its outputs go to DRAM
            mixed = op_of(mixer).execute(mixer, [v for _, v in results])
            mixed = mixed if isinstance(mixed, list) else [mixed]
            results = [(e, v) for (e, _), v in zip(results, mixed)]
        n = d["aux_outputs"]
        for j, (e, v) in enumerate(results):
            if e["out_addr"]:
                mem.write_rows(e["out_addr"], out_f, r0, v[0], "output rows")
            for le, node in zip(levels[j * n:(j + 1) * n], thresholds[j * n:(j + 1) * n]):
                mem.write_rows(le["out_addr"], level_f, r0,
                               op_of(node).execute(node, [v])[0], "level output rows")


def _level_outputs(d, header, mem, levels):
    """The level outputs' format and thresholds (one per entry of ``levels``)."""
    if not levels:
        return None, []
    port = header["port_bytes"]
    f = _fmt(d["aux_fmt"], d["aux_elem"], d["out_c"], d["out_h"], d["out_w"], port)
    if d["aux_pitch"] != f.row_bytes or d["aux_bytes"] != f.nbytes:
        raise ProgramError(f"descriptor {d['index']}: level outputs' aux_pitch "
                           f"{d['aux_pitch']} or aux_bytes {d['aux_bytes']} differ from "
                           "their format's")
    if d["aux_param_bytes"] < level_block_bytes(d, port):
        raise ProgramError(f"descriptor {d['index']}: a level output's parameter block of "
                           f"{d['aux_param_bytes']} bytes cannot hold its thresholds")
    nodes = [_threshold(mem.read(e["param_addr"], d["aux_param_bytes"],
                                 "level output's thresholds"),
                        d["out_c"], d["aux_levels"], d["const_bytes"]) for e in levels]
    return f, nodes


def _pool_rows(d, pool, y, r0, r1, c0, c1):
    """Max pooling of the core's rows [c0, c1) into output rows [r0, r1): the window's
    rows outside the result and the padded columns are taps that never win."""
    st, pk, pp = d["pool_stride"], d["pool_kernel"], d["pool_padding"]
    if y.shape[2] != c1 - c0 or y.shape[3] != d["mid_w"]:
        raise ProgramError(f"descriptor {d['index']}: the convolution computed "
                           f"{tuple(y.shape[2:])} rows for a pool over ({c1 - c0}, {d['mid_w']})")
    top, bottom = c0 - (r0 * st - pp), ((r1 - 1) * st - pp + pk) - c1
    full = torch.full((y.shape[0], y.shape[1], top + y.shape[2] + bottom, d["mid_w"] + 2 * pp),
                      int(y.min()) - 1 if y.numel() else -1, dtype=torch.int64)
    full[:, :, top:top + y.shape[2], pp:pp + d["mid_w"]] = y
    return op_of(pool).execute(pool, [full])


def _onchip_mixer(d, params):
    """The mixer of a convolution group that mixes its bases on chip: base ``k``'s
    lambda and gate are in job ``k``'s parameter block."""
    per = [p.consts("mixer", 4) for p in params]
    gated = d["stages"] & STAGE_BITS["gated"]
    return _node("mixer", d["out_c"], lambdas=torch.stack([c[2] for c in per]),
                 lambda_frac=int(per[0][0]), gate_frac=int(per[0][1]),
                 gates=torch.stack([c[3] for c in per]) if gated else None)


def _run_head(d, header, mem, entries, in_f, out_f):
    (e,) = entries
    p = _Params(d, header, mem, e["param_addr"])
    x = mem.read_rows(e["in_addr"], in_f, 0, d["in_h"], "head input").unsqueeze(0)
    w = torch.from_numpy(unpack_consts(p.raw("weights"), d["out_c"] * d["in_c"], d["weight_bytes"]))
    node = _node("head", d["out_c"], weight=w.reshape(d["out_c"], d["in_c"]),
                 bias=p.consts("head", d["out_c"]))
    y = op_of(node).execute(node, [x])                    # [1, classes]
    mem.write_rows(e["out_addr"], out_f, 0, y.reshape(d["out_c"], 1, 1), "logits")


def _entries(d, mem):
    """The job table: the jobs' entries and the level outputs' (fusion rule 7)."""
    if not 1 <= d["jobs"] <= 64:
        raise ProgramError(f"descriptor {d['index']}: {d['jobs']} jobs")
    if d["flags"] & FLAG_BITS["levels_out"] and not 1 <= d["aux_outputs"] <= 8:
        raise ProgramError(f"descriptor {d['index']}: {d['aux_outputs']} level outputs an output")
    table = [decode(mem.read(d["table_addr"] + k * JOB.itemsize, JOB.itemsize,
                             f"job-table entry {k}"), JOB) for k in range(table_entries(d))]
    return table[:d["jobs"]], table[d["jobs"]:]


def run_descriptor(d, header, mem):
    """Execute one decoded descriptor on the image; return ``[(address, format)]`` of
    the tensors it wrote, in job-table order."""
    mem.where = f"descriptor {d['index']} ({_OPCODES[d['opcode']]})"
    entries, levels = _entries(d, mem)
    in_f, side_f, out_f = _formats(d, header)
    # the intended engine's units read a binary convolution's geometry from these
    # fields instead of computing it: numbers not its own would be wrong windows
    for name, want in unit_geometry(d, header).items():
        if d[name] != want:
            raise ProgramError(f"descriptor {d['index']}: unit geometry {name} {d[name]} "
                               f"!= {want} of its fields")
    level_f, thresholds = _level_outputs(d, header, mem, levels)
    op = _OPCODES[d["opcode"]]
    if op == "INPUT":
        mem.read(entries[0]["out_addr"], out_f.nbytes, "input frame")   # the host wrote it
    elif op == "HEAD":
        _run_head(d, header, mem, entries, in_f, out_f)
    else:
        _run_tiled(d, header, mem, entries, in_f, side_f, out_f, levels, level_f, thresholds)
    return ([(e["out_addr"], out_f) for e in entries if e["out_addr"]]
            + [(e["out_addr"], level_f) for e in levels])


def _frames_for(header, frames):
    """``(frames as [N, C, H, W], the input frame's format, the logits')`` of a program's
    header; frames of another shape are refused."""
    frames = torch.as_tensor(frames)
    if frames.dim() == 3:
        frames = frames.unsqueeze(1)
    in_f = _fmt(header["in_fmt"], header["in_elem"], header["in_c"], header["in_h"],
                header["in_w"], header["port_bytes"])
    out_f = _fmt(header["out_fmt"], header["out_elem"], header["classes"], 1, 1,
                 header["port_bytes"])
    if tuple(frames.shape[1:]) != (in_f.channels, in_f.height, in_f.width):
        raise ValueError(f"frames of shape {tuple(frames.shape[1:])} for a program that takes "
                         f"{(in_f.channels, in_f.height, in_f.width)}")
    return frames, in_f, out_f


def run_program(program, image, frames):
    """Run a program on an image, frame after frame.

    Parameters
    ----------
    program : EngineProgram or bytes
        The header and descriptors (:meth:`EngineProgram.program_bytes`).
    image : bytearray
        The memory image from the program's base; written in place.
    frames : torch.Tensor
        uint8 frames [N, H, W] or [N, C, H, W].

    Returns
    -------
    logits : torch.Tensor
        int64 [N, classes].
    outputs : list of list of torch.Tensor
        Per descriptor, per output of its job table, the tensor it wrote to DRAM,
        read back right after it ran: int64 [N, C, H, W].
    """
    header, descs = read_program(program)
    mem = _Memory(image, header["base"])
    frames, in_f, out_f = _frames_for(header, frames)
    per_desc = [[] for _ in descs]
    logits = []
    for frame in frames:
        mem.where = "the host"
        mem.write(header["in_addr"], in_f.pack(frame.to(torch.int64).numpy()), "input frame")
        for i, d in enumerate(descs):
            written = run_descriptor(d, header, mem)
            per_desc[i].append([mem.read_rows(a, f, 0, f.height, "output") for a, f in written])
        mem.where = "the host"
        logits.append(mem.read_rows(header["out_addr"], out_f, 0, 1, "logits").reshape(-1))
    outputs = [[torch.stack([f[j] for f in frames_out]) for j in range(len(frames_out[0]))]
               for frames_out in per_desc]
    return torch.stack(logits), outputs


def read_descriptors(image, base, address):
    """The compute descriptors of the program at ``address`` in ``image`` (from byte
    address ``base``), up to its END; a WAIT is left out (this model runs a detached
    descriptor to its end before the next, so there is nothing to wait for)."""
    descs, at = [], address - base
    while True:
        chunk = bytes(image[at:at + DESCRIPTOR.itemsize])
        if len(chunk) != DESCRIPTOR.itemsize:
            raise ProgramError(f"the program at {address:#x} has no END")
        d = decode(chunk, DESCRIPTOR)
        if d["magic"] != DESCRIPTOR_MAGIC:
            raise ProgramError(f"the program at {address:#x}: bad magic at {base + at:#x}")
        if d["opcode"] == END_OPCODE:
            return descs
        if d["opcode"] != WAIT:
            descs.append(d)
        at += DESCRIPTOR.itemsize


def run_frames_in_flight(program, image, frames):
    """Run a stream of frames as a host runs frames in flight (:mod:`~groupnet_hw.
    compiler.engine.frames`): each detached stem to its end before the descriptors after
    it (the engine runs them side by side on tensors apart, so the values are the same).
    Returns the logits, int64 [N, classes]."""
    from ..compiler.engine.frames import frame_runs
    header = program.header
    mem = _Memory(image, header["base"])
    frames, in_f, out_f = _frames_for(header, frames)
    logits = []
    for address, frame, slot, done in frame_runs(header, len(frames)):
        if frame is not None:
            mem.where = "the host"
            mem.write(slot, in_f.pack(frames[frame].to(torch.int64).numpy()), "input frame")
        for d in read_descriptors(image, header["base"], address):
            run_descriptor(d, header, mem)
        if done is not None:
            mem.where = "the host"
            logits.append(mem.read_rows(header["out_addr"], out_f, 0, 1, "logits").reshape(-1))
    return torch.stack(logits)


class Mismatch:
    """The first descriptor whose output in DRAM differs from the integer graph."""

    def __init__(self, index, ref, nodes, opcode, count):
        self.index, self.ref, self.nodes, self.opcode, self.count = index, ref, nodes, opcode, count

    def __str__(self):
        return (f"descriptor {self.index} ({self.opcode}: {', '.join(self.nodes)}) wrote "
                f"{self.ref} with {self.count} values differing from the integer graph")


def first_mismatch(program, outputs, values):
    """The first descriptor (in execution order) whose output tensor differs.

    Parameters
    ----------
    program : EngineProgram
        Maps each descriptor's outputs to graph references.
    outputs : list of list of torch.Tensor
        Per descriptor, its output tensors as read from DRAM ([N, C, H, W]), e.g. the
        second value of :func:`run_program` or the RTL's per-layer dumps.
    values : dict
        The integer executor's values (:func:`groupnet_hw.compiler.execute.execute`).

    Returns
    -------
    Mismatch or None
    """
    for i, (refs, got) in enumerate(zip(program.outputs, outputs)):
        for ref, t in zip(refs, got):
            name, _, k = ref.partition(":")
            want = values[name]
            if isinstance(want, list):      # a multi-output node (one output: ref without :k)
                want = want[int(k) if k else 0]
            want = want.reshape(t.shape) if want.numel() == t.numel() else want
            if want.shape != t.shape or not torch.equal(want, t):
                count = int((want != t).sum()) if want.shape == t.shape else t.numel()
                return Mismatch(i, ref, [n.name for n in program.groups[i].nodes],
                                program.groups[i].opcode, count)
    return None
