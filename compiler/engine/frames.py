"""Frames in flight: the next frame's stem beside this frame's other descriptors
(docs/architecture.md section 12).

The stem runner is a unit of its own on the background side of the DMAs
(``hw/engine/port_share.py``), so while the arrays run frame n's binary layers it can
compute frame n+1's stem: a descriptor marked *detached* is handed to it and the
sequencer goes on (``groupnet_hw.engine_opcodes``). For that the two frames' tensors
must lie apart: the input frame and the stem's outputs get a second slot (B) beside the
one-frame program's (A), the stem's outputs in A are kept for the whole program (no
later tensor of the frame reuses their bytes, which the next frame's stem is writing),
and every descriptor that reads or writes a slotted tensor gets a job table for B. The
image then holds, beside the one-frame program, three programs:

``first``
    The one-frame program's descriptors up to its stem, on slot A; END.
``next`` of slot s
    The stem of the frame in the other slot, detached; the one-frame program's
    descriptors after its stem, on slot s; END, which waits for the stem.

A host runs a stream of frames as :func:`frame_runs` says: frame 0 into slot A and
``first``; then, for each frame n, frame n+1 into the other slot and ``next`` of frame
n's slot, after which the logits (one place) are frame n's. Each run after the first
takes the longer of the stem and the rest (:func:`.cycles.predict`'s ``interval``).
"""

from __future__ import annotations

from dataclasses import replace

from ...engine_format import FLAG_BITS, OPCODE_CODES
from ...engine_opcodes import END
from .formats import TensorFormat, round_up
from .program import DESCRIPTOR, DESCRIPTOR_MAGIC, HEADER, JOB, decode, encode, job_table

__all__ = ["stem_index", "add_frames_in_flight", "frame_runs"]


def stem_index(descriptors):
    """The index of the descriptor that can run detached: the first one that is not
    INPUT, if it is the stem (a CONV of integer weights, the stem runner's), else
    None."""
    for i, d in enumerate(descriptors):
        if d["opcode"] == OPCODE_CODES["INPUT"]:
            continue
        stem = d["opcode"] == OPCODE_CODES["CONV"] and d["flags"] & FLAG_BITS["int_weights"]
        return i if stem else None
    return None


def add_frames_in_flight(program):
    """``program`` (an :class:`~.layout.EngineProgram` compiled with its stem's outputs
    kept to its end) with the slot-B tensors, tables and the programs of frames in
    flight appended to its image and named in its header; unchanged if the program has
    no stem that reads the input frame alone."""
    from .layout import REGION_ALIGN, _encode_descriptor
    h, base = program.header, program.base
    descs = program.descriptors
    s = stem_index(descs)
    if s is None:
        return program
    stem_entries = job_table(program.image, base, descs[s])
    if len(stem_entries) != 1 or stem_entries[0]["in_addr"] != h["in_addr"]:
        return program
    image = bytearray(program.image)
    at = base + len(image)

    def region(nbytes):
        nonlocal at
        address, at = at, at + round_up(nbytes, REGION_ALIGN)
        return address

    in_fmt = TensorFormat.from_code(h["in_fmt"], h["in_elem"], h["in_c"], h["in_h"],
                                    h["in_w"], h["port_bytes"])
    slot_b = {int(h["in_addr"]): region(in_fmt.nbytes)}
    for ref in program.outputs[s]:
        address, fmt = program.tensors[ref]
        slot_b[int(address)] = region(fmt.nbytes)
    # slot B's job tables, for the descriptors that touch a slotted tensor
    offsets, new_tables = {}, bytearray()
    for i in range(s, len(descs)):
        entries = job_table(image, base, descs[i])
        if not any(e[f] in slot_b for e in entries for f in ("in_addr", "side_addr", "out_addr")):
            continue
        offsets[i] = len(new_tables)
        for e in entries:
            e = dict(e, **{f: slot_b.get(int(e[f]), e[f])
                           for f in ("in_addr", "side_addr", "out_addr")})
            new_tables += encode(e, JOB)
    table_at = region(len(new_tables))
    tables_b = {i: table_at + o for i, o in offsets.items()}
    image += bytes(table_at - base - len(image)) + new_tables
    image += bytes(at - base - len(image))

    # the programs
    def table(i, slot):
        return tables_b.get(i, descs[i]["table_addr"]) if slot else descs[i]["table_addr"]

    def program_bytes(entries):
        out = bytearray()
        for k, (i, slot, detach) in enumerate(entries):
            d = dict(descs[i], index=k, table_addr=table(i, slot), detach=int(detach))
            out += _encode_descriptor(d, h)
        out += encode(dict(opcode=END, index=len(entries), magic=DESCRIPTOR_MAGIC), DESCRIPTOR)
        return out

    rest = range(s + 1, len(descs))
    programs = {"first_addr": [(i, 0, False) for i in range(s + 1)],
                "next_addr_a": [(s, 1, True)] + [(i, 0, False) for i in rest],
                "next_addr_b": [(s, 0, True)] + [(i, 1, False) for i in rest]}
    addresses = {}
    for name, entries in programs.items():
        addresses[name] = base + len(image)
        image += program_bytes(entries)
    image += bytes(round_up(len(image), REGION_ALIGN) - len(image))
    header = dict(h, image_bytes=len(image), in_addr_b=slot_b[int(h["in_addr"])], **addresses)
    image[:HEADER.itemsize] = encode(header, HEADER)
    return replace(program, image=image, header=decode(image[:HEADER.itemsize], HEADER))


def frame_runs(header, frames):
    """The runs of ``frames`` frames in flight: ``(program address, frame to write
    first or None, its slot's address, frame whose logits the run leaves or None)``,
    ``frames + 1`` of them (the last run's stem computes a stale slot, unread)."""
    slots = (header["in_addr"], header["in_addr_b"])
    nexts = (header["next_addr_a"], header["next_addr_b"])
    runs = [(header["first_addr"], 0, slots[0], None)]
    for n in range(frames):
        following = n + 1 if n + 1 < frames else None
        runs.append((nexts[n % 2], following, slots[(n + 1) % 2], n))
    return runs
