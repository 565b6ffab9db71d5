"""cocotb testbench: drive one input stream, collect one output stream.

This module is loaded by cocotb inside the simulator process started by
:func:`groupnet_hw.sim.cocotb_runner.run_stream_rtl`; it is not meant to be
imported elsewhere. It talks to its caller only through two JSON files:

* the parameter file named by the environment variable
  :data:`PARAMS_ENV` (``GROUPNET_COCOTB_STREAM_PARAMS``), with keys
  ``in_beats`` (list of packed ints), ``n_out``, ``out_width``, ``stall``,
  ``seed``, ``timeout_cycles``, ``reset_cycles``, ``period_ns``,
  ``sleep_when_idle``, ``ports`` (Verilog port names) and ``result_path``;
* the result file ``result_path``, with ``outputs``, ``out_cycles``,
  ``cycles``, ``inputs_accepted``, ``timeout``, ``errors``, ``sim_seconds``.

Timing conventions
------------------
The component is held in reset (``rst`` high, ``i__valid`` and ``o__ready``
low) for ``reset_cycles`` clock edges. *Cycle 0* is the first rising edge after
reset at which the first input beat is offered. A beat is transferred at the
rising edge where valid and ready are both sampled high; ``out_cycles[k]`` is
the cycle of the edge that transferred output beat ``k``, and ``cycles`` is
``out_cycles[-1] + 1`` (cycles from the first input offer through the last
output, inclusive). For a pipeline of latency ``L`` at full throughput,
``out_cycles[k] == k + L``.

Per-cycle cost
--------------
Signals are sampled right after ``await RisingEdge(clk)``, which cocotb runs
before the design evaluates the edge, so the values read are those the edge
sampled; writes made then take effect after the edge (inertial writes on
Verilator, ReadWrite-phase writes on Icarus). The busy loop does one
``await`` and two or three handle reads per cycle. With ``stall == 0`` and
``sleep_when_idle``, when two consecutive edges transfer nothing the testbench
checks in the ReadOnly phase whether the next edge can transfer anything and,
if not, sleeps until ``i__ready`` or ``o__valid`` rises (cycle numbers are then
recovered from simulation time). Long compute phases of folded designs thus
cost no Python per cycle.
"""

import json
import os
import random
import time

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import First, ReadOnly, RisingEdge, Timer

PARAMS_ENV = "GROUPNET_COCOTB_STREAM_PARAMS"

_IDLE_BEFORE_SLEEP = 2
_MAX_ERRORS = 10


def _binstr(handle):
    return str(handle.value)


@cocotb.test()
async def stream_tb(dut):
    """Feed ``in_beats`` into ``i``, collect ``n_out`` beats from ``o``."""
    with open(os.environ[PARAMS_ENV]) as f:
        p = json.load(f)
    ports = p["ports"]
    clk = getattr(dut, ports["clk"])
    rst = getattr(dut, ports["rst"])
    i_payload = getattr(dut, ports["i_payload"])
    i_valid = getattr(dut, ports["i_valid"])
    i_ready = getattr(dut, ports["i_ready"])
    o_payload = getattr(dut, ports["o_payload"])
    o_valid = getattr(dut, ports["o_valid"])
    o_ready = getattr(dut, ports["o_ready"])

    beats = p["in_beats"]
    n_in = len(beats)
    n_out = p["n_out"]
    stall = float(p["stall"])
    timeout = int(p["timeout_cycles"])
    result = {"outputs": [], "out_cycles": [], "cycles": 0, "inputs_accepted": 0,
              "timeout": False, "errors": [], "sim_seconds": 0.0}
    errors = result["errors"]

    def finish():
        with open(p["result_path"], "w") as f:
            json.dump(result, f)

    in_width = len(i_payload)
    if len(o_payload) != p["out_width"]:
        errors.append(f"o payload port is {len(o_payload)} bits wide, caller expects "
                      f"{p['out_width']}")
    bad = next((k for k, b in enumerate(beats) if b < 0 or b >> in_width), None)
    if bad is not None:
        errors.append(f"input beat {bad} = {beats[bad]} does not fit the {in_width}-bit "
                      f"i payload port")
    if errors:
        finish()
        return

    Clock(clk, p["period_ns"], unit="ns").start()
    edge = RisingEdge(clk)

    # Reset; measure the clock period in simulator steps on the way.
    rst.value = 1
    i_valid.value = 0
    o_ready.value = 0
    if n_in:
        i_payload.value = beats[0]
    stamps = []
    for _ in range(max(2, p["reset_cycles"])):
        await edge
        stamps.append(get_sim_time())
    period_steps = stamps[-1] - stamps[-2]
    rst.value = 0

    outputs = result["outputs"]
    out_cycles = result["out_cycles"]
    idx = 0            # next input beat to transfer
    got = 0            # output beats received
    cycle = -1         # index of the edge just processed
    wall0 = time.perf_counter()

    if stall <= 0.0:
        # Full throughput: valid high while beats remain, ready always high.
        if n_in:
            i_valid.value = 1
        o_ready.value = 1
        sleep = bool(p["sleep_when_idle"])
        t0 = stamps[-1] + period_steps          # sim time of cycle 0's edge
        idle = 0
        while got < n_out:
            if sleep and idle >= _IDLE_BEFORE_SLEEP:
                await ReadOnly()
                if not ((idx < n_in and i_ready.value) or o_valid.value):
                    wake = [RisingEdge(o_valid)]
                    if idx < n_in:
                        wake.append(RisingEdge(i_ready))
                    left = timeout - cycle
                    if left > 1:
                        wake.append(Timer((left - 1) * period_steps, unit="step"))
                        await First(*wake)
                await edge
                cycle = (get_sim_time() - t0) // period_steps
            else:
                await edge
                cycle += 1
            if cycle >= timeout:
                result["timeout"] = True
                break
            moved = False
            if idx < n_in and i_ready.value:
                idx += 1
                moved = True
                if idx < n_in:
                    i_payload.value = beats[idx]
                else:
                    i_valid.value = 0
            if o_valid.value:
                value = o_payload.value
                try:
                    outputs.append(value.to_unsigned())
                except ValueError:
                    errors.append(f"output beat {got} at cycle {cycle} is not 0/1: {value}")
                    break
                out_cycles.append(cycle)
                got += 1
                moved = True
            idle = 0 if moved else idle + 1
    else:
        # Random stalls: before each input beat, with probability `stall`, keep
        # valid low for 1..4 cycles; on each cycle where ready would be high,
        # with probability `stall`, drop it for 1..4 cycles. While `o` is
        # stalled, checks that it keeps valid high and its payload stable.
        rng = random.Random(p["seed"])
        in_gap = rng.randint(1, 4) if rng.random() < stall else 0
        out_gap = 0
        offering = False       # i valid is high (with beats[idx])
        ready_now = False      # o ready is high
        held = None            # payload binstr of a stalled output beat
        while True:
            # Drive the inputs of the coming edge.
            if not offering and idx < n_in:
                if in_gap > 0:
                    in_gap -= 1
                else:
                    i_payload.value = beats[idx]
                    i_valid.value = 1
                    offering = True
            if out_gap == 0 and rng.random() < stall:
                out_gap = rng.randint(1, 4)
            if out_gap > 0:
                out_gap -= 1
                if ready_now:
                    o_ready.value = 0
                    ready_now = False
            elif not ready_now:
                o_ready.value = 1
                ready_now = True
            if got >= n_out:
                break
            await edge
            cycle += 1
            if cycle >= timeout:
                result["timeout"] = True
                break
            # Transfers at this edge.
            if offering and i_ready.value:
                idx += 1
                offering = False
                i_valid.value = 0
                if idx < n_in and rng.random() < stall:
                    in_gap = rng.randint(1, 4)
            valid = o_valid.value
            if held is not None:
                if not valid:
                    errors.append(f"o: valid dropped at cycle {cycle} before the "
                                  f"stalled beat was accepted")
                elif _binstr(o_payload) != held:
                    errors.append(f"o: payload changed at cycle {cycle} while stalled")
                held = None
                if len(errors) >= _MAX_ERRORS:
                    break
            if valid:
                if ready_now:
                    value = o_payload.value
                    try:
                        outputs.append(value.to_unsigned())
                    except ValueError:
                        errors.append(f"output beat {got} at cycle {cycle} is not 0/1: "
                                      f"{value}")
                        break
                    out_cycles.append(cycle)
                    got += 1
                else:
                    held = _binstr(o_payload)

    result["sim_seconds"] = time.perf_counter() - wall0
    result["inputs_accepted"] = idx
    result["cycles"] = (out_cycles[-1] + 1) if out_cycles else max(cycle + 1, 0)
    finish()
