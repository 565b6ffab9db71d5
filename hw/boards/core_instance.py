"""The accelerator core as an instance of the Verilog module a build already wrote.

A board top needs the core's ports, not its logic: elaborating the accelerator a second
time for the board project would take as long as the first (minutes on a CIFAR-size
network) and could only give the same Verilog. :class:`CoreInstance` has the core's
signature and elaborates to an ``Instance`` of its module; the build adds the core's
Verilog file to the board's project beside the top.
"""

from __future__ import annotations

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring

__all__ = ["CoreInstance"]


class CoreInstance(wiring.Component):
    """A stand-in for an elaborated accelerator core: same ports, no logic of its own.

    Parameters
    ----------
    core : wiring.Component
        The accelerator whose Verilog module is instantiated; only its signature and
        ``n_pixels`` are read (it is not elaborated again).
    module_name : str
        The Verilog module's name (``groupnet_core``).

    Attributes
    ----------
    i, o : the core's stream ports, in the same directions and payload shapes.
    n_pixels : int or None
        Pixels per frame, as the core's.

    Latency and throughput are the instantiated core's.
    """

    def __init__(self, core, module_name):
        self.module_name = module_name
        self.n_pixels = getattr(core, "n_pixels", None)
        super().__init__(core.signature)

    def elaborate(self, platform):
        m = Module()
        # Amaranth's Verilog names a port's members path__member (``i__valid``); the
        # payloads are flat vectors there, so their bits are connected as values.
        ports = {"i_clk": ClockSignal("sync"),
                 # a reset-less domain (ECP5 starts through GSR) holds the core out of reset
                 "i_rst": ResetSignal("sync", allow_reset_less=True)}
        for name in ("i", "o"):
            port = getattr(self, name)
            inward = name == "i"
            ports[f"{'i' if inward else 'o'}_{name}__valid"] = port.valid
            ports[f"{'o' if inward else 'i'}_{name}__ready"] = port.ready
            ports[f"{'i' if inward else 'o'}_{name}__payload"] = _bits(port.payload)
        m.submodules.core = Instance(self.module_name, **ports)
        return m


def _bits(payload):
    return payload.as_value() if hasattr(payload, "as_value") else payload
