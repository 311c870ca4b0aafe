"""Summarise Nsight Compute's raw CSV: per kernel, its time, issue rate, where its warps stall and
how busy its pipes are, side by side for several reports (e.g. jax_fa4's backward beside
FlashAttention-4's). No GPU needed.

On the GPU machine (Firecracker runtime; keep the clocks alone), one report per implementation:

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section InstructionStats -c 12 --csv --page raw \\
        python3 benchmarks/profile_kernels.py --impl jax_fa4 --pass bwd --head-dim 128 \\
        --seq 8192 --calls 1 > ncu_jax_fa4.csv
    python3 benchmarks/ncu_summary.py ncu_jax_fa4.csv ncu_fa4jax.csv [--min-us 200]

The raw page holds one row per profiled kernel after a header row and a units row; the script
keeps kernels of at least --min-us (the main kernels, not the pre/post passes) and prints, per
report and kernel: the duration, instructions, issue-active share, the stall reasons in cycles per
issued instruction (largest first) and every pipe-utilisation metric the sections recorded.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence

_DURATION = "gpu__time_duration.sum"
_STALL = "smsp__average_warps_issue_stalled_"
_STALL_SUFFIX = "_per_issue_active.ratio"


# Microseconds per unit of the units row.
_TIME_UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def read_report(path: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The kernel rows of one ``--csv --page raw`` report, {metric or column: value}, and the
    units row, {metric: unit} (ncu's own messages before the header are skipped)."""
    with open(path, newline="") as fh:
        lines = [line for line in fh if line.startswith('"')]  # ==PROF== lines are not CSV
    rows = list(csv.reader(lines))
    if not rows or "Kernel Name" not in rows[0]:
        raise ValueError("no ncu raw CSV header (a 'Kernel Name' column) found")
    header, body = rows[0], rows[1:]
    units: dict[str, str] = {}
    if body and not body[0][header.index("Kernel Name")]:
        units = dict(zip(header, body[0], strict=False))
        body = body[1:]
    return [dict(zip(header, row, strict=False)) for row in body], units


def number(text: str | None) -> float | None:
    """A metric cell as a number ("4,850,500" -> 4850500.0); None when empty or not a number."""
    try:
        return float((text or "").replace(",", ""))
    except ValueError:
        return None


def duration_us(row: dict[str, str], units: dict[str, str]) -> float | None:
    """The kernel's duration in microseconds, by the units row (ns where it has none)."""
    value = number(row.get(_DURATION))
    return None if value is None else value * _TIME_UNITS.get(units.get(_DURATION, "nsecond"), 1e-3)


def summary(row: dict[str, str], units: dict[str, str], stalls: int) -> list[str]:
    """Lines describing one kernel row."""
    name = row.get("Kernel Name", "?")
    out = [f"  {name[:110]}"]
    facts = []
    d = duration_us(row, units)
    if d is not None:
        facts.append(f"{d:,.1f} us")
    inst = number(row.get("smsp__inst_executed.sum") or row.get("sm__inst_executed.sum"))
    if inst is not None:
        facts.append(f"{inst:,.0f} warp instructions")
    issue = number(row.get("smsp__issue_active.avg.pct_of_peak_sustained_active"))
    if issue is not None:
        facts.append(f"issue active {issue:.1f}%")
    if facts:
        out.append("    " + ", ".join(facts))
    stall = {
        key[len(_STALL) : -len(_STALL_SUFFIX)]: x
        for key, v in row.items()
        if key.startswith(_STALL) and key.endswith(_STALL_SUFFIX) and (x := number(v))
    }
    top = sorted(stall.items(), key=lambda kv: -kv[1])[:stalls]
    if top:
        out.append(
            "    stalls (cycles / issued instruction): " + ", ".join(f"{k} {v:.2f}" for k, v in top)
        )
    pipes = {
        key: x
        for key, v in row.items()
        if "pipe_" in key and key.endswith("pct_of_peak_sustained_active") and (x := number(v))
    }
    busy = sorted(pipes.items(), key=lambda kv: -kv[1])[:8]
    if busy:
        out.append(
            "    pipes (% of peak): "
            + ", ".join(f"{k.split('__', 1)[-1].split('.')[0]} {v:.1f}" for k, v in busy)
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+", help="ncu --csv --page raw outputs")
    ap.add_argument(
        "--min-us", type=float, default=200.0, help="kernels shorter than this are left out"
    )
    ap.add_argument("--stalls", type=int, default=8, help="stall reasons shown per kernel")
    args = ap.parse_args(argv)
    for path in args.reports:
        try:
            rows, units = read_report(path)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        kept = [r for r in rows if (duration_us(r, units) or 0.0) >= args.min_us]
        print(f"{path}: {len(rows)} kernels profiled, {len(kept)} of at least {args.min_us:g} us")
        for row in kept:
            print("\n".join(summary(row, units, args.stalls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
