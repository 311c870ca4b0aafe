"""jax_fa4: FlashAttention-class attention for JAX (Hopper CUDA kernels, a C++ CPU path)."""

from jax_fa4 import _ffi, sharding  # sharding: registers the automatic partitioning rules
from jax_fa4.attention import attention
from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p
from jax_fa4.reference import attention_reference
from jax_fa4.ring import from_zigzag, ring_attention, to_zigzag, zigzag_indices

_ffi.registered_targets()

__all__ = [
    "attention",
    "attention_reference",
    "fa4_bwd_p",
    "fa4_fwd_p",
    "from_zigzag",
    "ring_attention",
    "sharding",
    "to_zigzag",
    "zigzag_indices",
]
__version__ = "0.1.0"
