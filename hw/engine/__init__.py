"""The sequential engine's hardware: one set of units shared by all layers, with weights
and feature maps in DRAM (docs/architecture.md, "The engine's memory and control ports").

- :mod:`.avalon`: the Avalon-MM port signatures (the DRAM master with bursts, the
  register agent).
- :mod:`.dma`: the read and write DMAs (descriptors in, bursts on the bus, the DRAM
  window checked in hardware, bursts finished across a soft reset).
- :mod:`.csr`: the register file (control, status, window, program address, counters);
  its map is ``groupnet_hw.engine_registers``.
- :mod:`.sequencer`: fetches the program's descriptors through the read DMA and runs
  them (COPY and END so far, ``groupnet_hw.engine_opcodes``); ``EngineShell`` is the
  top with the ports, the register file, the sequencer and the DMAs.
- :mod:`.core`: the compute path: ``ComputeSequencer`` runs the compiler's layer
  descriptors (docs/architecture.md section 12) bit-exact with the reference model;
  ``EngineCore`` is ``EngineShell`` with it.
- :mod:`.arrays`: the intended engine's first unit (docs/architecture.md section 15):
  ``BaseArrays``, K_hw pipelined XNOR-popcount arrays that take one fold a cycle each.
- :mod:`.loader`: ``RowLoader``, a binary map's rows from the read DMA (the DRAM
  format) into the gatherer's ring, each base in its slice.
- :mod:`.gather`: ``WindowGather``, each output pixel's window read from the input
  rows on chip, a tap-aligned word a cycle.
- :mod:`.folds`: ``FoldIssuer``, which feeds the arrays: two window buffers and a weight
  buffer read once per (output fold, input fold).
- :mod:`.feeder`: ``EpilogueFeeder``, each output fold's sums into epilogue beats with
  their channels' constants from an on-chip buffer.
- :mod:`.epilogue`: ``EpilogueLanes``, the post-op, residual add, ReLU and
  threshold stages a channel a lane, the constants in the beat.
- :mod:`.mixer`: ``MixerLanes``, a block's aggregation of its K bases and the next
  block's soft gates, behind the epilogue.
- :mod:`.layer`: ``LayerDatapath``, those five connected: a binary convolution and its
  epilogue for the K_hw jobs of a descriptor.
"""

from .arrays import BaseArrays
from .avalon import AvalonBurstSignature, AvalonRegisterSignature
from .core import ComputeSequencer, EngineCore
from .csr import EngineCSR
from .epilogue import EpilogueLanes
from .feeder import EpilogueFeeder
from .folds import FoldIssuer
from .gather import WindowGather
from .layer import LayerDatapath
from .loader import RowLoader
from .mixer import MixerLanes
from .dma import ReadDMA, WriteDMA, descriptor_layout
from .sequencer import EngineShell, Sequencer

__all__ = ["AvalonBurstSignature", "BaseArrays", "AvalonRegisterSignature", "ComputeSequencer", "EngineCSR",
           "EngineCore", "EngineShell", "EpilogueFeeder", "EpilogueLanes", "FoldIssuer",
           "LayerDatapath", "MixerLanes",
           "ReadDMA", "RowLoader", "Sequencer", "WindowGather", "WriteDMA", "descriptor_layout"]
