"""jax_fa4: FlashAttention-class attention for JAX (Hopper CUDA kernels, a C++ CPU path).

Importing the package registers the extension's XLA FFI targets (:mod:`jax_fa4._ffi`), the
primitives' lowerings to them (:mod:`jax_fa4.lowering`) and, through those, the automatic
partitioning under a multi-device ``jax.jit`` (:mod:`jax_fa4.sharding`).

Modules, from the public calls down; each imports only modules on a later line, or later on
its own line (the test tests/test_module_graph.py keeps the graph acyclic):

* :mod:`jax_fa4.flax` (the Flax ``attention_fn`` adapter), :mod:`jax_fa4.ring`
  (``ring_attention``, the zig-zag layout helpers), :mod:`jax_fa4.attention`: the public calls;
* :mod:`jax_fa4.lowering` (the lowering rules), :mod:`jax_fa4.sharding` (the automatic
  partitioning), :mod:`jax_fa4.ring_engine` (the per-device ring loops);
* :mod:`jax_fa4.primitives` (``fa4_fwd_p``, ``fa4_bwd_p``: abstract evaluation, batching);
* :mod:`jax_fa4._ffi` (the extension and its FFI targets), :mod:`jax_fa4._compat`,
  :mod:`jax_fa4.validation`, :mod:`jax_fa4.reference` (the float64-capable oracle).
"""

from jax_fa4 import (
    _ffi,
    lowering,  # noqa: F401 - registers the lowerings (and the partitioning)
    sharding,
)
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
