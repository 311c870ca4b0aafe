"""Where the time of a benchmark chain goes, from a JAX profiler trace (GPU only).

Runs the forward chains of ``bench_attention.py`` (the same chain, inputs and chain length) for
each implementation in one cell (``--pass bwd``: its forward + backward chains, so the backward's
kernels show beside the forward's), under ``jax.profiler`` (CUPTI), and prints per implementation:
the chain's wall time per call, the GPU kernels of one chain (name, count, mean duration) and the
idle time between consecutive kernels on the GPU. This tells a slow kernel from time lost between
kernels (launch gaps, host work in a custom call's handler) when a benchmark cell reads lower
through JAX than the kernel does alone.

Usage (GPU): python benchmarks/profile_chain.py --impls jax_fa4,cudnn --head-dim 128 --seq 2048

``--decode-cells 1,3`` profiles ``bench_decode.py``'s chains instead (cells by index into its
``CELLS``; bandwidth as there), e.g. to see whether a decode cell's time through JAX is the
kernels' or lost between them.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_attention as ba  # noqa: E402


def gpu_kernel_events(trace_dir: str) -> list[tuple[str, int, int]]:
    """(name, start_ns, duration_ns) of every event on the GPU planes' stream lines, by start."""
    from jax.profiler import ProfileData

    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not files:
        raise RuntimeError(f"no .xplane.pb under {trace_dir}")
    events = []
    for plane in ProfileData.from_file(files[-1]).planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if not line.name.lower().startswith("stream"):
                continue
            for e in line.events:
                events.append((e.name, int(e.start_ns), int(e.duration_ns)))
    return sorted(events, key=lambda x: x[1])


def chain_of(attn, n: int, q, k, v, do, bwd: bool):
    """(compiled chain, its arguments, work factor): n forward calls, or with `bwd` n forward +
    backward steps, whose work is 3.5 forwards' (the backward counted as 2.5)."""
    if bwd:
        return ba.compile_fn(ba.fwd_bwd_chain(attn, n), (q, k, v, do)), (q, k, v, do), 3.5
    return ba.compile_fn(ba.fwd_chain(attn, n), (q, k, v)), (q, k, v), 1.0


def profile_impl(
    impl: str, cell: ba.Cell, dtype, chain_flops: float, chains: int, bwd: bool
) -> None:
    """Prints the wall time per call and the kernel timeline summary of `chains` chains."""
    attn = ba.make_impl(impl, cell.causal, cell.head_dim)
    flops = ba.fwd_flops(cell.batch, cell.heads, cell.seq, cell.head_dim, cell.causal)
    n = ba.chain_length(flops, chain_flops)
    q, k, v, do = ba.make_inputs(cell, dtype)
    f, args, factor = chain_of(attn, n, q, k, v, do, bwd)
    what = "fwd+bwd" if bwd else "fwd"
    title = f"{impl}: hd{cell.head_dim} seq {cell.seq} causal {cell.causal} {what} chain {n}"
    report_chain(f, args, n, chains, title, factor * flops / 1e12, "TFLOP/s")


def profile_decode(impl: str, index: int, chains: int) -> None:
    """profile_impl for bench_decode.py's cell CELLS[index] (its chain, inputs and lengths)."""
    import bench_decode as bd

    cell = bd.CELLS[index]
    b, sq, sk, hq, hkv = cell
    q, k, v, lengths = bd.make_inputs(cell)
    f = ba.compile_fn(ba.fwd_chain(bd.make_impl(impl, lengths), bd.CHAIN), (q, k, v))
    title = f"{impl}: decode {b} x {sk}, seq_q {sq}, heads {hq}/{hkv} chain {bd.CHAIN}"
    report_chain(f, (q, k, v), bd.CHAIN, chains, title, bd.moved_bytes(q, k) / 1e9, "GB/s")


def profile_variant(impl: str, variant: str, chains: int, bwd: bool) -> None:
    """profile_impl for bench_variants.py's cell of `variant` (16 heads, hd128, 16k)."""
    import bench_variants as bv

    cell = bv.Cell(variant, 1, 16384)
    n = bv.chain_length(cell)
    q, k, v, do = bv.make_inputs(cell)
    f, args, factor = chain_of(bv.make_impl(impl, cell), n, q, k, v, do, bwd)
    what = "fwd+bwd" if bwd else "fwd"
    title = f"{impl}: {variant} 16k hd128 {what} chain {n}"
    report_chain(f, args, n, chains, title, factor * bv.fwd_flops(cell) / 1e12, "TFLOP/s")


def report_chain(f, args, n: int, chains: int, title: str, work: float, unit: str) -> None:
    """Times the compiled chain `f` of `n` calls, then traces `chains` runs of it and prints the
    GPU kernels of one chain and the gaps between them; `work` per call in `unit` x seconds."""
    wall = ba.time_compiled(f, args, 5) / n
    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        for _ in range(chains):
            jax.block_until_ready(f(*args))
        jax.profiler.stop_trace()
        time.sleep(0.5)
        events = gpu_kernel_events(d)
    print(f"\n== {title}: wall {wall * 1e6:.1f} us per call = {work / wall:.1f} {unit}")
    if not events:
        print("   no GPU events in the trace")
        return
    by_name: dict[str, list[int]] = defaultdict(list)
    for name, _, dur in events:
        by_name[name].append(dur)
    for name, durs in sorted(by_name.items(), key=lambda x: -sum(x[1])):
        mean = statistics.mean(durs)
        print(f"   {len(durs):4d} x {mean / 1e3:9.1f} us  {name[:110]}")
    gaps = [b[1] - (a[1] + a[2]) for a, b in zip(events, events[1:], strict=False)]
    inside = [g for g in gaps if g < 1_000_000]  # gaps between chains (host sync) are ~ms
    # Each traced chain launches the same kernels: a chain's span (first start to last end) over
    # its calls is its cost per call on the GPU's clock, right also where kernels overlap
    # (programmatic dependent launches), which the busy sum is not.
    per = len(events) // chains
    runs = [events[i * per : (i + 1) * per] for i in range(chains)]
    spans = [max(e[1] + e[2] for e in r) - r[0][1] for r in runs if r]
    # End-to-start gaps by kernel pair: where a pair overlaps (< 0) or waits.
    pairs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for x, y, g in zip(events, events[1:], gaps, strict=False):
        if g < 1_000_000:
            pairs[(x[0][:40], y[0][:40])].append(g)
    busy = sum(e[2] for e in events)
    per_call_s = busy / chains / n / 1e9
    print(
        f"   {len(events)} GPU events over {chains} chains; busy {busy / 1e6:.3f} ms = "
        f"{per_call_s * 1e6:.1f} us per call = {work / per_call_s:.1f} "
        f"{unit} kernel-only; gaps between kernels (< 1 ms): median "
        f"{statistics.median(inside) / 1e3 if inside else 0:.1f} us, total "
        f"{sum(inside) / chains / n / 1e3:.1f} us per call"
    )
    span_s = statistics.median(spans) / n / 1e9
    rate = work / span_s
    print(f"   span of a chain on the GPU: {span_s * 1e6:.1f} us per call = {rate:.1f} {unit}")
    for (x, y), g in sorted(pairs.items(), key=lambda kv: -len(kv[1])):
        gap = statistics.median(g) / 1e3
        print(f"   {len(g):4d} x end-to-start {gap:8.1f} us (median)  {x} -> {y}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ba.add_cell_arguments(p)
    p.add_argument("--chain-flops", type=float, default=2e12)
    p.add_argument("--chains", type=int, default=3)
    p.add_argument("--decode-cells", default="", help="bench_decode.py cell indices, e.g. 1,3")
    p.add_argument("--variant", default="", help="a bench_variants.py variant, e.g. window4096")
    p.add_argument(
        "--pass",
        dest="which",
        choices=("fwd", "bwd"),
        default="fwd",
        help="bwd: forward + backward chains (not with --decode-cells)",
    )
    a = p.parse_args(argv)
    bwd = a.which == "bwd"
    if a.variant:
        for impl in a.impls.split(","):
            try:
                profile_variant(impl, a.variant, a.chains, bwd)
            except Exception as e:
                print(f"\n== {impl}: {a.variant} failed: {ba.short_reason(e)}")
        return 0
    if a.decode_cells:
        if bwd:
            print("--pass bwd profiles the attention cells, not --decode-cells", file=sys.stderr)
            return 2
        for index in (int(x) for x in a.decode_cells.split(",")):
            for impl in a.impls.split(","):
                try:
                    profile_decode(impl, index, a.chains)
                except Exception as e:
                    print(f"\n== {impl}: decode cell {index} failed: {ba.short_reason(e)}")
        return 0
    cell = ba.Cell(a.head_dim, a.seq, a.causal, 16384 // a.seq, 2048 // a.head_dim)
    for impl in a.impls.split(","):
        try:
            profile_impl(impl, cell, jax.numpy.bfloat16, a.chain_flops, a.chains, bwd)
        except Exception as e:  # one implementation failing must not hide the others
            print(f"\n== {impl}: failed: {ba.short_reason(e)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
