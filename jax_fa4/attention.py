"""jax_fa4.attention: the public call, its argument checks and its custom VJP."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jax_fa4 import _compat
from jax_fa4.primitives import BWD_EXTRAS, fa4_bwd_p, fa4_fwd_p
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

Residuals = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, tuple[jax.Array, ...]]


@dataclass(frozen=True)
class _Static:
    """The static parameters of one call (hashable: the custom VJP's non-differentiable arg).

    extras: the names of the extra operands (:data:`jax_fa4.primitives.EXTRAS` order)."""

    softmax_scale: float
    causal: bool
    window_left: int | None
    window_right: int | None
    softcap: float | None
    extras: tuple[str, ...]
    deterministic: bool

    def fwd_params(self) -> dict[str, object]:
        return dict(
            softmax_scale=self.softmax_scale,
            causal=self.causal,
            window_left=self.window_left,
            window_right=self.window_right,
            softcap=self.softcap,
            extras=self.extras,
        )


def _fwd(
    q: jax.Array, k: jax.Array, v: jax.Array, extra_ops: tuple[jax.Array, ...], static: _Static
) -> tuple[jax.Array, jax.Array]:
    o, lse = fa4_fwd_p.bind(q, k, v, *extra_ops, **static.fwd_params())
    return o, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention_core(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    extra_ops: tuple[jax.Array, ...],
    static: _Static,
) -> tuple[jax.Array, jax.Array]:
    """The checked call, differentiable: q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv],
    extra_ops named by static.extras (int32 lengths [b], int32 segment ids [b, sq] / [b, sk],
    float32 sinks [b, hq]) -> (o [b, sq, hq, dv] in q's dtype, lse float32 [b, hq, sq])."""
    return _fwd(q, k, v, extra_ops, static)


def _attention_core_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    extra_ops: tuple[jax.Array, ...],
    static: _Static,
) -> tuple[tuple[jax.Array, jax.Array], Residuals]:
    """((o, lse), residuals (q, k, v, o, lse, extra_ops)): the backward recomputes the scores."""
    o, lse = _fwd(q, k, v, extra_ops, static)
    return (o, lse), (q, k, v, o, lse, extra_ops)


def _attention_core_bwd(
    static: _Static,
    residuals: Residuals,
    cotangents: tuple[jax.Array, jax.Array],
) -> tuple[jax.Array, jax.Array, jax.Array, tuple[jax.Array | None, ...]]:
    """(dq, dk, dv, extra cotangents) from the cotangents (do, dlse) of (o, lse).

    The integer operands get no cotangent (None). The sinks' is computed here from lse, o, do
    and dlse: with ``P_sink = exp(sink - lse)`` (the sink's softmax weight in its row),
    ``d sink[b, h] = sum_i P_sink[b, h, i] * (dlse[b, h, i] - rowsum(dO * O)[b, h, i])`` over the
    rows whose lse is finite (padding rows have lse -inf and no sink).
    """
    q, k, v, o, lse, extra_ops = residuals
    do, dlse = cotangents
    do = jnp.asarray(do, o.dtype)
    dlse = jnp.asarray(dlse, jnp.float32)
    by_name = dict(zip(static.extras, extra_ops, strict=True))
    bwd_names = tuple(n for n in static.extras if n in BWD_EXTRAS)
    dq, dk, dv = fa4_bwd_p.bind(
        q,
        k,
        v,
        o,
        lse,
        do,
        dlse,
        *(by_name[n] for n in bwd_names),
        softmax_scale=static.softmax_scale,
        causal=static.causal,
        window_left=static.window_left,
        window_right=static.window_right,
        softcap=static.softcap,
        extras=bwd_names,
        deterministic=static.deterministic,
    )
    extra_cts: list[jax.Array | None] = []
    for name, x in zip(static.extras, extra_ops, strict=True):
        if name != "sinks":
            extra_cts.append(None)
            continue
        extra_cts.append(sinks_cotangent(x, lse, o, do, dlse))
    return dq, dk, dv, tuple(extra_cts)


def sinks_cotangent(
    sinks: jax.Array, lse: jax.Array, o: jax.Array, do: jax.Array, dlse: jax.Array
) -> jax.Array:
    """The sinks' cotangent [b, hq] (float32) from the final lse [b, hq, sq] (which holds the
    sink), o and do [b, sq, hq, d] and dlse [b, hq, sq]: ``sum_i exp(sink - lse_i) * (dlse_i -
    rowsum(dO * O)_i)`` over the rows whose lse is finite (padding rows have lse -inf, no sink).
    """
    # rowsum(dO * O) in float32, [b, sq, hq] -> [b, hq, sq]: an elementwise product and a
    # reduction over the head dim, which XLA fuses into one pass over dO and O (as a dot it may
    # take a transposed float32 copy of both first).
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1).transpose(0, 2, 1)
    finite = jnp.isfinite(lse)
    p_sink = jnp.exp(sinks[:, :, None] - jnp.where(finite, lse, 0.0))
    return jnp.sum(jnp.where(finite, p_sink * (dlse - delta), 0.0), axis=2)


_attention_core.defvjp(_attention_core_fwd, _attention_core_bwd)


def _no_keys(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    shape_o: tuple[int, int, int, int],
    q_lengths: jax.Array | None,
    sinks: jax.Array | None,
    others: Sequence[jax.Array],
) -> tuple[jax.Array, jax.Array]:
    """The answer when no query can see a key (seq_k == 0) or there is nothing to compute:
    o = 0, lse = the sink on the non-padding rows with sinks, -inf elsewhere. No kernel launch
    and no arithmetic on q, k, v (0 * x would turn one NaN or Inf in q into NaN everywhere);
    gradients are zeros but for the sinks'. Inside shard_map the results vary over the inputs'
    manual axes."""
    b, sq, hq, _ = shape_o
    o = jnp.zeros(shape_o, q.dtype)
    lse = jnp.full((b, hq, sq), -jnp.inf, jnp.float32)
    if sinks is not None:
        rows = jnp.arange(sq)[None, :] < (sq if q_lengths is None else q_lengths[:, None])
        lse = jnp.where(rows[:, None, :], sinks[:, :, None], lse)
    varying = _compat.union_varying_axes(jax.typeof(x) for x in (q, k, v, *others))
    o, lse = (_compat.cast_to_varying(x, varying) for x in (o, lse))
    return o, lse


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    local_window_size: int | tuple[int | None, int | None] | None = None,
    query_seq_lengths: jax.Array | None = None,
    key_value_seq_lengths: jax.Array | None = None,
    segment_ids: jax.Array | tuple[jax.Array, jax.Array] | None = None,
    logits_soft_cap: float | None = None,
    sinks: jax.Array | None = None,
    return_lse: bool = False,
    deterministic: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention, FlashAttention-style (never materialises the score matrix).

    Which keys a query sees: for batch entry b, query i and key j, with ``q_len`` and ``kv_len``
    the (clamped) lengths below and ``off = kv_len - q_len``, key j is visible iff ``i < q_len``,
    ``j < kv_len``, ``i + off - left <= j <= i + off + right`` (the window; ``causal`` makes
    ``right = min(right, 0)``) and, with segment ids, ``q_ids[b, i] == kv_ids[b, j]``. Without
    lengths ``off = seq_k - seq_q``: masks are aligned to the bottom-right corner, as in
    FlashAttention 2+.

    Args:
      q: queries ``[batch, seq_q, heads_q, head_dim]``.
      k: keys ``[batch, seq_k, heads_kv, head_dim]``; ``heads_q % heads_kv == 0`` (GQA/MQA: q
        head ``h`` attends with kv head ``h // (heads_q // heads_kv)``).
      v: values ``[batch, seq_k, heads_kv, head_dim_v]`` (``head_dim_v`` may differ on the CPU).
      causal: mask keys after each query (``j <= i + off``).
      softmax_scale: multiplies ``q . k``; default ``1 / sqrt(head_dim)``. Static: a Python
        float (or int, or NumPy scalar), or a concrete 0-d jax/NumPy array, which is converted
        with ``float()``; a traced scale is an error (fold it into q instead).
      local_window_size: a sliding window: a non-negative int ``w`` (meaning ``(w, w)``) or a pair
        ``(left, right)`` of non-negative ints or None (unbounded on that side): query i sees keys
        ``i + off - left <= j <= i + off + right``. ``(w, 0)`` with or without ``causal`` is the
        usual causal window of ``w + 1`` keys. Static (Python ints).
      query_seq_lengths: integer ``[batch]``: the queries ``i >= query_seq_lengths[b]`` are
        padding: output 0, lse ``-inf`` (no sink), zero gradients. Values outside ``[0, seq_q]``
        act as clamped to it (the kernels clamp; int32 values reach them as given); any
        integer dtype (another one is clamped, then cast to int32).
      key_value_seq_lengths: integer ``[batch]``: the keys ``j >= key_value_seq_lengths[b]`` are
        never visible (never read). Clamped to ``[0, seq_k]``, like query_seq_lengths.
      segment_ids: packed sequences: an integer array ``[batch, seq]`` (when ``seq_q ==
        seq_k``) or a pair ``(q_segment_ids [batch, seq_q], kv_segment_ids [batch, seq_k])``;
        key j is visible from query i only if their ids are equal. Causal, window and lengths
        still apply to the positions within the row (causal inside each document). Any integer
        dtype, cast to int32 (the values must fit in int32: checked, with a ValueError, where
        they are known at trace time; traced ones are cast). Ids that are non-decreasing along
        the sequence let the GPU kernels skip the blocks between documents; any ids are exact.
      logits_soft_cap: a static positive finite float ``c``: the score ``s = softmax_scale * q.k``
        becomes ``c * tanh(s / c)`` before the softmax (as Gemma 2).
      sinks: floating-point ``[heads_q]``: one logit per query head that joins every row's
        softmax denominator and no numerator: ``lse = log(exp(sinks[h]) + sum_visible exp(s))``,
        ``o = sum_visible exp(s - lse) v``. Differentiable (its gradient comes back in its
        dtype); a non-padding row that sees no key gets o = 0 and lse = ``sinks[h]``.
      return_lse: also return the log-sum-exp of the (capped) scaled scores (natural log, the
        sink included), float32 ``[batch, heads_q, seq_q]``; it is differentiable too.
      deterministic: make the backward bitwise reproducible: the same inputs give the same dq,
        dk and dv bits on every run (same device, same shapes). The forward always is, and so
        are dk and dv; only the GPU kernel's dq is summed by float32 atomics whose order the
        hardware picks, and ``True`` orders those adds (key block by key block, per query block;
        a semaphore in the workspace), at some cost in backward speed (README.md gives the
        measured cost). On the CPU the backward is always deterministic and this flag changes
        nothing.
        The values are as accurate either way (only the summation order is fixed).

    Returns:
      ``o`` ``[batch, seq_q, heads_q, head_dim_v]`` in q's dtype, or ``(o, lse)``. A row that
      sees no key (a padding row, or one that the window, the lengths or the segment ids leave
      empty) gets o = 0 and lse ``-inf``, or the sink with sinks (not on padding rows), and
      contributes no gradient.

    q, k and v share one dtype: bfloat16, float16 or float32 (float32 on the CPU only); the GPU
    kernels (Hopper, sm_90a) take head dims 64, 128 and 256. Accumulation is float32. Everything
    combines with everything and works under ``jit``, ``grad``, ``vmap``, ``checkpoint``;
    unsupported inputs raise at trace time, naming the argument. Sharded inputs under ``jit``
    are partitioned automatically (:mod:`jax_fa4.sharding`; lengths and segment ids split with
    the batch, sinks with the heads), and it runs per shard inside ``shard_map``; for a sequence
    split inside shard_map see :func:`jax_fa4.ring_attention`.
    """
    dims = check_qkv(q, k, v)
    scale = check_softmax_scale(softmax_scale, dims.head_dim)
    causal = check_flag("causal", causal)
    return_lse = check_flag("return_lse", return_lse)
    deterministic = check_flag("deterministic", deterministic)
    left, right = check_window(local_window_size)
    softcap = check_softcap(logits_soft_cap)
    q_lengths = check_seq_lengths("query_seq_lengths", query_seq_lengths, dims.batch, dims.seq_q)
    kv_lengths = check_seq_lengths(
        "key_value_seq_lengths", key_value_seq_lengths, dims.batch, dims.seq_k
    )
    ids = check_segment_ids(segment_ids, dims.batch, dims.seq_q, dims.seq_k)
    sinks = check_sinks(sinks, dims.heads_q)
    sinks_b = None
    if sinks is not None:  # [hq] -> float32 [b, hq]: its transpose sums d sinks over the batch
        sinks_b = jnp.broadcast_to(sinks.astype(jnp.float32), (dims.batch, dims.heads_q))
    named = {
        "q_lengths": q_lengths,
        "kv_lengths": kv_lengths,
        "q_segment_ids": None if ids is None else ids[0],
        "kv_segment_ids": None if ids is None else ids[1],
        "sinks": sinks_b,
    }
    names = tuple(n for n, x in named.items() if x is not None)
    extra_ops = tuple(named[n] for n in names)
    if dims.seq_k == 0 or dims.batch * dims.seq_q * dims.heads_q == 0:
        o, lse = _no_keys(
            q,
            k,
            v,
            (dims.batch, dims.seq_q, dims.heads_q, dims.head_dim_v),
            q_lengths,
            sinks_b,
            extra_ops,
        )
    else:
        # Inside shard_map(check_vma=True): give every operand the union of their varying manual
        # axes first, so that the gradient of an operand replicated over an axis is summed over
        # it.
        q, k, v, *extra = _compat.match_varying_axes(q, k, v, *extra_ops)
        static = _Static(scale, causal, left, right, softcap, names, deterministic)
        o, lse = _attention_core(q, k, v, tuple(extra), static)
    return (o, lse) if return_lse else o
