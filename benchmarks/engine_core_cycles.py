"""The engine's compute path (hw/engine/core.py) in RTL: measured cycles per frame and per
descriptor against the cycle model's prediction (compiler/engine/cycles.py).

The digits Group-Net (random eval state, seed K) at K = 1, 2, 3 is compiled for the
tests' engines (tests/test_engine_core.py's 16 x 32 lanes of 4 bit planes and
tests/test_engine_planes.py's 16 x 64 lanes of one, the engine a build writes for a
binary network; 64 KiB scratchpad, 128-bit ports) and run on the fast Verilator path
under the cycle model's DRAM (latency 48 cycles, 10 bytes per cycle: the DE10-Nano
default at 100 MHz). Per descriptor the RTL's cycles are the difference between runs
of the program cut after it and before it. Two predictions are reported beside the
measurement: the cycle model of the intended engine (compiler/engine/cycles.py: the
``arrays`` arrays side by side with overlapped transfers, which this sequential,
reference-exact path does not reach, so the ratio is large; the model is not fitted
to it) and the model of the core as built (compiler/engine/core_cycles.py, which
mirrors the core's state machine: its error is the column ``core_error``).

    python benchmarks/engine_core_cycles.py            # writes benchmarks/results/engine_core_cycles.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import verilog

from groupnet_hw.compiler.engine.config import DramModel
from groupnet_hw.compiler.engine.core_cycles import predict_core
from groupnet_hw.compiler.engine.cycles import predict
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.hw.engine.core import EngineCore
from groupnet_hw.sim.engine_rtl import build_engine_rtl
from groupnet_hw.sim.engine_verify import cut_after, frame_image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_engine_core as T  # noqa: E402  (the tests' helpers: frames, cuts, runs)
import test_engine_planes as P  # noqa: E402  (the binary engine)

DRAM = DramModel(latency=48, bytes_per_cycle=10.0)


def measure(build, bases, core_params, config):
    g = compile_model(T.zoo_model("digits", bases, seed=bases))
    program = compile_engine(g, config)
    pred = predict(program, DRAM)
    core = predict_core(program, core_params, DRAM.latency, DRAM.bytes_per_cycle)
    image = frame_image(program, T.frames_for(g, 1)[0])
    kw = dict(latency=DRAM.latency, bytes_per_cycle=DRAM.bytes_per_cycle)
    whole = T.run_rtl(build, program, image, **kw).cycles
    cuts = [T.run_rtl(build, program, cut_after(program, image, i), **kw).cycles
            for i in range(len(program.descriptors))]
    rows, prev = [], 0
    for i, (p, q, c) in enumerate(zip(pred.descriptors, core.descriptors, cuts)):
        # the first cut also holds the END descriptor and the run's start and stop
        q_cycles = q.cycles + (core.end if i == 0 else 0)
        rows.append({"index": i, "opcode": p.opcode, "jobs": p.jobs, "label": p.label,
                     "predicted": p.cycles, "core_predicted": q_cycles, "rtl": c - prev,
                     "ratio": round((c - prev) / p.cycles, 2),
                     "core_error": round((q_cycles - (c - prev)) / (c - prev), 4),
                     "core_dominant": q.dominant})
        prev = c
    return {"bases": bases, "predicted": pred.cycles, "core_predicted": core.cycles,
            "rtl": whole, "ratio": round(whole / pred.cycles, 2),
            "core_error": round((core.cycles - whole) / whole, 4), "descriptors": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(Path(__file__).parent / "results"
                                                  / "engine_core_cycles.json"))
    args = ap.parse_args(argv)
    out = {"dram": {"latency": DRAM.latency, "bytes_per_cycle": DRAM.bytes_per_cycle}}
    for key, core, config in (("nbit", T.NBIT_CORE, T.NBIT_CONFIG),
                              ("binary", P.BINARY_CORE, P.BINARY_CONFIG)):
        path = Path(tempfile.mkdtemp(prefix="engine_core_")) / "engine_core.v"
        path.write_text(verilog.convert(EngineCore(**core), name="engine_core"))
        t0 = time.time()
        build = build_engine_rtl(path, "engine_core")
        out[key] = {"engine": core, "build_seconds": round(time.time() - t0, 1),
                    "networks": [measure(build, k, core, config) for k in (1, 2, 3)]}
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    for key in ("nbit", "binary"):
        e = out[key]["engine"]
        print(f"{e['pe']} x {e['simd']} lanes, {e['planes']} bit plane(s):")
        for n in out[key]["networks"]:
            _print_network(n)


def _print_network(n):
    print(f"digits K={n['bases']}: RTL {n['rtl']:,} cycles/frame, predicted "
          f"{n['predicted']:,}, ratio {n['ratio']}; core model {n['core_predicted']:,} "
          f"({100 * n['core_error']:+.2f} %)")
    for r in n["descriptors"]:
        print(f"  {r['index']:2d} {r['opcode']:9s} jobs {r['jobs']}  RTL {r['rtl']:8,}  "
              f"predicted {r['predicted']:6,}  x{r['ratio']:<6}  core model "
              f"{r['core_predicted']:8,} ({100 * r['core_error']:+.2f} %, "
              f"{r['core_dominant']})")


if __name__ == "__main__":
    main()
