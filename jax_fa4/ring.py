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

Variants (the arguments of :func:`jax_fa4.attention`, over the global sequence): a sliding
window becomes, for each ring step, the window shifted to its block pair's positions (bounds that
may be negative), and the steps whose block pairs see nothing of each other are skipped, kernel
call and transfer; segment ids are split like q and k, the kv ids travelling with their K/V
block; the soft cap applies in every step; the sinks join the final combination of the steps'
partial results once (their gradient is computed from the final lse). Lengths of the global
sequence work without causal and window (as per-block lengths); with them they are an error,
never an approximation: the lengths would move the band's diagonal per batch entry.

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

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax_fa4 import _compat
from jax_fa4.attention import attention, sinks_cotangent
from jax_fa4.ring_engine import (
    LAYOUTS,
    AxisName,
    in_mesh_order,
    move_blocks,
    query_positions,
    ring_bwd,
    ring_fwd,
    run_layout,
)
from jax_fa4.validation import (
    check_flag,
    check_qkv,
    check_segment_ids,
    check_seq_lengths,
    check_sinks,
    check_softcap,
    check_softmax_scale,
    check_window,
)

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


@dataclasses.dataclass(frozen=True)
class _RingStatic:
    """The static parameters of one ring (hashable: the custom VJP's non-differentiable arg).

    layout: the caller's layout; run: the one the loop runs in (:func:`run_layout`), where the
    residuals are kept, so that the backward moves only the cotangents and the gradients."""

    axis_name: AxisName
    causal: bool
    softmax_scale: float
    layout: str
    run: str
    deterministic: bool
    window_left: int | None
    window_right: int | None
    softcap: float | None

    def params(self) -> dict[str, object]:
        """The engine's keyword arguments shared by both directions."""
        return dict(
            axis_name=self.axis_name,
            causal=self.causal,
            softmax_scale=self.softmax_scale,
            layout=self.run,
            window_left=self.window_left,
            window_right=self.window_right,
            softcap=self.softcap,
        )


# (q_segment_ids [b, sq], kv_segment_ids [b, sk], q_lengths [b], kv_lengths [b]), each optional.
Masks = tuple[jax.Array | None, jax.Array | None, jax.Array | None, jax.Array | None]
Residuals = tuple[jax.Array, ...]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _ring_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    masks: Masks,
    sinks: jax.Array | None,
    static: _RingStatic,
) -> tuple[jax.Array, jax.Array]:
    """The checked ring, differentiable: (o [b, sq, hq, dv], lse float32 [b, hq, sq]) of this
    device's blocks, in the caller's layout. sinks: float32 [b, hq] or None."""
    return _ring_core_fwd(q, k, v, masks, sinks, static)[0]


def _ring_core_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    masks: Masks,
    sinks: jax.Array | None,
    static: _RingStatic,
) -> tuple[tuple[jax.Array, jax.Array], tuple]:
    """((o, lse), residuals): q, k, v, the segment ids, o and lse in the run layout, the
    lengths and sinks."""
    q_ids, kv_ids, q_lengths, kv_lengths = masks
    axis, src, run = static.axis_name, static.layout, static.run
    q, k, v, q_ids, kv_ids = move_blocks(
        axis, src, run, [(q, 1), (k, 1), (v, 1), (q_ids, 1), (kv_ids, 1)]
    )
    o, lse = ring_fwd(
        q,
        k,
        v,
        q_segment_ids=q_ids,
        kv_segment_ids=kv_ids,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        sinks=sinks,
        **static.params(),
    )
    out = tuple(move_blocks(axis, run, src, [(o, 1), (lse, 2)]))
    return out, (q, k, v, o, lse, (q_ids, kv_ids, q_lengths, kv_lengths), sinks)


def _ring_core_bwd(
    static: _RingStatic,
    residuals: tuple,
    cotangents: tuple[jax.Array, jax.Array],
) -> tuple:
    """(dq, dk, dv, mask cotangents (None: integers), d sinks) of this device's blocks from the
    cotangents (do, dlse) of (o, lse).

    The sinks' gradient, from the final lse (which holds the sink) and o: ``d sink[b, h] =
    sum_i exp(sink[b, h] - lse[b, h, i]) * (dlse[b, h, i] - rowsum(dO * O)[b, h, i])`` over this
    device's rows with a finite lse (padding rows have none); the cast of the sinks to vary over
    the ring axis (in :func:`ring_attention`) sums it over the devices.
    """
    q, k, v, o, lse, masks, sinks = residuals
    q_ids, kv_ids, q_lengths, kv_lengths = masks
    do, dlse = cotangents
    do = jnp.asarray(do, o.dtype)
    dlse = jnp.asarray(dlse, jnp.float32)
    axis, src, run = static.axis_name, static.layout, static.run
    do, dlse = move_blocks(axis, src, run, [(do, 1), (dlse, 2)])
    dq, dk, dv = ring_bwd(
        q,
        k,
        v,
        o,
        lse,
        do,
        dlse,
        deterministic=static.deterministic,
        q_segment_ids=q_ids,
        kv_segment_ids=kv_ids,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        **static.params(),
    )
    d_sinks = None
    if sinks is not None:
        d_sinks = sinks_cotangent(sinks, lse, o, do, dlse)
    dq, dk, dv = move_blocks(axis, run, src, [(dq, 1), (dk, 1), (dv, 1)])
    return dq, dk, dv, (None, None, None, None), d_sinks


_ring_core.defvjp(_ring_core_fwd, _ring_core_bwd)


def _ring_size(axis_name: AxisName) -> int:
    """The ring size; a ValueError naming `axis_name` when it is not bound here, or when it is a
    tuple of axes out of the mesh's order (:func:`jax_fa4.ring_engine.in_mesh_order`)."""
    try:
        n = int(jax.lax.axis_size(axis_name))
    except NameError as err:
        raise ValueError(
            f"ring_attention: axis_name={axis_name!r} is not a bound mesh axis here. Call "
            "ring_attention inside jax.shard_map over a mesh with that axis, with the sequence "
            "axis of q, k and v split over it (e.g. in_specs=P(None, axis_name))"
        ) from err
    if isinstance(axis_name, tuple | list) and len(axis_name) > 1:
        order = tuple(getattr(jax.sharding.get_abstract_mesh(), "axis_names", ()) or ())
        in_mesh = in_mesh_order(axis_name, order)
        if order and in_mesh != tuple(axis_name):
            raise ValueError(
                f"ring_attention: axis_name={tuple(axis_name)!r} lists the mesh axes out of the "
                f"mesh's order {order!r}; give them as {in_mesh!r} (and split the sequence with "
                f"P(None, {in_mesh!r})): jax.lax.ppermute pairs devices in the mesh's order, so "
                "a ring over the axes in another order would pass blocks to the wrong devices"
            )
    return n


def _no_keys(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    axis_name: AxisName,
    layout: str,
    q_lengths: jax.Array | None,
    sinks: jax.Array | None,
    head_dim_v: int,
) -> tuple[jax.Array, jax.Array]:
    """The answer when there are no keys (or nothing to compute): o = 0, lse = the sink on the
    non-padding rows with sinks, -inf elsewhere; no kernel call, no arithmetic on q, k, v."""
    b, sq, hq, _ = q.shape
    o = jnp.zeros((b, sq, hq, head_dim_v), q.dtype)
    lse = jnp.full((b, hq, sq), -jnp.inf, jnp.float32)
    if sinks is not None:
        n, r = _ring_size(axis_name), jax.lax.axis_index(axis_name)
        rows = jnp.ones((b, sq), bool)
        if q_lengths is not None:
            rows = query_positions(layout, r, n, sq)[None, :] < q_lengths[:, None]
        lse = jnp.where(rows[:, None, :], sinks[:, :, None], lse)
    varying = _compat.union_varying_axes(jax.typeof(x) for x in (q, k, v))
    return _compat.cast_to_varying(o, varying), _compat.cast_to_varying(lse, varying)


def _check_lengths_without_band(
    causal: bool, window: tuple[int | None, int | None], given: list[str]
) -> None:
    """Lengths shift the band's diagonal per batch entry; a ring's band is static per step."""
    if not given or (not causal and window == (None, None)):
        return
    what = "causal=True" if causal else f"local_window_size={window}"
    raise ValueError(
        f"ring_attention: {' and '.join(given)} cannot be combined with {what}: the lengths move "
        "the diagonal of the causal/window band by kv_len - q_len per batch entry, which the "
        "ring's per-step block masks (one static band per step) cannot express exactly. Lengths "
        "work without causal and local_window_size (keys j >= kv_len and queries i >= q_len of "
        "the global sequence masked). For padded causal self-attention mark the padding with "
        "segment_ids instead (e.g. a pair (q_ids, kv_ids) with distinct ids for the padded "
        "queries and keys), or use jax_fa4.attention without a sequence split"
    )


def ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool = False,
    softmax_scale: float | None = None,
    local_window_size: int | tuple[int | None, int | None] | None = None,
    query_seq_lengths: jax.Array | None = None,
    key_value_seq_lengths: jax.Array | None = None,
    segment_ids: jax.Array | tuple[jax.Array, jax.Array] | None = None,
    logits_soft_cap: float | None = None,
    sinks: jax.Array | None = None,
    return_lse: bool = False,
    layout: str = "contiguous",
    deterministic: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Exact attention over a sequence split across the mesh axis `axis_name` (inside shard_map).

    The semantics are :func:`jax_fa4.attention`'s over the whole (global) sequence: positions,
    the causal mask, the window and the lengths refer to the global sequence in its natural
    order, whatever `layout` the blocks come in.

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
      local_window_size: a sliding window over the global positions, as in
        :func:`jax_fa4.attention` (an int ``w`` or a pair ``(left, right)``; with ``causal`` the
        right side is 0). Needs ``seq_q_local == seq_k_local``. Every ring step gets the window
        shifted to its block pair's positions, and a step whose blocks see nothing of each other
        is skipped (no kernel call, no transfer): a window of ``w`` keys costs about ``w / local
        length + 1`` steps instead of the whole ring. With ``layout="zigzag"`` the ring moves the
        blocks into the contiguous layout and back (two ppermutes each way; even local length).
      query_seq_lengths: integer ``[batch]``: queries at global positions ``>= q_len`` are
        padding (output 0, lse ``-inf``, zero gradients); values act as clamped to ``[0, global
        seq_q]``. The same on every device of the ring (not split).
      key_value_seq_lengths: integer ``[batch]``: keys at global positions ``>= kv_len`` are
        never visible; values act as clamped to ``[0, global seq_k]``. Lengths cannot be
        combined with ``causal`` or ``local_window_size`` (a ValueError: the lengths would move
        the band's diagonal per batch entry, which the ring cannot do exactly; mark padding
        with ``segment_ids`` instead). With ``layout="zigzag"`` the ring runs in the contiguous
        layout, as with a window.
      segment_ids: packed sequences: this device's ids, an integer array ``[batch, seq_local]``
        (when ``seq_q_local == seq_k_local``) or a pair ``(q_ids [batch, seq_q_local], kv_ids
        [batch, seq_k_local])``, split over the ring axis like q and k; the kv ids travel with
        their K/V block. Key j is visible from query i only if their ids are equal; causal and
        the window still apply to the global positions.
      logits_soft_cap: a static positive float ``c``: scores become ``c * tanh(s / c)``.
      sinks: floating-point ``[heads_q]`` (this device's heads; the same on every device of the
        ring): one logit per head in every non-padding row's denominator. It joins the final
        combination of the ring's partial results once (not per step); differentiable, its
        gradient summed over the ring.
      return_lse: also return the float32 log-sum-exp ``[batch, heads_q, seq_q_local]`` over the
        whole sequence (the sink included; differentiable).
      layout: how the global sequence is laid out over the devices: ``"contiguous"`` (device r
        holds block r: a natural-order array sharded over the axis; a causal ring rebalances
        itself with a few extra ppermutes) or ``"zigzag"`` (device r holds chunks r and 2n-1-r
        of 2n, see :func:`to_zigzag`: balanced with no extra transfers). Matters with
        ``causal``, a window or lengths; without them any layout that q, k, v and the segment
        ids share gives the same (permuted) result. A wrong layout gives a wrong mask: it cannot
        be detected.
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
    window = check_window(local_window_size)
    softcap = check_softcap(logits_soft_cap)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    n = _ring_size(axis_name)
    q_lengths = check_seq_lengths(
        "query_seq_lengths", query_seq_lengths, dims.batch, n * dims.seq_q
    )
    kv_lengths = check_seq_lengths(
        "key_value_seq_lengths", key_value_seq_lengths, dims.batch, n * dims.seq_k
    )
    ids = check_segment_ids(segment_ids, dims.batch, dims.seq_q, dims.seq_k)
    sinks = check_sinks(sinks, dims.heads_q)
    given = [
        name
        for name, x in (("query_seq_lengths", q_lengths), ("key_value_seq_lengths", kv_lengths))
        if x is not None
    ]
    # A side that spans the whole global sequence bounds nothing: dropped, so that a causal ring
    # with such a window runs balanced like a plain causal one.
    window = tuple(
        None if w is not None and w >= n * max(dims.seq_q, dims.seq_k) - 1 else w for w in window
    )
    _check_lengths_without_band(causal, window, given)
    banded = causal or window != (None, None)
    if banded and dims.seq_q != dims.seq_k:
        what = "causal=True" if causal else "local_window_size"
        raise ValueError(
            f"ring_attention with {what} needs q and k to hold the same positions (equal "
            f"local sequence lengths); got q {dims.seq_q}, k {dims.seq_k} (axis 1)"
        )
    if layout == "zigzag" and n > 1 and dims.seq_q % 2 and (banded or given):
        raise ValueError(
            "ring_attention with layout='zigzag' needs an even local sequence length (two "
            f"chunks per device); got {dims.seq_q} (axis 1 of q)"
        )
    if n == 1:  # one device: the one-device call is exact (and has its own VJP)
        return attention(
            q,
            k,
            v,
            causal=causal,
            softmax_scale=scale,
            local_window_size=None if window == (None, None) else window,
            query_seq_lengths=q_lengths,
            key_value_seq_lengths=kv_lengths,
            segment_ids=ids,
            logits_soft_cap=softcap,
            sinks=sinks,
            return_lse=return_lse,
            deterministic=deterministic,
        )
    if dims.seq_k == 0 or dims.batch * dims.seq_q * dims.heads_q == 0:
        sinks_b = None
        if sinks is not None:
            sinks_b = jnp.broadcast_to(sinks.astype(jnp.float32), (dims.batch, dims.heads_q))
        o, lse = _no_keys(q, k, v, axis_name, layout, q_lengths, sinks_b, dims.head_dim_v)
        return (o, lse) if return_lse else o
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
    sinks_b = None
    if sinks is not None:  # [hq] -> float32 [b, hq]: its transpose sums d sinks over the batch
        sinks_b = jnp.broadcast_to(sinks.astype(jnp.float32), (dims.batch, dims.heads_q))
    q_ids, kv_ids = (None, None) if ids is None else ids
    operands = [q, k, v, q_ids, kv_ids, q_lengths, kv_lengths, sinks_b]
    present = [i for i, x in enumerate(operands) if x is not None]
    # Give every operand the union of the varying manual axes (with the ring's), so that the
    # cotangent of one replicated over an axis (the sinks, say) is summed over it.
    cast = _compat.match_varying_axes(*(operands[i] for i in present))
    if any(varying):
        cast = tuple(_compat.cast_to_varying(x, ring_axes) for x in cast)
    for i, x in zip(present, cast, strict=True):
        operands[i] = x
    q, k, v, q_ids, kv_ids, q_lengths, kv_lengths, sinks_b = operands
    static = _RingStatic(
        axis_name=axis_name,
        causal=causal,
        softmax_scale=scale,
        layout=layout,
        run=run_layout(
            axis_name, causal, layout, dims.seq_q, window=window, has_lengths=bool(given)
        ),
        deterministic=deterministic,
        window_left=window[0],
        window_right=window[1],
        softcap=softcap,
    )
    o, lse = _ring_core(q, k, v, (q_ids, kv_ids, q_lengths, kv_lengths), sinks_b, static)
    return (o, lse) if return_lse else o
