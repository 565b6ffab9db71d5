"""Time consecutive fast-path Verilator builds into a fresh cache: the build options of
``sim/fast_rtl.py`` against the options before them (``--as-before``: ``-O2`` on every
C++ file, Verilator's runtime library compiled by every build).

The designs are two engines of ``hw/engine/core.py``: a small one (4 PE x 8 SIMD, one
bit plane) and the 4-plane engine a 64 KiB build writes for 2- and 4-bit activations
(16 x 32; ``NBIT_CORE`` of ``tests/test_engine_core.py``),
built one after the other as a test session or a user's second ``verify`` would.

    python benchmarks/verilator_builds.py                # the current options
    python benchmarks/verilator_builds.py --as-before    # the options before them

Prints the wall and CPU seconds of each build and of both. For a ratio, time both
modes in one run, alternating (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path


def _cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--as-before", action="store_true",
                    help="-O2 on every C++ file, the runtime compiled by every build")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verilator-builds-") as tmp:
        tmp = Path(tmp)
        # the runtime's store is the default cache: a fresh one, so the first build
        # compiles it (and with --as-before each build gets its own)
        os.environ["GROUPNET_HW_RTL_CACHE"] = str(tmp / "default")
        from groupnet_hw.compiler.engine.target import engine_target
        from groupnet_hw.flow import ENGINE_NAME, BuildConfig, engine_verilog
        from groupnet_hw.sim import engine_rtl, fast_rtl
        core = engine_target("de10nano", buffer_bytes=64 << 10,
                             max_util=BuildConfig().max_util).core
        designs = {"small engine": dict(core, pe=4, simd=8, planes=1, stem_pe=4),
                   "4-plane engine": core}
        if args.as_before:
            fast_rtl.MAKE_ARGS = ()
            engine_rtl.VERILATOR_ARGS = (*fast_rtl.VERILATOR_ARGS, "-CFLAGS", "-O2")
        total_wall = total_cpu = 0.0
        for n, (name, params) in enumerate(designs.items()):
            path = tmp / f"{n}.v"
            path.write_text(engine_verilog(params))
            if args.as_before:
                os.environ["GROUPNET_HW_RTL_CACHE"] = str(tmp / f"default{n}")
            cpu0, t0 = _cpu_seconds(), time.perf_counter()
            engine_rtl.build_engine_rtl(path, ENGINE_NAME, build_dir=tmp / f"c{n}")
            wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
            total_wall, total_cpu = total_wall + wall, total_cpu + cpu
            print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU")
        mode = "options before" if args.as_before else "current options"
        print(f"both ({mode}): {total_wall:.1f} s wall, {total_cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
