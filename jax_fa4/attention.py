"""jax_fa4.attention: the public call, its argument checks and its custom VJP."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_fa4 import _compat
from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p
from jax_fa4.validation import check_flag, check_qkv, check_softmax_scale

Residuals = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attention_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    softmax_scale: float,
    causal: bool,
    deterministic: bool,
) -> tuple[jax.Array, jax.Array]:
    """The checked call, differentiable: q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv]
    -> (o [b, sq, hq, dv] in q's dtype, lse float32 [b, hq, sq])."""
    del deterministic  # a backward-only option
    o, lse = fa4_fwd_p.bind(q, k, v, softmax_scale=softmax_scale, causal=causal)
    return o, lse


def _attention_core_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    softmax_scale: float,
    causal: bool,
    deterministic: bool,
) -> tuple[tuple[jax.Array, jax.Array], Residuals]:
    """((o, lse), residuals (q, k, v, o, lse)): the backward recomputes the scores from them."""
    del deterministic
    o, lse = fa4_fwd_p.bind(q, k, v, softmax_scale=softmax_scale, causal=causal)
    return (o, lse), (q, k, v, o, lse)


def _attention_core_bwd(
    softmax_scale: float,
    causal: bool,
    deterministic: bool,
    residuals: Residuals,
    cotangents: tuple[jax.Array, jax.Array],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv) shaped like (q, k, v) from the cotangents (do, dlse) of (o, lse)."""
    q, k, v, o, lse = residuals
    do, dlse = cotangents
    do = jnp.asarray(do, o.dtype)
    dlse = jnp.asarray(dlse, jnp.float32)
    dq, dk, dv = fa4_bwd_p.bind(
        q,
        k,
        v,
        o,
        lse,
        do,
        dlse,
        softmax_scale=softmax_scale,
        causal=causal,
        deterministic=deterministic,
    )
    return dq, dk, dv


_attention_core.defvjp(_attention_core_fwd, _attention_core_bwd)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    return_lse: bool = False,
    deterministic: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention, FlashAttention-style (never materialises the score matrix).

    Args:
      q: queries ``[batch, seq_q, heads_q, head_dim]``.
      k: keys ``[batch, seq_k, heads_kv, head_dim]``; ``heads_q % heads_kv == 0`` (GQA/MQA: q
        head ``h`` attends with kv head ``h // (heads_q // heads_kv)``).
      v: values ``[batch, seq_k, heads_kv, head_dim_v]`` (``head_dim_v`` may differ on the CPU).
      causal: mask keys after each query. With ``seq_q != seq_k`` the mask is aligned to the
        bottom-right corner, as in FlashAttention 2+: query ``i`` sees keys ``j <= i + seq_k -
        seq_q``. A query that sees no key gets output 0 and lse ``-inf``.
      softmax_scale: multiplies ``q . k``; default ``1 / sqrt(head_dim)``. Static: a Python
        float (or int, or NumPy scalar), or a concrete 0-d jax/NumPy array, which is converted
        with ``float()``; a traced scale is an error (fold it into q instead).
      return_lse: also return the log-sum-exp of the scaled scores (natural log), float32
        ``[batch, heads_q, seq_q]``; it is differentiable too.
      deterministic: make the backward bitwise reproducible: the same inputs give the same dq,
        dk and dv bits on every run (same device, same shapes). The forward always is, and so
        are dk and dv; only the GPU kernel's dq is summed by float32 atomics whose order the
        hardware picks, and ``True`` orders those adds (key block by key block, per query block;
        a semaphore in the workspace), at some cost in backward speed (README.md gives the
        measured cost). On the CPU the backward is always deterministic and this flag changes
        nothing.
        The values are as accurate either way (only the summation order is fixed).

    Returns:
      ``o`` ``[batch, seq_q, heads_q, head_dim_v]`` in q's dtype, or ``(o, lse)``.

    q, k and v share one dtype: bfloat16, float16 or float32 (float32 on the CPU only); the GPU
    kernels (Hopper, sm_90a) take head dims 64, 128 and 256. Accumulation is float32. Works under
    ``jit``, ``grad``, ``vmap``, ``checkpoint``; unsupported inputs raise at trace time. Sharded
    inputs under ``jit`` are partitioned automatically (:mod:`jax_fa4.sharding`), and it runs per
    shard inside ``shard_map``; for a sequence split inside shard_map see
    :func:`jax_fa4.ring_attention`.
    """
    dims = check_qkv(q, k, v)
    scale = check_softmax_scale(softmax_scale, dims.head_dim)
    causal = check_flag("causal", causal)
    return_lse = check_flag("return_lse", return_lse)
    deterministic = check_flag("deterministic", deterministic)
    if dims.seq_k == 0 or dims.batch * dims.seq_q * dims.heads_q == 0:
        # Nothing to attend to (or nothing to compute): the exact answer, no kernel launch and no
        # arithmetic on the inputs (0 * x would turn one NaN or Inf in q into NaN everywhere).
        # Gradients are zeros; inside shard_map the results vary over the inputs' manual axes.
        o = jnp.zeros((dims.batch, dims.seq_q, dims.heads_q, dims.head_dim_v), q.dtype)
        lse = jnp.full((dims.batch, dims.heads_q, dims.seq_q), -jnp.inf, jnp.float32)
        varying = _compat.union_varying_axes(jax.typeof(x) for x in (q, k, v))
        o, lse = (_compat.cast_to_varying(x, varying) for x in (o, lse))
    else:
        # Inside shard_map(check_vma=True): give q, k, v the union of their varying manual axes
        # first, so that the gradient of an operand replicated over an axis is summed over it.
        q, k, v = _compat.match_varying_axes(q, k, v)
        o, lse = _attention_core(q, k, v, scale, causal, deterministic)
    return (o, lse) if return_lse else o
