"""Multi-device jax_fa4: data parallel and ring attention over the sequence, checked and timed.

Runs on however many devices the machine has (one included) and compares, on the same problem,

* ``one-device``: ``jax_fa4.attention`` under ``jax.jit`` on device 0 (the reference);
* ``data-parallel``: the same call under plain ``jax.jit`` with q/k/v sharded over the batch
  (``NamedSharding``): the automatic partitioning runs the kernel per shard, no communication;
* ``ring-shard_map``: ``jax_fa4.ring_attention`` inside ``jax.shard_map`` with the sequence split
  over all devices (zig-zag layout when causal, so every device gets the same work);
* ``ring-jit``: plain ``jax.jit`` with q/k/v sharded over the sequence (natural order): the
  automatic partitioning reaches the same ring (causal: it moves the chunks into the zig-zag
  order itself, a few extra ppermutes).

Each sharded result (o and lse) is compared with the one-device result; a mode passes when its
max |difference| is within ``4 * eps(dtype) * max(1, max|o|)`` (lse: the same with
``max|lse|``). Times are medians of ``--repeats`` runs of one jit holding a chain of ``--chain``
calls (``q = attention(q, k, v)``, a real data dependency), divided by the chain length. The
backward (``jax.vjp`` of each call and the pullback of a fixed cotangent; every gradient is an
output of the jit) is timed where a backward kernel exists; a platform without one reports the
NotImplementedError and the run goes on. FLOPs as FlashAttention counts them (forward
4*b*h*s*s*d, halved when causal; backward 2.5x).

GPU (every GPU of the machine):
    python benchmarks/multi_gpu.py --json benchmarks/results/h200-multi-gpu-Ngpu.json
CPU smoke test (8 host devices, tiny shapes, float32):
    python benchmarks/multi_gpu.py --cpu-devices 8
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="run on this many host CPU devices instead of the GPUs (smoke test; small defaults)",
    )
    p.add_argument("--devices", type=int, default=0, help="use the first N devices (0: all)")
    p.add_argument("--dtype", default=None, help="bfloat16 (GPU default) / float16 / float32")
    p.add_argument("--heads", type=int, default=None, help="q heads (GPU default 16)")
    p.add_argument("--kv-heads", type=int, default=None, help="kv heads (default: = heads)")
    p.add_argument("--head-dim", type=int, default=None, help="GPU default 128")
    p.add_argument(
        "--dp-batch-per-device", type=int, default=None, help="data parallel: batch per device"
    )
    p.add_argument("--dp-seq", type=int, default=None, help="data parallel: sequence length")
    p.add_argument(
        "--ring-seq-per-device",
        type=int,
        default=None,
        help="ring: sequence per device (the global sequence is this x devices, batch 1)",
    )
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--chain", type=int, default=None, help="calls per timed jit (GPU default 4)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    return p.parse_args(argv)


ARGS = _parse_args() if __name__ == "__main__" else _parse_args([])
if ARGS.cpu_devices:
    # Must happen before jax is imported.
    os.environ["JAX_PLATFORMS"] = "cpu"
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_force_host_platform_device_count={ARGS.cpu_devices}".strip()
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_fa4  # noqa: E402


@dataclass
class Problem:
    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool

    def fwd_flops(self) -> float:
        f = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return f / 2 if self.causal else f


@dataclass
class Record:
    mode: str
    problem: dict
    devices: int
    fwd_ms: float | None = None
    fwd_tflops: float | None = None
    bwd_ms: float | None = None
    bwd_tflops: float | None = None
    speedup_fwd: float | None = None  # one-device forward time / this mode's
    speedup_bwd: float | None = None
    max_diff_o: float | None = None
    max_diff_lse: float | None = None
    tol_o: float | None = None
    ok: bool | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def _median_seconds(fn: Callable, args: tuple, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _fwd_chain(attn: Callable, n: int) -> Callable:
    def chain(q, k, v):
        for _ in range(n):
            q = attn(q, k, v)[0]
        return q

    return chain


def _fwd_bwd_chain(attn: Callable, n: int) -> Callable:
    def chain(q, k, v, ct):
        dks, dvs = [], []
        for _ in range(n):
            (o, _), pull = jax.vjp(attn, q, k, v)
            dq, dk, dv = pull((ct, jnp.zeros(o.shape[:1] + (o.shape[2], o.shape[1]), jnp.float32)))
            dks.append(dk)
            dvs.append(dv)
            q = (o + dq).astype(q.dtype)
        return q, dks, dvs

    return chain


def _time_mode(
    rec: Record, attn: Callable, args: tuple, prob: Problem, chain: int, repeats: int, bwd: bool
):
    q = args[0]
    t = _median_seconds(jax.jit(_fwd_chain(attn, chain)), args, repeats) / chain
    rec.fwd_ms = t * 1e3
    rec.fwd_tflops = prob.fwd_flops() / t / 1e12
    if not bwd:
        return
    ct = jax.device_put(jnp.full(q.shape, 0.01, q.dtype), q.sharding)
    try:
        t_all = _median_seconds(jax.jit(_fwd_bwd_chain(attn, chain)), (*args, ct), repeats)
    except NotImplementedError as err:
        rec.notes.append(f"backward: NotImplementedError: {str(err).splitlines()[0][:200]}")
        return
    except Exception as err:  # noqa: BLE001 - a benchmark reports and goes on
        rec.notes.append(f"backward failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
        return
    t_b = t_all / chain - t
    if t_b <= 0:
        rec.notes.append("backward: fwd+bwd chain not slower than the forward (timing noise)")
        return
    rec.bwd_ms = t_b * 1e3
    rec.bwd_tflops = 2.5 * prob.fwd_flops() / t_b / 1e12


# ---------------------------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------------------------


def _mesh(devices, name: str):
    return jax.make_mesh((len(devices),), (name,), axis_types=(AxisType.Auto,), devices=devices)


def _inputs(prob: Problem, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 3)
    dt = jnp.dtype(prob.dtype)
    q = jax.random.normal(keys[0], (prob.batch, prob.seq, prob.heads, prob.head_dim), dt)
    k = jax.random.normal(keys[1], (prob.batch, prob.seq, prob.kv_heads, prob.head_dim), dt)
    v = jax.random.normal(keys[2], (prob.batch, prob.seq, prob.kv_heads, prob.head_dim), dt)
    return q, k, v


def _check(rec: Record, got, want, dtype) -> None:
    eps = float(jnp.finfo(jnp.dtype(dtype)).eps)
    (o, lse), (o0, lse0) = got, want
    o, o0 = np.asarray(o, np.float32), np.asarray(o0, np.float32)
    lse, lse0 = np.asarray(lse, np.float32), np.asarray(lse0, np.float32)
    rec.max_diff_o = float(np.max(np.abs(o - o0)))
    rec.max_diff_lse = float(np.max(np.abs(lse - lse0)))
    rec.tol_o = 4 * eps * max(1.0, float(np.max(np.abs(o0))))
    tol_lse = 4 * float(jnp.finfo(jnp.float32).eps) * max(1.0, float(np.max(np.abs(lse0))))
    tol_lse = max(tol_lse, 4 * eps)  # lse sums bf16 products: allow the input dtype's rounding
    rec.ok = bool(rec.max_diff_o <= rec.tol_o and rec.max_diff_lse <= tol_lse)


def run_problem(
    label: str, prob: Problem, devices, chain: int, repeats: int, bwd: bool
) -> list[Record]:
    """One-device reference, then the sharded modes of `label` ("dp" or "ring").

    A mode that fails is recorded (ok=False, the error in its notes) and the next one runs.
    """
    n = len(devices)
    q, k, v = _inputs(prob)
    scale = 1.0 / np.sqrt(prob.head_dim)

    def attn(q, k, v):
        return jax_fa4.attention(q, k, v, causal=prob.causal, softmax_scale=scale, return_lse=True)

    records = []
    one = tuple(jax.device_put(x, devices[0]) for x in (q, k, v))
    ref = jax.jit(attn)(*one)
    base = Record("one-device", asdict(prob), 1)
    _time_mode(base, attn, one, prob, chain, repeats, bwd)
    records.append(base)

    def attempt(mode: str, run: Callable[[Record], None]) -> None:
        rec = Record(mode, asdict(prob), n)
        try:
            run(rec)
        except Exception as err:  # noqa: BLE001 - report and go on
            rec.ok = False
            rec.notes.append(f"failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
            traceback.print_exc()
        if base.fwd_ms and rec.fwd_ms:
            rec.speedup_fwd = base.fwd_ms / rec.fwd_ms
        if base.bwd_ms and rec.bwd_ms:
            rec.speedup_bwd = base.bwd_ms / rec.bwd_ms
        records.append(rec)

    if label == "dp":

        def data_parallel(rec: Record) -> None:
            sh = NamedSharding(_mesh(devices, "dp"), P("dp"))
            args = tuple(jax.device_put(x, sh) for x in (q, k, v))
            _check(rec, jax.jit(attn)(*args), ref, prob.dtype)
            _time_mode(rec, attn, args, prob, chain, repeats, bwd)

        attempt("data-parallel", data_parallel)
        return records

    mesh = _mesh(devices, "sp")
    sh = NamedSharding(mesh, P(None, "sp"))

    def ring_shard_map(rec: Record) -> None:
        # Zig-zag order when causal (balanced work); the caller permutes the sequence once.
        zz = prob.causal and n > 1
        layout = "zigzag" if zz else "contiguous"

        def body(q, k, v):
            return jax_fa4.ring_attention(
                q,
                k,
                v,
                axis_name="sp",
                causal=prob.causal,
                softmax_scale=scale,
                return_lse=True,
                layout=layout,
            )

        ring = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(P(None, "sp"),) * 3,
            out_specs=(P(None, "sp"), P(None, None, "sp")),
            check_vma=True,
        )
        perm = (lambda x: jax_fa4.to_zigzag(x, n)) if zz else (lambda x: x)
        args = tuple(jax.device_put(perm(np.asarray(x)), sh) for x in (q, k, v))
        o, lse = jax.jit(ring)(*args)
        if zz:
            o = jax_fa4.from_zigzag(np.asarray(o), n)
            lse = jax_fa4.from_zigzag(np.asarray(lse), n, axis=2)
            rec.notes.append("inputs in zig-zag order (jax_fa4.to_zigzag), results permuted back")
        _check(rec, (o, lse), ref, prob.dtype)
        _time_mode(rec, ring, args, prob, chain, repeats, bwd)

    def ring_jit(rec: Record) -> None:
        # Plain jit, sequence sharded in natural order: the automatic partitioning's ring.
        args = tuple(jax.device_put(x, sh) for x in (q, k, v))
        if prob.causal and n > 1:
            rec.notes.append("natural order: the ring moves chunks into zig-zag order itself")
        _check(rec, jax.jit(attn)(*args), ref, prob.dtype)
        _time_mode(rec, attn, args, prob, chain, repeats, bwd)

    attempt("ring-shard_map", ring_shard_map)
    attempt("ring-jit", ring_jit)
    return records


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def _print_table(records: list[Record]) -> None:
    hdr = (
        f"{'mode':<15} {'dev':>3} {'b':>3} {'seq':>7} {'h/kv':>6} {'d':>4} {'causal':>6} "
        f"{'fwd ms':>9} {'TF/s':>7} {'x1dev':>6} {'bwd ms':>9} {'TF/s':>7} {'x1dev':>6} "
        f"{'diff o':>9} {'diff lse':>9} ok"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in records:
        p = r.problem
        print(
            f"{r.mode:<15} {r.devices:>3} {p['batch']:>3} {p['seq']:>7} "
            f"{p['heads']:>3}/{p['kv_heads']:<2} {p['head_dim']:>4} {str(p['causal']):>6} "
            f"{_fmt(r.fwd_ms, '.3f'):>9} {_fmt(r.fwd_tflops, '.3g'):>7} "
            f"{_fmt(r.speedup_fwd, '.2f'):>6} "
            f"{_fmt(r.bwd_ms, '.3f'):>9} {_fmt(r.bwd_tflops, '.3g'):>7} "
            f"{_fmt(r.speedup_bwd, '.2f'):>6} "
            f"{_fmt(r.max_diff_o, '.2e'):>9} {_fmt(r.max_diff_lse, '.2e'):>9} "
            f"{'' if r.ok is None else ('yes' if r.ok else 'NO')}"
        )
        for note in r.notes:
            print(f"{'':<19}note: {note}")


def main() -> int:
    args = ARGS
    devices = jax.devices()
    if args.devices:
        devices = devices[: args.devices]
    n = len(devices)
    platform = devices[0].platform
    cpu = platform == "cpu"
    dtype = args.dtype or ("float32" if cpu else "bfloat16")
    heads = args.heads or (2 if cpu else 16)
    kv_heads = args.kv_heads or heads
    head_dim = args.head_dim or (32 if cpu else 128)
    dp_b = args.dp_batch_per_device or (1 if cpu else 2)
    dp_seq = args.dp_seq or (256 if cpu else 4096)
    ring_seq = args.ring_seq_per_device or (64 if cpu else 4096)
    chain = args.chain or (2 if cpu else 4)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    print(
        f"jax {jax.__version__}, {n} x {devices[0].device_kind} ({platform}); jax_fa4 "
        f"automatic partitioning {'on' if jax_fa4.sharding.ENABLED else 'off'}"
    )
    records: list[Record] = []
    failed = False
    for causal in causals:
        problems = [
            ("dp", Problem(dp_b * n, dp_seq, heads, kv_heads, head_dim, dtype, causal)),
            ("ring", Problem(1, ring_seq * n, heads, kv_heads, head_dim, dtype, causal)),
        ]
        for label, prob in problems:
            try:
                records += run_problem(
                    label, prob, devices, chain, args.repeats, not args.no_backward
                )
            except Exception:  # noqa: BLE001 - report and go on
                failed = True
                print(f"{label} {prob} failed:\n{traceback.format_exc()}", file=sys.stderr)
    _print_table(records)
    if args.json:
        out = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "jax": jax.__version__,
            "platform": platform,
            "device_kind": devices[0].device_kind,
            "devices": n,
            "records": [asdict(r) for r in records],
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")
    bad = [r.mode for r in records if r.ok is False]
    if bad:
        print(f"failed or different from one device: {bad} (see the notes above)")
    return 1 if (bad or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
