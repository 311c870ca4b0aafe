"""Loads the compiled extension and registers its XLA FFI targets, once, per platform."""

from __future__ import annotations

import functools
import os

import jax
from jaxlib import xla_client

try:
    from jax_fa4 import _jax_fa4_ext
except ImportError as err:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        f"jax_fa4's compiled extension (_jax_fa4_ext) could not be loaded ({err}). Install the "
        "package with `pip install .` (scikit-build-core + CMake build it), and do not import "
        "jax_fa4 from a source tree that shadows the installed package"
    ) from err

FWD_TARGET = "jax_fa4_fwd_{platform}"
# The platform name XLA files each handler under: jax maps "cpu" (and "gpu") to XLA's names but
# passes "cuda" through unchanged, and XLA's GPU client looks handlers up under "CUDA".
_XLA_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}
BWD_TARGET = "jax_fa4_bwd_{platform}"

# Whether the CUDA handlers are registered as command-buffer compatible, so that XLA may record
# them into the CUDA graphs it replays for a jitted program (as it does for its own cuDNN
# attention) instead of launching them one by one. Off by default: on an H200 it moved the
# benchmark ratios by no more than their run-to-run noise (about 3%). JAX_FA4_FFI_COMMAND_BUFFER=1
# at import turns it on.
COMMAND_BUFFER_ENV = "JAX_FA4_FFI_COMMAND_BUFFER"
COMMAND_BUFFER: bool = os.environ.get(COMMAND_BUFFER_ENV, "").strip() == "1"


@functools.cache
def registered_targets() -> dict[str, frozenset[str]]:
    """Registers every handler of the extension with XLA; returns {platform: target names}."""
    out: dict[str, frozenset[str]] = {}
    registrations = _jax_fa4_ext.registrations()
    for platform, targets in registrations.items():
        traits = xla_client.CustomCallTargetTraits.DEFAULT
        if platform == "cuda" and COMMAND_BUFFER:
            traits = xla_client.CustomCallTargetTraits.COMMAND_BUFFER_COMPATIBLE
        for name, capsule in targets.items():
            jax.ffi.register_ffi_target(
                name, capsule, platform=_XLA_PLATFORM[platform], traits=traits
            )
        out[platform] = out.get(platform, frozenset()) | frozenset(targets)
    return out


def has_target(name: str, platform: str) -> bool:
    """Whether the extension was built with the FFI target `name` for `platform`."""
    return name in registered_targets().get(platform, frozenset())


def built_with_cuda() -> bool:
    """Whether the extension holds the Hopper CUDA kernels (it was built where nvcc was found)."""
    return bool(_jax_fa4_ext.built_with_cuda)


def cuda_bwd_workspace_bytes(batch: int, seq_q: int, heads_q: int, head_dim: int) -> int:
    """Bytes of the uint8 workspace result of ``jax_fa4_bwd_cuda``, from the C++ formula
    (cuda/hopper/bwd/workspace.h) that the handler checks against."""
    if not built_with_cuda():
        raise NotImplementedError("jax_fa4 was built without its CUDA kernels")
    return int(_jax_fa4_ext.cuda_bwd_workspace_bytes(batch, seq_q, heads_q, head_dim))


def cuda_fwd_workspace_bytes(
    batch: int, seq_q: int, seq_k: int, heads_q: int, heads_kv: int, head_dim: int
) -> int:
    """Bytes of the uint8 workspace result of ``jax_fa4_fwd_cuda`` (the split-KV decode path's
    partial outputs; 0 for most shapes), from the C++ plan (cuda/hopper/decode/plan.h) that the
    handler checks against."""
    if not built_with_cuda():
        raise NotImplementedError("jax_fa4 was built without its CUDA kernels")
    return int(
        _jax_fa4_ext.cuda_fwd_workspace_bytes(batch, seq_q, seq_k, heads_q, heads_kv, head_dim)
    )
