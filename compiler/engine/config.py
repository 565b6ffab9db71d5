"""The engine's size and the DRAM behind its memory port.

Both records are frozen and validated on construction, so a typo or an impossible
size fails where it is written, not in the cycle model or the RTL.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineConfig", "DramModel", "DE10_NANO_DRAM"]


def _positive(owner, **values):
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    """Size of one layer-sequential engine.

    Parameters
    ----------
    arrays : int
        K_hw: XNOR-popcount arrays, one base each; a descriptor group of K bases runs
        in ``ceil(K / arrays)`` rounds.
    pe, simd : int
        Output channels and input lanes of one array: an array has ``pe * simd`` lanes
        and takes ``ceil(C_out/pe) * k*k * ceil(C_in/simd)`` cycles per output pixel (a
        tap's channels are words of their own: :func:`.cycles.binary_fold_cycles`).
    stem_pe, stem_simd : int
        The full-precision stem's multiplier array (DSP blocks): the same folding
        formula with integer multiplies.
    vector_lanes : int
        Channels per cycle of the element-wise unit (post-ops, adds, thresholds,
        mixers), of max pooling and of the classifier head; a binary convolution's
        epilogue takes ``ceil(pe / vector_lanes)`` beats a job of each output fold.
    port_bytes : int
        Data width of the Avalon-MM master in bytes (16: the DE10-Nano's FPGA-to-SDRAM
        port at 128 bits). Tensor rows and parameter blocks are padded to it, so every
        row is whole bursts.
    input_buffer, weight_buffer, output_buffer : int
        On-chip tile buffers in bytes, each double buffered (a transfer fills one half
        while the units work on the other). The input and output buffers are shared by
        the arrays (the jobs of one round split them); the weight buffer is per array.
    replay_row_bytes : int
        Bytes of an input row the runner's row replay holds (``hw/engine/replay.py``,
        two slots): a binary convolution whose jobs all read one map
        (``shared_input``) reads each row of at most these bytes once for every job of
        a round, else once a job (and beside a residual add, whose side rows come
        between the input rows, always once a job).
    map_buffer : int
        Bytes of the runner's output map buffer (``hw/engine/mapbuffer.py``), in which a
        weight-streaming descriptor's output maps are assembled a chunk at a time where
        they fit, then written at its end (larger maps go straight to DRAM as they are
        computed).
    ring_rows : int
        Rows of the window gatherer's ring (docs/architecture.md section 15): a
        weight-streaming descriptor reads its input once for all its chunks only where
        the ring holds the whole map (at most ``ring_rows`` rows, and half the input
        buffer), else once a chunk.
    clock_mhz : float
        The engine's own clock (a PLL output on the board), in MHz.
    pipeline_depth : int
        Cycles from a descriptor's first operand to its first result (window, array
        tree, epilogue registers); paid once per descriptor.
    scratchpad : int
        0: the tile buffers above (the intended engine: prologue thresholds applied as
        rows arrive, so the input buffer holds narrow levels). Else the bytes of the one
        scratchpad of the core that ``hw/engine/core.py`` implements, which holds a
        descriptor's job table, its jobs' parameter blocks and every job's rows of a
        tile as they are in DRAM, and streams weights on its own when the blocks do not
        fit (:func:`.tiling.scratchpad_need`); the row tiles are sized for it.
    fuse_overlapping_pools : bool
        A convolution followed by a max pooling whose windows overlap (kernel > stride,
        the ResNet stem's 3x3/2) pools on chip. True for the intended engine, whose
        pooling unit sees each convolution result once; False for the core as built,
        which evaluates the convolution once per pooling tap (2.25x the stem's work
        at 3x3/2): its result goes to DRAM and a MAXPOOL descriptor pools it.
    prologue_thresholds : bool
        A binary convolution applies the threshold of its input as it reads it (fusion
        rule 3). True for the intended engine (thresholds applied as rows arrive);
        False for the core as built, whose gather reads a wide element per lane and
        its thresholds beside it: a PIXEL descriptor writes the levels as packed bits
        once per base, and the convolution gathers a tap's channels in one read (a 1x1
        convolution, which thresholds no element twice, keeps its prologue).
    group_by_tensor : bool
        Jobs without weights (PIXEL, MAXPOOL, SUBSAMPLE) share a descriptor only with
        jobs that read the same tensor (fusion rule 4), so that each descriptor loads
        its input once for all its jobs; False: with every job whose input comes from
        the same descriptor (fewer descriptors, one input load a job). The core's cycle
        model decides for the core (:func:`.target.compile_for_core`).
    levels_at_producer : bool
        A mixer whose outputs binary convolutions read through their input thresholds
        applies those thresholds itself and writes the levels beside (or, where nothing
        else reads them, instead of) its wide outputs (fusion rule 7): the next layers
        read bits instead of wide maps. True for the intended engine, whose mixer lanes
        feed threshold lanes; False for the core as built, which has none there.
    fixed_containers : tuple of int
        Element bits a fixed-point map may take in DRAM: the smallest that holds its
        proven range. (8, 16, 24, 32, 64) for the intended engine (ResNet-18's wide
        maps prove 17 to 20 bits: three bytes instead of four); the core as built
        reads powers of two only.
    tap_aligned_weights : bool
        A binary convolution's weights are packed *tap-aligned*: a window's SIMD folds
        are its taps (``ky``, then ``kx``), each of ``ceil(C_in/groups / simd)`` folds
        of that tap's channels alone, lanes beyond them 0, the order in which the
        window gatherer reads the input (docs/architecture.md section 15). True for
        the intended engine; False for the core as built, whose gather packs a tap's
        channels against the previous tap's: the flat window of ``k*k*C_in/groups``
        lanes in ``ceil(k*k*C_in/groups / simd)`` folds. The program's header records
        the order (:func:`.params.tap_aligned_weights`).
    coefficient_fraction : int or None
        Fraction bits of the mixer lanes' coefficients (``hw/engine/mixer.py``): they
        scale a mixer's lambdas and gates to it and shift by it, so a program's
        fractions must be at most this and its coefficients, scaled, 18-bit signed
        (:func:`.layout.unit_operand_refusal`). 12 for the intended engine; None for
        the core as built, which shifts by any fraction at run time.
    scale_bits : int or None
        Signed bits of a post-op scale ``A`` in the epilogue lanes: one multiplier a
        lane, the sum being the other operand. 18 for the intended engine; None for
        the core as built (its multipliers take ``MUL_BITS``).
    frames_in_flight : bool
        The image also holds the programs that run the next frame's stem, detached,
        beside this frame's other descriptors (:mod:`.frames`): a stream of frames then
        takes the longer of the two a frame. True for the intended engine, whose stem
        runner shares the DMAs from their background side; False for the core as
        built.
    """

    arrays: int = 5
    pe: int = 16
    simd: int = 64
    stem_pe: int = 16
    stem_simd: int = 9
    vector_lanes: int = 8
    port_bytes: int = 16
    input_buffer: int = 192 * 1024
    weight_buffer: int = 16 * 1024
    output_buffer: int = 192 * 1024
    ring_rows: int = 16
    replay_row_bytes: int = 8192
    map_buffer: int = 64 * 1024
    clock_mhz: float = 100.0
    pipeline_depth: int = 24
    scratchpad: int = 0
    fuse_overlapping_pools: bool = True
    prologue_thresholds: bool = True
    group_by_tensor: bool = False
    levels_at_producer: bool = True
    fixed_containers: tuple = (8, 16, 24, 32, 64)
    tap_aligned_weights: bool = True
    coefficient_fraction: int | None = 12
    scale_bits: int | None = 18
    frames_in_flight: bool = True

    def __post_init__(self):
        _positive("EngineConfig", arrays=self.arrays, pe=self.pe, simd=self.simd,
                  stem_pe=self.stem_pe, stem_simd=self.stem_simd,
                  vector_lanes=self.vector_lanes, port_bytes=self.port_bytes,
                  input_buffer=self.input_buffer, weight_buffer=self.weight_buffer,
                  output_buffer=self.output_buffer, pipeline_depth=self.pipeline_depth,
                  ring_rows=self.ring_rows, replay_row_bytes=self.replay_row_bytes)
        if self.scratchpad < 0 or self.scratchpad % self.port_bytes:
            raise ValueError(f"EngineConfig.scratchpad ({self.scratchpad}) must be whole "
                             "port words")
        if self.port_bytes & (self.port_bytes - 1) or not 4 <= self.port_bytes <= 64:
            raise ValueError("EngineConfig.port_bytes must be a power of two from 4 to 64 "
                             f"(Avalon-MM data widths of 32 to 512 bits), got {self.port_bytes}")
        for name in ("input_buffer", "weight_buffer", "output_buffer"):
            size = getattr(self, name)
            if size % (2 * self.port_bytes):
                raise ValueError(f"EngineConfig.{name} ({size}) must be a multiple of two "
                                 f"port words ({2 * self.port_bytes} bytes): it is double "
                                 "buffered in whole bursts")
        if not set(self.fixed_containers) <= {8, 16, 24, 32, 64} or 64 not in self.fixed_containers:
            raise ValueError("EngineConfig.fixed_containers must be taken from 8, 16, 24, 32 "
                             f"and 64 bits and hold 64 (the logits), got {self.fixed_containers}")
        if not isinstance(self.tap_aligned_weights, bool):
            raise ValueError("EngineConfig.tap_aligned_weights must be True or False, "
                             f"got {self.tap_aligned_weights!r}")
        if not (isinstance(self.clock_mhz, (int, float)) and 1 <= self.clock_mhz <= 1000):
            raise ValueError(f"EngineConfig.clock_mhz must be in [1, 1000], got {self.clock_mhz!r}")

    @property
    def lanes(self):
        """XNOR lanes of all arrays."""
        return self.arrays * self.pe * self.simd


@dataclass(frozen=True)
class DramModel:
    """What the engine's memory port sees of DRAM, in engine cycles.

    Parameters
    ----------
    latency : int
        Cycles from a read burst's address to its first data beat.
    bytes_per_cycle : float
        Sustained bytes per engine cycle, reads and writes together.

    Notes
    -----
    The default (:data:`DE10_NANO_DRAM`, 48 cycles and 10 bytes per cycle at 100 MHz,
    i.e. 480 ns and 1.0 GB/s) is deliberately conservative for the DE10-Nano:

    - The fabric reaches the HPS's 1 GB of DDR3 only through the HPS SDRAM controller's
      FPGA-to-SDRAM ports. The memory is 32-bit DDR3-800: 800 MT/s x 4 bytes = 3.2 GB/s
      peak, shared with the ARM cores running Linux and with every other port.
    - A single port's sustained throughput is well under half of the peak once refresh,
      bank and read/write turn-arounds and the controller's arbitration are paid;
      1.0 GB/s assumes mixed read/write traffic of whole bursts (Altera's Cyclone V HPS
      SDRAM controller documentation gives efficiency figures of that order for
      mixed traffic; we have not measured it on the board).
    - Read latency through the controller and the clock crossing into the fabric is a
      few hundred nanoseconds; 480 ns (48 cycles at 100 MHz) is at the high end of the
      30-60 cycles we expect.

    The RTL's DRAM model (the fast path's C++ model) takes the same two numbers and
    sustains the rate in whole bus words: a 16-byte port at 10 bytes per cycle moves
    five words in eight cycles.
    """

    latency: int = 48
    bytes_per_cycle: float = 10.0

    def __post_init__(self):
        if not isinstance(self.latency, int) or self.latency < 0:
            raise ValueError(f"DramModel.latency must be a non-negative integer, got {self.latency!r}")
        if not (isinstance(self.bytes_per_cycle, (int, float)) and self.bytes_per_cycle > 0):
            raise ValueError("DramModel.bytes_per_cycle must be positive, "
                             f"got {self.bytes_per_cycle!r}")

    @classmethod
    def at_clock(cls, clock_mhz, gbytes_per_s=1.0, latency_ns=480.0):
        """The same DRAM seen from an engine clocked at ``clock_mhz``."""
        return cls(latency=int(round(latency_ns * clock_mhz / 1000.0)),
                   bytes_per_cycle=gbytes_per_s * 1000.0 / clock_mhz)

    def gbytes_per_s(self, clock_mhz):
        """Sustained bandwidth in GB/s at the engine clock."""
        return self.bytes_per_cycle * clock_mhz / 1000.0


#: The default DRAM model for the DE10-Nano at the default 100 MHz engine clock.
DE10_NANO_DRAM = DramModel.at_clock(100.0)
