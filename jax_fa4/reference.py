"""The documented oracle: plain jax.numpy attention with the same conventions as the kernels."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp


def _window(local_window_size: int | Sequence[int | None] | None) -> tuple[int | None, int | None]:
    """(left, right) of a window given as None, an int w (meaning (w, w)) or a pair."""
    if local_window_size is None:
        return None, None
    if isinstance(local_window_size, (tuple, list)):
        left, right = local_window_size
        return (None if left is None else int(left)), (None if right is None else int(right))
    w = int(local_window_size)
    return w, w


def visibility(
    batch: int,
    seq_q: int,
    seq_k: int,
    *,
    causal: bool = False,
    local_window_size: int | Sequence[int | None] | None = None,
    query_seq_lengths: jax.Array | None = None,
    key_value_seq_lengths: jax.Array | None = None,
    segment_ids: jax.Array | Sequence[jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(visible bool ``[b, sq, sk]``, padding-row bool ``[b, sq]``) of :func:`jax_fa4.attention`.

    With ``q_len = clip(query_seq_lengths[b], 0, sq)``, ``kv_len = clip(key_value_seq_lengths[b],
    0, sk)`` (defaults sq and sk) and ``off = kv_len - q_len``: key j is visible from query i iff
    ``i < q_len``, ``j < kv_len``, ``i + off - left <= j <= i + off + right`` (the window; causal
    makes ``right = min(right, 0)``; None is unbounded) and, with segment ids, ``q_ids[b, i] ==
    kv_ids[b, j]``. Query rows ``i >= q_len`` are padding. The window bounds may be negative.
    """
    left, right = _window(local_window_size)
    if causal:
        right = 0 if right is None else min(right, 0)
    q_len = jnp.full((batch,), seq_q, jnp.int32)
    kv_len = jnp.full((batch,), seq_k, jnp.int32)
    if query_seq_lengths is not None:
        q_len = jnp.clip(jnp.asarray(query_seq_lengths), 0, seq_q).astype(jnp.int32)
    if key_value_seq_lengths is not None:
        kv_len = jnp.clip(jnp.asarray(key_value_seq_lengths), 0, seq_k).astype(jnp.int32)
    i = jnp.arange(seq_q, dtype=jnp.int32)[None, :, None]
    j = jnp.arange(seq_k, dtype=jnp.int32)[None, None, :]
    ql = q_len[:, None, None]
    kl = kv_len[:, None, None]
    diag = i + (kl - ql)  # the key aligned with query i (bottom-right alignment)
    visible = (i < ql) & (j < kl)
    if left is not None:
        visible &= j >= diag - left
    if right is not None:
        visible &= j <= diag + right
    if segment_ids is not None:
        if isinstance(segment_ids, (tuple, list)):
            q_ids, kv_ids = segment_ids
        else:
            q_ids = kv_ids = segment_ids
        q_ids, kv_ids = jnp.asarray(q_ids), jnp.asarray(kv_ids)
        visible &= q_ids[:, :, None] == kv_ids[:, None, :]
    padding = jnp.arange(seq_q)[None, :] >= q_len[:, None]
    return visible, padding


def attention_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    local_window_size: int | Sequence[int | None] | None = None,
    query_seq_lengths: jax.Array | None = None,
    key_value_seq_lengths: jax.Array | None = None,
    segment_ids: jax.Array | Sequence[jax.Array] | None = None,
    logits_soft_cap: float | None = None,
    sinks: jax.Array | None = None,
    compute_dtype=None,
) -> tuple[jax.Array, jax.Array]:
    """Materialised softmax(scale * q k^T) v with every variant of :func:`jax_fa4.attention`;
    returns ``(o, lse)``.

    Shapes as :func:`jax_fa4.attention`: q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk,
    hkv, dv]``; o ``[b, sq, hq, dv]`` and lse float32-or-wider ``[b, hq, sq]``. Which keys a query
    sees is :func:`visibility` (causal is bottom-right aligned: query i sees keys j <= i + sk - sq
    without lengths). The score is ``s = scale * q.k``, ``c * tanh(s / c)`` with
    ``logits_soft_cap=c``; ``sinks`` (``[hq]``) joins every non-padding row's denominator:
    ``lse = log(exp(sink[h]) + sum_visible exp(s))``. A padding row gets o = 0 and lse = -inf; any
    other row that sees no key gets o = 0 and lse = -inf (or the sink). Computation runs in
    ``compute_dtype`` (default: the inputs' dtype promoted to at least float32); o is returned in
    that dtype too, so a float64 call is a float64 oracle (differentiable, sinks included).
    """
    if compute_dtype is None:
        compute_dtype = jnp.promote_types(q.dtype, jnp.float32)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    qf, kf, vf = (x.astype(compute_dtype) for x in (q, k, v))
    kf = jnp.repeat(kf, group, axis=2)
    vf = jnp.repeat(vf, group, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", qf, kf) * jnp.asarray(scale, compute_dtype)
    if logits_soft_cap is not None:
        cap = jnp.asarray(logits_soft_cap, compute_dtype)
        s = cap * jnp.tanh(s / cap)
    visible, padding = visibility(
        b,
        sq,
        sk,
        causal=causal,
        local_window_size=local_window_size,
        query_seq_lengths=query_seq_lengths,
        key_value_seq_lengths=key_value_seq_lengths,
        segment_ids=segment_ids,
    )
    visible = visible[:, None]  # [b, 1, sq, sk]
    s = jnp.where(visible, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    if sinks is not None:
        sink = jnp.asarray(sinks).astype(compute_dtype)[None, :, None, None]  # [1, hq, 1, 1]
        sink = jnp.where(padding[:, None, :, None], -jnp.inf, sink)  # [b, hq, sq, 1]
        m = jnp.maximum(m, sink)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.where(visible, jnp.exp(s - m_safe), 0.0)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + jnp.where(jnp.isfinite(sink), jnp.exp(sink - m_safe), 0.0)
    l_safe = jnp.where(denom > 0, denom, 1.0)
    o = jnp.einsum("bhqk,bkhd->bqhd", p / l_safe, vf)
    lse = jnp.where(denom[..., 0] > 0, jnp.log(l_safe[..., 0]) + m_safe[..., 0], -jnp.inf)
    return o, lse
