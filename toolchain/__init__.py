"""toolchain: what runs the FPGA tools on a build.

- :mod:`.synth`: Yosys synthesis and nextpnr place and route with the YoWASP tools
  (``groupnet-hw synth``);
- :mod:`.netlist`, :mod:`.dsp_registers`, :mod:`.bram_registers`,
  :mod:`.hard_registers`: passes on Yosys's JSON netlist of an ECP5 design between Yosys
  and nextpnr (``python3 -m groupnet_hw.toolchain.hard_registers NETLIST.json``);
- :mod:`.board_project`: a board's vendor project, written and built
  (``groupnet-hw build``).

The hardware it builds is :mod:`groupnet_hw.hw`'s (which imports nothing from here);
the board and device facts are :mod:`groupnet_hw.devices`'.
"""
