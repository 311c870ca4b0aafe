"""The documented oracle: plain jax.numpy attention with the same conventions as the kernels."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def attention_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    compute_dtype=None,
) -> tuple[jax.Array, jax.Array]:
    """Materialised softmax(scale * q k^T) v; returns ``(o, lse)``.

    Shapes as :func:`jax_fa4.attention`: q ``[b, sq, hq, d]``, k ``[b, sk, hkv, d]``, v ``[b, sk,
    hkv, dv]``; o ``[b, sq, hq, dv]`` and lse float32-or-wider ``[b, hq, sq]``. Causal is
    bottom-right aligned (query i sees keys j <= i + sk - sq); a query that sees no key gets o = 0
    and lse = -inf. Computation runs in ``compute_dtype`` (default: the inputs' dtype promoted to
    at least float32); o is returned in that dtype too, so a float64 call is a float64 oracle.
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
    if causal:
        row = jnp.arange(sq)[:, None]
        col = jnp.arange(sk)[None, :]
        s = jnp.where(col <= row + (sk - sq), s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.exp(s - m_safe)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    l_safe = jnp.where(denom > 0, denom, 1.0)
    o = jnp.einsum("bhqk,bkhd->bqhd", p / l_safe, vf)
    lse = jnp.where(denom[..., 0] > 0, jnp.log(l_safe[..., 0]) + m_safe[..., 0], -jnp.inf)
    return o, lse
