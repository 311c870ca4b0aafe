"""Decode on one GPU: a few queries against a long KV cache, jax_fa4 beside the peers.

Cells (bf16, head dim 128, causal with a per-sequence cache length equal to the cache size, as a
sampling loop calls it): the four of the decode issue, (batch, seq_k, heads q / kv) = (16, 8192,
32/8), (64, 4096, 32/8), (1, 131072, 32/8), (8, 32768, 16/16) at seq_q 1, and (16, 8192, 32/8)
at seq_q 4 and 16 (speculative decoding, chunked prefill) and (16, 1024, 32/8). Bandwidth = the
bytes of q, k, v and o moved once / forward time. Implementations: ``jax_fa4``
(``key_value_seq_lengths``), ``cudnn`` (``jax.nn.dot_product_attention(...,
key_value_seq_lengths=..., implementation="cudnn")``, without ``is_causal``, which jax.nn aligns
top-left), ``fa3`` (the FA3 binding, no lengths: the
whole cache), ``xla`` (``jax.nn.dot_product_attention(..., implementation="xla")``).

Timing: chains of dependent calls in one jit, the median of repeats, as bench_attention.py, at two
chain lengths; ``fwd_us`` is the slope, (t(long) - t(short)) / (long - short): the cost of one more
call in a steady stream of calls (a sampling loop's layers), without the fixed cost of launching
and synchronising one jit execution, which at 100-300 us per decode call is several per cent of a
chain and would favour the slower implementation. ``fwd_us_chain`` is t(long) / long, that fixed
cost included.

    python3 benchmarks/bench_decode.py --out results.json [--impls jax_fa4,cudnn] [--rounds 3]

Writes ``{"date", "environment", "records"}``, each record ``{"impl", "variant": "decode",
"batch", "seq_q", "seq_k", "heads", "heads_kv", "head_dim", "fwd_us", "fwd_gbps", "fwd_us_chain",
"fwd_gbps_chain", "note"}`` (and ``"fwd_gbps_rounds"`` with ``--rounds`` above 1).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from bench_attention import (  # noqa: E402
    compile_fn,
    environment,
    fwd_chain,
    short_reason,
    time_compiled,
)

IMPLS = ("jax_fa4", "cudnn", "fa3", "xla")
HEAD_DIM = 128
# (batch, seq_q, seq_k, heads_q, heads_kv)
CELLS = (
    (16, 1, 8192, 32, 8),
    (64, 1, 4096, 32, 8),
    (1, 1, 131072, 32, 8),
    (8, 1, 32768, 16, 16),
    (16, 4, 8192, 32, 8),
    (16, 16, 8192, 32, 8),
    (16, 1, 1024, 32, 8),
)
CHAIN_SHORT = 10
CHAIN = 50


def make_impl(
    impl: str, lengths: jax.Array
) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """attention(q, k_cache, v_cache) of `impl`, causal, the cache length `lengths` [batch]."""
    if impl == "jax_fa4":
        import jax_fa4

        return lambda q, k, v: jax_fa4.attention(
            q, k, v, causal=True, key_value_seq_lengths=lengths
        )
    if impl in ("cudnn", "xla"):
        # jax.nn's is_causal is aligned top-left (query 0 sees key 0 only), not to the end of the
        # cache: the cache length alone is the decode mask (exact for seq_q 1; for seq_q > 1 the
        # query rows see the whole cache, the same keys read).
        def nn(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax.nn.dot_product_attention(
                q, k, v, key_value_seq_lengths=lengths, implementation=impl
            )

        return nn
    if impl == "fa3":
        from flash_attn3_jax import flash_mha

        return lambda q, k, v: flash_mha(q, k, v, is_causal=True)
    raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(IMPLS)}")


def make_inputs(cell: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """q [b, sq, hq, d], k and v [b, sk, hkv, d] (bf16, random normal) and the cache lengths
    [b] (= sk) of `cell`."""
    b, sq, sk, hq, hkv = cell
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (b, sq, hq, HEAD_DIM), jnp.float32).astype(jnp.bfloat16)
    k = jax.random.normal(kk, (b, sk, hkv, HEAD_DIM), jnp.float32).astype(jnp.bfloat16)
    v = jax.random.normal(kv, (b, sk, hkv, HEAD_DIM), jnp.float32).astype(jnp.bfloat16)
    return q, k, v, jnp.full((b,), sk, jnp.int32)


def moved_bytes(q: jax.Array, k: jax.Array) -> int:
    """Bytes one call moves: q and o, k and v, 2 bytes each."""
    return 2 * (2 * q.size + 2 * k.size)


def _record(impl: str, cell: tuple[int, ...]) -> dict[str, Any]:
    """An empty record of `impl` on `cell` (fwd_us / fwd_gbps null until timed)."""
    b, sq, sk, hq, hkv = cell
    return {
        "impl": impl,
        "variant": "decode",
        "batch": b,
        "seq_q": sq,
        "seq_k": sk,
        "heads": hq,
        "heads_kv": hkv,
        "head_dim": HEAD_DIM,
        "fwd_us": None,
        "fwd_gbps": None,
        "fwd_us_chain": None,
        "fwd_gbps_chain": None,
    }


def prepare(
    impl: str, args: tuple[jax.Array, ...], lengths: jax.Array
) -> tuple[Callable[..., Any], Callable[..., Any]] | str:
    """`impl`'s two compiled chains (CHAIN_SHORT and CHAIN calls) on (q, k, v) = `args`, or why
    they could not be built."""
    try:
        attn = make_impl(impl, lengths)
        short, long = (compile_fn(fwd_chain(attn, n), args) for n in (CHAIN_SHORT, CHAIN))
    except Exception as e:  # a peer without this shape: recorded, not fatal
        return f"failed: {short_reason(e)}"
    return short, long


def time_chains(
    chains: tuple[Callable[..., Any], Callable[..., Any]], args: tuple[jax.Array, ...], repeats: int
) -> tuple[float, float]:
    """(slope, whole chain) seconds per call: the median of `repeats` runs of each chain."""
    t_short, t_long = (time_compiled(c, args, repeats, 1.0) for c in chains)
    return (t_long - t_short) / (CHAIN - CHAIN_SHORT), t_long / CHAIN


def measure_cell(
    impls: Sequence[str], cell: tuple[int, ...], repeats: int, rounds: int
) -> list[dict[str, Any]]:
    """One record per implementation on `cell`: each is compiled once, then timed `rounds` times
    in a row with the order reversed every other round (so that none is always timed first after
    another's compile or last in a warm GPU); a record holds the median round's slope and, with
    more than one round, every round's GB/s (``fwd_gbps_rounds``)."""
    recs = {impl: _record(impl, cell) for impl in impls}
    q, k, v, lengths = make_inputs(cell)
    moved = moved_bytes(q, k)
    built = {}
    for impl in impls:
        got = prepare(impl, (q, k, v), lengths)
        if isinstance(got, str):
            recs[impl]["note"] = got
        else:
            built[impl] = got
    order = list(built)
    per_call: dict[str, list[tuple[float, float]]] = {impl: [] for impl in built}
    for r in range(rounds):
        for impl in order if r % 2 == 0 else order[::-1]:
            per_call[impl].append(time_chains(built[impl], (q, k, v), repeats))
    for impl, times in per_call.items():
        slopes = sorted(t for t, _ in times)
        t = slopes[(len(slopes) - 1) // 2]  # the median round (the lower middle of an even count)
        t_chain = sorted(c for _, c in times)[(len(times) - 1) // 2]
        rec = recs[impl]
        rec["fwd_us"] = round(t * 1e6, 1)
        rec["fwd_gbps"] = round(moved / t / 1e9)
        rec["fwd_us_chain"] = round(t_chain * 1e6, 1)
        rec["fwd_gbps_chain"] = round(moved / t_chain / 1e9)
        if rounds > 1:
            rec["fwd_gbps_rounds"] = [round(moved / s / 1e9) for s, _ in times]
        rec["note"] = f"slope of chains {CHAIN_SHORT} and {CHAIN}" + (
            f", median of {rounds} rounds" if rounds > 1 else ""
        )
    return [recs[impl] for impl in impls]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time each cell's implementations this many times in a row, the order reversed "
        "every other round; a record holds the median round (and every round's figure)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    impls = [i for i in args.impls.split(",") if i]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        ap.error(f"--impls: unknown {', '.join(unknown)}; known: {', '.join(IMPLS)}")
    records = []
    for cell in CELLS:
        for rec in measure_cell(impls, cell, args.repeats, args.rounds):
            records.append(rec)
            b, sq, sk, hq, hkv = cell
            rounds = f", rounds {rec['fwd_gbps_rounds']}" if "fwd_gbps_rounds" in rec else ""
            print(
                f"{rec['impl']:8s} b{b} sq{sq} sk{sk} {hq}/{hkv}: {rec['fwd_gbps']} GB/s"
                f" (whole chain {rec['fwd_gbps_chain']}{rounds})",
                flush=True,
            )
    out = {"date": _dt.date.today().isoformat(), "environment": environment(), "records": records}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
