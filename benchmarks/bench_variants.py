"""Attention variants on one GPU: jax_fa4 beside the peers that have each variant.

The grid of the variants issue: bf16, head dim 128, 16 heads, causal, one 16k-token row
(batch 1), forward and backward, TFLOP/s over the visible (query, key) pairs only:

  dense_causal   causal, no variant (the baseline the variants are compared with)
  window4096     causal + local window (4096, 0)
  window1024     causal + local window (1024, 0)
  softcap30      causal + logits soft cap 30
  sinks          causal + one learnable sink logit per head
  packed8x2048   causal inside each of 8 documents of 2,048 tokens packed into the row
                 (jax_fa4: segment ids; FA3 and fa4jax: their varlen entries)

and ``dense_causal`` at batch 8, seq 2048, which packed8x2048 is compared with (the same
visible pairs, in separate rows). Peers, each where it has the variant: ``fa3`` (window,
varlen), ``cudnn`` (``jax.nn.dot_product_attention``: window), ``tokamax`` (its Mosaic GPU
kernel: window, soft cap), ``fa4jax`` (window, varlen). Timing: chains of calls in one jit (each
call's output the next call's q, as bench_attention.py), the median of repeats, at two chain
lengths n and 3n; ``fwd_tflops`` is from the slope, (t(3n) - t(n)) / 2n: the cost of one more call
in a steady stream of calls, without the fixed cost of launching and synchronising one jit
execution (0.4-0.5 ms on the H200, against 0.75 ms for one 16k window call: at the 5 calls a
16k chain holds it would be a tenth of the figure, and favour the slower implementation).
``fwd_tflops_chain`` is from t(3n) / 3n, that fixed cost included. The backward is the fwd+bwd
chain minus the forward chain, both by the slope (``bwd_tflops``) and by the long chain
(``bwd_tflops_chain``).

    python3 benchmarks/bench_variants.py --out results.json [--impls jax_fa4,fa3,...]

Writes ``{"date", "environment", "records"}``, each record ``{"impl", "variant", "head_dim",
"seq", "batch", "causal", "fwd_tflops", "bwd_tflops", "fwd_tflops_chain", "bwd_tflops_chain",
"note"}`` (null where not measured).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from bench_attention import (  # noqa: E402
    compile_fn,
    environment,
    fwd_bwd_chain,
    fwd_chain,
    matmul_tflops,
    short_reason,
    time_compiled,
)

IMPLS = ("jax_fa4", "fa3", "cudnn", "tokamax", "fa4jax")
VARIANTS = ("dense_causal", "window4096", "window1024", "softcap30", "sinks", "packed8x2048")
# What each peer has (jax_fa4 has everything).
PEER_VARIANTS = {
    "fa3": {"dense_causal", "window4096", "window1024", "packed8x2048"},
    "cudnn": {"dense_causal", "window4096", "window1024"},
    "tokamax": {"dense_causal", "window4096", "window1024", "softcap30"},
    "fa4jax": {"dense_causal", "window4096", "window1024", "packed8x2048"},
}
CHAIN_FLOPS = 2e12
DOC = 2048


@dataclass(frozen=True)
class Cell:
    variant: str
    batch: int
    seq: int
    heads: int = 16
    head_dim: int = 128


def window_of(variant: str) -> int | None:
    """The left window of a window variant (right is 0: causal), else None."""
    return int(variant[len("window") :]) if variant.startswith("window") else None


def visible_pairs(cell: Cell) -> int:
    """(query, key) pairs visible in one head, summed over the batch."""
    rows = np.arange(cell.seq, dtype=np.int64)
    w = window_of(cell.variant)
    if cell.variant == "packed8x2048":
        per_row = rows % DOC + 1
    elif w is not None:
        per_row = np.minimum(rows, w) + 1
    else:
        per_row = rows + 1
    return int(per_row.sum()) * cell.batch


def fwd_flops(cell: Cell) -> float:
    """4 * d per visible pair (QK^T and PV, 2 FLOPs per multiply-add), over heads and batch."""
    return 4.0 * cell.heads * cell.head_dim * visible_pairs(cell)


def segment_ids(cell: Cell) -> jax.Array:
    """int32 [batch, seq]: the document index of each token."""
    ids = np.arange(cell.seq, dtype=np.int32) // DOC
    return jnp.asarray(np.broadcast_to(ids, (cell.batch, cell.seq)))


def make_impl(impl: str, cell: Cell) -> Callable[..., jax.Array]:
    """attention(q, k, v) of `impl` for `cell`'s variant; raises NotImplementedError when the
    implementation lacks the variant."""
    v = cell.variant
    if impl != "jax_fa4" and v not in PEER_VARIANTS[impl]:
        raise NotImplementedError(f"{impl} has no {v}")
    w = window_of(v)
    if impl == "jax_fa4":
        import jax_fa4

        kw: dict[str, Any] = {"causal": True}
        if w is not None:
            kw["local_window_size"] = (w, 0)
        if v == "softcap30":
            kw["logits_soft_cap"] = 30.0
        if v == "sinks":
            kw["sinks"] = jnp.linspace(-1.0, 1.0, cell.heads, dtype=jnp.float32)
        if v == "packed8x2048":
            kw["segment_ids"] = segment_ids(cell)
        return lambda q, k, vv: jax_fa4.attention(q, k, vv, **kw)
    if impl == "cudnn":
        win = (w, 0) if w is not None else None
        return lambda q, k, vv: jax.nn.dot_product_attention(
            q, k, vv, is_causal=True, local_window_size=win, implementation="cudnn"
        )
    if impl == "tokamax":
        import tokamax

        win = (w, 0) if w is not None else None
        cap = 30.0 if v == "softcap30" else None
        return lambda q, k, vv: tokamax.dot_product_attention(
            q,
            k,
            vv,
            is_causal=True,
            local_window_size=win,
            logits_soft_cap=cap,
            implementation="mosaic",
        )
    if impl == "fa3":
        from flash_attn3_jax import flash_mha, flash_mha_varlen

        if v == "packed8x2048":
            cu = jnp.arange(0, cell.batch * cell.seq + 1, DOC, dtype=jnp.int32)

            def fa3_varlen(q: jax.Array, k: jax.Array, vv: jax.Array) -> jax.Array:
                b, s, h, d = q.shape
                flat = [x.reshape(b * s, h, d) for x in (q, k, vv)]
                o = flash_mha_varlen(
                    *flat, cu, cu, max_seqlen_q=DOC, max_seqlen_k=DOC, is_causal=True
                )
                return o.reshape(b, s, h, d)

            return fa3_varlen
        win = (w, 0) if w is not None else (-1, -1)
        return lambda q, k, vv: flash_mha(q, k, vv, is_causal=True, window_size=win)
    if impl == "fa4jax":
        from fa4_jax import flash_attn, flash_attn_varlen

        if v == "packed8x2048":
            cu = jnp.arange(0, cell.batch * cell.seq + 1, DOC, dtype=jnp.int32)

            def fa4_varlen(q: jax.Array, k: jax.Array, vv: jax.Array) -> jax.Array:
                b, s, h, d = q.shape
                flat = [x.reshape(b * s, h, d) for x in (q, k, vv)]
                return flash_attn_varlen(*flat, cu, cu, causal=True).reshape(b, s, h, d)

            return fa4_varlen
        win = (w, 0) if w is not None else None
        return lambda q, k, vv: flash_attn(q, k, vv, causal=True, window_size=win)
    raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(IMPLS)}")


def chain_length(cell: Cell) -> int:
    """Calls in the short timing chain of `cell` (about CHAIN_FLOPS of forward work, 2 to 32)."""
    return max(2, min(32, int(np.ceil(CHAIN_FLOPS / fwd_flops(cell)))))


def make_inputs(cell: Cell) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """q, k, v and dO of `cell`: bf16 random normal, [batch, seq, heads, head_dim] each."""
    keys = jax.random.split(jax.random.key(0), 4)
    shape = (cell.batch, cell.seq, cell.heads, cell.head_dim)
    q, k, v, do = (jax.random.normal(kk, shape, jnp.float32).astype(jnp.bfloat16) for kk in keys)
    return q, k, v, do


def measure(impl: str, cell: Cell, repeats: int, do_bwd: bool) -> dict[str, Any]:
    """One record: TFLOP/s over visible pairs of `impl` on `cell` (null where it failed)."""
    rec: dict[str, Any] = {
        "impl": impl,
        "variant": cell.variant,
        "head_dim": cell.head_dim,
        "seq": cell.seq,
        "batch": cell.batch,
        "causal": True,
        "fwd_tflops": None,
        "bwd_tflops": None,
        "fwd_tflops_chain": None,
        "bwd_tflops_chain": None,
    }
    try:
        attn = make_impl(impl, cell)
    except NotImplementedError as e:
        rec["note"] = f"skipped: {e}"
        return rec
    except Exception as e:
        rec["note"] = f"unavailable: {short_reason(e)}"
        return rec
    flops = fwd_flops(cell)
    n = chain_length(cell)
    n_long = 3 * n
    q, k, v, do = make_inputs(cell)
    notes = [f"chains {n} and {n_long}"]

    def timed(chain: Callable[[Any, int], Callable[..., Any]], args: tuple) -> tuple[float, float]:
        """(slope, long-chain) seconds per call of `chain`."""
        t_short, t_long = (
            time_compiled(compile_fn(chain(attn, m), args), args, repeats, 1.0) for m in (n, n_long)
        )
        return (t_long - t_short) / (n_long - n), t_long / n_long

    try:
        t_fwd, t_fwd_chain = timed(fwd_chain, (q, k, v))
        rec["fwd_tflops"] = round(flops / t_fwd / 1e12, 1)
        rec["fwd_tflops_chain"] = round(flops / t_fwd_chain / 1e12, 1)
        notes.append(f"fwd {t_fwd * 1e3:.3f} ms (chain {t_fwd_chain * 1e3:.3f})")
        print(f"  {impl} {cell.variant}: fwd {rec['fwd_tflops']} TFLOP/s", flush=True)
        if do_bwd:
            t_all, t_all_chain = timed(fwd_bwd_chain, (q, k, v, do))
            t_bwd, t_bwd_chain = t_all - t_fwd, t_all_chain - t_fwd_chain
            if t_bwd > 0 and t_bwd_chain > 0:
                rec["bwd_tflops"] = round(2.5 * flops / t_bwd / 1e12, 1)
                rec["bwd_tflops_chain"] = round(2.5 * flops / t_bwd_chain / 1e12, 1)
                notes.append(f"bwd {t_bwd * 1e3:.3f} ms (chain {t_bwd_chain * 1e3:.3f})")
    except Exception as e:
        traceback.print_exc()
        notes.append(f"failed: {short_reason(e)}")
    rec["note"] = "; ".join(notes)
    return rec


def cells(variants: Sequence[str], seq: int) -> list[Cell]:
    out = [Cell(v, 1, seq) for v in variants]
    if "packed8x2048" in variants:
        out.append(Cell("dense_causal", seq // DOC, DOC))
    return out


# Peers whose cells run after every other implementation's, in every round: tokamax's Mosaic GPU
# backward under a window autotunes for minutes (it ran past the 150 s cell timeout at (1024, 0)
# and at (4096, 0) on an H100), and a timeout ends the run, so it must come where it loses
# nothing else; its window cells (SLOW_CELLS) come after its other cells of every round.
LAST_IMPLS = ("tokamax",)
SLOW_CELLS = {"tokamax": ("window4096", "window1024")}


def run_order(
    grid: Sequence[Cell],
    impls: Sequence[str],
    last: Sequence[str] = LAST_IMPLS,
    rounds: int = 1,
    slow: dict[str, Sequence[str]] | None = None,
) -> list[tuple[int, Cell, str]]:
    """The run's (round, cell, impl) triples: every round cell by cell with every implementation
    in turn, except the `last` ones, whose cells follow all the others' of every round, round by
    round in the grid's order, and among those their `slow` variants after the rest."""
    slow = SLOW_CELLS if slow is None else slow
    first = [(r, c, i) for r in range(rounds) for c in grid for i in impls if i not in last]
    tail = [(r, c, i) for r in range(rounds) for i in impls if i in last for c in grid]
    quick = [(r, c, i) for r, c, i in tail if c.variant not in slow.get(i, ())]
    late = [(r, c, i) for r, c, i in tail if c.variant in slow.get(i, ())]
    return first + quick + late


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1, help="passes over the grid (records each)")
    p.add_argument("--no-bwd", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument(
        "--max-seconds", type=float, default=540, help="start no new cell after this many seconds"
    )
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=150,
        help="a cell running longer is taken for a hang: write what was measured, exit 3 "
        f"({', '.join(LAST_IMPLS)} run after the others' cells of every round, their window cells "
        "last: their timeouts cost no other cell)",
    )
    a = p.parse_args(argv)
    impls = a.impls.split(",")
    env = environment()
    env["matmul_tflops"] = round(matmul_tflops(), 1)
    print(f"bf16 8192^3 matmul chain: {env['matmul_tflops']} TFLOP/s", flush=True)
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def write() -> None:
        if a.out:
            with open(a.out, "w") as fh:
                doc = {"date": _dt.date.today().isoformat(), "environment": env, "records": records}
                json.dump(doc, fh, indent=1)

    def hung(what: str) -> None:
        print(f"!! {what} ran past --cell-timeout {a.cell_timeout:g} s: a hang", flush=True)
        write()
        sys.stdout.flush()
        os._exit(3)

    for r, cell, impl in run_order(cells(a.variants.split(","), a.seq), impls, rounds=a.rounds):
        if time.perf_counter() - t0 > a.max_seconds:
            print(f"--max-seconds {a.max_seconds:g} spent: stopping", flush=True)
            write()
            return 0
        watchdog = threading.Timer(a.cell_timeout, hung, (f"{impl} {cell.variant}",))
        watchdog.daemon = True
        watchdog.start()
        rec = measure(impl, cell, a.repeats, not a.no_bwd)
        watchdog.cancel()
        rec["round"] = r
        records.append(rec)
        print(
            f"{impl:8s} {cell.variant:13s} b{cell.batch} s{cell.seq}: fwd "
            f"{rec['fwd_tflops']} bwd {rec['bwd_tflops']}  ({rec.get('note', '')})",
            flush=True,
        )
        write()
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
