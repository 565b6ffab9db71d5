"""The paper's complexity view of a Group-Net family member (section 3.2, eq. 4; section 4).

Counted per call of a library layer in the model's traced graph (:func:`.tracing.traced`),
with the real tensor shapes of one ``[1, in_channels, image_size, image_size]`` uint8
input. The shapes come from running the graph on the ``meta`` device with the model's
parameters swapped for meta tensors (:func:`torch.func.functional_call`): nothing is
computed and nothing is allocated, so ResNet-34 at 224 with K = 8 takes 1-3 seconds,
and the model itself is not changed.

Conventions
-----------
*Binary operations*
    XNOR-popcount multiply-accumulates of a binary convolution,
    ``c_in * c_out * k_h * k_w * h_out * w_out`` (a MAC of a binary weight with an
    activation; with n-bit activations each of them is n bit-plane operations, see
    *sigma*).
*Full-precision operations*
    Multiply-accumulates, one per MAC or fused multiply-add:

    - first convolution (FPConv2d) and classifier: their MACs, plus one addition per
      output element for a bias;
    - binary convolution: ``c_out * h_out * w_out``, the scaling of each popcount by
      alpha -- eq. 4's ``K * c_out * w_out * h_out`` full-precision operations, per base;
    - batch norm: one per element (the inference scale and shift, one multiply-add);
    - residual add: one per element; aggregation ``sum_k lambda_k x_k``: K per element;
      soft gate ``C_k x_k + (1 - C_k) agg``: two per element and base;
    - global pooling: one addition per input element (its 1/(H*W) folds into the
      classifier).

    Comparisons and data movement (sign, n-bit thresholds, ReLU, max pooling, the
    option-A shortcut, the input's power-of-two scale) count as 0, as in eq. 4.
*Weight memory*
    Binary weights 1 bit; full-precision weights 32 bits; per-channel constants at 32
    bits: alpha of a binary convolution (one per output channel, one per tensor with
    ``alpha="tensor"``), batch norm as its inference scale and shift (2 per channel),
    aggregation lambdas, gate thetas, biases. A module called more than once (the
    shortcut of a block is called once per base) is counted at its first call.
*Float counterpart*
    What a Group-Net decomposes: the same configuration with K = 1 and every weight in
    float32 (binary convolutions become float convolutions without alpha). It is built
    (on the meta device) and counted by the same rules, not derived by dividing by K:
    the memory saving is its weight bits over the model's.
*Speed-up sigma (eq. 4, 64-bit CPU)*
    For a binary layer position shared by K bases: the float MACs of the position over
    ``K * MACs / 64`` word operations plus ``K * c_out * h_out * w_out`` full-precision
    operations. Eq. 4 writes the float MACs with the *input* map size, which is the
    output size for the paper's stride-1 example; for a strided convolution that form
    counts products that are never computed, so the per-layer sigma here passes the
    output size for both (identical at stride 1, the true MAC count at stride 2). K of
    a position is read off the graphs, not the config: the number of binary
    convolution calls of that shape in the model over the number in the float
    counterpart. With n-bit activations a word holds 64 / n MACs (bit-serial planes).
    The network's sigma is the float MACs of all binary positions over the sum of the
    denominators; elementwise steps outside binary convolutions are not in eq. 4 (they
    are in ``fp_ops``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch import nn

from . import layers as L
from .tracing import traced

__all__ = ["eq4_sigma", "LayerComplexity", "Complexity", "complexity", "WORD_BITS"]

#: Word width of the CPU of eq. 4 (XNOR-popcounts per instruction).
WORD_BITS = 64


def eq4_sigma(c_in, c_out, kernel_h, kernel_w, h_in, w_in, h_out, w_out, bases, word=WORD_BITS):
    """Speed-up of eq. 4: a float convolution against ``bases`` binary ones.

    Parameters
    ----------
    c_in, c_out : int
        Channels.
    kernel_h, kernel_w : int
        Kernel size (``h, w`` of the paper).
    h_in, w_in : int
        Map size the paper writes the float MACs with (input size).
    h_out, w_out : int
        Output map size (the full-precision additions).
    bases : int
        K, binary convolutions replacing the float one.
    word : float
        Binary MACs per CPU word operation (64; ``64 / n`` with n-bit activations).

    Returns
    -------
    float
        ``c_in c_out w h w_in h_in / (K c_in c_out w h w_in h_in / word + K c_out w_out h_out)``.
    """
    macs = c_in * c_out * kernel_h * kernel_w * h_in * w_in
    return macs / (bases * macs / word + bases * c_out * h_out * w_out)


@dataclass
class LayerComplexity:
    """One call of a library layer.

    Attributes
    ----------
    name : str
        Module path, ``#n`` appended for the n-th call of a module called more than
        once (display only).
    node : str
        fx node name.
    kind : str
        Layer type (class name).
    in_shape, out_shape : list of int
        ``[C, H, W]`` (``[features]`` after pooling) of the first tensor input and of the
        output (of each element for a layer returning one tensor per base).
    binary_ops, fp_ops, weight_bits : int
        See the module docstring.
    bases : int or None
        K sharing this binary layer position (binary convolutions only).
    sigma : float or None
        Eq. 4 speed-up of the position (binary convolutions only).
    shared : bool
        The module was already called (its weights are counted at that row).
    """

    name: str
    node: str
    kind: str
    in_shape: list
    out_shape: list
    binary_ops: int = 0
    fp_ops: int = 0
    weight_bits: int = 0
    bases: int | None = None
    sigma: float | None = None
    shared: bool = False

    @property
    def shape(self):
        """``"C x H x W -> C x H x W"`` for display."""
        return f"{'x'.join(map(str, self.in_shape))} -> {'x'.join(map(str, self.out_shape))}"


@dataclass
class Complexity:
    """The complexity view of a model: per-layer rows and totals.

    Attributes
    ----------
    variant : str
    bases : int
        K of the configuration.
    act_bits : int
    input_shape : list of int
        ``[C, H, W]`` of the input counted.
    layers : list of LayerComplexity
        One row per library-layer call, in graph order.
    float_weight_bits : int
        Weight memory of the float counterpart (K = 1, float32 weights).
    float_fp_ops : int
        Full-precision operations of the float counterpart (its binary layers as float
        MACs).
    float_binary_macs : int
        Float MACs of the counterpart at the binary layer positions (numerator of the
        network's sigma).
    sigma : float
        The network's eq. 4 speed-up over its binary layers.
    """

    variant: str
    bases: int
    act_bits: int
    input_shape: list
    layers: list = field(default_factory=list)
    float_weight_bits: int = 0
    float_fp_ops: int = 0
    float_binary_macs: int = 0
    sigma: float = 0.0

    @property
    def binary_ops(self):
        """Total XNOR-popcount MACs."""
        return sum(l.binary_ops for l in self.layers)

    @property
    def fp_ops(self):
        """Total full-precision operations."""
        return sum(l.fp_ops for l in self.layers)

    @property
    def weight_bits(self):
        """Total weight memory in bits."""
        return sum(l.weight_bits for l in self.layers)

    @property
    def binary_weight_bits(self):
        """Weight bits of the binary convolutions (1-bit weights and their alphas)."""
        return sum(l.weight_bits for l in self.layers if l.kind == "BinaryConv2d")

    @property
    def memory_saving(self):
        """Float counterpart's weight bits over the model's."""
        return self.float_weight_bits / self.weight_bits if self.weight_bits else 0.0

    def to_dict(self):
        """JSON-ready dict: configuration, totals, and ``layers`` (one dict per row)."""
        return dict(variant=self.variant, bases=self.bases, act_bits=self.act_bits,
                    input_shape=list(self.input_shape), binary_ops=self.binary_ops,
                    fp_ops=self.fp_ops, weight_bits=self.weight_bits,
                    binary_weight_bits=self.binary_weight_bits,
                    float_weight_bits=self.float_weight_bits,
                    memory_saving=self.memory_saving, float_fp_ops=self.float_fp_ops,
                    float_binary_macs=self.float_binary_macs, sigma=self.sigma,
                    layers=[dict(dataclasses.asdict(l), shape=l.shape) for l in self.layers])

    def table(self):
        """Plain-text table: one row per layer call, a total row, and a summary line."""
        head = ("layer", "type", "shape", "binary ops", "FP ops", "weight bits", "sigma")
        rows = [(l.name, l.kind, l.shape, f"{l.binary_ops:,}", f"{l.fp_ops:,}",
                 f"{l.weight_bits:,}" + ("*" if l.shared else ""),
                 "" if l.sigma is None else f"{l.sigma:.2f}") for l in self.layers]
        total = ("total", "", "", f"{self.binary_ops:,}", f"{self.fp_ops:,}",
                 f"{self.weight_bits:,}", f"{self.sigma:.2f}")
        widths = [max(len(r[i]) for r in rows + [head, total]) for i in range(len(head))]

        def line(r):
            # text columns left-aligned, numbers right-aligned
            return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip()

        rule = "-" * len(line(head))
        out = [line(head), rule, *map(line, rows), rule, line(total)]
        if any(l.shared for l in self.layers):
            out.append("* module called again: its weights are counted at its first call")
        out.append(f"{self.variant}, K={self.bases}, {self.act_bits}-bit activations, input "
                   f"{'x'.join(map(str, self.input_shape))}: weight memory "
                   f"{self.weight_bits / 8 / 1024:,.1f} KiB against "
                   f"{self.float_weight_bits / 8 / 1024:,.1f} KiB for the float32 counterpart "
                   f"(K=1), {self.memory_saving:.2f}x smaller; eq. 4 speed-up of the binary "
                   f"layers on a {WORD_BITS}-bit CPU {self.sigma:.2f}x")
        return "\n".join(out)


# ------------------------------------------------------------------ shapes on meta
class _Recorder(fx.Interpreter):
    """Runs the graph and keeps every node's value (meta tensors: shapes only)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        value = super().run_node(n)
        self.values[n.name] = value
        return value


class _Propagate(nn.Module):
    """Holds the graph as a submodule so functional_call can swap its parameters."""

    def __init__(self, gm):
        super().__init__()
        self.gm = gm

    def forward(self, x):
        rec = _Recorder(self.gm)
        rec.run(x)
        return rec.values


def _node_values(gm, cfg):
    """fx node name -> value (meta tensors) for one input of the config's size."""
    prop = _Propagate(gm)
    state = {name: torch.empty_like(t, device="meta")
             for name, t in [*prop.named_parameters(), *prop.named_buffers()]}
    x = torch.zeros(1, cfg.in_channels, cfg.image_size, cfg.image_size, dtype=torch.uint8,
                    device="meta")
    # eval mode for the run: a training batch norm refuses one value per channel (a 1x1
    # map of one image); the modules' own flags are restored afterwards
    modes = [(m, m.training) for m in gm.modules()]
    gm.eval()
    try:
        with torch.no_grad():
            return torch.func.functional_call(prop, state, (x,), strict=True)
    finally:
        for m, mode in modes:
            m.training = mode


def _meta_twin(model, **changes):
    """The model's class rebuilt on the meta device from its (changed) configuration."""
    cfg = dataclasses.replace(model.config, **changes)
    with torch.device("meta"):
        if hasattr(model, "quant"):
            return type(model)(cfg, model.quant)
        return type(model)(cfg)


# ------------------------------------------------------------------ per-layer rules
def _chw(t):
    return list(t.shape[1:])


def _numel(t):
    n = 1
    for s in t.shape[1:]:
        n *= int(s)
    return n


def _first_tensor(args, values):
    """The first tensor among a call's (possibly nested) node arguments."""
    for a in args:
        if isinstance(a, fx.Node):
            v = values[a.name]
            if isinstance(v, torch.Tensor):
                return v
            if isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor):
                return v[0]
        elif isinstance(a, (list, tuple)):
            t = _first_tensor(a, values)
            if t is not None:
                return t
    return None


def _binary_conv_macs(m, y):
    return m.in_channels * m.out_channels * m.kernel_size * m.kernel_size * y.shape[2] * y.shape[3]


def _count(m, x, y, float_weights):
    """``(binary_ops, fp_ops, weight_bits)`` of one call: layer ``m``, first tensor
    input ``x``, output ``y`` (one of them for a per-base list). ``float_weights``
    counts binary convolutions as float ones (the float counterpart)."""
    if isinstance(m, L.BinaryConv2d):
        macs = _binary_conv_macs(m, y)
        n = m.weight.numel()
        if float_weights:
            return 0, macs, 32 * n
        alphas = m.out_channels if m.alpha_mode == "channel" else 1
        return macs, m.out_channels * y.shape[2] * y.shape[3], n + 32 * alphas
    if isinstance(m, L.FPConv2d):
        # weight elements (c_out * c_in/groups * k_h * k_w) once per output pixel
        macs = m.weight.numel() * y.shape[2] * y.shape[3]
        bias = m.bias is not None
        return 0, macs + (_numel(y) if bias else 0), 32 * (m.weight.numel()
                                                           + (m.bias.numel() if bias else 0))
    if isinstance(m, L.Classifier):
        bias = m.bias is not None
        return 0, m.weight.numel() + (m.out_features if bias else 0), \
            32 * (m.weight.numel() + (m.bias.numel() if bias else 0))
    if isinstance(m, L.BatchNorm):
        return 0, _numel(y), 32 * 2 * m.num_features
    if isinstance(m, L.LogitBatchNorm):
        # the pooling's adds, then a scale and a bias per class
        return 0, _numel(x) + 2 * m.num_features, 32 * 2 * m.num_features
    if isinstance(m, L.Add):
        return 0, _numel(y), 0
    if isinstance(m, L.Aggregation):
        return 0, m.bases * _numel(y), 32 * m.lambdas.numel()
    if isinstance(m, L.SoftGate):
        return 0, 2 * m.bases * _numel(y), 32 * m.theta.numel()
    if isinstance(m, L.GlobalPool):
        return 0, _numel(x), 0
    if isinstance(m, (L.InputQuant, L.BinaryActivation, L.NBitActivation, L.ReLU, L.MaxPool,
                      L.OptionAShortcut)):
        return 0, 0, 0
    # a new library layer must get a rule here, or its cost would silently be missing
    raise ValueError(f"complexity: no counting rule for {type(m).__name__}")


def _signature(m, x, y):
    """Shape of a binary layer position (dilation left out: BPAC bases differ in it)."""
    return (m.in_channels, m.out_channels, m.kernel_size, m.stride,
            *x.shape[2:], *y.shape[2:])


def _rows(model, float_weights=False):
    """Rows of every library-layer call, plus ``(module, x, y)`` of each binary conv."""
    gm = traced(model)
    values = _node_values(gm, model.config)
    calls, seen, rows, binary = Counter(), set(), [], []
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        m = gm.get_submodule(node.target)
        x = _first_tensor(node.args, values)
        y = values[node.name]
        if isinstance(y, (list, tuple)):
            y = y[0]
        b_ops, f_ops, bits = _count(m, x, y, float_weights)
        calls[node.target] += 1
        shared = id(m) in seen
        seen.add(id(m))
        name = node.target if calls[node.target] == 1 else f"{node.target} #{calls[node.target]}"
        rows.append(LayerComplexity(name=name, node=node.name, kind=type(m).__name__,
                                    in_shape=_chw(x) if x is not None else [],
                                    out_shape=_chw(y), binary_ops=b_ops, fp_ops=f_ops,
                                    weight_bits=0 if shared else bits, shared=shared))
        if isinstance(m, L.BinaryConv2d):
            binary.append((rows[-1], m, x, y))
    return rows, binary


def complexity(model) -> Complexity:
    """The paper's complexity view of ``model``, per layer and in total.

    Parameters
    ----------
    model : GroupNet or GroupNetConfig
        Any network of library layers with a ``config`` (a
        :class:`~.groupnet.GroupNetConfig`) whose class rebuilds it from
        ``(config, quant)``; a bare config is built on the meta device. The model may
        live on any device, meta included; it is not changed.

    Returns
    -------
    Complexity

    Raises
    ------
    ValueError
        if a traced layer has no counting rule, or the binary layer positions of the
        model do not match those of its float counterpart K times over.
    """
    from .groupnet import GroupNet, GroupNetConfig
    if isinstance(model, GroupNetConfig):
        with torch.device("meta"):
            model = GroupNet(model)
    cfg = model.config
    rows, binary = _rows(model)
    # the float counterpart: one base, float weights, a plain network (no BPAC rates,
    # no emulated defect)
    if hasattr(cfg, "bases"):
        twin = _meta_twin(model, bases=1, dilations=None, emulate_inplace_sum=False)
    else:
        # a family without bases (FINN's CNV) is its own K=1 counterpart
        twin = model
    float_rows, float_binary = _rows(twin, float_weights=True)

    positions = Counter(_signature(m, x, y) for _, m, x, y in float_binary)
    uses = Counter(_signature(m, x, y) for _, m, x, y in binary)
    if set(positions) != set(uses):
        raise ValueError("complexity: the binary convolution shapes of the model and of its "
                         "K=1 float counterpart differ")
    bases = {}
    for sig, n in uses.items():
        if n % positions[sig]:
            raise ValueError(f"complexity: {n} binary convolutions of shape {sig} against "
                             f"{positions[sig]} in the K=1 counterpart")
        bases[sig] = n // positions[sig]

    act_bits = getattr(cfg, "act_bits", 1)
    word = WORD_BITS / act_bits
    denominator = 0.0
    for row, m, x, y in binary:
        k = bases[_signature(m, x, y)]
        h, w = y.shape[2], y.shape[3]
        row.bases = k
        # the output size for eq. 4's w_in, h_in: the MACs actually computed (module doc)
        row.sigma = eq4_sigma(m.in_channels, m.out_channels, m.kernel_size, m.kernel_size,
                              h, w, h, w, k, word=word)
        denominator += row.binary_ops / word + m.out_channels * h * w
    numerator = sum(_binary_conv_macs(m, y) for _, m, _, y in float_binary)

    return Complexity(variant=getattr(cfg, "variant", type(model).__name__.lower()),
                      bases=getattr(cfg, "bases", 1), act_bits=act_bits,
                      input_shape=[cfg.in_channels, cfg.image_size, cfg.image_size],
                      layers=rows,
                      float_weight_bits=sum(r.weight_bits for r in float_rows),
                      float_fp_ops=sum(r.fp_ops for r in float_rows),
                      float_binary_macs=numerator,
                      sigma=numerator / denominator if denominator else 0.0)
