"""Cell-by-cell comparison of two recorded bench_attention.py runs (JSON): one implementation's
TFLOP/s in the new run over the old run's, and its ratio to a peer in each run.

Usage: python3 benchmarks/compare_runs.py OLD.json NEW.json [--impl jax_fa4] [--peer cudnn]
Prints one markdown row per (head dim, causal, seq) with forward and backward, and the lowest
new/old ratio of each pass. Absolute TFLOP/s move from run to run with the card's clocks; the
ratio to a peer measured in the same run moves less.
"""

from __future__ import annotations

import argparse
import json


def cells(path: str, impl: str) -> dict[tuple[int, bool, int], dict]:
    with open(path) as f:
        records = json.load(f)["records"]
    return {(r["head_dim"], r["causal"], r["seq"]): r for r in records if r.get("impl") == impl}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--impl", default="jax_fa4")
    p.add_argument("--peer", default="cudnn")
    a = p.parse_args()
    old, new = cells(a.old, a.impl), cells(a.new, a.impl)
    old_peer, new_peer = cells(a.old, a.peer), cells(a.new, a.peer)
    print(
        f"| head dim | causal | seq | fwd new/old | fwd vs {a.peer}: old, new "
        f"| bwd new/old | bwd vs {a.peer}: old, new |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = {"fwd": None, "bwd": None}
    for key in sorted(set(old) & set(new)):
        row = [str(key[0]), "yes" if key[1] else "no", str(key[2])]
        for pass_ in ("fwd", "bwd"):
            o, n = old[key].get(f"{pass_}_tflops"), new[key].get(f"{pass_}_tflops")
            if not o or not n:
                row += ["-", "-"]
                continue
            r = n / o
            worst[pass_] = r if worst[pass_] is None else min(worst[pass_], r)
            po = old_peer.get(key, {}).get(f"{pass_}_tflops")
            pn = new_peer.get(key, {}).get(f"{pass_}_tflops")
            vs = f"{o / po:.3f}, {n / pn:.3f}" if po and pn else "-"
            row += [f"{r:.3f}", vs]
        print("| " + " | ".join(row) + " |")
    for pass_, w in worst.items():
        if w is not None:
            print(f"lowest {pass_} new/old: {w:.3f}")


if __name__ == "__main__":
    main()
