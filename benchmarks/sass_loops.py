"""The innermost loop of a kernel's SASS (``nvdisasm -c`` or ``cuobjdump -sass`` output), counted:
instructions, tensor-core products (HGMMA), exponentials (MUFU), named barriers, local-memory
spills, and how many MUFU sit between a ``wgmma.wait_group 1`` and the following
``wgmma.wait_group 0`` (work that overlaps the last product in flight). No GPU needed.

    python3 benchmarks/sass_loops.py ours.sass --function 'bwd_kernelI13__nv_bf.*Hd128.*KindE1'
    python3 benchmarks/sass_loops.py fa4.sass --timeline

``--function`` picks one kernel by a regular expression on its ``.text.`` name (default: all the
file's code as one); ``--timeline`` prints the loop as its synchronisation points with the
instruction mix between them; ``--all`` counts every main loop of the function instead of the
shortest.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys
from collections.abc import Sequence

_PRED = re.compile(r"^@!?U?P[0-9T] ")
_SYNC = ("WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "BAR.", "SYNCS")


def load(path: str, function: str | None = None) -> list[str]:
    """The instruction and label lines of `path`, of the kernels whose name matches `function`."""
    out: list[str] = []
    keep = function is None
    for line in pathlib.Path(path).read_text().split("\n"):
        line = re.sub(r"/\*[0-9a-f]+\*/", "", line).strip()
        if line.startswith(".text."):
            keep = function is None or re.search(function, line) is not None
        elif keep and line:
            out.append(line)
    return out


def opcode(line: str) -> str:
    return _PRED.sub("", line).split()[0]


def main_loops(lines: Sequence[str]) -> list[list[str]]:
    """Every backward-branch range of at least 150 instructions with at least 16 MUFU (attention
    main loops, not barrier spins or epilogue loops), in code order: a kernel with several copies
    of its step (one per mask need, say) has one each."""
    labels: dict[str, int] = {}
    body: list[str] = []
    for line in lines:
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(body)
        elif re.match(r"^(@!?U?P[0-9T] )?[A-Z]", line):
            body.append(line)
    loops = []
    for i, line in enumerate(body):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] <= i and i - labels[m.group(1)] >= 150:
            loop = body[labels[m.group(1)] : i + 1]
            if sum(opcode(x).startswith("MUFU") for x in loop) >= 16:
                loops.append(loop)
    return loops


def innermost_loop(lines: Sequence[str]) -> list[str]:
    """The shortest of `main_loops`."""
    loops = main_loops(lines)
    if not loops:
        raise SystemExit("no loop of 150 or more instructions with 16 or more MUFU")
    return min(loops, key=len)


def summary(loop: Sequence[str]) -> dict[str, int]:
    kinds = collections.Counter(opcode(x).split(".")[0] for x in loop)
    between, pending = 0, False
    for line in loop:
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            pending = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            pending = False
        elif pending and opcode(line).startswith("MUFU"):
            between += 1
    return {
        "instructions": len(loop),
        "HGMMA": kinds["HGMMA"],
        "MUFU": kinds["MUFU"],
        "MUFU before wait 0": between,
        "BAR": kinds["BAR"],
        "LDL/STL": kinds["LDL"] + kinds["STL"],
    }


def timeline(loop: Sequence[str]) -> str:
    out: list[str] = []
    run: collections.Counter[str] = collections.Counter()
    for line in loop:
        op = opcode(line)
        if op.startswith(_SYNC):
            if run:
                out.append("    " + " ".join(f"{k}:{v}" for k, v in run.most_common(6)))
            run = collections.Counter()
            out.append(" ".join(_PRED.sub("", line).split()[:3]))
        else:
            run[op.split(".")[0]] += 1
    if run:
        out.append("    " + " ".join(f"{k}:{v}" for k, v in run.most_common(6)))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sass")
    p.add_argument("--function", default=None)
    p.add_argument("--timeline", action="store_true")
    p.add_argument("--all", action="store_true", help="every main loop of the function, in order")
    a = p.parse_args(argv)
    if a.all:
        for loop in main_loops(load(a.sass, a.function)):
            print(", ".join(f"{k} {v}" for k, v in summary(loop).items()))
        return 0
    loop = innermost_loop(load(a.sass, a.function))
    print(", ".join(f"{k} {v}" for k, v in summary(loop).items()))
    if a.timeline:
        print(timeline(loop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
