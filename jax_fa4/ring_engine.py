"""The ring attention engine: the per-device ring loops that ``ring_attention`` and the automatic
partitioning (:mod:`jax_fa4.sharding`) run, with no argument checks and no VJP of their own.

Every function here runs where the mesh axis ``axis_name`` is bound (inside ``jax.shard_map``
or a custom_partitioning body), on this device's blocks: q ``[b, sq, hq, d]``, k ``[b, sk, hkv,
d]``, v ``[b, sk, hkv, dv]``, o/do ``[b, sq, hq, dv]``, lse/dlse float32 ``[b, hq, sq]``, with
sq and sk the local sequence lengths; the optional masks: q_segment_ids int32 ``[b, sq]`` and
kv_segment_ids int32 ``[b, sk]`` (this device's blocks; the kv ids travel with their K/V block),
q_lengths / kv_lengths int32 ``[b]`` (lengths of the *global* sequence, the same on every device
of the ring, already clamped to ``[0, n * sq]`` / ``[0, n * sk]``), sinks float32 ``[b, hq]``
(forward only).

Forward: the device computes its queries against the K/V block it holds while the next block it
needs arrives by ``jax.lax.ppermute``, and merges the partial outputs through their log-sum-exps
(:func:`_merge`). Backward: K/V travel the same way, each device adds its dK/dV contribution for
the block it holds to a float32 accumulator that travels with the block, and after the block's
last visit one more ppermute brings the accumulator home; dQ stays local. Both use the final
``(o, lse)``, as the FlashAttention backward does, so no per-step state is saved. With sinks the
forward adds them once, in the final combination (``lse = logaddexp(lse_keys, sink)``, ``o *=
exp(lse_keys - lse)``); the backward needs no sink (the final lse holds it; d sinks is computed
from lse, o, do and dlse by the caller).

Steps. At step ``s`` device ``r`` holds the K/V block of device ``(r - s) mod n``. A step whose
block pairs have no visible entry on any device (a sliding window far from the block) is skipped:
no kernel call and no transfer. The steps that remain form two chains: the near-past blocks
travel ``r -> r + 1`` (jumping over skipped steps in one ppermute), the near-future ones
``r -> r - 1``; a full ring is the classic one-directional ring.

Layouts (``layout``, which only matters with a causal mask, a window or lengths):

* ``"contiguous"``: device ``r`` holds the ``r``-th contiguous block. Block pairs get the global
  band (causal, window) in local coordinates: the q block ``delta`` blocks after the k block
  (``delta`` is ``s`` on the devices ``r >= s`` and ``s - n`` on the others, which wrapped around)
  sees the band ``i + delta * c - left <= j <= i + delta * c + right`` (c the local length): a
  window with shifted, possibly negative, bounds (:func:`pair_call`). Lengths become per-block
  local lengths. :func:`ring_fwd_local` / :func:`ring_bwd_local` rebalance a causal contiguous ring
  with an even local length (and no window or lengths) by moving the chunks into the zig-zag
  layout first (:func:`blocks_to_zigzag`: two ppermutes) and the results back
  (:func:`blocks_from_zigzag`).
* ``"zigzag"``: the sequence is cut into ``2 n`` chunks of length ``c`` and device ``r`` holds
  chunks ``r`` and ``2 n - 1 - r``. With a causal mask (no window) the diagonal step is one
  causal kernel call on the local block; every other step is one full call on two stacked
  ``c x c`` block pairs (:func:`_zigzag_pairs`), the same program on every device (masks are
  selects, not branches). With a window or lengths a zig-zag ring runs in the contiguous layout
  (moved there and back by :func:`ring_fwd_local` / :func:`ring_bwd_local`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import jax
import jax.numpy as jnp

from jax_fa4 import _compat
from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p

LAYOUTS = ("zigzag", "contiguous")
AxisName = Hashable  # a mesh axis name, or a tuple of them (the ring runs over their product)
Window = tuple[int | None, int | None]  # (left, right); None is unbounded on that side

# The mask operands of the primitives, in their order (jax_fa4.primitives.EXTRAS without sinks).
_MASK_EXTRAS = ("q_lengths", "kv_lengths", "q_segment_ids", "kv_segment_ids")


# ---------------------------------------------------------------------------------------------
# Per-block pieces
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BlockCall:
    """The static mask of one kernel call on a block pair: ``causal`` and the local window
    ``(left, right)`` (None: unbounded; may be negative), as the primitives take them."""

    causal: bool = False
    window: Window = (None, None)


def fold_causal(causal: bool, window: Window) -> Window:
    """The band ``(left, right)`` of ``causal`` and ``window``: causal makes right ``min(right,
    0)``."""
    left, right = window
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def pair_call(delta: int, c: int, band: Window) -> BlockCall | None:
    """The kernel call for a pair of ``c``-long blocks (query block ``delta`` blocks after the
    key block) under the global band ``(left, right)`` of a sequence whose q and k share
    positions: key j_g is visible from query i_g iff ``-left <= j_g - i_g <= right``.

    Locally ``j - i`` spans ``[-(c - 1), c - 1]`` and the band is ``[delta * c - left, delta * c
    + right]``: None when they do not meet (no visible entry), else the local window, with a side
    that covers the whole block left unbounded (``(None, None)``: a full block, ``(None, 0)``:
    the causal call).
    """
    left, right = band
    lo_all, hi_all = -(c - 1), c - 1
    lo = lo_all if left is None else max(delta * c - left, lo_all)
    hi = hi_all if right is None else min(delta * c + right, hi_all)
    if lo > hi:
        return None
    w_left = None if lo == lo_all else -lo
    w_right = None if hi == hi_all else hi
    if w_left is None and w_right == 0:
        return BlockCall(causal=True)
    return BlockCall(window=(w_left, w_right))


def _extras(masks: dict[str, jax.Array | None]) -> tuple[tuple[str, ...], list[jax.Array]]:
    """(names, operands) of the mask operands present, in the primitives' order."""
    names = tuple(n for n in _MASK_EXTRAS if masks.get(n) is not None)
    return names, [masks[n] for n in names]


def _variant_params(call: BlockCall, softcap: float | None, names: tuple[str, ...]) -> dict:
    """The primitives' variant parameters; the defaults are left out (dense/causal calls bind
    exactly the parameters they always had)."""
    params: dict[str, object] = {}
    if call.window[0] is not None:
        params["window_left"] = call.window[0]
    if call.window[1] is not None:
        params["window_right"] = call.window[1]
    if softcap is not None:
        params["softcap"] = softcap
    if names:
        params["extras"] = names
    return params


def _block_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    masks: dict[str, jax.Array | None],
    scale: float,
    call: BlockCall,
    softcap: float | None,
) -> tuple[jax.Array, jax.Array]:
    """One kernel call on a block pair: q [b, s, hq, d], k/v [b, t, hkv, d|dv], masks (local
    lengths [b], segment ids [b, s] / [b, t]) -> o [b, s, hq, dv], lse float32 [b, hq, s] of
    those keys only."""
    names, ops = _extras(masks)
    return tuple(
        fa4_fwd_p.bind(
            q,
            k,
            v,
            *ops,
            softmax_scale=scale,
            causal=call.causal,
            **_variant_params(call, softcap, names),
        )
    )


def _block_bwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    o: jax.Array,
    lse: jax.Array,
    do: jax.Array,
    dlse: jax.Array,
    masks: dict[str, jax.Array | None],
    scale: float,
    call: BlockCall,
    softcap: float | None,
    deterministic: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One backward kernel call on a block pair: this pair's share of (dq, dk, dv), shaped like
    (q, k, v), given the final o, lse of the whole sequence's rows and their cotangents."""
    names, ops = _extras(masks)
    return tuple(
        fa4_bwd_p.bind(
            q,
            k,
            v,
            o,
            lse,
            do,
            dlse,
            *ops,
            softmax_scale=scale,
            causal=call.causal,
            deterministic=deterministic,
            **_variant_params(call, softcap, names),
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


def add_sinks(
    o: jax.Array, lse: jax.Array, sinks: jax.Array, padding: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Joins the sinks to finished rows: ``lse' = logaddexp(lse, sink)``, ``o' = o * exp(lse -
    lse')``; padding rows keep o and lse (-inf).

    o ``[b, s, h, dv]`` (the result is float32), lse float32 ``[b, h, s]`` over every key, sinks
    float32 ``[b, h]``, padding bool ``[b, s]`` or None. A row that saw no key gets o = 0 and
    lse = the sink.
    """
    sink = sinks.astype(jnp.float32)[:, :, None]
    total = jnp.logaddexp(lse, sink)
    if padding is not None:
        total = jnp.where(padding[:, None, :], -jnp.inf, total)
    safe = jnp.where(jnp.isfinite(total), total, 0.0)
    w = jnp.exp(jnp.where(jnp.isfinite(lse), lse, -jnp.inf) - safe)  # 0 where lse is -inf
    w = jnp.swapaxes(w, 1, 2)[..., None]
    o = jnp.where(w > 0, o.astype(jnp.float32) * w, 0.0)
    return o, total


def in_mesh_order(axes: Sequence[str], mesh_axes: Sequence[str]) -> tuple[str, ...]:
    """`axes` (ring axes, all in `mesh_axes`) in the mesh's order. A ring over several axes needs
    them given in that order: jax.lax.axis_index numbers the devices (and P(None, axes) lays out
    the blocks) in the order given, jax.lax.ppermute pairs them in the mesh's, so in another
    order the ring would pass blocks to the wrong devices."""
    return tuple(a for a in mesh_axes if a in axes)


def _ring_setup(axis_name: AxisName) -> tuple[int, jax.Array]:
    """(ring size n, this device's index r)."""
    return int(jax.lax.axis_size(axis_name)), jax.lax.axis_index(axis_name)


def _shift(x, axis_name: AxisName, n: int, shift: int):
    """ppermute of the pytree `x` by `shift` places along the ring: device i sends to i + shift."""
    shift %= n
    if shift == 0:
        return x
    return jax.lax.ppermute(x, axis_name, [(i, (i + shift) % n) for i in range(n)])


def _halves(x: jax.Array, axis: int = 1) -> tuple[jax.Array, jax.Array]:
    """The first and second halves of `x` along `axis` (an even length)."""
    c = x.shape[axis] // 2
    return jax.lax.slice_in_dim(x, 0, c, axis=axis), jax.lax.slice_in_dim(x, c, None, axis=axis)


def _zigzag_pairs(
    earlier: jax.Array,
    q_like: Sequence[tuple[jax.Array | None, int]],
    kv_like: Sequence[jax.Array | None],
) -> list[jax.Array | None]:
    """The two (c x c) block pairs of a zig-zag step, stacked along the batch for one kernel call.

    With the visiting block earlier in the sequence than this device's (``earlier``), all of
    this device's queries see the first chunk of the visitor: pairs (q_b, k_0) and (q_a, k_0).
    Otherwise only the second query chunk sees the visitor, all of it: (q_b, k_0) and (q_b, k_1).
    The first pair is the same either way; the second is chosen by a select, not a branch, so
    every device runs the same program. q_like: (array, sequence axis) pairs split along the
    query sequence (axis 1, or 2 for lse-like arrays); kv_like: arrays split along the key
    sequence (axis 1). Each result has twice the batch and half the sequence of its input; a
    None stays None.
    """
    out: list[jax.Array | None] = []
    for x, axis in q_like:
        if x is None:
            out.append(None)
            continue
        xa, xb = _halves(x, axis)
        out.append(jnp.concatenate([xb, jnp.where(earlier, xa, xb)], axis=0))
    for x in kv_like:
        if x is None:
            out.append(None)
            continue
        x0, x1 = _halves(x)
        out.append(jnp.concatenate([x0, jnp.where(earlier, x0, x1)], axis=0))
    return out


# ---------------------------------------------------------------------------------------------
# The plan of a ring: which steps, which kernel calls
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every step of a ring computes (static; the same program on every device).

    mode: ``"full"`` (no band: every pair is full, lengths as local lengths), ``"zigzag"``
    (causal, zig-zag layout) or ``"banded"`` (contiguous layout, a band: each step's one or two
    candidate pairs, see :func:`pair_call`). steps: the steps computed (0 first); calls[s]: for
    ``"banded"``, the call of the devices ``r >= s`` (delta s) and of the devices ``r < s``
    (delta s - n; None at step 0), each None when invisible.
    """

    n: int
    mode: str
    steps: tuple[int, ...]
    calls: tuple[tuple[BlockCall | None, BlockCall | None], ...] = ()

    def chains(self) -> list[list[int]]:
        """The steps after 0 in the order their blocks arrive: a forward chain (blocks of devices
        r - s, ascending s, each from the previous by one ppermute) and a backward chain (blocks
        of devices r + (n - s), descending s). A ring that computes every step is one forward
        chain."""
        rest = [s for s in self.steps if s]
        if len(rest) == self.n - 1:
            return [rest, []]
        return [
            [s for s in rest if 2 * s <= self.n],
            sorted((s for s in rest if 2 * s > self.n), reverse=True),
        ]


def _plan(n: int, layout: str, band: Window, c: int) -> _Plan:
    """The plan of a ring of `n` devices with local length `c` (q and k, when banded)."""
    if band == (None, None):
        return _Plan(n, "full", tuple(range(n)))
    if layout == "zigzag":
        assert band == (None, 0), band  # ring_fwd_local moves any other band to contiguous
        return _Plan(n, "zigzag", tuple(range(n)))
    calls = []
    for s in range(n):
        calls.append((pair_call(s, c, band), pair_call(s - n, c, band) if s else None))
    steps = tuple(s for s in range(n) if any(x is not None for x in calls[s]))
    return _Plan(n, "banded", steps, tuple(calls))


def _local_lengths(
    q_lengths: jax.Array | None,
    kv_lengths: jax.Array | None,
    q_block: jax.Array,
    kv_block: jax.Array,
    sq: int,
    sk: int,
) -> dict[str, jax.Array | None]:
    """The global lengths [b] seen from a (q block, kv block) pair of the contiguous layout: the
    number of valid positions in each block, ``clip(len - block * size, 0, size)`` (the lengths
    are int32 as given: clamped to the block first, so that no length wraps around)."""

    def local(lengths, block, size):
        if lengths is None:
            return None
        start = block * size
        return (jnp.clip(lengths, start, start + size) - start).astype(jnp.int32)

    return {
        "q_lengths": local(q_lengths, q_block, sq),
        "kv_lengths": local(kv_lengths, kv_block, sk),
    }


def query_positions(layout: str, r: jax.Array, n: int, sq: int) -> jax.Array:
    """The global positions ``[sq]`` (int32) of device r's query rows in `layout`."""
    i = jnp.arange(sq, dtype=jnp.int32)
    if layout == "contiguous" or n == 1:
        return r * sq + i
    c = sq // 2
    first = r * c + i
    second = (2 * n - 1 - r) * c + (i - c)
    return jnp.where(i < c, first, second).astype(jnp.int32)


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
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
    sinks: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ring forward loop in `layout` as given: ``(o, lse)``.

    q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk, hkv, dv]`` and the masks (module
    docstring) are this device's blocks; o ``[b, sq, hq, dv]`` in q's dtype, lse float32 ``[b,
    hq, sq]`` over the whole sequence (sinks included). Preconditions (checked by the callers):
    a causal mask or a window needs sq == sk; the zig-zag layout runs only without a band or with
    a causal mask and no window, and never with lengths; lengths never come with a band; with the
    zig-zag layout and a causal mask, sq is even. A causal contiguous ring runs unbalanced here;
    :func:`ring_fwd_local` rebalances it.
    """
    n, r = _ring_setup(axis_name)
    b, sq = q.shape[:2]
    sk = k.shape[1]
    band = fold_causal(causal, (window_left, window_right))
    has_lengths = q_lengths is not None or kv_lengths is not None
    assert not (has_lengths and band != (None, None)), "lengths with a band"
    assert not (has_lengths and layout == "zigzag"), "lengths in the zig-zag layout"
    plan = _plan(n, layout, band, sq)
    full = BlockCall()

    def masks_for(s: int, kv_ids) -> dict[str, jax.Array | None]:
        m = {"q_segment_ids": q_segment_ids, "kv_segment_ids": kv_ids}
        if has_lengths:
            m.update(_local_lengths(q_lengths, kv_lengths, r, (r - s) % n, sq, sk))
        return m

    def step(s: int, blk) -> tuple[jax.Array, jax.Array]:
        kb, vb, kv_ids = blk
        masks = masks_for(s, kv_ids)
        if plan.mode == "full":
            return _block_fwd(q, kb, vb, masks, softmax_scale, full, softcap)
        # At step s device r holds the block of device (r - s) mod n, which comes before its own
        # block in the sequence exactly when r >= s.
        earlier = r >= s
        if plan.mode == "zigzag":
            if s == 0:  # own block: one causal call (see the module docstring)
                return _block_fwd(q, kb, vb, masks, softmax_scale, BlockCall(True), softcap)
            qs, q_ids, ks, vs, k_ids = _zigzag_pairs(
                earlier, [(q, 1), (q_segment_ids, 1)], [kb, vb, kv_ids]
            )
            pair_masks = {"q_segment_ids": q_ids, "kv_segment_ids": k_ids}
            o2, lse2 = _block_fwd(qs, ks, vs, pair_masks, softmax_scale, full, softcap)
            (o_b, o_x), (lse_b, lse_x) = (o2[:b], o2[b:]), (lse2[:b], lse2[b:])
            # The second pair's rows are chunk a (earlier) or chunk b (later) of this device's.
            o_bb, lse_bb = _merge(o_b, lse_b, o_x, jnp.where(earlier, -jnp.inf, lse_x))
            o = jnp.concatenate([o_x.astype(jnp.float32), o_bb], axis=1)
            lse = jnp.concatenate([jnp.where(earlier, lse_x, -jnp.inf), lse_bb], axis=2)
            return o, lse
        # banded: the call of the devices r >= s and that of the others (None: invisible)
        c_early, c_late = plan.calls[s]
        if c_late is None or c_early == c_late:
            o, lse = _block_fwd(q, kb, vb, masks, softmax_scale, c_early, softcap)
            if s and c_late is None:
                lse = jnp.where(earlier, lse, -jnp.inf)
            return o, lse
        o_l, lse_l = _block_fwd(q, kb, vb, masks, softmax_scale, c_late, softcap)
        if c_early is None:
            return o_l, jnp.where(earlier, -jnp.inf, lse_l)
        o_e, lse_e = _block_fwd(q, kb, vb, masks, softmax_scale, c_early, softcap)
        return jnp.where(earlier, o_e, o_l), jnp.where(earlier, lse_e, lse_l)

    acc: list[tuple[jax.Array, jax.Array]] = []

    def add(part: tuple[jax.Array, jax.Array]) -> None:
        if acc:
            acc[0] = _merge(*acc[0], *part)
        else:
            acc.append((part[0].astype(jnp.float32), part[1]))

    own = (k, v, kv_segment_ids)
    if 0 in plan.steps:
        add(step(0, own))
    for chain in plan.chains():
        prev, blk, nxt = 0, own, None
        for idx, s in enumerate(chain):
            blk = _shift(blk, axis_name, n, s - prev) if nxt is None else nxt
            if idx + 1 < len(chain):  # start moving the next block before computing on this one
                nxt = _shift(blk, axis_name, n, chain[idx + 1] - s)
            add(step(s, blk))
            prev = s
    if acc:
        o, lse = acc[0]
    else:  # no visible entry anywhere (a window that misses every block)
        varying = _compat.union_varying_axes(jax.typeof(x) for x in (q, k, v))
        o = _compat.cast_to_varying(
            jnp.zeros((b, sq, q.shape[2], v.shape[3]), jnp.float32), varying
        )
        lse = _compat.cast_to_varying(jnp.full((b, q.shape[2], sq), -jnp.inf, jnp.float32), varying)
    if sinks is not None:
        padding = None
        if q_lengths is not None:
            padding = query_positions(layout, r, n, sq)[None, :] >= q_lengths[:, None]
        o, lse = add_sinks(o, lse, sinks, padding)
    return o.astype(q.dtype), lse


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
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ring backward loop in `layout` as given: ``(dq, dk, dv)`` shaped like q, k, v.

    o ``[b, sq, hq, dv]``, lse float32 ``[b, hq, sq]`` are the ring forward's outputs (over the
    whole sequence, sinks included), do/dlse their cotangents; each block's kernel call uses them
    as the one-device backward does, so its dq/dk/dv are that block pair's exact share of the
    gradient. The steps, masks and preconditions are the forward's (:func:`ring_fwd`). dK/dV
    accumulate in float32 and travel with their K/V block; after the block's last visit one
    ppermute brings each accumulator home. The ring's own sums run in a fixed order, so with
    ``deterministic`` (passed to every kernel call) the result is bitwise reproducible.
    """
    n, r = _ring_setup(axis_name)
    b, sq = q.shape[:2]
    sk = k.shape[1]
    det = deterministic
    band = fold_causal(causal, (window_left, window_right))
    has_lengths = q_lengths is not None or kv_lengths is not None
    assert not (has_lengths and band != (None, None)), "lengths with a band"
    assert not (has_lengths and layout == "zigzag"), "lengths in the zig-zag layout"
    plan = _plan(n, layout, band, sq)
    full = BlockCall()
    zero = jnp.zeros((), jnp.float32)

    def masks_for(s: int, kv_ids) -> dict[str, jax.Array | None]:
        m = {"q_segment_ids": q_segment_ids, "kv_segment_ids": kv_ids}
        if has_lengths:
            m.update(_local_lengths(q_lengths, kv_lengths, r, (r - s) % n, sq, sk))
        return m

    def call(q_, kb, vb, o_, lse_, do_, dlse_, masks, bc):
        grads = _block_bwd(q_, kb, vb, o_, lse_, do_, dlse_, masks, softmax_scale, bc, softcap, det)
        return tuple(g.astype(jnp.float32) for g in grads)

    def step(s: int, blk) -> tuple[jax.Array, jax.Array, jax.Array]:
        kb, vb, kv_ids = blk
        masks = masks_for(s, kv_ids)
        if plan.mode == "full":
            return call(q, kb, vb, o, lse, do, dlse, masks, full)
        earlier = r >= s
        if plan.mode == "zigzag":
            if s == 0:
                return call(q, kb, vb, o, lse, do, dlse, masks, BlockCall(True))
            qs, q_ids, os_, lses, dos, dlses, ks, vs, k_ids = _zigzag_pairs(
                earlier,
                [(q, 1), (q_segment_ids, 1), (o, 1), (lse, 2), (do, 1), (dlse, 2)],
                [kb, vb, kv_ids],
            )
            pair_masks = {"q_segment_ids": q_ids, "kv_segment_ids": k_ids}
            dq2, dk2, dv2 = call(qs, ks, vs, os_, lses, dos, dlses, pair_masks, full)
            dq_b, dq_x = dq2[:b], dq2[b:]
            dq = jnp.concatenate(
                [jnp.where(earlier, dq_x, zero), dq_b + jnp.where(earlier, zero, dq_x)], axis=1
            )
            dkv = []
            for d2 in (dk2, dv2):
                d_0, d_x = d2[:b], d2[b:]
                dkv.append(
                    jnp.concatenate(
                        [d_0 + jnp.where(earlier, d_x, zero), jnp.where(earlier, zero, d_x)],
                        axis=1,
                    )
                )
            return dq, dkv[0], dkv[1]
        c_early, c_late = plan.calls[s]
        if c_late is None or c_early == c_late:
            grads = call(q, kb, vb, o, lse, do, dlse, masks, c_early)
            if s and c_late is None:
                grads = tuple(jnp.where(earlier, g, zero) for g in grads)
            return grads
        g_l = call(q, kb, vb, o, lse, do, dlse, masks, c_late)
        if c_early is None:
            return tuple(jnp.where(earlier, zero, g) for g in g_l)
        g_e = call(q, kb, vb, o, lse, do, dlse, masks, c_early)
        return tuple(jnp.where(earlier, e, lt) for e, lt in zip(g_e, g_l, strict=True))

    own = (k, v, kv_segment_ids)
    varying = _compat.union_varying_axes(jax.typeof(x) for x in (q, k, v, o, lse, do, dlse))

    def zeros_like(x: jax.Array) -> jax.Array:
        return _compat.cast_to_varying(jnp.zeros(x.shape, jnp.float32), varying)

    if 0 in plan.steps:
        dq_acc, dk_own, dv_own = step(0, own)
    else:
        dq_acc, dk_own, dv_own = zeros_like(q), zeros_like(k), zeros_like(v)
    for chain in plan.chains():
        prev, blk, nxt, dkv = 0, own, None, None
        for idx, s in enumerate(chain):
            blk = _shift(blk, axis_name, n, s - prev) if nxt is None else nxt
            if idx + 1 < len(chain):
                nxt = _shift(blk, axis_name, n, chain[idx + 1] - s)
            dq, dk, dv = step(s, blk)
            dq_acc = dq_acc + dq
            if dkv is None:
                dkv = (dk, dv)
            else:  # the accumulators follow the block they belong to
                dk_acc, dv_acc = _shift(dkv, axis_name, n, s - prev)
                dkv = (dk_acc + dk, dv_acc + dv)
            prev = s
        if dkv is not None:  # home: the block of device r - prev is at device r
            dk_home, dv_home = _shift(dkv, axis_name, n, -prev)
            dk_own, dv_own = dk_own + dk_home, dv_own + dv_home
    return dq_acc.astype(q.dtype), dk_own.astype(k.dtype), dv_own.astype(v.dtype)


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


def run_layout(
    axis_name: AxisName,
    causal: bool,
    layout: str,
    seq_len: int,
    *,
    window: Window = (None, None),
    has_lengths: bool = False,
) -> str:
    """The layout the ring loop runs in, for blocks given in `layout` (sq = `seq_len`).

    A causal contiguous ring with an even local length and neither window nor lengths runs in
    the zig-zag layout (balanced); a zig-zag ring with a window or lengths runs in the contiguous
    one (its block pairs then have one band offset per step); anything else runs as given.
    """
    if _n(axis_name) == 1:
        return layout
    banded = window != (None, None)
    if layout == "zigzag" and (banded or has_lengths):
        return "contiguous"
    if causal and not banded and not has_lengths and layout == "contiguous" and seq_len % 2 == 0:
        return "zigzag"
    return layout


def rebalances(axis_name: AxisName, causal: bool, layout: str, seq_len: int) -> bool:
    """Whether a contiguous-layout causal ring (no window, no lengths) is run in the zig-zag
    layout (see :func:`run_layout`)."""
    return layout == "contiguous" and run_layout(axis_name, causal, layout, seq_len) == "zigzag"


def move_blocks(
    axis_name: AxisName, src: str, dst: str, xs: list[tuple[jax.Array | None, int]]
) -> list[jax.Array | None]:
    """The blocks xs ((array or None, sequence axis) pairs) moved from layout `src` to `dst`."""
    if src == dst:
        return [x for x, _ in xs]
    present = [(x, axis) for x, axis in xs if x is not None]
    fn = blocks_to_zigzag if dst == "zigzag" else blocks_from_zigzag
    moved = iter(fn(axis_name, present))
    return [None if x is None else next(moved) for x, _ in xs]


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
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
    sinks: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ring forward on this device's blocks (no argument checks, no VJP): ``(o, lse)``.

    q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk, hkv, dv]`` and the segment ids are
    this device's blocks in `layout`; lengths, sinks as in the module docstring; o ``[b, sq, hq,
    dv]`` (q's dtype) and lse float32 ``[b, hq, sq]`` over the whole sequence, in the same layout.
    Runs in :func:`run_layout` (moving the blocks there and the results back). Must run where
    `axis_name` is bound (shard_map, or a custom_partitioning body). Every device runs the same
    program (masks are selects). Preconditions as :func:`ring_fwd`'s, but for the layout.
    """
    has_lengths = q_lengths is not None or kv_lengths is not None
    window = (window_left, window_right)
    run = run_layout(axis_name, causal, layout, q.shape[1], window=window, has_lengths=has_lengths)
    q, k, v, q_ids, kv_ids = move_blocks(
        axis_name, layout, run, [(q, 1), (k, 1), (v, 1), (q_segment_ids, 1), (kv_segment_ids, 1)]
    )
    o, lse = ring_fwd(
        q,
        k,
        v,
        axis_name=axis_name,
        causal=causal,
        softmax_scale=softmax_scale,
        layout=run,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        q_segment_ids=q_ids,
        kv_segment_ids=kv_ids,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        sinks=sinks,
    )
    o, lse = move_blocks(axis_name, run, layout, [(o, 1), (lse, 2)])
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
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ring backward on this device's blocks: ``(dq, dk, dv)`` shaped like q, k, v.

    o, lse: the ring forward's outputs (sinks included); do, dlse: their cotangents; all in
    `layout`, masks as :func:`ring_fwd_local`'s. deterministic: bitwise reproducible gradients
    (see :func:`jax_fa4.attention`).
    """
    has_lengths = q_lengths is not None or kv_lengths is not None
    window = (window_left, window_right)
    run = run_layout(axis_name, causal, layout, q.shape[1], window=window, has_lengths=has_lengths)
    moved = move_blocks(
        axis_name,
        layout,
        run,
        [
            (q, 1),
            (k, 1),
            (v, 1),
            (o, 1),
            (lse, 2),
            (do, 1),
            (dlse, 2),
            (q_segment_ids, 1),
            (kv_segment_ids, 1),
        ],
    )
    *args, q_ids, kv_ids = moved
    dq, dk, dv = ring_bwd(
        *args,
        axis_name=axis_name,
        causal=causal,
        softmax_scale=softmax_scale,
        layout=run,
        deterministic=deterministic,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        q_segment_ids=q_ids,
        kv_segment_ids=kv_ids,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
    )
    return tuple(move_blocks(axis_name, run, layout, [(dq, 1), (dk, 1), (dv, 1)]))
