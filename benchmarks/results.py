"""The results table: every design on every board, from the recorded measurements.

Reads the JSON the benchmarks wrote under ``benchmarks/results/`` and writes
``docs/results.md`` (the tables, with where each number comes from),
``docs/results.png`` (frames/s and the fullest resource per design and board) and the
headline rows between the ``results`` markers of ``README.md``:

    python benchmarks/results.py              # render only (seconds, no compiler run)
    python benchmarks/results.py --measure    # schedule the rows this script owns first

Sources (nothing here is typed in by hand; each file says how it was measured):

- ``groupnet_boards.json`` (``benchmarks/groupnet_boards.py``): the digits and
  CIFAR-size Group-Nets at K = 1, 3, 5 scheduled for the DE10-Nano and the ULX3S;
- ``schedules.json`` (``--measure`` here): the same schedule for the pairs that file does
  not cover, the iCEBreaker rows and FINN's CNV with the schedule's own folding;
- ``finn_cnv.json`` (``benchmarks/finn_cnv.py``): FINN's CNV with FINN's published
  folding on the ULX3S, simulated and synthesized;
- ``synthesis.json``: Fmax and Yosys counts measured with ``groupnet-hw synth``,
  each with its commands and the commit that recorded it;
- ``verified.json``: the RTL runs that proved a design bit-exact in its board mapping;
- ``verify_speed.json`` (``benchmarks/verify_speed.py``): simulator speed.

Every schedule row uses random, seeded weights: the structure, not the accuracy, sets
cycles and resources.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from groupnet_hw.devices import BOARDS as DEVICE_BOARDS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: (id, label, arch, K) in table order. ``cnv-finn`` is FINN's CNV with FINN's folding.
DESIGNS = (
    ("digits-k1", "digits, K=1", "digits", 1),
    ("digits-k3", "digits, K=3", "digits", 3),
    ("digits-k5", "digits, K=5", "digits", 5),
    ("cifar-k1", "CIFAR-size, K=1", "cifar", 1),
    ("cifar-k3", "CIFAR-size, K=3", "cifar", 3),
    ("cifar-k5", "CIFAR-size, K=5", "cifar", 5),
    ("cnv", "FINN's CNV", "cnv", 1),
    ("cnv-finn", "FINN's CNV, FINN's folding", "cnv", 1),
)
LABELS = {d[0]: d[1] for d in DESIGNS}
#: board -> (name, device, clock MHz), in table order.
BOARDS = {b.name: (b.title, f"{b.device.series} {b.device.part}", b.clock_mhz)
          for b in DEVICE_BOARDS.values()}
#: The (design, board) pairs every table must have: each design on each board, and
#: FINN's folding on the board FINN's comparison was made for.
EXPECTED = tuple((d, b) for d, *_ in DESIGNS if d != "cnv-finn" for b in BOARDS) + (
    ("cnv-finn", "ulx3s"),)
#: Rows of the README's headline table.
HEADLINE = (("digits-k5", "de10nano"), ("digits-k5", "ulx3s"), ("cifar-k1", "de10nano"),
            ("cifar-k1", "ulx3s"), ("cifar-k5", "de10nano"), ("cnv", "de10nano"),
            ("cnv-finn", "ulx3s"), ("digits-k1", "icebreaker"))
RESOURCE_NAMES = {"alm": "ALM", "lut": "LUT4 sites", "ff": "FF", "m10k": "M10K",
                  "ebr": "EBR", "lutram": "DPR16X4", "dsp": "DSP"}
BEGIN = "<!-- results: begin (written by benchmarks/results.py; edit there) -->"
END = "<!-- results: end -->"
#: A frame interval no unit needs to be faster than: every unit at its least parallelism.
FULLY_FOLDED = 1 << 24


# ----------------------------------------------------------------------------- loading
def _read(results_dir, name, default=None):
    path = Path(results_dir) / name
    if not path.is_file():
        if default is not None:
            return default
        raise FileNotFoundError(f"{path}: missing; run the benchmark that writes it")
    return json.loads(path.read_text())


def _schedule_row(r, source):
    """A row of ``groupnet_boards.json`` or ``schedules.json``, normalized."""
    design = r.get("design") or f"{r['arch']}-k{r['K']}"
    return {"design": design, "board": r["board"], "fits": bool(r["fits"]),
            "frame_cycles": r.get("frame_cycles"), "frames_per_second": r.get("frames_per_second"),
            "clock_mhz": r.get("clock_mhz", BOARDS[r["board"]][2]),
            "resources": r.get("resources") or {}, "budget": r.get("budget") or {},
            "smallest": r.get("smallest"), "error": r.get("error"),
            "bases": r.get("base_mapping"), "source": source}


def _finn_row(finn, budget):
    """FINN's CNV with FINN's folding on the ULX3S, from ``finn_cnv.json``."""
    f = finn["finn_folding"]
    cells = f["estimate_cells"]
    resources = {"lut": f["estimate_lut_sites"], "ff": cells["ff"], "lutram": cells["lutram"],
                 "ebr": cells["bram"], "dsp": cells["dsp"]}
    fits = all(resources[k] <= 0.9 * v for k, v in budget.items()) if budget else True
    return {"design": "cnv-finn", "board": finn["board"], "fits": fits,
            "frame_cycles": f["frame_cycles"], "frames_per_second": f["frames_per_second"],
            "clock_mhz": f["clock_mhz"], "resources": resources, "budget": budget,
            "smallest": None, "error": None, "bases": None, "source": "finn_cnv.json"}


def load(results_dir=RESULTS):
    """Everything the tables need, from the recorded JSON.

    Returns
    -------
    dict
        ``rows``: one normalized schedule row per (design, board) found, in table order;
        ``fmax``: (design, board) -> the Fmax run shown in the table; ``synthesis``:
        every recorded synthesis run; ``verified``: (design, board) -> bit-exact run;
        ``speed``: ``verify_speed.json``; ``missing``: expected pairs with no row.
    """
    boards = _read(results_dir, "groupnet_boards.json")
    owned = _read(results_dir, "schedules.json", default={"rows": []})
    finn = _read(results_dir, "finn_cnv.json")
    synthesis = _read(results_dir, "synthesis.json")["runs"]
    verified = _read(results_dir, "verified.json")["runs"]
    speed = _read(results_dir, "verify_speed.json")

    found = {}
    for r in boards:
        row = _schedule_row(r, "groupnet_boards.json")
        found[row["design"], row["board"]] = row
    for r in owned["rows"]:
        row = _schedule_row(r, "schedules.json")
        found.setdefault((row["design"], row["board"]), row)
    ulx3s_budget = next((r["budget"] for r in found.values() if r["board"] == finn["board"]), {})
    found["cnv-finn", finn["board"]] = _finn_row(finn, ulx3s_budget)

    runs = [dict(r, source="synthesis.json") for r in synthesis]
    syn = finn.get("synthesis") or {}
    if syn.get("fmax_mhz"):
        cells = syn["cells"]
        runs.append({
            "design": "cnv-finn", "board": finn["board"], "flow": syn["flow"],
            "what": "FINN's CNV with BNN-PYNQ's folding, line buffers serial, whole pixels",
            "commands": ["python benchmarks/finn_cnv.py --synth"],
            "frame_cycles": finn["build"]["frame_cycles"],
            "fmax_mhz_by_seed": {str(syn.get("seed", 1)): syn["fmax_mhz"]},
            "kept_seed": syn.get("seed", 1), "fmax_mhz": syn["fmax_mhz"],
            "late_register_inputs_by_seed": {
                str(syn.get("seed", 1)): (syn.get("late_endpoints") or {}).get("count")},
            "yosys": {"lut4": cells["lut"], "ccu2c": cells["carry"], "ff": cells["ff"],
                      "dp16kd": cells["bram"], "dpr16x4": cells["lutram"],
                      "mult18x18d": cells["dsp"]},
            "recorded": {"commit": finn.get("git", "?"), "date": finn.get("date", "?"),
                         "where": "docs/finn.md"},
            "source": "finn_cnv.json"})
    fmax = {}
    for run in runs:
        key = run["design"], run["board"]
        row = found.get(key)
        if (run.get("fmax_mhz") and not run.get("alternative") and row
                and run.get("frame_cycles") == row["frame_cycles"]):
            fmax[key] = run

    checked = {(v["design"], v["board"]): dict(v, source="verified.json") for v in verified}
    m = finn.get("measured") or {}
    if m.get("images"):
        checked["cnv-finn", finn["board"]] = {
            "design": "cnv-finn", "board": finn["board"], "images": m["images"],
            "exact": m["exact"], "stalled_images": 0,
            "cycles_measured_equal_predicted":
                m.get("cycles_per_frame") == m.get("cycles_per_frame_predicted"),
            "commands": ["python benchmarks/finn_cnv.py"], "model": "random weights, seed 0",
            "recorded": {"commit": finn.get("git", "?"), "date": finn.get("date", "?")},
            "source": "finn_cnv.json"}

    order = {pair: i for i, pair in enumerate(EXPECTED)}
    rows = sorted(found.values(), key=lambda r: order.get((r["design"], r["board"]), 1 << 30))
    return {"rows": rows, "fmax": fmax, "synthesis": runs, "verified": checked,
            "speed": speed, "missing": [p for p in EXPECTED if p not in found]}


# --------------------------------------------------------------------------- rendering
def _n(v):
    return f"{v:,.0f}" if isinstance(v, (int, float)) else "-"


def _short_error(text):
    # "the network needs ... block RAM: it does not fit this board yet (...)"
    return text.split(": it does not fit")[0].split(" (")[0].removeprefix("the network ")


def resources_text(row, percent=False):
    """The row's estimate against the board's budget, or what stops it fitting."""
    if row.get("error"):
        return f"does not fit: {_short_error(row['error'])}"
    shown = row["smallest"]["resources"] if row.get("smallest") else row["resources"]
    parts = []
    for key, limit in row["budget"].items():
        used = shown.get(key, 0)
        name = RESOURCE_NAMES.get(key, key)
        parts.append(f"{name} {100 * used / limit:.0f} %" if percent
                     else f"{name} {used:,}/{limit:,}")
    text = ", ".join(parts)
    if row.get("smallest"):
        text = f"fully folded ({row['smallest']['frame_cycles']:,} cycles/frame): {text}"
    return text


def fmax_text(data, row):
    run = data["fmax"].get((row["design"], row["board"]))
    if not run:
        return "-"
    fps = run["fmax_mhz"] * 1e6 / row["frame_cycles"]
    return f"{run['fmax_mhz']:.2f} MHz (seed {run['kept_seed']}; {fps:,.0f} frames/s)"


def bit_exact_text(data, row):
    v = data["verified"].get((row["design"], row["board"]))
    if not v:
        return "-"
    text = f"{v['exact']}/{v['images']}"
    if v.get("stalled_images"):
        text += f", {v['stalled_images']} more under stalls"
    return text


def _cells(data, row, percent=False):
    fits = row["fits"]
    return [LABELS[row["design"]], BOARDS[row["board"]][0],
            _n(row["frame_cycles"]) if fits else "-",
            _n(row["frames_per_second"]) if fits else "-",
            resources_text(row, percent), fmax_text(data, row), bit_exact_text(data, row),
            "yes" if fits else "no"]


def _table(head, align, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


HEAD = ["design", "board", "cycles/frame", "frames/s at the board clock",
        "estimate / budget", "Fmax (ECP5, nextpnr)", "bit-exact on Verilator", "fits"]
ALIGN = ["---", "---", "---:", "---:", "---", "---", "---", "---"]


def results_table(data):
    """Every design on every board: one row per (design, board)."""
    return _table(HEAD, ALIGN, [_cells(data, r) for r in data["rows"]])


def headline_table(data):
    """The README's rows, resources as shares of the budget."""
    by = {(r["design"], r["board"]): r for r in data["rows"]}
    head = HEAD[:4] + ["resources (estimate, share of the board)"] + HEAD[5:]
    return _table(head, ALIGN, [_cells(data, by[p], percent=True) for p in HEADLINE if p in by])


def synthesis_table(data):
    rows = []
    for run in data["synthesis"]:
        seeds = ", ".join(f"{v:.2f} (seed {k})" for k, v in run.get("fmax_mhz_by_seed", {}).items())
        late = run.get("late_register_inputs_by_seed") or {}
        late_text = ", ".join(f"{v} (seed {k})" for k, v in late.items() if v is not None)
        cells = ", ".join(f"{k.upper()} {v:,}" for k, v in run.get("yosys", {}).items())
        rows.append([LABELS[run["design"]], BOARDS[run["board"]][0], _n(run["frame_cycles"]),
                     run["what"], seeds or "no place and route", late_text or "-", cells,
                     "<br>".join(f"`{c}`" for c in run["commands"]),
                     f"{run['recorded']['commit']} ({run['recorded']['date']})"])
    return _table(["design", "board", "cycles/frame", "build", "Fmax MHz by seed",
                   "register inputs later than 10 ns", "Yosys cells", "commands", "recorded at"],
                  ["---", "---", "---:", "---", "---", "---", "---", "---", "---"], rows)


def verified_table(data):
    rows = []
    for (design, board), v in data["verified"].items():
        how = v.get("test") or ""
        if v.get("commands"):
            how = "; ".join(f"`{c}`" for c in v["commands"]) + (f"; {how}" if how else "")
        lat = v.get("latency_cycles")
        rows.append([LABELS[design], BOARDS[board][0], f"{v['exact']}/{v['images']}",
                     str(v.get("stalled_images") or "-"),
                     "yes" if v.get("cycles_measured_equal_predicted") else "no",
                     f"{lat['isolated']} / {lat['steady']}" if lat else "-", how,
                     v.get("model", "random weights"),
                     f"{v['recorded']['commit']} ({v['recorded']['date']})"])
    return _table(["design", "board", "exact", "under stalls", "cycles measured = predicted",
                   "latency (isolated / steady), measured = predicted", "run by", "model",
                   "recorded at"], ["---"] * 2 + ["---:"] * 2 + ["---"] * 5, rows)


def speed_table(data):
    rows = []
    for r in data["speed"]["results"]:
        for sim, s in r["simulators"].items():
            rows.append([r["model"], _n(r["frame_cycles"]), sim,
                         f"{s['build_seconds']:.1f}" if s.get("build_seconds") else "(cached)",
                         f"{s['images_per_second']:,.1f}", f"{s['exact']}/{s['images']}"])
    m = data["speed"]["machine"]
    return (f"Machine: {m['cpus']} cores, {m['processor']}, Python {m['python']}.\n\n"
            + _table(["model", "cycles/frame", "simulator", "build s", "images/s", "exact"],
                     ["---", "---:", "---", "---:", "---:", "---"], rows))


def markdown(data):
    """``docs/results.md``."""
    missing = ", ".join(f"{d} on {b}" for d, b in data["missing"])
    return f"""# Results

Written by `python benchmarks/results.py` from the JSON in `benchmarks/results/`; rerun
it after any benchmark. `python benchmarks/results.py --measure` schedules the rows it
owns again first (a few minutes).

![frames/s and the fullest resource per design and board](results.png)

## Every design on every board

Each network is folded to the fastest frame interval whose calibrated resource estimate
fits the board at 90 % of every resource (`groupnet-hw build` without `--fps`).
Weights are random and seeded: the structure sets cycles and resources. A row that
does not fit shows its fully folded design. FINN's CNV appears twice on the ULX3S:
with the schedule's own folding, and with the folding FINN published
([finn.md](finn.md)).

{results_table(data)}
{f"{chr(10)}Not recorded: {missing}.{chr(10)}" if missing else ""}
What each column is and where it comes from:

- **cycles/frame, frames/s, estimate / budget**: the schedule's cycle model and the
  resource model calibrated against Yosys ([architecture.md](architecture.md)
  section 9). Digits and CIFAR-size rows for the DE10-Nano and the ULX3S come from
  `benchmarks/results/groupnet_boards.json` (`python benchmarks/groupnet_boards.py`,
  also [boards.md](boards.md)); the other rows from `benchmarks/results/schedules.json`
  (`python benchmarks/results.py --measure`); FINN's folding from
  `benchmarks/results/finn_cnv.json` (`python benchmarks/finn_cnv.py`). Frames/s are
  at the board's clock: 50 MHz (DE10-Nano), 25 MHz (ULX3S), 12 MHz (iCEBreaker).
- **Fmax**: nextpnr on the LFE5U-85F, the core alone, at the best of the seeds tried,
  and frames/s at that clock (`benchmarks/results/synthesis.json`, FINN's from
  `finn_cnv.json`). Only builds with the row's frame interval are shown. Cyclone V and
  iCE40 have no out-of-context place and route here.
- **bit-exact**: images whose every logit and class equal PyTorch's fixed-point forward
  on the generated Verilog, at the predicted cycles per frame, then again under random
  input gaps and output stalls (`benchmarks/results/verified.json`, FINN's from
  `finn_cnv.json`). "-": no run recorded in this mapping.

The digits K=5 Fmax and bit-exact runs used the trained model of `groupnet-hw train`:
the same structure and folding as the row, other weights.

## Synthesis and place and route

Measured with `groupnet-hw synth`; Yosys counts cells of the flat netlist. The 1,024
cycles/frame builds are alternatives to the default folding, kept as timing references.
The hardware has changed since some of these runs: the commands measure it again.

{synthesis_table(data)}

## Bit-exact runs

{verified_table(data)}

## Verification speed

`python benchmarks/verify_speed.py` (`benchmarks/results/verify_speed.json`): images per
second through each simulator, all outputs compared with PyTorch.

{speed_table(data)}
"""


def readme_block(data):
    """The README's headline rows, between :data:`BEGIN` and :data:`END`."""
    return (f"{BEGIN}\n{headline_table(data)}\n\nAll designs on all boards, synthesis runs and "
            f"sources: [docs/results.md](docs/results.md).\n{END}")


def update_readme(text, data):
    """``text`` with its results block replaced; unchanged if it has no block."""
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    return pattern.sub(lambda _: readme_block(data), text)


def plot(data, path):
    """``docs/results.png``: frames/s (log) and the fullest budgeted resource, per
    design and board; designs that do not fit are marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    designs = [d for d, *_ in DESIGNS]
    by = {(r["design"], r["board"]): r for r in data["rows"]}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    width = 0.8 / len(BOARDS)
    colors = ("tab:blue", "tab:orange", "tab:green")
    for j, (board, (name, _, clock)) in enumerate(BOARDS.items()):
        xs = [i + (j - 1) * width for i in range(len(designs))]
        fps, util, nofit_x, error_x = [], [], [], []
        for x, d in zip(xs, designs):
            r = by.get((d, board))
            shown = {} if r is None or r.get("error") else (r["smallest"] or r)["resources"]
            fps.append(r["frames_per_second"] if r and r["fits"] else 0)
            util.append(max((100 * shown.get(k, 0) / v for k, v in r["budget"].items()),
                            default=0) if shown else 0)
            if r is not None and not r["fits"]:
                (error_x if r.get("error") else nofit_x).append(x)
        ax1.bar(xs, fps, width, label=f"{name} ({clock:g} MHz)", color=colors[j])
        ax2.bar(xs, util, width, color=colors[j])
        for x in nofit_x + error_x:
            ax1.text(x, 1.2, "no", ha="center", va="bottom", fontsize=7, rotation=90)
        for x in error_x:
            ax2.text(x, 1.2, "RAM", ha="center", va="bottom", fontsize=7, rotation=90)
    ax1.set_yscale("log")
    ax1.set_ylim(bottom=1)
    ax1.set_ylabel("frames/s at the board clock")
    ax1.legend(fontsize=8)
    ax1.set_title("Fastest folding that fits 90 % of each board (\"no\": does not fit)")
    ax2.set_yscale("log")
    ax2.set_ylim(1, 10000)
    ax2.axhline(90, color="grey", linestyle="--", linewidth=1)
    ax2.text(len(designs) - 0.5, 95, "90 %", ha="right", va="bottom", fontsize=7, color="grey")
    ax2.set_ylabel("fullest resource, % of the board\n(fully folded where it does not "
                   "fit;\nRAM: weights exceed the block RAM)", fontsize=8)
    ax2.set_xticks(range(len(designs)))
    ax2.set_xticklabels([LABELS[d].replace(", FINN's", ",\nFINN's") for d in designs],
                        fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------- measuring
def _model(design):
    import torch
    arch, k = next((a, k) for d, _, a, k in DESIGNS if d == design)
    if arch == "cnv":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from finn_cnv import make_model
        return make_model("cnv", seed=0)
    from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
    from groupnet_hw.models.zoo import arch_config
    gen = torch.Generator().manual_seed(k)      # groupnet_boards.py's seeds
    torch.manual_seed(k)
    return randomize_eval_state(GroupNet(arch_config(arch, bases=k)), gen).eval()


def measure(pairs, max_util=0.9, progress=print):
    """Schedule each (design, board) of ``pairs`` as ``groupnet-hw build`` does
    (:func:`groupnet_hw.flow.build` up to its ``schedule`` step) and return the rows in
    ``groupnet_boards.json``'s format."""
    from dataclasses import replace

    from groupnet_hw.devices import get_board
    from groupnet_hw.flow import BuildConfig, FlowError, build
    rows = []
    for design, board in pairs:
        t0 = time.perf_counter()
        model = _model(design)
        cfg = BuildConfig(board=board, max_util=max_util)
        row = {"design": design, "board": board,
               "budget": dict(get_board(board).device.limits)}
        try:
            s = build(model, cfg, stop_after="schedule").schedule
        except FlowError as exc:
            row.update(fits=False, error=str(exc))
        else:
            smallest = None
            if not s.fits():
                slow = build(model, replace(cfg, target_cycles=FULLY_FOLDED,
                                            bases=s.base_mapping),
                             stop_after="schedule").schedule
                smallest = {"frame_cycles": slow.frame_cycles, "resources": slow.resources}
            row.update(fits=s.fits(), frame_cycles=s.frame_cycles,
                       frames_per_second=round(s.frames_per_second, 1),
                       clock_mhz=s.clock_mhz, resources=s.resources, smallest=smallest,
                       base_mapping=s.base_mapping,
                       beat_units=sum(u.beats > 1 for u in s.units.values()),
                       units=len(s.units),
                       other_mapping=[n for n in s.notes if "instead" in n])
        row["schedule_seconds"] = round(time.perf_counter() - t0, 1)
        progress(f"{design} on {board}: " + (f"{row.get('frame_cycles'):,} cycles/frame, "
                                              f"fits {row['fits']}" if "error" not in row
                                              else row["error"]))
        rows.append(row)
    return rows


def _git():
    """The commit measured, ``-dirty`` with uncommitted changes."""
    import subprocess
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def owned_pairs(results_dir=RESULTS):
    """The expected pairs ``groupnet_boards.json`` and ``finn_cnv.json`` do not cover."""
    covered = {(f"{r['arch']}-k{r['K']}", r["board"])
               for r in _read(results_dir, "groupnet_boards.json")}
    return [p for p in EXPECTED if p not in covered and p[0] != "cnv-finn"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measure", action="store_true",
                    help="schedule the rows of schedules.json again before rendering")
    ap.add_argument("--max-util", type=float, default=0.9)
    args = ap.parse_args(argv)
    if args.measure:
        import datetime
        import platform
        rows = measure(owned_pairs(), args.max_util)
        (RESULTS / "schedules.json").write_text(json.dumps({
            "about": "Written by `python benchmarks/results.py --measure`: the pairs of "
                     "design and board groupnet_boards.json does not cover, scheduled as "
                     "`groupnet-hw build` does (random seeded weights, the fastest folding "
                     f"within {args.max_util:.0%} of every resource).",
            "date": datetime.date.today().isoformat(), "git": _git(),
            "machine": f"{platform.machine()}", "rows": rows}, indent=1) + "\n")
    data = load()
    (DOCS / "results.md").write_text(markdown(data))
    plot(data, DOCS / "results.png")
    if README.is_file():
        text = README.read_text()
        new = update_readme(text, data)
        if new != text:
            README.write_text(new)
    print(results_table(data))
    if data["missing"]:
        print("not recorded:", ", ".join(f"{d} on {b}" for d, b in data["missing"]))


if __name__ == "__main__":
    main()
