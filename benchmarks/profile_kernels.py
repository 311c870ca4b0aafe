"""Run one implementation's attention forward (or forward + backward) a few times, for a kernel
profiler to attach to (GPU only).

The cell is the benchmark's (``bench_attention.py``: FA3 grid, bf16, the same random inputs), and
each call is a separate jitted step, so that ``ncu -k regex:NAME -c 1`` profiles exactly one
launch of the kernel of interest after a warm-up, e.g. jax_fa4's kernels beside FlashAttention-3's.

Usage (GPU): python benchmarks/profile_kernels.py --impl fa3 --pass bwd --head-dim 128 --seq 4096
  ncu -k regex:NAME -c 1 python3 benchmarks/profile_kernels.py --impl jax_fa4 --pass fwd
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_attention as ba  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the chosen pass ``--calls`` times (after one warm-up call); returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", required=True, choices=ba.ALL_IMPLS)
    p.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="bwd")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--calls", type=int, default=2)
    args = p.parse_args(argv)
    if args.calls < 1:
        print(f"bad --calls {args.calls}: must be at least 1", file=sys.stderr)
        return 2
    cell = ba.grid([args.head_dim], [args.seq], [args.causal], 16384, 2048)[0]
    q, k, v, do = ba.make_inputs(cell, jax.numpy.bfloat16)
    attn = ba.make_impl(args.impl, args.causal, args.head_dim)
    if args.which == "fwd":
        step = jax.jit(attn)
        operands: tuple[jax.Array, ...] = (q, k, v)
    else:
        step = jax.jit(lambda q, k, v, do: jax.vjp(attn, q, k, v)[1](do))
        operands = (q, k, v, do)
    for _ in range(args.calls + 1):
        jax.block_until_ready(step(*operands))
    what = f"d={cell.head_dim} s={cell.seq} b={cell.batch} h={cell.heads} causal={cell.causal}"
    print(f"{args.impl} {args.which} {what}: {args.calls + 1} calls done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
