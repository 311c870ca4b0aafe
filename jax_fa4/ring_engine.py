"""The ring attention engine: the per-device ring loops that ``ring_attention`` and the automatic
partitioning (:mod:`jax_fa4.sharding`) run, with no argument checks and no VJP of their own.

Every function here runs where the mesh axis ``axis_name`` is bound (inside ``jax.shard_map``
or a custom_partitioning body), on this device's blocks: q ``[b, sq, hq, d]``, k ``[b, sk, hkv,
d]``, v ``[b, sk, hkv, dv]``, o/do ``[b, sq, hq, dv]``, lse/dlse float32 ``[b, hq, sq]``, with
sq and sk the local sequence lengths.

Forward: the device computes its queries against the K/V block it holds while that block's
successor arrives by ``jax.lax.ppermute`` (device ``r`` sends to ``r + 1``), and merges the
partial outputs through their log-sum-exps (:func:`_merge`). Backward: K/V travel the same way,
each device adds its dK/dV contribution for the block it holds to a float32 accumulator that
travels with the block, and after a full turn the accumulators arrive at the block's owner; dQ
stays local. Both use the final ``(o, lse)``, as the FlashAttention backward does, so no per-step
state is saved.

Layouts (``layout``, which only matters with a causal mask):

* ``"contiguous"``: device ``r`` holds the ``r``-th contiguous block. A block from an earlier
  device is seen whole, one from a later device not at all (its lse set to -inf).
  :func:`ring_fwd_local` / :func:`ring_bwd_local` rebalance a causal contiguous ring with an
  even local length by moving the chunks into the zig-zag layout first
  (:func:`blocks_to_zigzag`: two ppermutes) and the results back (:func:`blocks_from_zigzag`).
* ``"zigzag"``: the sequence is cut into ``2 n`` chunks of length ``c`` and device ``r`` holds
  chunks ``r`` and ``2 n - 1 - r``. The diagonal step is one causal kernel call on the local
  block; every other step is one full call on two stacked ``c x c`` block pairs
  (:func:`_zigzag_pairs`), the same program on every device (masks are selects, not branches).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import jax
import jax.numpy as jnp

from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p

LAYOUTS = ("zigzag", "contiguous")
AxisName = Hashable  # a mesh axis name, or a tuple of them (the ring runs over their product)


# ---------------------------------------------------------------------------------------------
# Per-block pieces
# ---------------------------------------------------------------------------------------------


def _block_fwd(
    q: jax.Array, k: jax.Array, v: jax.Array, scale: float, causal: bool
) -> tuple[jax.Array, jax.Array]:
    """One kernel call on a block pair: q [b, s, hq, d], k/v [b, t, hkv, d|dv] -> o [b, s, hq,
    dv], lse float32 [b, hq, s] of those keys only."""
    return tuple(fa4_fwd_p.bind(q, k, v, softmax_scale=scale, causal=causal))


def _block_bwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    o: jax.Array,
    lse: jax.Array,
    do: jax.Array,
    dlse: jax.Array,
    scale: float,
    causal: bool,
    deterministic: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One backward kernel call on a block pair: this pair's share of (dq, dk, dv), shaped like
    (q, k, v), given the final o, lse of the whole sequence's rows and their cotangents."""
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


def _merge(
    o_acc: jax.Array, lse_acc: jax.Array, o_blk: jax.Array, lse_blk: jax.Array
) -> tuple[jax.Array, jax.Array]:
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


def _ring_setup(axis_name: AxisName) -> tuple[int, jax.Array, list[tuple[int, int]]]:
    """(ring size n, this device's index r, the ppermute pairs r -> r + 1 mod n)."""
    n = jax.lax.axis_size(axis_name)
    r = jax.lax.axis_index(axis_name)
    perm = [(i, (i + 1) % n) for i in range(n)]
    return n, r, perm


def _halves(x: jax.Array, axis: int = 1) -> tuple[jax.Array, jax.Array]:
    """The first and second halves of `x` along `axis` (an even length)."""
    c = x.shape[axis] // 2
    return jax.lax.slice_in_dim(x, 0, c, axis=axis), jax.lax.slice_in_dim(x, c, None, axis=axis)


def _zigzag_pairs(
    earlier: jax.Array,
    q_like: Sequence[tuple[jax.Array, int]],
    kv_like: Sequence[jax.Array],
) -> list[jax.Array]:
    """The two (c x c) block pairs of a zig-zag step, stacked along the batch for one kernel call.

    With the visiting block earlier in the sequence than this device's (``earlier``), all of
    this device's queries see the first chunk of the visitor: pairs (q_b, k_0) and (q_a, k_0).
    Otherwise only the second query chunk sees the visitor, all of it: (q_b, k_0) and (q_b, k_1).
    The first pair is the same either way; the second is chosen by a select, not a branch, so
    every device runs the same program. q_like: (array, sequence axis) pairs split along the
    query sequence (axis 1, or 2 for lse-like arrays); kv_like: arrays split along the key
    sequence (axis 1). Each result has twice the batch and half the sequence of its input.
    """
    out = []
    for x, axis in q_like:
        xa, xb = _halves(x, axis)
        out.append(jnp.concatenate([xb, jnp.where(earlier, xa, xb)], axis=0))
    for x in kv_like:
        x0, x1 = _halves(x)
        out.append(jnp.concatenate([x0, jnp.where(earlier, x0, x1)], axis=0))
    return out


# ---------------------------------------------------------------------------------------------
# The ring loops, in a given layout
# ---------------------------------------------------------------------------------------------


def ring_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: AxisName,
    causal: bool,
    softmax_scale: float,
    layout: str,
) -> tuple[jax.Array, jax.Array]:
    """The ring forward loop in `layout` as given: ``(o, lse)``.

    q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk, hkv, dv]`` are this device's
    blocks; o ``[b, sq, hq, dv]`` in q's dtype, lse float32 ``[b, hq, sq]`` over the whole
    sequence. A causal contiguous ring runs unbalanced here (every device computes every step's
    full block and masks the later ones); :func:`ring_fwd_local` rebalances it. With the zig-zag
    layout and a causal mask, sq must be even.
    """
    n, r, perm = _ring_setup(axis_name)
    b = q.shape[0]

    def step(s: int, kb, vb):
        if not causal:
            return _block_fwd(q, kb, vb, softmax_scale, False)
        if s == 0:  # own block: one causal call covers both layouts (see the module docstring)
            return _block_fwd(q, kb, vb, softmax_scale, True)
        # At step s device r holds the block of device (r - s) mod n, which comes before its own
        # block in the sequence exactly when r >= s.
        earlier = r >= s
        if layout == "contiguous":  # an earlier block is seen whole, a later one not at all
            o, lse = _block_fwd(q, kb, vb, softmax_scale, False)
            return o, jnp.where(earlier, lse, -jnp.inf)
        qs, ks, vs = _zigzag_pairs(earlier, [(q, 1)], [kb, vb])
        o2, lse2 = _block_fwd(qs, ks, vs, softmax_scale, False)
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


def ring_bwd(
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
    """The ring backward loop in `layout` as given: ``(dq, dk, dv)`` shaped like q, k, v.

    o ``[b, sq, hq, dv]``, lse float32 ``[b, hq, sq]`` are the ring forward's outputs (over the
    whole sequence), do/dlse their cotangents; each block's kernel call uses them as the
    one-device backward does, so its dq/dk/dv are that block pair's exact share of the gradient.
    dK/dV accumulate in float32 and travel with their K/V block; after the last step one more
    ppermute brings each accumulator home. The ring's own sums run in a fixed order, so with
    ``deterministic`` (passed to every kernel call) the result is bitwise reproducible.
    """
    n, r, perm = _ring_setup(axis_name)
    b = q.shape[0]
    det = deterministic

    def step(s: int, kb, vb):
        if not causal:
            return _block_bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, False, det)
        if s == 0:
            return _block_bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, True, det)
        earlier = r >= s
        if layout == "contiguous":
            grads = _block_bwd(q, kb, vb, o, lse, do, dlse, softmax_scale, False, det)
            return tuple(jnp.where(earlier, g, jnp.zeros((), g.dtype)) for g in grads)
        qs, os_, lses, dos, dlses, ks, vs = _zigzag_pairs(
            earlier, [(q, 1), (o, 1), (lse, 2), (do, 1), (dlse, 2)], [kb, vb]
        )
        dq2, dk2, dv2 = _block_bwd(qs, ks, vs, os_, lses, dos, dlses, softmax_scale, False, det)
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


# ---------------------------------------------------------------------------------------------
# Contiguous <-> zig-zag, on device, and the rebalanced ring
# ---------------------------------------------------------------------------------------------


def _zigzag_home(chunk: int, n: int) -> int:
    """The device holding `chunk` (of 2n) in the zig-zag layout."""
    return chunk if chunk < n else 2 * n - 1 - chunk


def blocks_to_zigzag(axis_name: AxisName, xs: list[tuple[jax.Array, int]]) -> list[jax.Array]:
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


def blocks_from_zigzag(axis_name: AxisName, xs: list[tuple[jax.Array, int]]) -> list[jax.Array]:
    """Inverse of :func:`blocks_to_zigzag`: every chunk j goes home to device j // 2."""
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


def rebalances(axis_name: AxisName, causal: bool, layout: str, seq_len: int) -> bool:
    """Whether a contiguous-layout causal ring is run in the zig-zag layout (see module doc)."""
    return causal and layout == "contiguous" and seq_len % 2 == 0 and _n(axis_name) > 1


def _n(axis_name: AxisName) -> int:
    """The ring size (the product of the sizes of the axes in `axis_name`)."""
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
    if not rebalances(axis_name, causal, layout, q.shape[1]):
        return ring_fwd(q, k, v, layout=layout, **params)
    q, k, v = blocks_to_zigzag(axis_name, [(q, 1), (k, 1), (v, 1)])
    o, lse = ring_fwd(q, k, v, layout="zigzag", **params)
    o, lse = blocks_from_zigzag(axis_name, [(o, 1), (lse, 2)])
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
    if not rebalances(axis_name, causal, layout, q.shape[1]):
        return ring_bwd(q, k, v, o, lse, do, dlse, layout=layout, **params)
    args = blocks_to_zigzag(
        axis_name, [(q, 1), (k, 1), (v, 1), (o, 1), (lse, 2), (do, 1), (dlse, 2)]
    )
    dq, dk, dv = ring_bwd(*args, layout="zigzag", **params)
    return tuple(blocks_from_zigzag(axis_name, [(dq, 1), (dk, 1), (dv, 1)]))
