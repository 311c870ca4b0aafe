"""Ring (context-parallel) attention: the sequence split over a mesh axis, K/V passed around.

Inside ``jax.shard_map``, every device of the ring axis holds one block of the sequence of q, k
and v. ``ring_attention`` computes exact attention over the whole sequence: the device computes
its queries against the K/V block it holds while that block's successor arrives by
``jax.lax.ppermute`` (device ``r`` sends to ``r + 1``), and merges the partial outputs through
their log-sum-exps. The backward is a ring too (its own ``custom_vjp``, not the autodiff of the
forward's ppermutes): K/V travel the same way, each device adds its dK/dV contribution for the
block it holds to an accumulator that travels with the block, and after a full turn the
accumulators arrive at the block's owner. dQ stays local. Both directions use the final
``(o, lse)`` as the FlashAttention backward does, so no per-step state is saved.

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
from collections.abc import Hashable

import jax
import jax.numpy as jnp
import numpy as np

from jax_fa4 import _compat
from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p
from jax_fa4.validation import check_flag, check_qkv, check_softmax_scale

LAYOUTS = ("zigzag", "contiguous")
AxisName = Hashable  # a mesh axis name, or a tuple of them (the ring runs over their product)


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


def to_zigzag(x, num_shards: int, axis: int = 1):
    """Reorders axis `axis` (the sequence; 1 for ``[batch, seq, ...]``) of `x` into zig-zag order.

    Works on NumPy and JAX arrays. Shard the result's sequence axis contiguously over the ring
    axis (``PartitionSpec(None, axis_name)``) and call ``ring_attention(..., layout="zigzag")``.
    """
    idx = zigzag_indices(x.shape[axis], num_shards)
    return x.take(idx, axis=axis) if isinstance(x, np.ndarray) else jnp.take(x, idx, axis=axis)


def from_zigzag(x, num_shards: int, axis: int = 1):
    """Inverse of :func:`to_zigzag`: back to the natural sequence order."""
    inv = np.argsort(zigzag_indices(x.shape[axis], num_shards))
    return x.take(inv, axis=axis) if isinstance(x, np.ndarray) else jnp.take(x, inv, axis=axis)


# ---------------------------------------------------------------------------------------------
# Per-block pieces
# ---------------------------------------------------------------------------------------------


def _fwd(q, k, v, scale: float, causal: bool):
    return tuple(fa4_fwd_p.bind(q, k, v, softmax_scale=scale, causal=causal))


def _bwd(q, k, v, o, lse, do, dlse, scale: float, causal: bool, deterministic: bool):
    return tuple(
        fa4_bwd_p.bind(
            q,
            k,
            v,
            o,
            lse,
            do,
            dlse,
            softmax_scale=scale,
            causal=causal,
            deterministic=deterministic,
        )
    )


def _merge(o_acc, lse_acc, o_blk, lse_blk):
    """Merges two partial softmax results through their log-sum-exps. A partial with lse -inf
    (its rows saw no key) contributes nothing, whatever its o holds. o [b, s, h, dv] (the result
    is float32), lse float32 [b, h, s]."""
    lse = jnp.logaddexp(lse_acc, lse_blk)
    safe = jnp.where(jnp.isfinite(lse), lse, 0.0)

    def weight(x):  # [b, h, s] -> [b, s, h, 1]
        return jnp.swapaxes(jnp.exp(x - safe), 1, 2)[..., None]

    def term(o, x):  # 0 where the weight is 0, even if o is not finite there
        return jnp.where(weight(x) > 0, o.astype(jnp.float32) * weight(x), 0.0)

    return term(o_acc, lse_acc) + term(o_blk, lse_blk), lse


def _ring_setup(axis_name: AxisName):
    n = jax.lax.axis_size(axis_name)
    r = jax.lax.axis_index(axis_name)
    perm = [(i, (i + 1) % n) for i in range(n)]
    return n, r, perm


def _halves(x, axis: int = 1):
    c = x.shape[axis] // 2
    return jax.lax.slice_in_dim(x, 0, c, axis=axis), jax.lax.slice_in_dim(x, c, None, axis=axis)


def _zigzag_pairs(earlier, q_like, kv_like):
    """The two (c x c) block pairs of a zig-zag step, stacked along the batch for one kernel call.

    With the visiting block earlier in the sequence than this device's (``earlier``), all of
    this device's queries see the first chunk of the visitor: pairs (q_b, k_0) and (q_a, k_0).
    Otherwise only the second query chunk sees the visitor, all of it: (q_b, k_0) and (q_b, k_1).
    The first pair is the same either way; the second is chosen by a select, not a branch, so
    every device runs the same program. q_like: arrays split along the query sequence (axis 1,
    or 2 for lse-like arrays); kv_like: arrays split along the key sequence.
    """
    out = []
    for x, axis in q_like:
        xa, xb = _halves(x, axis)
        out.append(jnp.concatenate([xb, jnp.where(earlier, xa, xb)], axis=0))
    for x in kv_like:
        x0, x1 = _halves(x)
        out.append(jnp.concatenate([x0, jnp.where(earlier, x0, x1)], axis=0))
    return out


def _ring_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
) -> tuple[jax.Array, jax.Array]:
    """The ring forward on this device's blocks (no argument checks, no VJP): ``(o, lse)``.

    q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk, hkv, dv]`` are this device's
    blocks; o ``[b, sq, hq, dv]`` in q's dtype, lse float32 ``[b, hq, sq]`` over the whole
    sequence. Must run where `axis_name` is bound (shard_map, or a custom_partitioning body).
    Every device runs the same program (masks are selects, not branches).
    """
    n, r, perm = _ring_setup(axis_name)
    b = q.shape[0]

    def step(s: int, kb, vb):
        if not causal:
            return _fwd(q, kb, vb, softmax_scale, False)
        if s == 0:  # own block: one causal call covers both layouts (see the module docstring)
            return _fwd(q, kb, vb, softmax_scale, True)
        # At step s device r holds the block of device (r - s) mod n, which comes before its own
        # block in the sequence exactly when r >= s.
        earlier = r >= s
        if layout == "contiguous":  # an earlier block is seen whole, a later one not at all
            o, lse = _fwd(q, kb, vb, softmax_scale, False)
            return o, jnp.where(earlier, lse, -jnp.inf)
        qs, ks, vs = _zigzag_pairs(earlier, [(q, 1)], [kb, vb])
        o2, lse2 = _fwd(qs, ks, vs, softmax_scale, False)
        (o_b, o_x), (lse_b, lse_x) = (o2[:b], o2[b:]), (lse2[:b], lse2[b:])
        # The second pair's rows are chunk a (earlier) or chunk b (later) of this device's.
        o_bb, lse_bb = _merge(o_b, lse_b, o_x, jnp.where(earlier, -jnp.inf, lse_x))
        o = jnp.concatenate([o_x.astype(jnp.float32), o_bb], axis=1)
        lse = jnp.concatenate([jnp.where(earlier, lse_x, -jnp.inf), lse_bb], axis=2)
        return o, lse

    o_acc, lse_acc = None, None
    kb, vb = k, v
    for s in range(n):
        if s + 1 < n:  # start moving the next block before computing on this one
            kb_next, vb_next = jax.lax.ppermute((kb, vb), axis_name, perm)
        o_blk, lse_blk = step(s, kb, vb)
        if o_acc is None:
            o_acc, lse_acc = o_blk.astype(jnp.float32), lse_blk
        else:
            o_acc, lse_acc = _merge(o_acc, lse_acc, o_blk, lse_blk)
        if s + 1 < n:
            kb, vb = kb_next, vb_next
    return o_acc.astype(q.dtype), lse_acc


def _ring_bwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    o: jax.Array,
    lse: jax.Array,
    do: jax.Array,
    dlse: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
    deterministic: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ring backward on this device's blocks: ``(dq, dk, dv)`` shaped like q, k, v.

    o, lse are the ring forward's outputs (over the whole sequence), do/dlse their cotangents;
    each block's kernel call uses them as the one-device backward does, so its dq/dk/dv are that
    block pair's exact share of the gradient. dK/dV accumulate in float32 and travel with their
    K/V block; after the last step one more ppermute brings each accumulator home. The ring's own
    sums run in a fixed order, so with ``deterministic`` (passed to every kernel call) the
    result is bitwise reproducible.
    """
    n, r, perm = _ring_setup(axis_name)
    b = q.shape[0]
    det = deterministic

    def step(s: int, kb, vb):
        if not causal:
            return _bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, False, det)
        if s == 0:
            return _bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, True, det)
        earlier = r >= s
        if layout == "contiguous":
            grads = _bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, False, det)
            return tuple(jnp.where(earlier, g, jnp.zeros((), g.dtype)) for g in grads)
        qs, os_, lses, dos, dlses, ks, vs = _zigzag_pairs(
            earlier, [(q, 1), (o, 1), (lse, 2), (do, 1), (dlse, 2)], [kb, vb]
        )
        dq2, dk2, dv2 = _bwd(qs, ks, vs, os_, lses, dos, dlses, softmax_scale, False, det)
        zero = jnp.zeros((), jnp.float32)
        dq_b, dq_x = dq2[:b].astype(jnp.float32), dq2[b:].astype(jnp.float32)
        dq = jnp.concatenate(
            [jnp.where(earlier, dq_x, zero), dq_b + jnp.where(earlier, zero, dq_x)], axis=1
        )
        dkv = []
        for d2 in (dk2, dv2):
            d_0, d_x = d2[:b].astype(jnp.float32), d2[b:].astype(jnp.float32)
            dkv.append(
                jnp.concatenate(
                    [d_0 + jnp.where(earlier, d_x, zero), jnp.where(earlier, zero, d_x)], axis=1
                )
            )
        return dq, dkv[0], dkv[1]

    dq_acc = dk_acc = dv_acc = None
    kb, vb = k, v
    for s in range(n):
        if s + 1 < n:
            kb_next, vb_next = jax.lax.ppermute((kb, vb), axis_name, perm)
        dq, dk, dv = (x.astype(jnp.float32) for x in step(s, kb, vb))
        if dq_acc is None:
            dq_acc, dk_acc, dv_acc = dq, dk, dv
        else:
            # dk_acc arrived (end of the previous step) with the block just computed on.
            dq_acc, dk_acc, dv_acc = dq_acc + dq, dk_acc + dk, dv_acc + dv
        dk_acc, dv_acc = jax.lax.ppermute((dk_acc, dv_acc), axis_name, perm)
        if s + 1 < n:
            kb, vb = kb_next, vb_next
    return dq_acc.astype(q.dtype), dk_acc.astype(k.dtype), dv_acc.astype(v.dtype)


def _zigzag_home(chunk: int, n: int) -> int:
    """The device holding `chunk` (of 2n) in the zig-zag layout."""
    return chunk if chunk < n else 2 * n - 1 - chunk


def _blocks_to_zigzag(axis_name: AxisName, xs: list[tuple[jax.Array, int]]) -> list[jax.Array]:
    """Moves contiguous-layout blocks (device r: chunks 2r, 2r+1) into the zig-zag layout.

    xs: (array, sequence axis) pairs, all permuted the same way. Two ppermutes in all: every
    device sends its even chunk (2r) in one, its odd chunk in the other (each is a permutation
    of the devices); device d then orders what it got as (chunk d, chunk 2n-1-d).
    """
    n, d = jax.lax.axis_size(axis_name), jax.lax.axis_index(axis_name)
    halves = [_halves(x, axis) for x, axis in xs]
    even = jax.lax.ppermute(
        [h[0] for h in halves], axis_name, [(r, _zigzag_home(2 * r, n)) for r in range(n)]
    )
    odd = jax.lax.ppermute(
        [h[1] for h in halves], axis_name, [(r, _zigzag_home(2 * r + 1, n)) for r in range(n)]
    )
    d_even = d % 2 == 0  # chunk d is even exactly when d is
    return [
        jnp.concatenate([jnp.where(d_even, e, o), jnp.where(d_even, o, e)], axis=axis)
        for (_, axis), e, o in zip(xs, even, odd, strict=True)
    ]


def _blocks_from_zigzag(axis_name: AxisName, xs: list[tuple[jax.Array, int]]) -> list[jax.Array]:
    """Inverse of :func:`_blocks_to_zigzag`: every chunk j goes home to device j // 2."""
    n, d = jax.lax.axis_size(axis_name), jax.lax.axis_index(axis_name)
    d_even = d % 2 == 0
    evens, odds = [], []
    for x, axis in xs:
        first, second = _halves(x, axis)  # chunks d and 2n-1-d
        evens.append(jnp.where(d_even, first, second))
        odds.append(jnp.where(d_even, second, first))

    def home(chunk: int) -> int:
        return chunk // 2

    even = jax.lax.ppermute(
        evens, axis_name, [(e, home(e if e % 2 == 0 else 2 * n - 1 - e)) for e in range(n)]
    )
    odd = jax.lax.ppermute(
        odds, axis_name, [(e, home(e if e % 2 == 1 else 2 * n - 1 - e)) for e in range(n)]
    )
    return [
        jnp.concatenate([e, o], axis=axis) for (_, axis), e, o in zip(xs, even, odd, strict=True)
    ]


def _rebalances(axis_name: AxisName, causal: bool, layout: str, seq_len: int) -> bool:
    """Whether a contiguous-layout causal ring is run in the zig-zag layout (see module doc)."""
    return causal and layout == "contiguous" and seq_len % 2 == 0 and _n(axis_name) > 1


def _n(axis_name: AxisName) -> int:
    return int(jax.lax.axis_size(axis_name))


def ring_fwd_local(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
) -> tuple[jax.Array, jax.Array]:
    """The ring forward on this device's blocks (no argument checks, no VJP): ``(o, lse)``.

    q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk, hkv, dv]`` are this device's
    blocks in `layout`; o ``[b, sq, hq, dv]`` (q's dtype) and lse float32 ``[b, hq, sq]`` over the
    whole sequence, in the same layout. Must run where `axis_name` is bound (shard_map, or a
    custom_partitioning body). Every device runs the same program (masks are selects).
    """
    params = dict(axis_name=axis_name, causal=causal, softmax_scale=softmax_scale)
    if not _rebalances(axis_name, causal, layout, q.shape[1]):
        return _ring_fwd(q, k, v, layout=layout, **params)
    q, k, v = _blocks_to_zigzag(axis_name, [(q, 1), (k, 1), (v, 1)])
    o, lse = _ring_fwd(q, k, v, layout="zigzag", **params)
    o, lse = _blocks_from_zigzag(axis_name, [(o, 1), (lse, 2)])
    return o, lse


def ring_bwd_local(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    o: jax.Array,
    lse: jax.Array,
    do: jax.Array,
    dlse: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
    deterministic: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ring backward on this device's blocks: ``(dq, dk, dv)`` shaped like q, k, v.

    o, lse: the ring forward's outputs; do, dlse: their cotangents; all in `layout`.
    deterministic: bitwise reproducible gradients (see :func:`jax_fa4.attention`).
    """
    params = dict(
        axis_name=axis_name,
        causal=causal,
        softmax_scale=softmax_scale,
        deterministic=deterministic,
    )
    if not _rebalances(axis_name, causal, layout, q.shape[1]):
        return _ring_bwd(q, k, v, o, lse, do, dlse, layout=layout, **params)
    args = _blocks_to_zigzag(
        axis_name, [(q, 1), (k, 1), (v, 1), (o, 1), (lse, 2), (do, 1), (dlse, 2)]
    )
    dq, dk, dv = _ring_bwd(*args, layout="zigzag", **params)
    return tuple(_blocks_from_zigzag(axis_name, [(dq, 1), (dk, 1), (dv, 1)]))


# ---------------------------------------------------------------------------------------------
# The public call
# ---------------------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _ring_core(q, k, v, axis_name, causal, softmax_scale, layout, deterministic):
    return _ring_core_fwd(q, k, v, axis_name, causal, softmax_scale, layout, deterministic)[0]


def _ring_core_fwd(q, k, v, axis_name, causal, softmax_scale, layout, deterministic):
    del deterministic  # a backward-only option
    params = dict(axis_name=axis_name, causal=causal, softmax_scale=softmax_scale)
    if not _rebalances(axis_name, causal, layout, q.shape[1]):
        o, lse = _ring_fwd(q, k, v, layout=layout, **params)
        return (o, lse), (q, k, v, o, lse)
    # Contiguous and causal: run (and keep the residuals) in the zig-zag layout.
    q, k, v = _blocks_to_zigzag(axis_name, [(q, 1), (k, 1), (v, 1)])
    o, lse = _ring_fwd(q, k, v, layout="zigzag", **params)
    out = tuple(_blocks_from_zigzag(axis_name, [(o, 1), (lse, 2)]))
    return out, (q, k, v, o, lse)


def _ring_core_bwd(axis_name, causal, softmax_scale, layout, deterministic, residuals, cotangents):
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
    if not _rebalances(axis_name, causal, layout, q.shape[1]):
        return _ring_bwd(q, k, v, o, lse, do, dlse, layout=layout, **params)
    do, dlse = _blocks_to_zigzag(axis_name, [(do, 1), (dlse, 2)])
    dq, dk, dv = _ring_bwd(q, k, v, o, lse, do, dlse, layout="zigzag", **params)
    return tuple(_blocks_from_zigzag(axis_name, [(dq, 1), (dk, 1), (dv, 1)]))


_ring_core.defvjp(_ring_core_fwd, _ring_core_bwd)


def _ring_size(axis_name: AxisName) -> int:
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
        from jax_fa4.attention import attention

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
