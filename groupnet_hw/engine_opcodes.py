"""The engine sequencer's control opcodes and where it finds a descriptor's fields.

The sequencer (``hw/engine/sequencer.py``) reads the program from DRAM one fixed-size
descriptor at a time. The descriptor's size and the places of its opcode, index and
magic are those of the compiler's program format (``compiler/engine/program.py``:
128 bytes, ``opcode`` at byte 0, ``index`` at 124, ``magic`` at 126, little-endian);
``tests/test_engine_sequencer.py`` checks that the two agree. They are repeated here,
in a module that imports nothing, because ``hw/`` never imports the compiler and the
host runtime (numpy only) writes test programs with them.

The compiler's format has compute opcodes 1 to 9 (``OPCODE_CODES``) and no way to end a
program or to move bytes; the sequencer needs both, so they are defined here, apart from
the compute opcodes (0x10 and up), and the compiler's format must adopt them:

========  ======  ====================================================================
opcode    name    fields
========  ======  ====================================================================
0x10      END     none: the program ends, STATUS.DONE is set
0x11      COPY    ``source`` (byte 8, u32), ``destination`` (byte 12, u32), ``length``
                  (byte 16, u32): bytes, multiples of the bus word, read by the read DMA
                  and written by the write DMA; every byte checked against the window
0x12      WAIT    none: waits until the detached descriptor (below) is done and every
                  byte it wrote is on the bus
========  ======  ====================================================================

A compute descriptor whose byte :data:`DETACH_OFFSET` is 1 is *detached*: the sequencer
hands it to its unit and fetches the next descriptor at once, so that the unit runs
beside the descriptors that follow (the stem of the next frame beside this frame's
binary layers). One descriptor is detached at a time (a second waits for the first's
unit); a later ``WAIT`` (and ``END``) waits for it, so a descriptor after the ``WAIT``
may read what it wrote. Only the units of an engine's background port detach (the
stem runner of the engine of the units); any other descriptor detached stops the engine
with ``unsupported``.

Any other opcode stops the engine with ``error_code("sequencer", "unknown_opcode")``;
a descriptor whose magic is not :data:`DESCRIPTOR_MAGIC` with ``"bad_magic"``, one whose
index is not its place in the program (0, 1, ...) with ``"bad_index"``.
"""

from __future__ import annotations

__all__ = ["DESCRIPTOR_BYTES", "DESCRIPTOR_MAGIC", "OPCODE_OFFSET", "INDEX_OFFSET",
           "MAGIC_OFFSET", "DETACH_OFFSET", "COPY_FIELDS", "CONTROL_OPCODES", "END", "COPY",
           "WAIT", "wait_descriptor",
           "encode_descriptor", "copy_descriptor", "end_descriptor"]

#: Bytes per descriptor (the compiler's ``DESCRIPTOR.itemsize``).
DESCRIPTOR_BYTES = 128
#: The value of a descriptor's ``magic`` field (the compiler's ``DESCRIPTOR_MAGIC``).
DESCRIPTOR_MAGIC = 0x4E44
#: Byte offsets of the fields every descriptor has: opcode (u8), index and magic (u16).
OPCODE_OFFSET = 0
INDEX_OFFSET = 124
MAGIC_OFFSET = 126
#: Byte offset of a compute descriptor's ``detach`` flag (u8, the compiler's field).
DETACH_OFFSET = 35

#: The sequencer's own opcodes.
END = 0x10
COPY = 0x11
WAIT = 0x12
CONTROL_OPCODES = {"END": END, "COPY": COPY, "WAIT": WAIT}

#: COPY's operands: name -> (byte offset, bytes), little-endian.
COPY_FIELDS = {"source": (8, 4), "destination": (12, 4), "length": (16, 4)}


def encode_descriptor(opcode: int, index: int, fields=None, *,
                      magic: int = DESCRIPTOR_MAGIC) -> bytes:
    """The 128 bytes of a descriptor.

    Parameters
    ----------
    opcode : int
        0 to 255.
    index : int
        The descriptor's place in the program (0 for the first).
    fields : dict, optional
        ``{name: value}`` of :data:`COPY_FIELDS` (other bytes are zero).
    magic : int
        Written at :data:`MAGIC_OFFSET` (default :data:`DESCRIPTOR_MAGIC`; tests pass
        another to make a descriptor the sequencer refuses).
    """
    out = bytearray(DESCRIPTOR_BYTES)
    out[OPCODE_OFFSET] = opcode & 0xFF
    out[INDEX_OFFSET:INDEX_OFFSET + 2] = (index & 0xFFFF).to_bytes(2, "little")
    out[MAGIC_OFFSET:MAGIC_OFFSET + 2] = (magic & 0xFFFF).to_bytes(2, "little")
    for name, value in (fields or {}).items():
        offset, size = COPY_FIELDS[name]
        out[offset:offset + size] = int(value).to_bytes(size, "little")
    return bytes(out)


def copy_descriptor(index: int, source: int, destination: int, length: int) -> bytes:
    """A COPY descriptor: ``length`` bytes from ``source`` to ``destination``."""
    return encode_descriptor(COPY, index, {"source": source, "destination": destination,
                                           "length": length})


def wait_descriptor(index: int) -> bytes:
    """A WAIT descriptor."""
    return encode_descriptor(WAIT, index)


def end_descriptor(index: int) -> bytes:
    """An END descriptor."""
    return encode_descriptor(END, index)
