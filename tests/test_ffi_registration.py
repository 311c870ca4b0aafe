"""Registration of the FFI targets (jax_fa4/_ffi.py): which traits the CUDA handlers get."""

from __future__ import annotations

import os
import subprocess
import sys

from jax_fa4 import _ffi

_SCRIPT = """
from jaxlib import xla_client
import jax

seen = {}
real = jax.ffi.register_ffi_target

def spy(name, fn, platform="cpu", **kw):
    seen[name] = (platform, kw.get("traits"))
    return real(name, fn, platform=platform, **kw)

jax.ffi.register_ffi_target = spy
from jax_fa4 import _ffi
_ffi.registered_targets()
T = xla_client.CustomCallTargetTraits
for name, (platform, traits) in sorted(seen.items()):
    print(name, platform, "cmdbuf" if traits == T.COMMAND_BUFFER_COMPATIBLE else "default")
"""


def _registrations(env_value: str | None) -> dict[str, tuple[str, str]]:
    env = dict(os.environ)
    env.pop("JAX_FA4_FFI_COMMAND_BUFFER", None)
    if env_value is not None:
        env["JAX_FA4_FFI_COMMAND_BUFFER"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("jax_fa4_")]
    return {name: (platform, traits) for name, platform, traits in rows}


def test_handlers_are_registered_with_default_traits():
    regs = _registrations(None)
    assert regs["jax_fa4_fwd_cpu"] == ("cpu", "default")
    assert regs["jax_fa4_bwd_cpu"] == ("cpu", "default")
    for name in ("jax_fa4_fwd_cuda", "jax_fa4_bwd_cuda"):
        assert (name in regs) == _ffi.built_with_cuda()
        if name in regs:
            assert regs[name] == ("CUDA", "default")


def test_command_buffer_opt_in_applies_to_cuda_handlers_only():
    regs = _registrations("1")
    assert regs["jax_fa4_fwd_cpu"] == ("cpu", "default")
    for name in ("jax_fa4_fwd_cuda", "jax_fa4_bwd_cuda"):
        assert (name in regs) == _ffi.built_with_cuda()
        if name in regs:
            assert regs[name] == ("CUDA", "cmdbuf")
