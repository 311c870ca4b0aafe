"""The multi-host recipe (examples/multihost_ring.py) on CPU processes of one machine: two
processes of two CPU devices each join through jax.distributed.initialize with a local
coordinator, and ring attention (shard_map, zig-zag) and plain jit with the sequence sharded run
over the four devices of both; each process checks its shards of o, dq, dk and dv (causal, a
window, packed documents; GQA) against the whole problem on one of its devices."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest

_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "multihost_ring.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_cpu_processes_match_one_device():
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(_SCRIPT),
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--cpu-devices",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=600)
            outs.append(out)
    finally:
        for p in procs:
            p.kill()
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{out[-4000:]}"
        assert f"process {i} of 2: all modes match one device" in out, out[-4000:]
        checks = [line for line in out.splitlines() if line.startswith(f"process {i} of 2: ")]
        # 3 cases x 2 modes x (o, dq, dk, dv), each within the bound, plus the summary line.
        assert sum(line.endswith(" ok") for line in checks) == 24, out[-4000:]
        assert "ring_attention, causal, window" in out and "packed documents" in out
