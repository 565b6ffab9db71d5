"""The paper's complexity view of a network (section 3.2, eq. 4; `groupnet-hw info`).

Computed on the lowered graph (:func:`.frontend.lower`), so every shape is the real one:

- *binary operations*: XNOR-popcount multiply-accumulates of the binary convolutions,
  ``c_in * c_out * k * k * h_out * w_out`` each;
- *full-precision operations*: multiply-accumulates of the first convolution and the
  classifier, plus one operation per element of every real-valued elementwise step
  (batch norm / post-op, residual add, each term of an aggregation or gate);
- *weight memory*: binary weights at 1 bit, full-precision weights and per-channel
  constants (alpha, batch norm, lambda, theta) at 32 bits, against the float32 model of
  the same topology with one base (the float counterpart a Group-Net decomposes);
- *speed-up sigma* of eq. 4 for a 64-bit CPU: a float convolution against its K binary
  bases (``K * c_in*c_out*k*k*h_out*w_out / 64`` word operations) plus ``K * c_out *
  w_out * h_out`` full-precision additions. Eq. 4 counts the float MACs with the input
  map size; they are computed here with the output size (the same for the paper's
  stride-1 example, the true count for stride-2 layers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["eq4_sigma", "LayerComplexity", "Complexity", "complexity"]


def eq4_sigma(c_in, c_out, kernel_h, kernel_w, h_in, w_in, h_out, w_out, bases, word=64):
    """Speed-up of eq. 4: a float conv layer against ``bases`` binary convolutions
    (``word`` XNOR-popcounts per instruction) and their ``bases`` full-precision sums."""
    macs = c_in * c_out * kernel_h * kernel_w * w_in * h_in
    return macs / (bases * macs / word + bases * c_out * w_out * h_out)


@dataclass
class LayerComplexity:
    """One binary layer position (its K bases together), or one full-precision step."""

    name: str
    kind: str
    shape: str
    binary_ops: int = 0
    fp_ops: int = 0
    weight_bits: int = 0
    float_weight_bits: int = 0
    sigma: float | None = None


@dataclass
class Complexity:
    """Per-layer rows and totals; ``sigma`` is the whole network's eq. 4 speed-up over its
    binary layers (float MACs of the counterpart over the binary cost)."""

    bases: int
    layers: list = field(default_factory=list)

    @property
    def binary_ops(self):
        return sum(l.binary_ops for l in self.layers)

    @property
    def fp_ops(self):
        return sum(l.fp_ops for l in self.layers)

    @property
    def weight_bits(self):
        return sum(l.weight_bits for l in self.layers)

    @property
    def float_weight_bits(self):
        return sum(l.float_weight_bits for l in self.layers)

    @property
    def memory_saving(self):
        return self.float_weight_bits / self.weight_bits if self.weight_bits else 0.0

    sigma: float = 0.0

    def to_dict(self):
        return dict(bases=self.bases, binary_ops=self.binary_ops, fp_ops=self.fp_ops,
                    weight_bits=self.weight_bits, float_weight_bits=self.float_weight_bits,
                    memory_saving=self.memory_saving, sigma=self.sigma,
                    layers=[asdict(l) for l in self.layers])

    def table(self):
        """Plain-text table, one row per layer, then the totals."""
        head = f"{'layer':34s} {'kind':9s} {'shape':24s} {'binary ops':>13s} {'FP ops':>11s} " \
               f"{'weight bits':>12s} {'sigma':>7s}"
        rows = [head, "-" * len(head)]
        for l in self.layers:
            sig = f"{l.sigma:.2f}" if l.sigma is not None else ""
            rows.append(f"{l.name[:34]:34s} {l.kind:9s} {l.shape[:24]:24s} {l.binary_ops:13,d} "
                        f"{l.fp_ops:11,d} {l.weight_bits:12,d} {sig:>7s}")
        rows.append("-" * len(head))
        rows.append(f"{'total':34s} {'':9s} {'':24s} {self.binary_ops:13,d} {self.fp_ops:11,d} "
                    f"{self.weight_bits:12,d} {self.sigma:7.2f}")
        rows.append(f"weight memory {self.weight_bits / 8 / 1024:,.1f} KiB against "
                    f"{self.float_weight_bits / 8 / 1024:,.1f} KiB for the float32 counterpart "
                    f"(K=1): {self.memory_saving:.1f}x smaller; eq. 4 speed-up on a 64-bit CPU "
                    f"{self.sigma:.2f}x (K={self.bases})")
        return "\n".join(rows)


def complexity(model) -> Complexity:
    """The complexity view of ``model`` (any network of library layers with a ``config``)."""
    from .frontend import lower
    g = lower(model)
    k = model.config.bases
    out = Complexity(bases=k)
    num = den = 0.0
    for node in g:
        a = node.attrs
        ins = [g.producer(r) for r in node.inputs]
        pixels = node.height * node.width
        shape = f"{node.channels}x{node.height}x{node.width}"
        if node.op == "bin_conv":
            p = ins[0]
            kk = a["kernel"]
            macs = p.channels * node.channels * kk * kk * pixels
            row = LayerComplexity(node.name, "binary", f"{p.channels}->{shape} k{kk}",
                                  binary_ops=macs, fp_ops=0, weight_bits=a["bits"].numel(),
                                  float_weight_bits=32 * a["bits"].numel() // k)
            # eq. 4 writes the float MACs with the input map size, which equals the output
            # size for the paper's example; with stride 2 the real MACs use the output size
            row.sigma = eq4_sigma(p.channels, node.channels, kk, kk, node.height, node.width,
                                  node.height, node.width, k)
            num += macs / k
            den += macs / 64 + node.channels * pixels
            out.layers.append(row)
        elif node.op == "int_conv":
            p = ins[0]
            macs = a["weight"].numel() * pixels
            bits = 32 * a["weight"].numel()
            out.layers.append(LayerComplexity(node.name, "fp conv", f"{p.channels}->{shape}",
                                              fp_ops=macs, weight_bits=bits,
                                              float_weight_bits=bits))
        elif node.op == "head":
            p = ins[0]
            n = a["weight"].numel()
            out.layers.append(LayerComplexity(node.name, "fp fc", f"{p.channels}->{node.channels}",
                                              fp_ops=n + p.channels * p.height * p.width,
                                              weight_bits=32 * (n + node.channels),
                                              float_weight_bits=32 * (n + node.channels)))
        elif node.op == "postop":
            # alpha and batch norm: scale and shift per channel, one op per element
            bits = 32 * 3 * node.channels
            out.layers.append(LayerComplexity(node.name, "fp bn", shape, fp_ops=pixels * node.channels,
                                              weight_bits=bits, float_weight_bits=bits // k
                                              if ins[0].op == "bin_conv" else bits))
        elif node.op in ("add", "mixer", "gate"):
            terms = len(node.inputs) if node.op != "add" else 1
            bits = 32 * len(a.get("lambdas", a.get("gates", [])))
            out.layers.append(LayerComplexity(node.name, f"fp {node.op}", shape,
                                              fp_ops=terms * pixels * node.channels,
                                              weight_bits=bits, float_weight_bits=0))
    out.sigma = num / den if den else 0.0
    return out
