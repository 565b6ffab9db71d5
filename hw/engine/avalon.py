"""Avalon-MM port signatures: the engine's DRAM master and its register agent.

The DE10-Nano's fabric reaches the HPS's DDR3 through the FPGA-to-SDRAM ports, which
speak Avalon-MM (or AXI-3) with 32-, 64-, 128- or 256-bit data (Cyclone V HPS Technical
Reference Manual, "FPGA-to-HPS SDRAM Interface" and "Avalon-MM Bidirectional Port":
address, burstcount, read, write, writedata, byteenable, waitrequest, readdata,
readdatavalid). The host reaches the engine's registers through an Avalon-MM agent
behind the lightweight HPS-to-FPGA bridge. Both signatures describe the port as its
master (Intel's newer word: host) sees it, like :class:`amaranth.lib.stream.Signature`
describes a stream as its source sees it: a DMA has ``Out(AvalonBurstSignature(...))``,
the register file ``In(AvalonRegisterSignature(...))``.

The protocol rules these ports follow (Avalon Interface Specifications, chapter 3,
"Avalon Memory-Mapped Interfaces"; the rules a master must keep are checked by the DRAM
models of ``tests/test_engine_dma.py``):

- A command (``read`` or ``write`` with ``address``, ``burstcount``, ``byteenable``) is
  accepted at the rising edge of a cycle in which ``waitrequest`` is low. While
  ``waitrequest`` is high the master holds every command signal constant: a presented
  command cannot be withdrawn.
- ``address`` is a byte address aligned to the data word; ``burstcount`` is the number of
  words, ``1 <= burstcount <= max_burst``, and a ``burstcount`` of ``n`` bits allows
  bursts up to ``2**(n - 1)`` words (the HPS port asks for a power of two).
- A write burst is ``burstcount`` beats of ``writedata``; the agent captures the address
  and ``burstcount`` with the first, and each beat is accepted in a cycle with
  ``waitrequest`` low, like a command. ``byteenable`` is per beat.
- A read burst is one command; its words return in order, one per cycle in which the
  agent raises ``readdatavalid``, possibly with gaps, some cycles after the command was
  accepted. The master cannot hold them back (there is no ready for read data), so it
  issues a read only when it has room for every word it has asked for.
- Bursts are not interrupted: once a burst has started on the bus it runs to its last
  word; arbitration stays locked to it until then.
"""

from amaranth.hdl import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AvalonBurstSignature", "AvalonRegisterSignature", "DATA_WIDTHS",
           "MAX_BURSTCOUNT_BITS"]

#: Data widths of the HPS's FPGA-to-SDRAM ports.
DATA_WIDTHS = (32, 64, 128, 256)
#: Width of the HPS port's ``burstcount``: bursts of up to 1,024 words.
MAX_BURSTCOUNT_BITS = 11


class AvalonBurstSignature(wiring.Signature):
    """An Avalon-MM master port with bursts, as the master sees it.

    Parameters
    ----------
    data_width : int
        Bits per word: 32, 64 (default), 128 or 256.
    max_burst : int
        Longest burst in words, a power of two from 1 to 1,024 (default 16).
    addr_width : int
        Bits of the byte address (default 32, the HPS port's).
    read, write : bool
        Which directions the port has (default both). A read-only port has no ``write``
        and ``writedata``; a write-only port no ``read``, ``readdata`` and
        ``readdatavalid``. The HPS offers bidirectional, read-only and write-only
        Avalon-MM ports.

    Members
    -------
    address : ``Out(addr_width)``
        Byte address of the burst's first word, a multiple of ``data_width // 8``.
    burstcount : ``Out(log2(max_burst) + 1)``
        Words in the burst, 1 to ``max_burst``.
    byteenable : ``Out(data_width // 8)``
        Bytes written by a write beat (bit ``k``: byte lane ``k``, bits ``8k..8k+7``);
        all ones on reads.
    waitrequest : ``In(1)``
        The agent takes no command or write beat this cycle.
    read : ``Out(1)``
        A read command is presented.
    readdata : ``In(data_width)``
        A word of read data, valid with ``readdatavalid``.
    readdatavalid : ``In(1)``
        ``readdata`` holds the next word of the oldest read burst.
    write : ``Out(1)``
        A write beat is presented (the first one carries the command).
    writedata : ``Out(data_width)``
        The write beat's word.

    Attributes
    ----------
    data_width, max_burst, addr_width : int
    bytes_per_word : int
    burstcount_width : int
    readable, writable : bool
    """

    def __init__(self, *, data_width=64, max_burst=16, addr_width=32, read=True,
                 write=True):
        if data_width not in DATA_WIDTHS:
            raise ValueError(f"data_width must be one of {DATA_WIDTHS}, not {data_width!r}")
        if (not isinstance(max_burst, int) or max_burst < 1
                or max_burst & (max_burst - 1)
                or max_burst > 1 << (MAX_BURSTCOUNT_BITS - 1)):
            raise ValueError(f"max_burst must be a power of two from 1 to "
                             f"{1 << (MAX_BURSTCOUNT_BITS - 1)}, not {max_burst!r}")
        bytes_per_word = data_width // 8
        min_addr = bytes_per_word.bit_length()      # room for one word-aligned address
        if not isinstance(addr_width, int) or not min_addr <= addr_width <= 64:
            raise ValueError(f"addr_width must be an integer from {min_addr} to 64, not "
                             f"{addr_width!r}")
        if not (read or write):
            raise ValueError("a port reads, writes or both")
        self.data_width = data_width
        self.max_burst = max_burst
        self.addr_width = addr_width
        self.bytes_per_word = bytes_per_word
        self.burstcount_width = max_burst.bit_length()
        self.readable = bool(read)
        self.writable = bool(write)
        members = {
            "address": Out(unsigned(addr_width)),
            "burstcount": Out(unsigned(self.burstcount_width)),
            "byteenable": Out(unsigned(bytes_per_word)),
            "waitrequest": In(1),
        }
        if read:
            members.update({
                "read": Out(1),
                "readdata": In(unsigned(data_width)),
                "readdatavalid": In(1),
            })
        if write:
            members.update({
                "write": Out(1),
                "writedata": Out(unsigned(data_width)),
            })
        super().__init__(members)

    def __eq__(self, other):
        return (type(other) is type(self)
                and (other.data_width, other.max_burst, other.addr_width, other.readable,
                     other.writable)
                == (self.data_width, self.max_burst, self.addr_width, self.readable,
                    self.writable))

    def __hash__(self):
        return hash((type(self), self.data_width, self.max_burst, self.addr_width,
                     self.readable, self.writable))

    def __repr__(self):
        return (f"AvalonBurstSignature(data_width={self.data_width}, "
                f"max_burst={self.max_burst}, addr_width={self.addr_width}, "
                f"read={self.readable}, write={self.writable})")


class AvalonRegisterSignature(wiring.Signature):
    """An Avalon-MM port for registers with a fixed read latency of one cycle, as the
    master sees it.

    The agent has no ``waitrequest``: every command is accepted in the cycle it is
    presented, and read data is valid in the cycle after the read command (Avalon
    ``readLatency`` 1, no ``readdatavalid``). Registers never need wait states, so this
    is the simplest agent the interconnect (Platform Designer, the HPS's lightweight
    bridge) accepts, and the host's read costs one cycle of the agent's clock. There is
    no ``byteenable``: writes are whole 32-bit words.

    Parameters
    ----------
    addr_width : int
        Bits of the word address (the register index), default 5.
    data_width : int
        Bits per register, default 32.

    Members
    -------
    address : ``Out(addr_width)``
        Register index (a word address; the interconnect divides the host's byte address
        by 4).
    read : ``Out(1)``
        Read the register; ``readdata`` holds it in the next cycle.
    write : ``Out(1)``
        Write ``writedata`` into the register at this cycle's rising edge.
    writedata : ``Out(data_width)``
    readdata : ``In(data_width)``
        Valid in the cycle after a read command; undefined otherwise.

    Attributes
    ----------
    addr_width, data_width : int
    read_latency : int
        1.
    """

    read_latency = 1

    def __init__(self, *, addr_width=5, data_width=32):
        if not isinstance(addr_width, int) or not 1 <= addr_width <= 32:
            raise ValueError(f"addr_width must be an integer from 1 to 32, not {addr_width!r}")
        if data_width not in (8, 16, 32, 64):
            raise ValueError(f"data_width must be 8, 16, 32 or 64, not {data_width!r}")
        self.addr_width = addr_width
        self.data_width = data_width
        super().__init__({
            "address": Out(unsigned(addr_width)),
            "read": Out(1),
            "write": Out(1),
            "writedata": Out(unsigned(data_width)),
            "readdata": In(unsigned(data_width)),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width))

    def __repr__(self):
        return (f"AvalonRegisterSignature(addr_width={self.addr_width}, "
                f"data_width={self.data_width})")
