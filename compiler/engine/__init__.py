"""The layer-sequential engine's back end (docs/architecture.md section 12).

One set of hardware units runs every layer; weights and feature maps live in DRAM and
a program of fixed-size descriptors, written by the compiler into the same memory
image, drives the units. The modules, each with one job:

- :mod:`.config`: the engine's size (:class:`EngineConfig`) and the DRAM it sees
  (:class:`DramModel`).
- :mod:`.fusion`: which graph nodes one descriptor executes, and which descriptors
  run their bases side by side on the K_hw arrays.
- :mod:`.formats`: tensor formats in DRAM and their numpy packing helpers.
- :mod:`.program`: the descriptor and program-header encodings.
- :mod:`.layout`: parameter packing, liveness allocation, the memory image;
  :func:`compile_engine` puts it all together.
- :mod:`.cycles`: the cycle model per descriptor and per frame.
- :mod:`.sizing`: an engine configuration for a board budget.

The reference model that executes a program on an image is
:mod:`groupnet_hw.sim.engine_model`.
"""
