"""The memory image: program, job tables, parameters, frames and the feature-map arena.

Image layout (every region starts at a multiple of :data:`REGION_ALIGN` bytes from
``base``; ``base`` is where the host placed the image in the DRAM window it reserved
for the engine, :data:`DEFAULT_BASE` unless told):

    base + 0          program header (128 bytes, :data:`.program.HEADER`)
    desc_addr         descriptors, 128 bytes each, in execution order
    table_addr        job tables (16 bytes per job)
    param_addr        parameter blocks (:mod:`.params`), one per job
    in_addr           the input frame (written by the host before a run)
    out_addr          the logits (read by the host after a run)
    arena_addr        feature maps, allocated by liveness (:func:`allocate`)

Feature maps are allocated in descriptor order: before a descriptor's outputs are
placed, every tensor whose last reader ran earlier is freed; outputs are placed first
fit in the freed space. A descriptor never writes over a tensor it reads (its tiles
read rows after writing others), and no two live tensors overlap (checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...numerics import signed_width

from .config import EngineConfig
from .formats import POWER_OF_TWO_FIXED, TensorFormat, container_bits, round_up
from .fusion import Group, fuse, give_back_prologues, main_ref, side_ref
from .frames import add_frames_in_flight, stem_index
from .gather import unit_geometry
from .params import (int_bytes, level_block_bytes, pack_binary_weights, pack_bitvec,
                     pack_consts, pack_int_weights, sections, tap_aligned_weights)
from .program import (DESCRIPTOR, DESCRIPTOR_MAGIC, END_OPCODE, FLAG_BITS, HEADER,
                      HEADER_FLAG_BITS, JOB, MAGIC, OPCODE_CODES, STAGE_BITS, VERSION,
                      ProgramError, decode, encode, table_entries)
from .tiling import choose_tiling, map_buffer_takes, map_region, tile_rows

__all__ = ["DEFAULT_BASE", "REGION_ALIGN", "EngineProgram", "compile_engine", "allocate",
           "tile_rows", "choose_tiling", "group_format", "level_format", "unit_operand_refusal",
           "check_no_overlap"]

#: Where the image starts by default: the top 128 MiB of the DE10-Nano's 1 GiB, which
#: the board's Linux is booted without (``mem=896M``) so that the engine owns it.
DEFAULT_BASE = 0x3800_0000
#: Region alignment: 4 KiB pages, so the host can map regions separately.
REGION_ALIGN = 4096


@dataclass
class EngineProgram:
    """A compiled engine program and its memory image.

    Attributes
    ----------
    config : EngineConfig
    groups : list of Group
        The descriptors' fused nodes, in execution order.
    descriptors : list of dict
        The decoded compute descriptors (what :attr:`image` holds; the final ``END``
        is not listed).
    header : dict
        The decoded program header.
    image : bytearray
        The memory image from ``base`` (frames not yet written).
    tensors : dict
        Graph reference -> ``(address, TensorFormat)`` of every tensor in DRAM.
    outputs : list of list of str
        Per descriptor, the references it writes (job-table order).
    graph : Graph
        The integer graph it was compiled from: its value ranges bound what the
        engine core multiplies (:func:`.target.check_program`).
    lifetimes : dict
        Reference -> ``(first, last)`` descriptor indices (written, last read).
    """

    config: EngineConfig
    groups: list
    descriptors: list
    header: dict
    image: bytearray
    tensors: dict
    outputs: list
    graph: object
    lifetimes: dict = field(default_factory=dict)

    @property
    def base(self):
        return self.header["base"]

    def replace_descriptor(self, i, d):
        """Descriptor ``i`` as ``d`` (another tiling of it), in the image too."""
        o = self.header["desc_addr"] - self.base + i * DESCRIPTOR.itemsize
        self.image[o:o + DESCRIPTOR.itemsize] = _encode_descriptor(d, self.header)
        self.descriptors[i] = decode(self.image[o:o + DESCRIPTOR.itemsize], DESCRIPTOR)

    def program_bytes(self):
        """The header and descriptors (what the sequencer fetches)."""
        end = self.header["desc_addr"] - self.base + self.header["n_desc"] * DESCRIPTOR.itemsize
        return bytes(self.image[:end])


def group_format(grp, port_bytes, fixed_elems=POWER_OF_TWO_FIXED):
    """The one output format of a descriptor: its jobs' kind in the widest container
    (a fixed-point one of ``fixed_elems``)."""
    last = [grp.mixer] if grp.mixer is not None else [j.last for j in grp.jobs]
    kind = last[0].kind
    bits = max(container_bits(n.kind, n.bit_width, fixed_elems) for n in last)
    n = last[0]
    return TensorFormat(kind, bits, n.channels, n.height, n.width, port_bytes)


def _main_outputs(grp):
    """References of a descriptor's outputs, in job-table order (written unless
    ``levels_only``)."""
    if grp.opcode in ("MIXER", "GATE") or grp.mixer is not None:
        node = grp.mixer if grp.mixer is not None else grp.jobs[0].last
        return [node.name] if node.outputs == 1 else [f"{node.name}:{k}" for k in range(node.outputs)]
    return [j.last.name for j in grp.jobs]


def _outputs(grp):
    """References a descriptor writes, in job-table order: its outputs, then their
    level outputs (fusion rule 7), output by output."""
    main = [] if grp.levels_only else _main_outputs(grp)
    return main + [t.name for ts in grp.levels for t in ts]


def level_format(grp, port_bytes, fixed_elems=POWER_OF_TWO_FIXED):
    """The one format of a descriptor's level outputs (fusion rule 7)."""
    ts = [t for ts in grp.levels for t in ts]
    n = ts[0]
    bits = max(container_bits(t.kind, t.bit_width, fixed_elems) for t in ts)
    return TensorFormat(n.kind, bits, n.channels, n.height, n.width, port_bytes)


def _norm(ref, g):
    """A reference as the tensor map keys it (``name`` for single-output nodes)."""
    return g.source(ref) if g.producer(ref).outputs == 1 else ref


def allocate(sizes, lifetimes, align):
    """Offsets of tensors in an arena by liveness.

    Parameters
    ----------
    sizes : dict
        Tensor -> bytes, in the order ties are placed.
    lifetimes : dict
        Tensor -> ``(first, last)``: written by descriptor ``first``, last read by
        ``last`` (``last >= first``).
    align : int
        Every offset is a multiple of it.

    Returns
    -------
    offsets : dict
        Tensor -> offset.
    arena : int
        Bytes of the arena.
    """
    free = []           # sorted [start, end) holes below `top`
    top, offsets, live = 0, {}, {}
    # ties in the order given (the program's), never by a tensor's name
    position = {t: i for i, t in enumerate(sizes)}
    order = sorted(sizes, key=lambda t: (lifetimes[t][0], -sizes[t], position[t]))
    for t in order:
        first = lifetimes[t][0]
        for other in [o for o, last in live.items() if last < first]:
            start = offsets[other]
            free.append([start, start + round_up(sizes[other], align)])
            del live[other]
        free = _merge(free)
        need = round_up(sizes[t], align)
        for hole in free:
            if hole[1] - hole[0] >= need:
                offsets[t] = hole[0]
                hole[0] += need
                break
        else:
            # grow: a hole ending at the top is extended instead of wasted
            if free and free[-1][1] == top:
                offsets[t] = free[-1][0]
                top = free[-1][0] + need
                free.pop()
            else:
                offsets[t] = top
                top += need
        free = [h for h in free if h[1] > h[0]]
        live[t] = lifetimes[t][1]
    check_no_overlap(sizes, lifetimes, offsets)
    return offsets, top


def _merge(holes):
    out = []
    for s, e in sorted(holes):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def check_no_overlap(sizes, lifetimes, offsets):
    """Raise AssertionError if two tensors live at once share a byte."""
    items = sorted(offsets, key=lambda t: offsets[t])
    for i, a in enumerate(items):
        a0, a1 = offsets[a], offsets[a] + sizes[a]
        for b in items[i + 1:]:
            b0 = offsets[b]
            if b0 >= a1:
                break
            (fa, la), (fb, lb) = lifetimes[a], lifetimes[b]
            if fa <= lb and fb <= la:
                raise AssertionError(f"live tensors {a} [{a0}, {a1}) and {b} at {b0} overlap "
                                     f"(lifetimes {lifetimes[a]}, {lifetimes[b]})")


def _stage_flags(job, mixer=None):
    st = 0
    if mixer is not None:
        st |= STAGE_BITS["mixer"] | (STAGE_BITS["gated"] if mixer.attrs["gates"] is not None else 0)
    if job.prologue is not None:
        st |= STAGE_BITS["prologue_threshold"]
    for n in job.epilogue:
        st |= STAGE_BITS[n.op]
    if job.pool is not None:
        st |= STAGE_BITS["maxpool"]
    if job.core.op == "mixer" and job.core.attrs["gates"] is not None:
        st |= STAGE_BITS["gated"]
    return st


def _job_consts(job, mixer=None):
    """Every constant of a job (for choosing const_bytes)."""
    vals = []
    if mixer is not None:
        a = mixer.attrs
        vals.append(a["lambdas"].numpy())
        if a["gates"] is not None:
            vals.append(a["gates"].numpy())
    for n in job.nodes:
        a = n.attrs
        if n.op == "postop":
            vals += [a["A"].numpy(), a["B"].numpy(), np.array([a["shift"]])]
        elif n.op == "threshold":
            vals.append(a["T"].numpy())
        elif n.op in ("mixer", "gate"):
            vals.append(a["lambdas"].numpy() if "lambdas" in a else np.zeros(1))
            if a.get("gates") is not None:
                vals.append(a["gates"].numpy())
        elif n.op == "head":
            vals.append(a["bias"].numpy())
    return np.concatenate([np.asarray(v, dtype=np.int64).reshape(-1) for v in vals]) \
        if vals else np.zeros(1, dtype=np.int64)


#: Signed bits of the mixer lanes' coefficients (one multiplier's narrow operand).
COEFFICIENT_BITS = 18


def unit_operand_refusal(grp, config):
    """Why the intended engine's lanes cannot take group ``grp``'s constants exactly, or
    None: a post-op scale wider than ``config.scale_bits``; a mixer's fraction above
    ``config.coefficient_fraction``, or a coefficient that, scaled to it, is wider than
    :data:`COEFFICIENT_BITS` (``hw/engine/mixer.py``, :func:`at_fraction`). The lanes
    would wrap them, so the compiler refuses them instead."""
    fraction, scale = config.coefficient_fraction, config.scale_bits
    for n in grp.nodes:
        a = n.attrs
        if n.op == "postop" and scale is not None:
            bits = signed_width(int(a["A"].min()), int(a["A"].max()))
            if bits > scale:
                return (f"{n.name}: post-op scales of {bits} bits, the engine's lanes "
                        f"take {scale}")
        if n.op in ("mixer", "gate") and fraction is not None:
            coefficients = [("lambda", a.get("lambdas"), a.get("lambda_frac", 0)),
                            ("gate", a.get("gates"), a.get("gate_frac", 0))]
            for what, values, frac in coefficients:
                if values is None:
                    continue
                if frac > fraction:
                    return (f"{n.name}: {what}s of {frac} fraction bits, the engine's mixer "
                            f"takes at most {fraction}")
                scaled = values.to(torch.int64) << (fraction - frac)
                bits = signed_width(int(scaled.min()), int(scaled.max()))
                if bits > COEFFICIENT_BITS:
                    return (f"{n.name}: {what}s need {bits} bits at the mixer's "
                            f"{fraction} fraction bits, it takes {COEFFICIENT_BITS}")
    return None


def _param_block(job, d, header, size, mixer=None, base=0):
    """One job's parameter block (``size`` bytes), sections as :func:`sections` says."""
    secs = sections(d, header)
    block = np.zeros(size, dtype=np.uint8)
    cb, wb = d["const_bytes"], d["weight_bytes"]

    def put(name, *parts):
        at = secs[name][0]
        data = np.concatenate([np.asarray(p, dtype=np.uint8).reshape(-1) for p in parts])
        assert data.size <= secs[name][1], name
        block[at:at + data.size] = data

    if job.prologue is not None:
        put("in_thr", *_threshold_bytes(job.prologue, cb))
    core = job.core
    if core.op == "bin_conv":
        put("weights", pack_binary_weights(core.attrs["bits"].numpy(), header["pe"], header["simd"],
                                           core.attrs.get("groups", 1),
                                           tap_aligned_weights(header)))
    elif core.op == "int_conv":
        put("weights", pack_int_weights(core.attrs["weight"].numpy(), header["stem_pe"],
                                        header["stem_simd"], wb))
    elif core.op == "head":
        put("weights", pack_consts(core.attrs["weight"].numpy(), wb))
        put("head", pack_consts(core.attrs["bias"].numpy(), cb))
    elif core.op == "mixer":
        a = core.attrs
        gates = [] if a["gates"] is None else [pack_consts(a["gates"].numpy(), cb)]
        put("mixer", pack_consts([a["lambda_frac"], a["gate_frac"]], cb),
            pack_consts(a["lambdas"].numpy(), cb), *gates)
    elif core.op == "gate":
        a = core.attrs
        put("mixer", pack_consts([0, a["gate_frac"]], cb), pack_consts(a["gates"].numpy(), cb))
    if mixer is not None:
        a = mixer.attrs
        gate = int(a["gates"][base]) if a["gates"] is not None else 0
        put("mixer", pack_consts([a["lambda_frac"], a["gate_frac"], int(a["lambdas"][base]), gate], cb))
    for n in job.epilogue:
        if n.op == "postop":
            a = n.attrs
            # A[c] and B[c] side by side: the core reads each channel's pair at once
            pairs = np.stack([a["A"].numpy().reshape(-1), a["B"].numpy().reshape(-1)], axis=1)
            put("postop", pack_consts([a["shift"], int(a["pre_relu"]) | 2 * int(a["post_relu"])], cb),
                pack_consts(pairs, cb))
        elif n.op == "threshold":
            put("thr", *_threshold_bytes(n, cb))
    return block


def _threshold_bytes(node, const_bytes):
    """A threshold's ``T[C][L]`` constants, then its invert bits (its section's bytes)."""
    return (pack_consts(node.attrs["T"].numpy(), const_bytes),
            pack_bitvec(node.attrs["invert"].numpy()))


def _level_block(threshold, d):
    """A level output's parameter block (``aux_param_bytes``): its threshold's bytes."""
    block = np.zeros(d["aux_param_bytes"], dtype=np.uint8)
    data = np.concatenate(_threshold_bytes(threshold, d["const_bytes"]))
    block[:data.size] = data
    return block


def _share_formats(groups, outputs, fmts, g):
    """Widen containers so that the tensors a descriptor reads through one format share
    it: its main inputs (``in_fmt``: a GATE's gated inputs and its aggregate come from
    different descriptors, so may have different containers), its side inputs
    (``side_fmt``) and, as before, its outputs (``out_fmt``). Tensors tied that way
    take the widest container of their kind, in place in ``fmts``."""
    parent = {r: r for r in fmts}

    def find(r):
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    def tie(refs):
        refs = [r for r in refs if r in parent]
        for r in refs[1:]:
            parent[find(r)] = find(refs[0])
    for grp, outs in zip(groups, outputs):
        tie(outs)
        tie([_norm(r, g) for job in grp.jobs for r in main_ref(job)])
        tie([_norm(side_ref(job, g), g) for job in grp.jobs if side_ref(job, g)])
    widest = {}
    for r, f in fmts.items():
        key = (find(r), f.kind)
        widest[key] = max(widest.get(key, 0), f.elem_bits)
    for r, f in fmts.items():
        bits = widest[(find(r), f.kind)]
        if bits != f.elem_bits:
            fmts[r] = TensorFormat(f.kind, bits, f.channels, f.height, f.width, f.port_bytes)


def _descriptor(grp, index, g, fmts, config):
    """The descriptor fields of a group (addresses filled in later)."""
    job = grp.jobs[0]
    core = job.core
    refs = main_ref(job)
    # a descriptor of level outputs alone still states its outputs' geometry
    out_fmt = fmts.get(_main_outputs(grp)[0]) or group_format(grp, config.port_bytes,
                                                               config.fixed_containers)
    in_fmt = fmts[_norm(refs[0], g)] if refs else out_fmt
    side = side_ref(job, g)
    side_fmt = fmts[_norm(side, g)] if side is not None else None
    a = core.attrs
    d = dict(opcode=OPCODE_CODES[grp.opcode], stages=_stage_flags(job, grp.mixer), flags=0,
             jobs=len(refs) if grp.opcode in ("MIXER", "GATE") else len(grp.jobs),
             kernel=a.get("kernel", 1), stride=a.get("stride", 1), dilation=a.get("dilation", 1),
             padding=a.get("padding", 0),
             in_h=in_fmt.height, in_w=in_fmt.width, in_c=in_fmt.channels,
             out_h=out_fmt.height, out_w=out_fmt.width, out_c=out_fmt.channels,
             side_c=side_fmt.channels if side_fmt else 0,
             groups=a.get("groups", a.get("times", 1)),
             in_fmt=in_fmt.code, in_elem=in_fmt.elem_bits,
             side_fmt=side_fmt.code if side_fmt else 0, side_elem=side_fmt.elem_bits if side_fmt else 0,
             out_fmt=out_fmt.code, out_elem=out_fmt.elem_bits,
             act_bits=a.get("in_bits", 0) if core.op == "bin_conv" else 0,
             in_levels=job.prologue.attrs["T"].shape[1] if job.prologue is not None else 0,
             out_levels=next((n.attrs["T"].shape[1] for n in job.epilogue if n.op == "threshold"), 0),
             const_bytes=8 if max([int_bytes(_job_consts(j, grp.mixer)) for j in grp.jobs]
                                  + [int_bytes(t.attrs["T"].numpy()) for ts in grp.levels
                                     for t in ts]) > 4 else 4,
             weight_bytes=0,
             in_pitch=in_fmt.row_bytes, side_pitch=side_fmt.row_bytes if side_fmt else 0,
             out_pitch=out_fmt.row_bytes, in_bytes=in_fmt.nbytes, out_bytes=out_fmt.nbytes,
             index=index, magic=DESCRIPTOR_MAGIC)
    if grp.opcode == "SUBSAMPLE":
        d["kernel"] = 1
    if job.pool is not None:
        pa = job.pool.attrs
        d.update(mid_h=core.height, mid_w=core.width, pool_kernel=pa["kernel"],
                 pool_stride=pa["stride"], pool_padding=pa["padding"])
    if core.op == "int_conv":
        d["flags"] |= FLAG_BITS["int_weights"]
        d["weight_bytes"] = max(int_bytes(j.core.attrs["weight"].numpy()) for j in grp.jobs)
    if core.op == "head":
        d["weight_bytes"] = int_bytes(a["weight"].numpy())
        d["in_c"] = in_fmt.channels
    if job.side_first:
        d["flags"] |= FLAG_BITS["side_first"]
    if grp.levels:
        lf = fmts[grp.levels[0][0].name]
        d["flags"] |= FLAG_BITS["levels_out"] | (FLAG_BITS["levels_only"] if grp.levels_only else 0)
        d.update(aux_outputs=len(grp.levels[0]), aux_fmt=lf.code, aux_elem=lf.elem_bits,
                 aux_levels=grp.levels[0][0].attrs["T"].shape[1], aux_pitch=lf.row_bytes,
                 aux_bytes=lf.nbytes)
        d["aux_param_bytes"] = level_block_bytes(d, config.port_bytes)
    if grp.opcode not in ("MIXER", "GATE") and len({main_ref(j)[0] if main_ref(j) else None
                                                    for j in grp.jobs}) == 1:
        d["flags"] |= FLAG_BITS["shared_input"]
    sides = {side_ref(j, g) for j in grp.jobs}
    if grp.opcode not in ("MIXER", "GATE") and side is not None and len(sides) == 1:
        # one residual for all bases (a stage's first block): read once, broadcast
        d["flags"] |= FLAG_BITS["shared_side"]
    return d


def compile_engine(g, config=None, base=DEFAULT_BASE):
    """Compile an integer graph into an engine program and its memory image.

    Parameters
    ----------
    g : Graph
        The integer graph (:func:`groupnet_hw.compiler.passes.compile_model`).
    config : EngineConfig, optional
        The engine's size (default: :class:`EngineConfig`'s defaults).
    base : int
        DRAM address of the image.

    Returns
    -------
    EngineProgram
    """
    config = config or EngineConfig()
    port = config.port_bytes
    # what the parameter blocks' layout depends on (:func:`.params.sections`)
    packing = dict(port_bytes=port, arrays=config.arrays, pe=config.pe, simd=config.simd,
                   stem_pe=config.stem_pe, stem_simd=config.stem_simd,
                   flags=HEADER_FLAG_BITS["tap_aligned_weights"] if config.tap_aligned_weights
                   else 0)
    groups, fmts, outputs = _fit_groups(fuse(g, config.arrays, config.fuse_overlapping_pools,
                                             config.prologue_thresholds,
                                             config.group_by_tensor,
                                             config.levels_at_producer),
                                        g, config, packing)
    # lifetimes: written by its descriptor, last read by its last reader
    lifetimes = {r: (i, i) for i, outs in enumerate(outputs) for r in outs}
    for i, grp in enumerate(groups):
        for job in grp.jobs:
            reads = main_ref(job) + ([side_ref(job, g)] if side_ref(job, g) else [])
            for r in reads:
                r = _norm(r, g)
                lifetimes[r] = (lifetimes[r][0], max(lifetimes[r][1], i))
    # the compute descriptors, then the sequencer's END
    header = dict(magic=MAGIC, version=VERSION, n_desc=len(groups) + 1, base=base,
                  desc_bytes=DESCRIPTOR.itemsize, **packing)
    descs = [_descriptor(grp, i, g, fmts, config) for i, grp in enumerate(groups)]
    stem = stem_index(descs) if config.frames_in_flight else None
    if stem is not None:
        # the next frame's stem writes these while this frame's later descriptors run:
        # no tensor of theirs may take the bytes (:mod:`.frames`)
        for r in outputs[stem]:
            lifetimes[r] = (lifetimes[r][0], len(groups))
    # parameter blocks: one per job (a mixer's one block, shared by its entries)
    blocks = []
    for grp, d in zip(groups, descs):
        size = _size_params(d, packing)
        try:
            choose_tiling(d, config)
            refusal = unit_operand_refusal(grp, config)
            if refusal:
                raise ValueError(refusal)
        except ValueError as exc:     # name the layer, as check_program does
            raise ValueError(f"descriptor {d['index']} ({grp.nodes[0].name}): {exc}") from None
        blocks.append(([_param_block(j, d, header, size, grp.mixer, k)
                        for k, j in enumerate(grp.jobs)] if size else [])
                      + [_level_block(t, d) for ts in grp.levels for t in ts])
    # regions
    desc_addr = base + round_up(HEADER.itemsize, port)
    table_addr = base + round_up(desc_addr - base + header["n_desc"] * DESCRIPTOR.itemsize,
                                 REGION_ALIGN)
    table_bytes = sum(table_entries(d) for d in descs) * JOB.itemsize
    param_addr = table_addr + round_up(table_bytes, REGION_ALIGN)
    param_offsets, at = [], 0
    for bl in blocks:
        param_offsets.append([])
        for b in bl:
            param_offsets[-1].append(at)
            at += b.size
    param_bytes = at
    in_addr = param_addr + round_up(param_bytes, REGION_ALIGN)
    # the frames' places by the graph's ends, not by program position (a descriptor
    # whose result nobody reads may follow the head)
    in_ref, out_ref = g.input, g.output
    if out_ref not in fmts or in_ref not in fmts or g[out_ref].op != "head":
        raise ValueError("the engine needs a graph from its input to a classifier head")
    in_fmt, out_fmt = fmts[in_ref], fmts[out_ref]
    out_addr = in_addr + round_up(in_fmt.nbytes, REGION_ALIGN)
    arena_addr = out_addr + round_up(out_fmt.nbytes, REGION_ALIGN)
    arena = {r: fmts[r].nbytes for r in lifetimes if r not in (in_ref, out_ref)}
    offsets, arena_bytes = allocate(arena, lifetimes, port)
    tensors = {r: (arena_addr + o, fmts[r]) for r, o in offsets.items()}
    tensors[in_ref] = (in_addr, in_fmt)
    tensors[out_ref] = (out_addr, out_fmt)
    image_bytes = arena_addr - base + round_up(arena_bytes, REGION_ALIGN)
    header.update(image_bytes=image_bytes, desc_addr=desc_addr, in_addr=in_addr,
                  in_fmt=in_fmt.code, in_elem=in_fmt.elem_bits, in_c=in_fmt.channels,
                  in_h=in_fmt.height, in_w=in_fmt.width, out_addr=out_addr,
                  out_fmt=out_fmt.code, out_elem=out_fmt.elem_bits, classes=out_fmt.channels,
                  arena_addr=arena_addr, arena_bytes=arena_bytes, param_addr=param_addr,
                  param_bytes=param_bytes, table_addr=table_addr, table_bytes=table_bytes)
    image = bytearray(image_bytes)
    image[0:HEADER.itemsize] = encode(header, HEADER)
    t_at = table_addr
    for i, (grp, d) in enumerate(zip(groups, descs)):
        d["table_addr"] = t_at
        entries = _job_entries(grp, d, g, tensors, outputs[i],
                               [param_addr + o for o in param_offsets[i]])
        for e in entries:
            o = t_at - base
            image[o:o + JOB.itemsize] = encode(e, JOB)
            t_at += JOB.itemsize
        for k, bl in enumerate(blocks[i]):
            o = param_addr + param_offsets[i][k] - base
            image[o:o + bl.size] = bl.tobytes()
        o = desc_addr - base + i * DESCRIPTOR.itemsize
        try:
            image[o:o + DESCRIPTOR.itemsize] = _encode_descriptor(d, header)
        except ProgramError as exc:     # name the layer, as for its tiling
            raise ProgramError(f"descriptor {d['index']} ({grp.nodes[0].name}): {exc}") from None
    o = desc_addr - base + len(descs) * DESCRIPTOR.itemsize
    image[o:o + DESCRIPTOR.itemsize] = encode(dict(opcode=END_OPCODE, index=len(descs),
                                                   magic=DESCRIPTOR_MAGIC), DESCRIPTOR)
    decoded = [decode(image[desc_addr - base + i * 128: desc_addr - base + (i + 1) * 128], DESCRIPTOR)
               for i in range(len(descs))]
    program = EngineProgram(config, groups, decoded, decode(image[:HEADER.itemsize], HEADER),
                            image, tensors, outputs, g, lifetimes)
    return add_frames_in_flight(program) if stem is not None else program


def _encode_descriptor(d, header):
    """A descriptor's bytes, with its unit geometry (:func:`.gather.unit_geometry`)
    computed from its other fields as it is encoded, so that no later change of them
    (another tiling, its addresses) leaves the geometry stale."""
    return encode(dict(d, **unit_geometry(d, header)), DESCRIPTOR)


def _size_params(d, packing):
    """Set a descriptor's ``param_bytes`` (one job's block, whole port words) and
    ``weight_tile_bytes``; return the block's size."""
    secs = sections(d, packing)
    size = round_up(max((o + n for o, n in secs.values()), default=0), packing["port_bytes"])
    d["param_bytes"] = size
    d["weight_tile_bytes"] = secs["weights"][1] if "weights" in secs else 0
    return size


def _formats(groups, g, port, fixed_elems):
    """One format per descriptor output (the widest container of its jobs, fixed-point
    ones of ``fixed_elems``) and one for its level outputs, shared by the tensors one
    descriptor reads together: ``(fmts, outputs per group)``."""
    fmts, outputs = {}, []
    for grp in groups:
        f = group_format(grp, port, fixed_elems)
        outputs.append(_outputs(grp))
        for r in ([] if grp.levels_only else _main_outputs(grp)):
            fmts[r] = f
        if grp.levels:
            lf = level_format(grp, port, fixed_elems)
            for ts in grp.levels:
                for t in ts:
                    fmts[t.name] = lf
    # the prologue threshold reads elements of 8, 16 or 32 bits (hw/engine/prologue.py)
    for grp in groups:
        for job in grp.jobs:
            ref = _norm(main_ref(job)[0], g) if job.prologue is not None else None
            f = fmts.get(ref)
            if f is not None and f.kind == "fixed":
                bits = container_bits(f.kind, f.elem_bits)
                if bits != f.elem_bits:
                    fmts[ref] = TensorFormat(f.kind, bits, f.channels, f.height, f.width,
                                             f.port_bytes)
    _share_formats(groups, outputs, fmts, g)
    return fmts, outputs


def _trial_descriptor(grp, g, fmts, config, packing):
    """A group's descriptor with its parameter sizes, to try a tiling on."""
    d = _descriptor(grp, 0, g, fmts, config)
    _size_params(d, packing)
    return d


def _fit_groups(groups, g, config, packing):
    """Fusion rule 6: a group whose one-row tile does not fit the buffers gives up its
    mixer, then runs as consecutive groups of as many jobs as fit, and on the core
    (``config.scratchpad``, which runs no rounds) of at most ``config.arrays`` jobs (a
    group that does not fit even alone is kept: the tiler names it). Returns
    ``(groups, fmts, outputs)``."""
    port = packing["port_bytes"]

    def fits(grp, fmts):
        d = _trial_descriptor(grp, g, fmts, config, packing)
        try:
            tile_rows(d, config)
        except ValueError:
            return False
        return True
    # the core holds at most `arrays` jobs in one descriptor (no rounds)
    most_jobs = config.arrays if config.scratchpad else None
    fmts, outputs = _formats(groups, g, port, config.fixed_containers)
    if not config.scratchpad:
        groups, fmts, outputs = _levels_the_map_buffer_takes(groups, g, config, packing,
                                                             fmts, outputs)
    unfused = [part for grp in groups
               for part in (grp.unfused() if grp.mixer is not None and not fits(grp, fmts)
                            else [grp])]
    if len(unfused) != len(groups):
        groups = unfused
        fmts, outputs = _formats(groups, g, port, config.fixed_containers)
    out = []
    for grp in groups:
        cap = min(len(grp.jobs), most_jobs or len(grp.jobs))
        if grp.splittable and (cap < len(grp.jobs) or not fits(grp, fmts)):
            most = next((n for n in range(cap, 0, -1)
                         if fits(Group(grp.jobs[:n]), fmts)), None)
            if most:
                out.extend(grp.split(most))
                continue
        out.append(grp)
    if len(out) == len(groups):
        return groups, fmts, outputs
    return out, fmts, [_outputs(grp) for grp in out]


def _levels_the_map_buffer_takes(groups, g, config, packing, fmts, outputs):
    """Fusion rule 6 on the engine of the units: a group whose level outputs its map
    buffer does not hold gives them up, each output's last first, until it does (the
    convolutions that read them threshold the group's outputs again). Returns
    ``(groups, fmts, outputs)``."""
    region = map_region(config)

    def takes(grp):
        d = _trial_descriptor(grp, g, fmts, config, packing)
        try:
            choose_tiling(d, config)
        except ValueError:      # the tiler names it
            return True
        return map_buffer_takes(d, region)
    groups = list(groups)
    while True:
        i = next((i for i, grp in enumerate(groups) if grp.levels and not takes(grp)), None)
        if i is None:
            return groups, fmts, outputs
        groups[i], thresholds = groups[i].fewer_levels()
        give_back_prologues(groups, thresholds, g)
        fmts, outputs = _formats(groups, g, config.port_bytes, config.fixed_containers)


def _job_entries(grp, d, g, tensors, outs, params):
    if grp.opcode == "INPUT":
        return [dict(out_addr=tensors[outs[0]][0])]
    # the main outputs' addresses (none with levels only), then the level outputs'
    main = [] if grp.levels_only else outs[:len(_main_outputs(grp))]
    n_blocks = len(params) - sum(len(ts) for ts in grp.levels)
    levels = [dict(out_addr=tensors[t.name][0], param_addr=params[n_blocks + i])
              for i, t in enumerate(t for ts in grp.levels for t in ts)]
    if grp.opcode in ("MIXER", "GATE"):
        job = grp.jobs[0]
        ins = main_ref(job)
        side = side_ref(job, g)
        return [dict(in_addr=tensors[_norm(r, g)][0],
                     side_addr=tensors[_norm(side, g)][0] if side and k == 0 else 0,
                     out_addr=tensors[main[k]][0] if k < len(main) else 0,
                     param_addr=params[0] if n_blocks else 0)
                for k, r in enumerate(ins)] + levels
    out = []
    for k, job in enumerate(grp.jobs):
        side = side_ref(job, g)
        out.append(dict(in_addr=tensors[_norm(main_ref(job)[0], g)][0],
                        side_addr=tensors[_norm(side, g)][0] if side else 0,
                        out_addr=tensors[main[k]][0] if k < len(main) else 0,
                        param_addr=params[k] if n_blocks else 0))
    return out + levels
