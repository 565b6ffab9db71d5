"""torch.fx tracing with the layer library as leaves.

The network's ``forward`` is the one description of its architecture. Tracing it with
every :data:`~.layers.LIBRARY_LAYERS` module as a leaf gives a graph of library-layer
calls (plus ``getitem`` on multi-output layers); :func:`run_fixed` runs that graph with
each layer's ``forward_fixed`` (the model's exact fixed-point forward), and the
compiler's front end lowers the same graph, one registered rule per layer type.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .fixed import Fixed
from .layers import LIBRARY_LAYERS

__all__ = ["LibraryTracer", "trace_layers", "run_fixed", "FixedInterpreter"]


class LibraryTracer(fx.Tracer):
    """Records library layers as ``call_module`` leaves and traces through everything else."""

    def is_leaf_module(self, m, module_qualified_name):
        return isinstance(m, LIBRARY_LAYERS)


def trace_layers(model: torch.nn.Module) -> fx.GraphModule:
    """The model's forward as an fx graph of library-layer calls.

    Raises
    ------
    ValueError
        if the forward computes anything outside the library (a plain ``+`` or a
        torch function): every op must be a layer so the compiler can lower it.
    """
    graph = LibraryTracer().trace(model)
    for node in graph.nodes:
        if node.op == "call_function" and node.target.__name__ == "getitem":
            continue
        if node.op in ("call_function", "call_method"):
            raise ValueError(f"{type(model).__name__}.forward computes {node.target!r} outside "
                             "the layer library; use a library layer instead")
    return fx.GraphModule(model, graph)


class FixedInterpreter(fx.Interpreter):
    """Runs a traced network with each library layer's ``forward_fixed``."""

    def __init__(self, module, keep_trace=False):
        super().__init__(module)
        self.keep_trace = keep_trace
        self.trace = {}

    def call_module(self, target, args, kwargs):
        return self.fetch_attr(target).forward_fixed(*args, **kwargs)

    def run_node(self, n):
        value = super().run_node(n)
        if self.keep_trace and n.op in ("call_module", "call_function"):
            self.trace[n.name] = value
        return value


def traced(model):
    """Cached :func:`trace_layers` (the trace depends on the module structure only).

    Kept in the instance ``__dict__``: as a module attribute the GraphModule would be
    registered as a submodule and enter the state dict.
    """
    gm = model.__dict__.get("_library_trace")
    if gm is None:
        gm = model.__dict__["_library_trace"] = trace_layers(model)
    return gm


def run_fixed(model, pixels, keep_trace=False):
    """``(logits Fixed, trace)`` of the model's exact fixed-point forward."""
    interp = FixedInterpreter(traced(model), keep_trace)
    out = interp.run(pixels)
    if not isinstance(out, Fixed):
        raise ValueError("the network's output is not a fixed-point tensor")
    return out, interp.trace
