"""CPU benchmark: jax_fa4.attention beside jax.nn.dot_product_attention(implementation="xla").

How the C++ CPU kernels (blocked online softmax, float32 accumulation, all cores) compare with
XLA's plain attention on the CPU. Grid: batch 1, 8 heads, float32, head dims 64 and 128,
seq 512/1024/2048/4096, not causal (``--causal`` adds the causal cells); forward and
forward+backward (``jax.vjp`` of the call and its pullback, all three gradients kept). Each
measurement is a compiled ``jax.jit`` function run once to warm up and then timed a few times
(fewer for the slow cells; a cell whose warm-up run alone exceeds ``--budget`` reports that one
run, with ``runs`` 0); the median is reported. The CPU's per-call dispatch overhead is
microseconds against milliseconds of work, so no call chaining is needed here.

Memory: ``temp MiB`` is the scratch memory XLA's compiled program allocates for the call
(``compiled.memory_analysis().temp_size_in_bytes``): the score matrices for XLA. Memory that
jax_fa4's C++ kernels allocate internally (O(seq) per thread) is not included.

FLOPs as in bench_attention.py: forward 4*b*h*s*s*d (halved when causal), backward 2.5x that.

Usage:  python benchmarks/bench_cpu.py --out benchmarks/results/cpu-fwd-bwd.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

# A CPU benchmark: keep jax on the CPU even on a machine with a GPU (the user's setting wins).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

IMPLS = ("xla", "jax_fa4")
AttnFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def make_impl(name: str, causal: bool) -> AttnFn:
    """The attention function of one implementation."""
    if name == "jax_fa4":
        import jax_fa4

        def fa4(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax_fa4.attention(q, k, v, causal=causal)

        return fa4
    if name == "xla":

        def xla(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="xla")

        return xla
    raise ValueError(f"unknown implementation {name!r}")


def fwd_bwd(attn: AttnFn) -> Callable[..., Any]:
    """Forward plus the pullback of a given cotangent; returns (o, (dq, dk, dv))."""

    def run(q: jax.Array, k: jax.Array, v: jax.Array, do: jax.Array) -> Any:
        o, pullback = jax.vjp(attn, q, k, v)
        return o, pullback(do)

    return run


def time_fn(
    fn: Callable[..., Any], args: Sequence[jax.Array], budget_s: float, max_runs: int
) -> tuple[float, int]:
    """(median seconds, timed runs) of fn(*args).

    One warm-up run, then timed runs until max_runs or budget_s is spent. A warm-up run that alone
    takes longer than budget_s is the measurement (returned with 0 timed runs): the compile is
    already done ahead of time, and repeating a run of many seconds would not fit the time box.
    """
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    t_warm = time.perf_counter() - t0
    if t_warm > budget_s:
        return t_warm, 0
    times: list[float] = []
    spent = 0.0
    while len(times) < max_runs and (not times or spent + times[-1] <= budget_s):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return statistics.median(times), len(times)


def temp_mib(compiled: Any) -> float | None:
    """XLA's scratch allocation of a compiled program, MiB (None if jax cannot say)."""
    try:
        ma = compiled.memory_analysis()
        return round(ma.temp_size_in_bytes / 2**20, 1)
    except Exception:
        return None


def measure(
    impl: str,
    seq: int,
    head_dim: int,
    causal: bool,
    batch: int,
    heads: int,
    dtype: Any,
    budget_s: float,
    max_runs: int,
) -> dict[str, Any]:
    """One record: times (ms), GFLOP/s, scratch memory of forward and forward+backward."""
    shape = (batch, seq, heads, head_dim)
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, do = (jax.random.normal(kk, shape, jnp.float32).astype(dtype) for kk in keys)
    flops = 4.0 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    rec: dict[str, Any] = {
        "impl": impl,
        "head_dim": head_dim,
        "seq": seq,
        "batch": batch,
        "heads": heads,
        "causal": causal,
        "fwd_ms": None,
        "fwd_bwd_ms": None,
        "fwd_gflops": None,
        "bwd_gflops": None,
        "fwd_temp_mib": None,
        "fwd_bwd_temp_mib": None,
        "runs": None,
        "error": None,
    }
    try:
        attn = make_impl(impl, causal)
        f = jax.jit(attn).lower(q, k, v).compile()
        rec["fwd_temp_mib"] = temp_mib(f)
        t_f, n_f = time_fn(f, (q, k, v), budget_s, max_runs)
        g = jax.jit(fwd_bwd(attn)).lower(q, k, v, do).compile()
        rec["fwd_bwd_temp_mib"] = temp_mib(g)
        t_fb, n_fb = time_fn(g, (q, k, v, do), budget_s, max_runs)
    except Exception as e:
        msg = (str(e).strip().splitlines() or [""])[0][:200]
        rec["error"] = f"{type(e).__name__}: {msg}"
        return rec
    rec["fwd_ms"] = round(t_f * 1e3, 3)
    rec["fwd_bwd_ms"] = round(t_fb * 1e3, 3)
    rec["fwd_gflops"] = round(flops / t_f / 1e9, 2)
    if t_fb > t_f:
        rec["bwd_gflops"] = round(2.5 * flops / (t_fb - t_f) / 1e9, 2)
    rec["runs"] = [n_f, n_fb]
    return rec


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: per (causal, head dim, seq), xla and jax_fa4 times and the speed-up of jax_fa4."""
    by: dict[tuple[bool, int, int], dict[str, dict[str, Any]]] = {}
    for r in records:
        by.setdefault((r["causal"], r["head_dim"], r["seq"]), {})[r["impl"]] = r

    def ms(r: dict[str, Any] | None, key: str) -> str:
        return "-" if r is None or r[key] is None else f"{r[key]:.1f}"

    def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> str:
        if a is None or b is None or a[key] is None or b[key] is None or b[key] == 0:
            return "-"
        return f"{a[key] / b[key]:.2f}x"

    def mem(r: dict[str, Any] | None) -> str:
        return "-" if r is None or r["fwd_bwd_temp_mib"] is None else f"{r['fwd_bwd_temp_mib']:.0f}"

    head = [
        "causal",
        "head dim",
        "seq",
        "fwd ms xla",
        "fwd ms jax_fa4",
        "fwd speed-up",
        "fwd+bwd ms xla",
        "fwd+bwd ms jax_fa4",
        "fwd+bwd speed-up",
        "fwd+bwd temp MiB xla",
        "fwd+bwd temp MiB jax_fa4",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (c, d, s), rs in sorted(by.items()):
        x, f = rs.get("xla"), rs.get("jax_fa4")
        lines.append(
            "| "
            + " | ".join(
                [
                    "yes" if c else "no",
                    str(d),
                    str(s),
                    ms(x, "fwd_ms"),
                    ms(f, "fwd_ms"),
                    ratio(x, f, "fwd_ms"),
                    ms(x, "fwd_bwd_ms"),
                    ms(f, "fwd_bwd_ms"),
                    ratio(x, f, "fwd_bwd_ms"),
                    mem(x),
                    mem(f),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seqs", default="512,1024,2048,4096")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--causal", action="store_true", help="also time causal cells")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument(
        "--budget",
        type=float,
        default=2.0,
        help="seconds of timed runs per measurement after the first (default 2)",
    )
    p.add_argument("--max-runs", type=int, default=5, help="timed runs at most (default 5)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="start no new measurement after this many seconds (default 300); 0 = no limit",
    )
    p.add_argument("--out", default=None, help="JSON output path")
    args = p.parse_args(argv)

    seqs = [int(x) for x in args.seqs.split(",") if x.strip()]
    head_dims = [int(x) for x in args.head_dims.split(",") if x.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if any(i not in IMPLS for i in impls):
        print(f"bad --impls {args.impls!r}; known: {', '.join(IMPLS)}", file=sys.stderr)
        return 2
    causals = [False, True] if args.causal else [False]
    dtype = jnp.dtype(args.dtype)

    t_start = time.perf_counter()
    header: dict[str, Any] = {
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "device": str(jax.devices()[0]),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": getattr(__import__("jaxlib"), "__version__", None),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "dtype": args.dtype,
        # Other processes on the machine skew CPU timings: the 1/5/15-minute load averages.
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"# {json.dumps(header)}", flush=True)
    records = []
    for c in causals:
        for d in head_dims:
            for s in seqs:
                for impl in impls:
                    if args.max_seconds > 0 and time.perf_counter() - t_start > args.max_seconds:
                        print(f"skipped {impl} causal={c} d={d} s={s}: --max-seconds spent")
                        continue
                    r = measure(
                        impl, s, d, c, args.batch, args.heads, dtype, args.budget, args.max_runs
                    )
                    records.append(r)
                    el = time.perf_counter() - t_start
                    what = (
                        f"error {r['error']}"
                        if r["error"]
                        else f"fwd {r['fwd_ms']:.2f} ms ({r['fwd_gflops']} GFLOP/s), "
                        f"fwd+bwd {r['fwd_bwd_ms']:.2f} ms, runs {r['runs']}, "
                        f"temp MiB {r['fwd_temp_mib']}/{r['fwd_bwd_temp_mib']}"
                    )
                    print(
                        f"[{el:6.1f} s] {impl:8s} causal={'yes' if c else 'no'} d={d} s={s}: "
                        f"{what}",
                        flush=True,
                    )
    header["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump({**header, "records": records}, fh, indent=1)
            fh.write("\n")
    print()
    print(
        f"## CPU ({header['cpu_count']} cores, {args.dtype}, batch {args.batch}, "
        f"{args.heads} heads): median ms; speed-up = xla time / jax_fa4 time"
    )
    print()
    print(table(records))
    print()
    print(
        f"# total {time.perf_counter() - t_start:.1f} s"
        + (f"; wrote {args.out}" if args.out else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
