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
"""

from .avalon import AvalonBurstSignature, AvalonRegisterSignature
from .core import ComputeSequencer, EngineCore
from .csr import EngineCSR
from .dma import ReadDMA, WriteDMA, descriptor_layout
from .sequencer import EngineShell, Sequencer

__all__ = ["AvalonBurstSignature", "AvalonRegisterSignature", "ComputeSequencer", "EngineCSR",
           "EngineCore", "EngineShell",
           "ReadDMA", "Sequencer", "WriteDMA", "descriptor_layout"]
