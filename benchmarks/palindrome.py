"""Averages the standalone kernel harness's timing rows (tests/gpu/cuda/) per kernel variant, for
palindromic runs such as ``--variants 14,17,17,14``, and prints each variant beside the cell's
first one.

Reads the harness's bench output (a file, or stdin): forward rows
``hd causal seq batch variant ms tflops [b2b_tflops]``, backward rows
``hd causal seq batch variant opts ms tflops``. Rows in other formats are ignored.

    python3 benchmarks/palindrome.py bench.txt      # or: ... | python3 benchmarks/palindrome.py
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict

_CELL = r"^\s*(\d+)\s+(yes|no)\s+(\d+)\s+(\d+)\s+(\d+)\s+"  # hd causal seq batch variant
_FWD = re.compile(_CELL + r"([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?\s*$")
_BWD = re.compile(_CELL + r"(\d+)\s+([\d.]+)\s+([\d.]+)\s*$")
# Cell (hd, causal, seq, opts text) -> variant name -> TFLOP/s of each of its rows, in file order.
Cells = OrderedDict[tuple, OrderedDict[str, list[float]]]


def parse(lines: list[str]) -> Cells:
    """The timing rows of a harness's bench output, grouped by cell and variant."""
    cells: Cells = OrderedDict()
    for line in lines:
        m = _BWD.match(line)
        if m:
            hd, causal, seq, _, variant, opts, _, tf = m.groups()
            key = (int(hd), causal, int(seq), f"opts {opts}")
        else:
            m = _FWD.match(line)
            if not m:
                continue
            hd, causal, seq, _, variant, _, tf, _ = m.groups()
            key = (int(hd), causal, int(seq), "")
        cells.setdefault(key, OrderedDict()).setdefault(f"V{variant}", []).append(float(tf))
    return cells


def report(cells: Cells) -> list[str]:
    """One line per cell: each variant's mean TFLOP/s (and range), relative to the cell's first."""
    out = []
    for (hd, causal, seq, extra), variants in cells.items():
        base_name, base = next(iter(variants.items()))
        base_mean = sum(base) / len(base)
        parts = []
        for name, vals in variants.items():
            mean = sum(vals) / len(vals)
            spread = f" [{min(vals):.1f}-{max(vals):.1f}]" if len(vals) > 1 else ""
            rel = "" if name == base_name else f" {100.0 * (mean / base_mean - 1.0):+.1f}%"
            parts.append(f"{name} {mean:.1f}{spread}{rel}")
        causal_text = "causal" if causal == "yes" else "full"
        out.append(f"hd{hd} {causal_text:6} {seq:6} {extra:8} " + " | ".join(parts))
    return out


def main(argv: list[str]) -> int:
    text = open(argv[1]).read() if len(argv) > 1 else sys.stdin.read()
    for line in report(parse(text.splitlines())):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
