"""The integer MVU's products registered twice on ECP5 (``Unit.registered_products``):
in the DSP block and again in the fabric, by the adder tree. Only there; the estimate
counts the copy's flip-flops; the accelerator stays bit-exact at the predicted cycles
and latency with the extra stage."""

import dataclasses

import torch

from groupnet_hw.compiler.ops import op_of
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.mvu import IntegerMVU
from conftest import random_model
from test_latency import assert_exact_and_timed

CONFIG = dict(bases=2, stages=[[8, 1, 1]], stem_channels=8, image_size=4, num_classes=3)
STEM = "stem_0"


def test_products_are_registered_again_on_ecp5_only_and_counted():
    g = compile_model(random_model(3, **CONFIG))
    folding = {STEM: (4, 9)}
    ecp5 = schedule(g, "ulx3s", folding=folding, bases="parallel", streams="pixels")
    de10 = schedule(g, "de10nano", folding=folding, bases="parallel", streams="pixels")
    assert ecp5.units[STEM].registered_products
    assert not any(u.registered_products for u in de10.units.values())
    # only the integer MVU multiplies
    assert [n for n, u in ecp5.units.items() if u.registered_products] == [STEM]
    w = g[STEM].attrs["weight"]
    width = IntegerMVU.product_width_of(int(w.min()), int(w.max()), 8, False)
    unit = dataclasses.replace(ecp5.units[STEM], registered_products=False)
    node, parent = g[STEM], g.producer(g[STEM].inputs[0])
    with_copy = op_of(node).resource_features(g, node, parent, ecp5.units[STEM])
    without = op_of(node).resource_features(g, node, parent, unit)
    assert with_copy["product_copy_bits"] == 4 * 9 * width
    assert "product_copy_bits" not in without


def test_registered_products_bit_exact_at_the_predicted_cycles_and_latency():
    model = random_model(3, **CONFIG)
    g = compile_model(model)
    sched = schedule(g, "ulx3s", folding={STEM: (4, 9)}, bases="parallel", streams="pixels")
    assert sched.units[STEM].registered_products
    gen = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (3, 1, 4, 4), generator=gen, dtype=torch.uint8)
    assert_exact_and_timed(model, sched, images, 5)
