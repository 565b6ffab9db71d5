"""groupnet-hw: compile trained Group-Net binary networks into bit-exact FPGA dataflow accelerators."""

__version__ = "0.1.0"
