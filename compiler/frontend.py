"""Front end: any network built from the layer library -> graph IR.

The model is traced with torch.fx, library layers as leaves (:mod:`..models.tracing`),
and every call of a layer is lowered by the one rule registered for its type
(:func:`lowers`), as hls4ml's per-layer handlers do. A rule reads the layer's own
quantization methods -- the same ones its ``forward_fixed`` uses -- so the constants
of the integer graph are those of the model's fixed-point forward, while the integer
arithmetic on them (the executor) stays independent.

Lowering tracks, for each traced value, a :class:`TensorMeta`: its graph reference, its
type (``bits``/``uint``/``fixed``, bits, fractional bits) and the affine map still
pending on it (a binary convolution's alpha, an n-bit step, a pooling's 1/(H*W)),
exactly as :class:`~..models.fixed.Fixed` does in the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..models import layers as L
from ..models.layers import conv_out_size
from ..models.tracing import traced
from .graph import Graph, Node

__all__ = ["TensorMeta", "lowers", "RULES", "lower", "LoweringError"]


class LoweringError(ValueError):
    """A model the front end cannot lower; the message names the layer."""


@dataclass(frozen=True)
class TensorMeta:
    """A traced value during lowering: graph reference, shape, type, pending affine map."""

    ref: str
    channels: int
    height: int
    width: int
    kind: str
    bits: int = 0
    frac: int = 0
    scale: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    #: channels the model's tensor has when the graph node carries fewer (option-A
    #: shortcut: the zero channels are added by the residual add)
    padded_channels: int | None = None

    @property
    def pending(self):
        return self.scale is not None or self.offset is not None


@dataclass(frozen=True)
class Pooled:
    """A global pooling awaiting its classifier (pooling and classifier are one unit)."""

    source: TensorMeta
    scale: torch.Tensor


#: layer type -> lowering rule ``rule(ctx, layer, *args) -> TensorMeta | list``
RULES = {}


def lowers(layer_type):
    """Decorator registering the lowering rule of one library layer type."""
    def deco(fn):
        if layer_type in RULES:
            raise ValueError(f"{layer_type.__name__} has two lowering rules")
        RULES[layer_type] = fn
        return fn
    return deco


class LoweringContext:
    """The graph under construction and the layer being lowered (for names and errors)."""

    def __init__(self, input_shape):
        self.graph = Graph()
        self.input_shape = input_shape
        self.where = ""

    def fail(self, problem):
        raise LoweringError(f"{self.where}: {problem}")

    def emit(self, op, inputs, like: TensorMeta = None, attrs=None, outputs=1, **fields):
        """Add a node named after the current layer; returns its name."""
        base = dict(channels=like.channels, height=like.height, width=like.width, kind=like.kind,
                    bits=like.bits, frac=like.frac) if like is not None else {}
        base.update(fields)
        name = self.graph.unique_name(self.where)
        self.graph.add(Node(name, op, [m.ref if isinstance(m, TensorMeta) else m for m in inputs],
                            attrs or {}, outputs=outputs, **base))
        return name

    def realized(self, x, what):
        if not isinstance(x, TensorMeta):
            self.fail(f"{what} takes a feature map, not a pooled vector")
        if x.pending:
            self.fail(f"{what} needs real integers, but a scale or offset is still pending; "
                      "put a batch norm before it")
        if x.padded_channels is not None:
            self.fail("an option-A shortcut may only feed a residual add")
        return x


# ----------------------------------------------------------------- rules
@lowers(L.InputQuant)
def _input(ctx, layer, pixels):
    c, h, w = ctx.input_shape
    meta = TensorMeta("", c, h, w, "uint", bits=8, frac=layer.frac)
    ref = ctx.emit("input", [], meta)
    ctx.graph.input = ref
    return replace(meta, ref=ref)


@lowers(L.FPConv2d)
def _fp_conv(ctx, layer, x):
    ctx.realized(x, "a full-precision convolution")
    w_q, w_frac = layer.quantized_weight()
    k, s, p, d = layer.kernel_size[0], layer.stride[0], layer.padding[0], layer.dilation[0]
    size = conv_out_size(x.height, k, s, d, p)
    out = TensorMeta("", layer.out_channels, size, size, "fixed", frac=x.frac + w_frac,
                     offset=layer.bias.detach().double() if layer.bias is not None else None)
    ref = ctx.emit("int_conv", [x], out, dict(weight=w_q, kernel=k, stride=s, dilation=d,
                                              padding=p))
    return replace(out, ref=ref)


@lowers(L.BinaryConv2d)
def _bin_conv(ctx, layer, x):
    if x.kind == "bits":
        in_bits = 0
    elif x.kind == "uint" and x.offset is None:
        # n-bit levels (frac 0) or 8-bit input pixels (FINN's first layer): the unit
        # multiplies the unsigned integers; their frac only scales the result
        in_bits = x.bits
    else:
        ctx.fail("a binary convolution takes binary or n-bit activations")
    k, s, d, p = layer.kernel_size, layer.stride, layer.dilation, layer.padding
    size = conv_out_size(x.height, k, s, d, p)
    scale = layer.alpha() * (x.scale if x.scale is not None else 1.0)
    out = TensorMeta("", layer.out_channels, size, size, "fixed", frac=x.frac, scale=scale)
    ref = ctx.emit("bin_conv", [x], out, dict(bits=layer.weight_bits(), kernel=k, stride=s,
                                              dilation=d, padding=p, in_bits=in_bits))
    return replace(out, ref=ref)


@lowers(L.ReLU)
def _relu(ctx, layer, x):
    if x.offset is not None or (x.scale is not None and (x.scale < 0).any()):
        ctx.realized(x, "ReLU")
    return replace(x, ref=ctx.emit("relu", [x], x))


@lowers(L.BatchNorm)
def _batchnorm(ctx, layer, x):
    if x.kind == "bits":
        ctx.fail("batch norm of binary values: put it after a convolution")
    A, B, shift = layer.fold(x)
    out = TensorMeta("", x.channels, x.height, x.width, "fixed", frac=int(layer.out_frac))
    ref = ctx.emit("postop", [x], out, dict(A=A, B=B, shift=shift, pre_relu=False,
                                            post_relu=False))
    return replace(out, ref=ref)


def _threshold(ctx, x, per_channel_t, kind, bits):
    c = x.channels
    T = torch.tensor([list(per_channel_t)] * c, dtype=torch.int64)
    out = TensorMeta("", c, x.height, x.width, kind, bits=bits)
    return out, ctx.emit("threshold", [x], out, dict(T=T, invert=torch.zeros(c, dtype=torch.int64)))


@lowers(L.BinaryActivation)
def _sign(ctx, layer, x):
    if x.offset is not None or (x.scale is not None and (x.scale < 0).any()):
        ctx.realized(x, "a binary activation")
    out, ref = _threshold(ctx, x, [0], "bits", 1)
    return replace(out, ref=ref)


@lowers(L.NBitActivation)
def _nbit(ctx, layer, x):
    ctx.realized(x, "an n-bit activation")
    out, ref = _threshold(ctx, x, layer.thresholds(x.frac), "uint", layer.bits)
    return replace(out, ref=ref, scale=torch.tensor([layer.step], dtype=torch.float64))


@lowers(L.MaxPool)
def _maxpool(ctx, layer, x):
    if x.scale is not None and (x.scale < 0).any():
        ctx.realized(x, "max pooling")
    k, s, p = layer.kernel_size, layer.stride, layer.padding
    size = conv_out_size(x.height, k, s, 1, p)
    out = replace(x, height=size, width=size)
    return replace(out, ref=ctx.emit("maxpool", [x], out, dict(kernel=k, stride=s, padding=p)))


@lowers(L.OptionAShortcut)
def _shortcut(ctx, layer, x):
    ctx.realized(x, "a shortcut")
    out = x
    if layer.stride > 1:
        size = (x.height - 1) // layer.stride + 1
        out = replace(x, height=size, width=size)
        out = replace(out, ref=ctx.emit("subsample", [x], out, dict(stride=layer.stride)))
    if layer.out_channels != x.channels:
        out = replace(out, padded_channels=layer.out_channels)
    return out


@lowers(L.Add)
def _add(ctx, layer, a, b):
    ctx.realized(a, "a residual add")
    if b.padded_channels not in (None, a.channels):
        ctx.fail(f"adds {a.channels} to {b.padded_channels} channels")
    ctx.realized(replace(b, padded_channels=None), "a residual add")
    if a.frac != b.frac:
        ctx.fail(f"adds values with {a.frac} and {b.frac} fractional bits; the joined "
                 "tensors must share a format")
    return replace(a, ref=ctx.emit("add", [a, b], a))


def _joined(ctx, metas, what):
    for m in metas:
        ctx.realized(m, what)
    if len({m.frac for m in metas}) != 1 or len({m.channels for m in metas}) != 1:
        ctx.fail(f"{what} of tensors in different formats "
                 f"({sorted({(m.channels, m.frac) for m in metas})} channels, frac)")


@lowers(L.Aggregation)
def _aggregation(ctx, layer, xs):
    _joined(ctx, xs, "aggregation")
    ref = ctx.emit("mixer", xs, xs[0], dict(lambdas=layer.quantized_lambdas(),
                                            lambda_frac=layer.lambda_frac, gates=None,
                                            gate_frac=0))
    return replace(xs[0], ref=ref)


@lowers(L.SoftGate)
def _gate(ctx, layer, xs, agg):
    _joined(ctx, list(xs) + [agg], "soft gate")
    ref = ctx.emit("gate", list(xs) + [agg], agg, dict(gates=layer.quantized_gates(),
                                                       gate_frac=layer.gate_frac),
                   outputs=len(xs))
    return [replace(agg, ref=f"{ref}:{k}") for k in range(len(xs))]


@lowers(L.GlobalPool)
def _pool(ctx, layer, x):
    ctx.realized(x, "global pooling")
    return Pooled(x, torch.tensor([1.0 / (x.height * x.width)], dtype=torch.float64))


@lowers(L.Classifier)
def _classifier(ctx, layer, pooled):
    if not isinstance(pooled, Pooled):
        ctx.fail("the classifier must follow global pooling (they are one hardware unit)")
    x = pooled.source
    w_q, b_q, frac = layer.quantized(x.frac, pooled.scale)
    out = TensorMeta("", layer.out_features, 1, 1, "fixed", frac=frac)
    ref = ctx.emit("head", [x], out, dict(weight=w_q, bias=b_q, frac=frac))
    ctx.graph.output = ref
    return replace(out, ref=ref)


@lowers(L.LogitBatchNorm)
def _logit_batchnorm(ctx, layer, x):
    # The head unit pools and applies a class-by-channel matrix: a per-class scale is
    # its diagonal, so the network's end stays the one head op.
    if not isinstance(x, TensorMeta) or x.kind != "fixed" or x.padded_channels is not None:
        ctx.fail("the logit batch norm takes a signed feature map (a convolution's or batch "
                 "norm's output)")
    if x.channels != layer.num_features:
        ctx.fail(f"takes {layer.num_features} channels (one per class), not {x.channels}")
    m_q, b_q, frac = layer.quantized(x.frac, x.height * x.width, x.scale, x.offset)
    out = TensorMeta("", layer.num_features, 1, 1, "fixed", frac=frac)
    ref = ctx.emit("head", [x], out, dict(weight=torch.diag(m_q), bias=b_q, frac=frac))
    ctx.graph.output = ref
    return replace(out, ref=ref)


# ----------------------------------------------------------------- driver
def _arg(env, a):
    if isinstance(a, (list, tuple)):
        return [_arg(env, v) for v in a]
    if hasattr(a, "op") and hasattr(a, "name") and a in env:
        return env[a]
    return a


def lower(model, input_shape=None) -> Graph:
    """The unfolded graph IR of ``model`` (run :func:`..passes.compile_model` for the
    integer graph).

    Parameters
    ----------
    model : torch.nn.Module
        Any network composed of library layers (:data:`~..models.layers.LIBRARY_LAYERS`).
    input_shape : (channels, height, width), optional
        Defaults to the model's ``config``.

    Raises
    ------
    LoweringError
        a layer type without a rule, or a composition the hardware cannot realize;
        the message names the layer.
    """
    if input_shape is None:
        cfg = model.config
        input_shape = (cfg.in_channels, cfg.image_size, cfg.image_size)
    gm = traced(model)
    ctx = LoweringContext(input_shape)
    env = {}
    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            env[fx_node] = None
        elif fx_node.op == "call_function":      # getitem on a multi-output layer
            seq, index = _arg(env, fx_node.args[0]), fx_node.args[1]
            env[fx_node] = seq[index]
        elif fx_node.op == "call_module":
            layer = gm.get_submodule(fx_node.target)
            rule = RULES.get(type(layer))
            if rule is None:
                raise LoweringError(f"{fx_node.target}: no lowering rule for "
                                    f"{type(layer).__name__}")
            ctx.where = fx_node.name
            try:
                value = rule(ctx, layer, *_arg(env, list(fx_node.args)))
            except LoweringError:
                raise
            except (ValueError, OverflowError) as exc:  # a constant that cannot be formed
                raise LoweringError(f"{fx_node.target}: {exc}") from None
            env[fx_node] = value
            if isinstance(value, TensorMeta) and value.padded_channels is None and value.ref:
                ctx.graph.origins[fx_node.name] = value.ref
            elif isinstance(value, list):
                for k, v in enumerate(value):
                    ctx.graph.origins[f"{fx_node.name}[{k}]"] = v.ref
        elif fx_node.op == "output":
            out = _arg(env, fx_node.args[0])
            if not isinstance(out, TensorMeta) or out.ref != ctx.graph.output:
                raise LoweringError("the network must end in the classifier")
    if ctx.graph.input is None or ctx.graph.output is None:
        raise LoweringError("the network needs an input quantizer and a classifier")
    return ctx.graph
