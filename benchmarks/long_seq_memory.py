"""Peak device memory of one forward + backward at a long sequence.

Default cell: seq 131072, batch 1, 16 heads, head dim 128, bfloat16, causal. jax_fa4 runs
``jax.grad`` of ``sum(attention(q, k, v) * do)``; plain XLA attention
(``jax.nn.dot_product_attention(implementation="xla")``) is tried on the same cell, and the
error it fails with (it materialises the seq x seq scores) is recorded instead of a number.

Peak memory is the device allocator's ``peak_bytes_in_use`` (reset by running each candidate in
its own process); the inputs' own bytes are printed beside it.

    python3 benchmarks/long_seq_memory.py --json benchmarks/results/h200-long-seq-memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

IMPLS = ("jax_fa4", "xla")


def run_one(
    impl: str, seq: int, batch: int, heads: int, head_dim: int, causal: bool
) -> dict[str, Any]:
    """Runs fwd + bwd once in this process and returns the peak memory and the time."""
    import jax
    import jax.numpy as jnp

    import jax_fa4

    dev = jax.devices()[0]
    shape = (batch, seq, heads, head_dim)
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, do = (jax.random.normal(kk, shape, jnp.bfloat16) for kk in keys)
    inputs_bytes = 4 * q.size * q.dtype.itemsize

    if impl == "jax_fa4":

        def attn(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax_fa4.attention(q, k, v, causal=causal)
    else:

        def attn(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="xla")

    def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jnp.sum(attn(q, k, v).astype(jnp.float32) * do.astype(jnp.float32))

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    rec: dict[str, Any] = {
        "impl": impl,
        "seq": seq,
        "batch": batch,
        "heads": heads,
        "head_dim": head_dim,
        "causal": causal,
        "dtype": "bfloat16",
        "device": dev.device_kind,
        "inputs_bytes": int(inputs_bytes),
    }
    try:
        compiled = step.lower(q, k, v).compile()
        t0 = time.perf_counter()
        val, grads = compiled(q, k, v)
        jax.block_until_ready(grads)
        rec["first_call_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        val, grads = compiled(q, k, v)
        jax.block_until_ready(grads)
        rec["second_call_s"] = time.perf_counter() - t0
        finite = all(bool(jnp.isfinite(g.astype(jnp.float32)).all()) for g in grads)
        rec["grads_finite"] = finite
        rec["loss"] = float(val)
        stats = dev.memory_stats() or {}
        rec["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
        rec["ok"] = finite
    except Exception as e:  # the XLA baseline is expected to fail here
        msg = f"{type(e).__name__}: {e}"
        rec["ok"] = False
        rec["error"] = msg.splitlines()[0][:300]
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seq", type=int, default=131072)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", choices=("yes", "no"), default="yes")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--json", help="write the records here")
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: run one impl, print its JSON
    a = p.parse_args(argv)
    causal = a.causal == "yes"
    if a.one:
        print(
            "RESULT " + json.dumps(run_one(a.one, a.seq, a.batch, a.heads, a.head_dim, causal)),
            flush=True,
        )
        return 0
    records = []
    for impl in a.impls.split(","):
        if impl not in IMPLS:
            p.error(f"--impls: unknown {impl!r}; allowed: {', '.join(IMPLS)}")
        # One process per impl: peak_bytes_in_use is per process and cannot be reset.
        env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
        cmd = [
            sys.executable,
            __file__,
            "--one",
            impl,
            "--seq",
            str(a.seq),
            "--batch",
            str(a.batch),
            "--heads",
            str(a.heads),
            "--head-dim",
            str(a.head_dim),
            "--causal",
            a.causal,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            rec = {
                "impl": impl,
                "seq": a.seq,
                "ok": False,
                "error": f"process failed rc={proc.returncode}: " + " | ".join(tail)[:300],
            }
        else:
            rec = json.loads(line[len("RESULT ") :])
        records.append(rec)
        peak = rec.get("peak_bytes_in_use")
        what = (
            f"peak {peak / 2**30:.2f} GiB, fwd+bwd {rec.get('second_call_s', float('nan')):.2f} s"
            if rec.get("ok")
            else f"FAILED: {rec.get('error')}"
        )
        print(
            f"{impl:8s} seq {a.seq} b{a.batch} h{a.heads} d{a.head_dim} causal={causal}: {what}",
            flush=True,
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0 if records and records[0].get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
