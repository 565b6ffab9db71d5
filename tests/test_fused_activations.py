"""Activations in the MVU (``schedule(..., fuse_activations=)``, ``build
--fuse-activations``): a threshold or post-op unit whose producer is an MVU feeding
nothing else becomes that MVU's activation stage (FINN's MVAU with thresholds), where
the estimate says it costs no DSP block and no logic more. The accelerator is bit-exact
under input gaps and output stalls at the same frame interval, with the latency the
model predicts; with one output fold the constants are constants, with several a ROM
read beside the result register."""

import pytest

from groupnet_hw.compiler.ops import op_of
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from test_latency import assert_exact_and_timed
from test_line_buffers import CONFIGS, _case


def _fusable(sched):
    """Threshold and post-op nodes whose producer is an MVU read by nothing else."""
    g = sched.graph
    out = []
    for node in g:
        if op_of(node).activation(node) is None:
            continue
        parent = g.producer(node.inputs[0])
        if op_of(parent).takes_activation and len(g.consumers(parent.name)) == 1:
            out.append(node.name)
    return out


#: One configuration and fold in the default tier; the rest of the 3 x 3 grid in the
#: slow tier.
FAST_FUSED = {(2, 1)}


@pytest.mark.parametrize("index,multiple", [
    pytest.param(index, multiple, marks=() if (index, multiple) in FAST_FUSED else pytest.mark.slow)
    for index in range(len(CONFIGS)) for multiple in (1, 8, 64)])
def test_fused_activations_bit_exact_at_the_same_cycles(index, multiple):
    """At the input rate and at 8 and 64 cycles a pixel: thresholds and post-ops in MVUs
    of one output fold (constants) and of several (ROM), K = 2 with dilation and stride
    2, 4-bit and 2-bit activations (multi-thresholds), a conv shortcut."""
    model, g, size, images = _case(index, 90 + index)
    target = multiple * size * size
    fused = schedule(g, "ulx3s", target_cycles=target, bases="parallel", streams="pixels")
    plain = schedule(g, "ulx3s", target_cycles=target, bases="parallel",
                     fuse_activations=False, streams="pixels")
    names = [n for n, u in fused.units.items() if u.fused]
    fusable = _fusable(fused)
    # every threshold is fused (its comparators replace a unit's), post-ops where the
    # estimate says so
    assert set(names) <= set(fusable)
    assert {n for n in fusable if g[n].op == "threshold"} <= set(names)
    assert not any(u.fused or u.activation for u in plain.units.values())
    for name in names:
        mvu = fused.graph.producer(fused.graph[name].inputs[0]).name
        assert fused.units[mvu].activation and fused.units[name].cycles == 0
        assert not any(fused.units[name].resources.values())
    assert fused.frame_cycles == plain.frame_cycles
    assert fused.resources["dsp"] <= plain.resources["dsp"]
    assert fused.resources["lut"] + fused.resources["ff"] < \
        plain.resources["lut"] + plain.resources["ff"]
    assert_exact_and_timed(model, fused, images, index)


def test_post_ops_in_mvus_at_several_folds_are_fused():
    """The configurations above fuse post-ops with several output folds (the ROM of
    scales and offsets and a DSP block per PE) and with one (constant multipliers)."""
    from groupnet_hw.compiler.ops.window import _out_folds
    folds = set()
    for index, multiple in ((0, 8), (2, 8)):
        _, g, size, _ = _case(index, 0)
        sched = schedule(g, "ulx3s", target_cycles=multiple * size * size, bases="parallel", streams="pixels")
        for name, unit in sched.units.items():
            if unit.fused and g[name].op == "postop":
                mvu = g.producer(g[name].inputs[0])
                folds.add(_out_folds(mvu, sched.units[mvu.name]) > 1)
    assert folds == {False, True}


def test_every_cnv_threshold_is_fused_and_reported():
    """FINN's CNV (cnv-small): every conv and FC layer but the last feeds a sign
    threshold and nothing else, the first a binary-weight MVU on 8-bit pixels; all
    eight are fused (tests/test_cnv.py checks the fused design bit-exact on Verilator),
    and the report says where each threshold went."""
    from groupnet_hw.compiler.report import render_text
    from test_cnv import cnv_model
    g = compile_model(cnv_model("cnv-small"))
    sched = schedule(g, "ulx3s", streams="pixels")
    fused = [n for n, u in sched.units.items() if u.fused]
    assert fused == _fusable(sched) and len(fused) == 8
    first = g.producer(g[fused[0]].inputs[0])
    assert first.attrs["in_bits"] == 8 and sched.units[first.name].activation
    text = render_text(sched)
    assert text.count("in the MVU") == 8 and text.count("+ threshold") == 8
    plain = schedule(g, "ulx3s", fuse_activations=False,
                     target_cycles=sched.frame_cycles, streams="pixels")
    assert plain.frame_cycles == sched.frame_cycles
    assert sched.resources["ff"] < plain.resources["ff"]
