"""Runs a lowering script in a fresh interpreter and returns what it printed on its RESULT line:
the CUDA lowering tests (jax.export for "cuda", no GPU needed) need a process of their own, with
two host devices for the shard_map cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_result_script(source: str) -> dict:
    """Runs `source` with ``python -c`` and returns the JSON after its last ``RESULT `` line;
    fails the calling test with the script's output when it exits non-zero or prints none."""
    env = dict(os.environ)
    if "xla_force_host_platform_device_count" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    proc = subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    return json.loads(lines[-1][len("RESULT ") :])
