"""Ring (context-parallel) attention: the sequence split over a mesh axis, K/V passed around.

Inside ``jax.shard_map``, every device of the ring axis holds one block of the sequence of q, k
and v. :func:`ring_attention` computes exact attention over the whole sequence: each device
computes its queries against the K/V block it holds while the next block arrives by
``jax.lax.ppermute``, and merges the partial outputs through their log-sum-exps. The backward is
a ring too (its own ``custom_vjp``, not the autodiff of the forward's ppermutes): K/V travel the
same way with their dK/dV accumulators, dQ stays local. Both directions use the final
``(o, lse)`` as the FlashAttention backward does, so no per-step state is saved. The loops
themselves are in :mod:`jax_fa4.ring_engine`, which the automatic partitioning of
:func:`jax_fa4.attention` (:mod:`jax_fa4.sharding`) runs as well; this module holds the public
call, its checks and its VJP, and the host-side layout helpers.

Layouts. Without a causal mask any assignment of sequence positions to devices works (as long as
q, k and v use the same one). With a causal mask the mask depends on where the blocks sit, so
``layout`` must say how the caller laid the sequence out:

* ``layout="contiguous"`` (default): device ``r`` holds the ``r``-th contiguous block, which is
  what sharding a natural-order array over the sequence axis gives (``P(None, axis_name)``).
  With a causal mask and an even local length the ring first moves the chunks into the zig-zag
  order below itself (two ppermutes of q, k and v, two of the outputs back; the backward
  likewise for the cotangents and gradients), so the work is balanced. With an odd local length
  every device computes every step's full block and masks the future ones (exact, twice the
  balanced work). The automatic partitioning of :func:`jax_fa4.attention` under ``jax.jit``
  uses this layout.
* ``layout="zigzag"`` (load balanced with no extra transfers): the caller cuts the sequence into
  ``2 n`` equal chunks and gives device ``r`` chunks ``r`` and ``2 n - 1 - r``, in that order.
  Every ring step then costs every device the same: the diagonal step is one causal call on the
  local block, every other step one full call on two stacked ``c x c`` block pairs (c = chunk
  length), the same program on every device. :func:`to_zigzag` / :func:`from_zigzag` permute a
  sequence into and out of this order (do it once, on token ids/positions/labels, before the
  model: attention is the only order-sensitive layer of a transformer besides positions).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax_fa4 import _compat
from jax_fa4.attention import attention
from jax_fa4.ring_engine import (
    LAYOUTS,
    AxisName,
    blocks_from_zigzag,
    blocks_to_zigzag,
    rebalances,
    ring_bwd,
    ring_fwd,
)
from jax_fa4.validation import check_flag, check_qkv, check_softmax_scale

__all__ = ["LAYOUTS", "from_zigzag", "ring_attention", "to_zigzag", "zigzag_indices"]


# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------


def zigzag_indices(seq_len: int, num_shards: int) -> np.ndarray:
    """Positions of the natural sequence in zig-zag order: ``x_zz = x[..., idx, ...]``.

    The sequence is cut into ``2 * num_shards`` chunks of ``seq_len / (2 * num_shards)``; shard
    ``r`` (the r-th contiguous block of the result) holds chunks ``r`` and ``2*num_shards-1-r``.
    """
    if num_shards < 1 or seq_len % (2 * num_shards):
        raise ValueError(
            f"zig-zag layout needs the sequence length ({seq_len}) to be a multiple of 2 x the "
            f"number of shards ({num_shards})"
        )
    c = seq_len // (2 * num_shards)
    chunks = []
    for r in range(num_shards):
        chunks += [r, 2 * num_shards - 1 - r]
    return np.concatenate([np.arange(j * c, (j + 1) * c) for j in chunks])


def to_zigzag(x: np.ndarray | jax.Array, num_shards: int, axis: int = 1) -> np.ndarray | jax.Array:
    """Reorders axis `axis` (the sequence; 1 for ``[batch, seq, ...]``) of `x` into zig-zag order.

    Works on NumPy and JAX arrays. Shard the result's sequence axis contiguously over the ring
    axis (``PartitionSpec(None, axis_name)``) and call ``ring_attention(..., layout="zigzag")``.
    """
    idx = zigzag_indices(x.shape[axis], num_shards)
    return x.take(idx, axis=axis) if isinstance(x, np.ndarray) else jnp.take(x, idx, axis=axis)


def from_zigzag(
    x: np.ndarray | jax.Array, num_shards: int, axis: int = 1
) -> np.ndarray | jax.Array:
    """Inverse of :func:`to_zigzag`: back to the natural sequence order."""
    inv = np.argsort(zigzag_indices(x.shape[axis], num_shards))
    return x.take(inv, axis=axis) if isinstance(x, np.ndarray) else jnp.take(x, inv, axis=axis)


# ---------------------------------------------------------------------------------------------
# The public call
# ---------------------------------------------------------------------------------------------


Residuals = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _ring_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
    deterministic: bool,
) -> tuple[jax.Array, jax.Array]:
    """The checked ring, differentiable: (o [b, sq, hq, dv], lse float32 [b, hq, sq]) of this
    device's blocks, in `layout`."""
    return _ring_core_fwd(q, k, v, axis_name, causal, softmax_scale, layout, deterministic)[0]


def _ring_core_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
    deterministic: bool,
) -> tuple[tuple[jax.Array, jax.Array], Residuals]:
    """((o, lse), residuals (q, k, v, o, lse)); a rebalanced ring keeps its residuals in the
    zig-zag layout, so that the backward moves only the cotangents and the gradients."""
    del deterministic  # a backward-only option
    params = dict(axis_name=axis_name, causal=causal, softmax_scale=softmax_scale)
    if not rebalances(axis_name, causal, layout, q.shape[1]):
        o, lse = ring_fwd(q, k, v, layout=layout, **params)
        return (o, lse), (q, k, v, o, lse)
    # Contiguous and causal: run (and keep the residuals) in the zig-zag layout.
    q, k, v = blocks_to_zigzag(axis_name, [(q, 1), (k, 1), (v, 1)])
    o, lse = ring_fwd(q, k, v, layout="zigzag", **params)
    out = tuple(blocks_from_zigzag(axis_name, [(o, 1), (lse, 2)]))
    return out, (q, k, v, o, lse)


def _ring_core_bwd(
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
    deterministic: bool,
    residuals: Residuals,
    cotangents: tuple[jax.Array, jax.Array],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv) of this device's blocks from the cotangents (do, dlse) of (o, lse)."""
    q, k, v, o, lse = residuals
    do, dlse = cotangents
    do = jnp.asarray(do, o.dtype)
    dlse = jnp.asarray(dlse, jnp.float32)
    params = dict(
        axis_name=axis_name,
        causal=causal,
        softmax_scale=softmax_scale,
        deterministic=deterministic,
    )
    if not rebalances(axis_name, causal, layout, q.shape[1]):
        return ring_bwd(q, k, v, o, lse, do, dlse, layout=layout, **params)
    do, dlse = blocks_to_zigzag(axis_name, [(do, 1), (dlse, 2)])
    dq, dk, dv = ring_bwd(q, k, v, o, lse, do, dlse, layout="zigzag", **params)
    return tuple(blocks_from_zigzag(axis_name, [(dq, 1), (dk, 1), (dv, 1)]))


_ring_core.defvjp(_ring_core_fwd, _ring_core_bwd)


def _ring_size(axis_name: AxisName) -> int:
    """The ring size; a ValueError naming `axis_name` when it is not bound here."""
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError as err:
        raise ValueError(
            f"ring_attention: axis_name={axis_name!r} is not a bound mesh axis here. Call "
            "ring_attention inside jax.shard_map over a mesh with that axis, with the sequence "
            "axis of q, k and v split over it (e.g. in_specs=P(None, axis_name))"
        ) from err


def ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool = False,
    softmax_scale: float | None = None,
    return_lse: bool = False,
    layout: str = "contiguous",
    deterministic: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Exact attention over a sequence split across the mesh axis `axis_name` (inside shard_map).

    Args:
      q: this device's queries ``[batch, seq_q_local, heads_q, head_dim]``.
      k: this device's keys ``[batch, seq_k_local, heads_kv, head_dim]`` (GQA as in
        :func:`jax_fa4.attention`).
      v: this device's values ``[batch, seq_k_local, heads_kv, head_dim_v]``.
      axis_name: the mesh axis (or tuple of axes) the sequence is split over; the ring follows
        the axis index, device ``r`` holding block ``r`` of the (laid out) sequence.
      causal: causal mask over the global sequence. Needs ``seq_q_local == seq_k_local`` (the
        same split of one sequence) and, with ``layout="zigzag"``, an even local length.
      softmax_scale: multiplies ``q . k``; default ``1 / sqrt(head_dim)``.
      return_lse: also return the float32 log-sum-exp ``[batch, heads_q, seq_q_local]`` over the
        whole sequence (differentiable).
      layout: how the global sequence is laid out over the devices: ``"contiguous"`` (device r
        holds block r: a natural-order array sharded over the axis; a causal ring rebalances
        itself with a few extra ppermutes) or ``"zigzag"`` (device r holds chunks r and 2n-1-r
        of 2n, see :func:`to_zigzag`: balanced with no extra transfers). Only matters when
        ``causal``; without a mask any layout that q, k and v share gives the same (permuted)
        result. A wrong layout with ``causal`` gives a wrong mask: it cannot be detected.
      deterministic: bitwise reproducible backward, as in :func:`jax_fa4.attention` (every
        kernel call of the backward ring gets it; the ring's own sums run in a fixed order).

    Returns:
      this device's ``o`` ``[batch, seq_q_local, heads_q, head_dim_v]`` (q's dtype), or
      ``(o, lse)``.

    Differentiable (the backward is a ring as well), works under ``jit``, ``vmap`` and
    ``shard_map(check_vma=True)``. Memory per device: its blocks plus two K/V blocks in flight.
    """
    dims = check_qkv(q, k, v)
    scale = check_softmax_scale(softmax_scale, dims.head_dim)
    causal = check_flag("causal", causal)
    return_lse = check_flag("return_lse", return_lse)
    deterministic = check_flag("deterministic", deterministic)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    n = _ring_size(axis_name)
    if causal and dims.seq_q != dims.seq_k:
        raise ValueError(
            "ring_attention with causal=True needs q and k to hold the same positions (equal "
            f"local sequence lengths); got q {dims.seq_q}, k {dims.seq_k} (axis 1)"
        )
    if causal and layout == "zigzag" and n > 1 and dims.seq_q % 2:
        raise ValueError(
            "ring_attention with layout='zigzag' needs an even local sequence length (two "
            f"chunks per device); got {dims.seq_q} (axis 1 of q)"
        )
    if n == 1 or dims.seq_k == 0 or dims.batch * dims.seq_q * dims.heads_q == 0:
        # One device, or nothing to attend: the one-device call is exact (and has its own VJP).
        return attention(
            q,
            k,
            v,
            causal=causal,
            softmax_scale=scale,
            return_lse=return_lse,
            deterministic=deterministic,
        )
    ring_axes = frozenset(axis_name if isinstance(axis_name, tuple) else (axis_name,))
    varying = [_compat.varying_axes(jax.typeof(x)) for x in (q, k, v)]
    if any(varying) and not all(ring_axes <= vary for vary in varying[1:]):
        # Only visible under shard_map(check_vma=True); without it the caller's specs are trusted.
        raise ValueError(
            f"ring_attention: k and v must be split over the ring axis {axis_name!r} (each device "
            f"holding its own block of the sequence); got k varying over {sorted(varying[1])}, v "
            f"over {sorted(varying[2])}. To attend local queries to keys every device holds in "
            "full, call jax_fa4.attention instead"
        )
    # Give every operand the union of the varying manual axes (with the ring's), so that the
    # cotangent of one replicated over an axis is summed over it.
    q, k, v = _compat.match_varying_axes(q, k, v)
    if any(varying):
        q, k, v = (_compat.cast_to_varying(x, ring_axes) for x in (q, k, v))
    o, lse = _ring_core(q, k, v, axis_name, causal, scale, layout, deterministic)
    return (o, lse) if return_lse else o
