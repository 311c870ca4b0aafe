"""Where a kernel's warps wait, per SASS instruction: Nsight Compute's source page (warp stall
sampling) summarised. No GPU needed.

On the GPU machine, one report with the SourceCounters section, then its source page as CSV:

    ncu --clock-control none --kernel-name-base mangled -k 'regex:bwd_kernel.*BwdHd128E' -c 1 \\
        --section SourceCounters --section WarpStateStats -o rep \\
        ./bwd_check --no-check --bench --config library --hd 128 --seqs 16384
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 benchmarks/ncu_source.py src.csv [--top 25] [--range LO HI]

Prints the stall reasons over all samples, the samples by opcode, the shared-memory wavefronts by
opcode (with the excess over the ideal: bank conflicts), the instructions holding the most
samples with their leading reasons, and with --range (two addresses, hex) the share of the
samples inside [LO, HI] (a loop) and every instruction there. A sample is charged to the
instruction its warp was waiting to issue: a stall on an instruction's operand (short or long
scoreboard) names the instruction that uses the value, not the one that produced it.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from collections.abc import Sequence

from ncu_summary import number

_SAMPLES = "Warp Stall Sampling (All Samples)"
_WAVEFRONTS = (
    "L1 Wavefronts Shared",
    "L1 Wavefronts Shared Ideal",
    "L1 Wavefronts Shared Excessive",
)


def _number(text: str) -> float:
    """A sample or wavefront count; an empty cell counts 0."""
    return number(text) or 0.0


def read_source(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """(header, one dict per SASS instruction) from `ncu --page source --csv` output: the rows
    after the header row that starts with "Address"."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    at = next((i for i, row in enumerate(rows) if row and row[0] == "Address"), None)
    if at is None:
        raise ValueError(
            f'{path}: no header row starting with "Address" (not an ncu source-page CSV)'
        )
    header = rows[at]
    body = [dict(zip(header, r, strict=True)) for r in rows[at + 1 :] if len(r) == len(header)]
    if _SAMPLES not in header:
        raise ValueError(f'{path}: no "{_SAMPLES}" column (profile with --section SourceCounters)')
    return header, body


def stall_columns(header: Sequence[str]) -> list[str]:
    """The per-reason sample columns (all samples, not the not-issued ones)."""
    return [h for h in header if h.startswith("stall_") and "Not Issued" not in h]


def opcode(source: str) -> str:
    """The opcode of a SASS line without its predicate and modifiers: "@!P0 BRA 0x10" -> "BRA"."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def leading_reasons(row: dict[str, str], stalls: Sequence[str], n: int = 2) -> str:
    total = max(_number(row[_SAMPLES]), 1.0)
    ranked = sorted(((_number(row[s]), s[len("stall_") :]) for s in stalls), reverse=True)[:n]
    return " ".join(f"{name} {100 * v / total:.0f}%" for v, name in ranked if v > 0)


def summarise(header: list[str], body: list[dict[str, str]], top: int) -> list[str]:
    stalls = stall_columns(header)
    total = sum(_number(r[_SAMPLES]) for r in body)
    out = [f"{len(body)} instructions, {total:.0f} samples"]
    if total <= 0:
        return out
    by_reason = collections.Counter(
        {s[len("stall_") :]: sum(_number(r[s]) for r in body) for s in stalls}
    )
    out.append(
        "stall reasons, % of samples: "
        + ", ".join(f"{k} {100 * v / total:.1f}" for k, v in by_reason.most_common(10) if v)
    )
    by_op: collections.Counter[str] = collections.Counter()
    waves: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in body:
        op = opcode(r["Source"])
        by_op[op] += _number(r[_SAMPLES])
        if all(w in r for w in _WAVEFRONTS):
            for k, w in enumerate(_WAVEFRONTS):
                waves[op][k] += _number(r[w])
    out.append(
        "samples by opcode, %: "
        + ", ".join(f"{k} {100 * v / total:.1f}" for k, v in by_op.most_common(12))
    )
    shared = sorted(((v, op) for op, v in waves.items() if v[0] > 0), reverse=True)
    if shared:
        out.append("shared-memory wavefronts by opcode (total / ideal / excessive):")
        out += [f"  {op:8s} {v[0]:14.0f} {v[1]:14.0f} {v[2]:14.0f}" for v, op in shared]
    out.append(f"the {top} instructions with the most samples:")
    for r in sorted(body, key=lambda r: -_number(r[_SAMPLES]))[:top]:
        share = 100 * _number(r[_SAMPLES]) / total
        source = r["Source"][:64]
        out.append(
            f"  {r['Address']:>18s} {share:5.1f}%  {source:64s} {leading_reasons(r, stalls)}"
        )
    return out


def in_range(header: list[str], body: list[dict[str, str]], lo: int, hi: int) -> list[str]:
    stalls = stall_columns(header)
    total = sum(_number(r[_SAMPLES]) for r in body) or 1.0
    rows = [r for r in body if lo <= int(r["Address"], 16) <= hi]
    inside = sum(_number(r[_SAMPLES]) for r in rows)
    out = [
        f"[{lo:#x}, {hi:#x}]: {len(rows)} instructions, {100 * inside / total:.1f}% of the samples"
    ]
    for r in rows:
        share = 100 * _number(r[_SAMPLES]) / total
        low = (
            int(r["Address"], 16) & 0xFFFFF
        )  # the low 20 bits: enough to tell a loop's lines apart
        source = r["Source"][:64]
        out.append(f"  {low:05x} {share:5.2f}%  {source:64s} {leading_reasons(r, stalls)}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    p.add_argument(
        "--top", type=int, default=25, help="instructions listed by samples (default 25)"
    )
    p.add_argument(
        "--range", nargs=2, metavar=("LO", "HI"), help="two addresses (hex): list that range"
    )
    args = p.parse_args(argv)
    try:
        header, body = read_source(args.csv)
    except (OSError, ValueError) as e:
        print(f"ncu_source.py: {e}", file=sys.stderr)
        return 2
    lines = summarise(header, body, args.top)
    if args.range:
        lines += in_range(header, body, int(args.range[0], 16), int(args.range[1], 16))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
