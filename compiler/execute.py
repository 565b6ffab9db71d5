"""Integer-graph executor: the project's one source of numerical truth.

Runs a folded graph on torch int64 tensors (NCHW). Convolutions gather windows
in the hardware's order (tap-major, channel-minor) and compute binary dots as
``2*popcount(xnor) - N`` on 0/1 bits, independently of the model's float64
convolution of +-1 values. With ``check_ranges`` every value is checked against
the bounds of range analysis.
"""

from __future__ import annotations

import torch

from .graph import Graph

__all__ = ["execute", "window_patches", "flat_weight", "round_shift", "RangeViolation"]


class RangeViolation(AssertionError):
    pass


def window_patches(x, kernel, stride, dilation, padding, pad_value):
    """[N, C, H, W] -> [N, Ho, Wo, k*k*C] with lane j = tap*C + channel, tap = ky*k + kx."""
    n, c, h, w = x.shape
    xp = torch.full((n, c, h + 2 * padding, w + 2 * padding), pad_value, dtype=x.dtype)
    xp[:, :, padding:padding + h, padding:padding + w] = x
    ho = (h + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    wo = (w + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    taps = []
    for ky in range(kernel):
        for kx in range(kernel):
            y0, x0 = ky * dilation, kx * dilation
            taps.append(xp[:, :, y0:y0 + stride * (ho - 1) + 1:stride,
                           x0:x0 + stride * (wo - 1) + 1:stride])
    patches = torch.stack(taps, dim=1)          # N, T, C, Ho, Wo
    return patches.permute(0, 3, 4, 1, 2).reshape(n, ho, wo, kernel * kernel * c)


def flat_weight(w):
    """(Cout, Cin, k, k) -> (Cout, k*k*Cin) in window lane order (the hardware's too)."""
    return w.permute(0, 2, 3, 1).reshape(w.shape[0], -1)


def _to_nchw(y):
    return y.permute(0, 3, 1, 2).contiguous()


def round_shift(v, s):
    """Round half up of v / 2**s by add-then-arithmetic-shift (ints or integer tensors)."""
    return (v + (1 << (s - 1))) >> s if s else v


def _per_channel(t):
    return t.view(1, -1, 1, 1)


def execute(g: Graph, pixels, check_ranges=False):
    """Run ``g`` on uint8 images ([N, H, W] or [N, 1, H, W]).

    Returns
    -------
    dict
        Node name -> value (multi-output nodes: list of tensors; the mixer also
        records its aggregate as ``blockN.agg``). ``values["head"]`` holds the
        int64 logits [N, n_classes] and ``values["classes"]`` the argmax.
    """
    if pixels.dim() == 3:
        pixels = pixels.unsqueeze(1)
    values = {}

    def get(ref):
        name, _, k = ref.partition(":")
        v = values[name]
        return v[int(k)] if k else v

    for node in g:
        a = node.attrs
        ins = [get(r) for r in node.inputs]
        if node.op == "input":
            out = pixels.to(torch.int64)
        elif node.op == "int_conv":
            p = window_patches(ins[0], a["weight"].shape[-1], a["stride"], a["dilation"], a["padding"], 0)
            out = _to_nchw(p @ flat_weight(a["weight"]).t())
        elif node.op == "bin_conv":
            p = window_patches(ins[0], a["kernel"], a["stride"], a["dilation"], a["padding"], 1)
            w = flat_weight(a["bits"])
            matches = p @ w.t() + (1 - p) @ (1 - w).t()        # popcount(xnor)
            out = _to_nchw(2 * matches - w.shape[1])
        elif node.op == "postop":
            v = ins[0].clamp(min=0) if a["pre_relu"] else ins[0]
            out = round_shift(_per_channel(a["A"]) * v + _per_channel(a["B"]), a["shift"])
            if a["post_relu"]:
                out = out.clamp(min=0)
        elif node.op == "sign":
            out = (ins[0] >= 0).to(torch.int64)
        elif node.op == "threshold":
            out = ((ins[0] >= _per_channel(a["T"])) ^ _per_channel(a["invert"])).to(torch.int64)
        elif node.op == "subsample":
            s = a["stride"]
            out = ins[0][:, :, ::s, ::s]
        elif node.op == "add":
            b = ins[1]
            pad = ins[0].shape[1] - b.shape[1]
            if pad:
                b = torch.cat([b, b.new_zeros(b.shape[0], pad, *b.shape[2:])], dim=1)
            out = ins[0] + b
        elif node.op == "mixer":
            agg = round_shift(sum(int(l) * x for l, x in zip(a["lambdas"], ins)), a["lambda_frac"])
            block = node.name.split(".")[0]
            values[f"{block}.agg"] = agg
            if a["gates"] is None:
                out = agg
            else:
                one = 1 << a["gate_frac"]
                out = [round_shift(int(c) * x + (one - int(c)) * agg, a["gate_frac"])
                       for c, x in zip(a["gates"], ins)]
        elif node.op == "head":
            sums = ins[0].sum(dim=(2, 3))
            values["pool"] = sums
            out = sums @ a["weight"].t() + a["bias"]
            values["classes"] = out.argmax(dim=1)
        else:
            raise ValueError(f"{node.name}: executor has no rule for op {node.op!r}")
        values[node.name] = out
        if check_ranges and node.lo is not None:
            for t in (out if isinstance(out, list) else [out]):
                if t.numel() and (int(t.min()) < node.lo or int(t.max()) > node.hi):
                    raise RangeViolation(f"{node.name}: values [{int(t.min())}, {int(t.max())}] "
                                         f"outside analysed range [{node.lo}, {node.hi}]")
    return values
