"""Ring attention over several processes (hosts): one program, started once per process.

Every process runs this same script. ``jax.distributed.initialize`` connects them through a
coordinator (process 0's address); then one mesh spans every device of every process, and
``jax_fa4.ring_attention`` inside ``jax.shard_map`` (and plain ``jax.jit`` with the sequence
sharded) run across all of them: K/V blocks travel between hosts by the same ``ppermute`` as
between the GPUs of one host. Each process builds the same global inputs from a fixed seed,
hands JAX only its own shards (``jax.make_array_from_callback``), and checks the shards it holds
of the output and of the gradients against ``jax_fa4.attention`` on one of its own devices, the
whole problem at once (the same rule as ``benchmarks/multi_gpu.py``: at most
``4 * eps(dtype) * max(1, max|reference|)`` apart).

Several hosts with GPUs (the same command on each, ``I`` = 0 .. N-1; host 0's address first)::

    python examples/multihost_ring.py --coordinator HOST0:8476 --num-processes N --process-id I

On one machine, CPU processes of 2 devices each stand in for the hosts (what
``tests/test_multihost.py`` runs; collectives between CPU processes go through gloo)::

    python examples/multihost_ring.py --coordinator 127.0.0.1:8476 --num-processes 2 \\
        --process-id 0 --cpu-devices 2 &
    python examples/multihost_ring.py --coordinator 127.0.0.1:8476 --num-processes 2 \\
        --process-id 1 --cpu-devices 2

Prints one line per check and ``process I of N: all modes match one device`` at the end; the
exit code is 0 when every check passed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coordinator", required=True, help="host:port of process 0")
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="run on this many CPU devices per process instead of the GPUs",
    )
    p.add_argument("--seq-per-device", type=int, default=None, help="default: CPU 32, GPU 4096")
    p.add_argument("--window", type=int, default=None, help="left window; default seq_per_device")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.cpu_devices:
        # Before jax is imported: the CPU platform with that many devices in this process.
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_force_host_platform_device_count={args.cpu_devices}".strip()
        )

    import jax

    if args.cpu_devices:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )

    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_fa4

    n = jax.device_count()  # every device of every process
    me = f"process {jax.process_index()} of {jax.process_count()}"
    cpu = jax.devices()[0].platform == "cpu"
    dtype = jnp.float32 if cpu else jnp.bfloat16
    b, h, hkv, d = 2, 4, 2, (32 if cpu else 128)  # GQA: 4 q heads share 2 kv heads
    s = (args.seq_per_device or (32 if cpu else 4096)) * n
    window = args.window if args.window is not None else s // n
    docs = 3  # packed documents per row (segment ids), boundaries not on block edges

    # The same global inputs in every process (a fixed seed), on the host.
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, s, h, d)).astype(dtype)
    k = rng.standard_normal((b, s, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, s, hkv, d)).astype(dtype)
    ct = rng.standard_normal((b, s, h, d)).astype(dtype)  # the cotangent of o
    ids = np.broadcast_to((np.arange(s) * docs // s).astype(np.int32), (b, s)).copy()

    cases: dict[str, dict] = {
        "causal": dict(causal=True),
        f"causal, window ({window}, 0)": dict(causal=True, local_window_size=(window, 0)),
        f"causal, {docs} packed documents": dict(causal=True, segment_ids="ids"),
    }

    mesh = jax.make_mesh((n,), ("seq",), axis_types=(AxisType.Auto,))
    seq_split = NamedSharding(mesh, P(None, "seq"))

    def put(x: np.ndarray) -> jax.Array:
        """A global array sharded over the sequence; this process supplies only its shards."""
        return jax.make_array_from_callback(x.shape, seq_split, lambda idx: x[idx])

    def vjp_of(f: Callable) -> Callable:
        def run(q, k, v, ct, *rest):
            o, pull = jax.vjp(lambda q, k, v: f(q, k, v, *rest), q, k, v)
            return (o, *pull(ct))

        return run

    def check(name: str, got: jax.Array, want: np.ndarray) -> bool:
        """got's shards in this process against the same slices of the one-device result."""
        eps = float(jnp.finfo(dtype).eps)
        tol = 4 * eps * max(1.0, float(np.max(np.abs(want))))
        err = max(
            float(np.max(np.abs(np.asarray(sh.data, np.float32) - want[sh.index])))
            for sh in got.addressable_shards
        )
        ok = err <= tol
        print(f"{me}: {name}: max |diff| {err:.2e} (allowed {tol:.2e}) {'ok' if ok else 'DIFFERS'}")
        return ok

    local = jax.local_devices()[0]
    all_ok = True
    for case, kw in cases.items():
        seg = "ids" if kw.get("segment_ids") == "ids" else None
        opts = {key: val for key, val in kw.items() if key != "segment_ids"}

        def attn(q, k, v, *ids_arg, opts=opts):
            sid = ids_arg[0] if ids_arg else None
            return jax_fa4.attention(q, k, v, segment_ids=sid, **opts)

        # The reference: the whole problem on one device of this process.
        extra = (ids,) if seg else ()
        ref = jax.jit(vjp_of(attn))(*(jax.device_put(x, local) for x in (q, k, v, ct, *extra)))
        ref = [np.asarray(x, np.float32) for x in ref]

        # 1. ring_attention in shard_map, the sequence in zig-zag order (balanced causal work).
        def ring_body(q, k, v, *ids_arg, opts=opts):
            sid = ids_arg[0] if ids_arg else None
            return jax_fa4.ring_attention(
                q, k, v, axis_name="seq", layout="zigzag", segment_ids=sid, **opts
            )

        ring = jax.shard_map(
            ring_body,
            mesh=mesh,
            in_specs=(P(None, "seq"),) * (3 + len(extra)),
            out_specs=P(None, "seq"),
        )
        zz = [jax_fa4.to_zigzag(x, n) for x in (q, k, v, ct, *extra)]
        got = jax.jit(vjp_of(ring))(*(put(x) for x in zz))
        for name, g, want in zip(("o", "dq", "dk", "dv"), got, ref, strict=True):
            all_ok &= check(f"ring_attention, {case}: {name}", g, jax_fa4.to_zigzag(want, n))

        # 2. Plain jit with the sequence sharded in natural order: the automatic partitioning
        #    runs the same ring.
        got = jax.jit(vjp_of(attn))(*(put(x) for x in (q, k, v, ct, *extra)))
        for name, g, want in zip(("o", "dq", "dk", "dv"), got, ref, strict=True):
            all_ok &= check(f"jit, sequence sharded, {case}: {name}", g, want)

    print(f"{me}: {'all modes match one device' if all_ok else 'SOME MODES DIFFER'}", flush=True)
    jax.distributed.shutdown()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
