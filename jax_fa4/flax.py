"""jax_fa4 as the ``attention_fn`` of Flax's attention modules (``flax.nnx`` and ``flax.linen``).

::

    from flax import nnx
    from jax_fa4.flax import make_attention_fn

    attn = nnx.MultiHeadAttention(
        num_heads=8, in_features=512, dtype=jnp.bfloat16, decode=False,
        attention_fn=make_attention_fn(causal=True), rngs=nnx.Rngs(0),
    )

    # linen: nn.MultiHeadDotProductAttention(num_heads=8, attention_fn=make_attention_fn())

The function keeps Flax's calling convention (``attention_fn(query, key, value, mask=...,
dropout_rate=..., deterministic=..., dtype=..., precision=..., module=..., ...)``) and Flax's
dtype rule (q, k, v are promoted to ``dtype``, or to their common type when ``dtype`` is None,
and the result comes back in that dtype). The attention variants of :func:`jax_fa4.attention` are
chosen when the function is made: ``make_attention_fn(causal=True, local_window_size=(1024, 0),
logits_soft_cap=30.0)``.

A padding ``mask`` (one that varies only over the batch and the keys: shape ``[batch..., 1, 1,
kv_length]``, or broadcastable to it, e.g. ``key_padding[:, None, None, :]``) is honoured
exactly, as per-key visibility (segment ids: every query 1, key j ``1`` where the mask is true and
``0`` where it is false); it combines with ``causal``, the window and the soft cap. A query row
whose mask hides every key gets output 0 (jax_fa4's semantics; Flax's default attention would
average all the values there). Autoregressive decoding (``decode=True``) works for the same
reason: its one query's mask over the cache, ``[batch..., 1, 1, max_length]``, is a padding
mask. Whatever else the kernel cannot do raises an error that says what
to use instead; no argument is dropped silently:

- any other ``mask`` (one that varies over the queries or the heads, including the mask that
  ``nn.make_causal_mask`` builds and Flax's ``make_attention_mask(query_padding,
  key_padding)``, which has a query axis) and a ``bias``:
  for causal attention make the function with ``causal=True`` (or call
  ``nnx.MultiHeadAttention`` with ``is_causal=True``); for key padding pass a mask of shape
  ``[batch, 1, 1, kv_length]``; for other masks keep Flax's default ``attention_fn``;
- attention dropout (``dropout_rate > 0`` while not ``deterministic``); with
  ``deterministic=True`` (evaluation) the rate is irrelevant and the call runs;
- ``sow_weights=True`` (``module=...``): jax_fa4 never forms the attention weights;
- custom einsums (linen's ``qk_attn_weights_einsum`` / ``attn_weights_value_einsum`` /
  ``einsum_dot_general``, as used for quantisation) and dot algorithms given as ``precision``.

Flax's ``deterministic`` call argument means "no dropout" and is unrelated to the kernel's
bitwise-reproducible backward; for the latter make the function with
``make_attention_fn(deterministic_backward=True)`` (:func:`jax_fa4.attention`'s
``deterministic``).

``precision`` given as ``None``, a ``jax.lax.Precision`` (or its name) or a pair of them is
accepted: the kernel multiplies in the input dtype and accumulates in float32, at least as precise
as any of those levels. ``force_fp32_for_softmax`` is accepted for the same reason (the softmax is
always computed in float32).

This module does not import Flax: the adapter is plain JAX, usable by any library that calls an
attention function this way.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_fa4.attention import attention
from jax_fa4.validation import (
    SUPPORTED_DTYPES,
    check_flag,
    check_softcap,
    check_softmax_scale,
    check_window,
)

__all__ = ["FlashAttentionFn", "make_attention_fn"]

_DEFAULT_ATTENTION_HINT = (
    "Flax's default attention_fn (flax.nnx.dot_product_attention or "
    "flax.linen.dot_product_attention)"
)


def _describe(x: Any) -> str:
    """A short description of an argument for error messages: shape and dtype of arrays."""
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return f"a {jnp.dtype(dtype).name} array of shape {tuple(shape)}"
    return f"{type(x).__name__} {x!r}"


def _is_precision_level(p: Any) -> bool:
    """None, a jax.lax.Precision, or a name it accepts ('highest', 'float32', ...)."""
    if p is None or isinstance(p, jax.lax.Precision):
        return True
    if isinstance(p, str):
        try:
            jax.lax.Precision(p)
        except ValueError:
            return False
        return True
    return False


def _check_precision(precision: Any) -> None:
    """Accepts what the kernel satisfies: a precision level, or a pair of them (lhs, rhs)."""
    if isinstance(precision, (tuple, list)):
        ok = len(precision) == 2 and all(_is_precision_level(p) for p in precision)
    else:
        ok = _is_precision_level(precision)
    if not ok:
        raise ValueError(
            f"precision: jax_fa4 cannot honour {precision!r}. Allowed: None, a jax.lax.Precision "
            "or its name ('default', 'high', 'highest', ...), or a pair of them (the kernel "
            "multiplies in the input dtype with float32 accumulation, which meets all of them). "
            "Dot algorithms are not supported: leave precision=None on the module, or use "
            f"{_DEFAULT_ATTENTION_HINT}"
        )


def _check_dropout(dropout_rate: Any, deterministic: Any) -> None:
    """Dropout on the attention weights needs the weights, which the kernel never forms."""
    if isinstance(dropout_rate, jax.core.Tracer):
        raise ValueError(
            "dropout_rate must be a static Python number (jax_fa4 supports only 0, or any rate "
            "with deterministic=True); got a traced value"
        )
    if isinstance(dropout_rate, bool) or not isinstance(
        dropout_rate, (numbers.Real, np.ndarray, np.generic)
    ):
        raise ValueError(f"dropout_rate must be a number in [0, 1); got {_describe(dropout_rate)}")
    rate = float(dropout_rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1); got {rate}")
    if rate == 0.0:
        return
    if isinstance(deterministic, jax.core.Tracer) or not isinstance(
        deterministic, (bool, np.bool_)
    ):
        raise ValueError(
            f"deterministic must be a Python bool when dropout_rate > 0 (got dropout_rate={rate} "
            f"and deterministic {_describe(deterministic)})"
        )
    if not deterministic:
        raise NotImplementedError(
            f"dropout_rate={rate} with deterministic=False: jax_fa4 has no attention dropout (it "
            "never forms the attention weights). Set dropout_rate=0 on the attention module (put "
            "dropout on the residual branch, e.g. nnx.Dropout after the attention output), run "
            f"with deterministic=True, or use {_DEFAULT_ATTENTION_HINT} for attention dropout"
        )


def _promote(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    dtype: Any,
    promote_dtype: Callable[..., Any] | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Flax's rule: cast q, k, v to ``dtype``, or to their common type when it is None."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if getattr(x, "shape", None) is None or getattr(x, "dtype", None) is None:
            raise TypeError(f"{name} must be an array; got {type(x).__name__}")
    if promote_dtype is not None:  # nnx.dot_product_attention's hook: f((q, k, v), dtype=...)
        query, key, value = promote_dtype((query, key, value), dtype=dtype)
    else:
        target = jnp.result_type(query, key, value) if dtype is None else jnp.dtype(dtype)
        query, key, value = (jnp.asarray(x, target) for x in (query, key, value))
    got = jnp.dtype(query.dtype)
    if got not in SUPPORTED_DTYPES or not (query.dtype == key.dtype == value.dtype):
        origin = f"dtype={jnp.dtype(dtype).name}" if dtype is not None else "dtype=None"
        raise ValueError(
            f"dtype: jax_fa4 computes in bfloat16, float16 or float32 (float32 on the CPU only); "
            f"the module asks for {origin}, giving query {got.name}, key "
            f"{jnp.dtype(key.dtype).name}, value {jnp.dtype(value.dtype).name}. Set dtype= on the "
            "attention module (e.g. dtype=jnp.bfloat16; param_dtype may stay float32)"
        )
    return query, key, value


def _to_4d(
    query: jax.Array, key: jax.Array, value: jax.Array
) -> tuple[tuple[int, ...], jax.Array, jax.Array, jax.Array]:
    """[batch..., seq, heads, dim] -> [batch, seq, heads, dim]; returns the batch shape too."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim < 3:
            raise ValueError(
                f"{name} must have shape [batch..., length, heads, head_dim] (rank >= 3); got "
                f"shape {tuple(x.shape)}"
            )
    batch = tuple(query.shape[:-3])
    if tuple(key.shape[:-3]) != batch or tuple(value.shape[:-3]) != batch:
        raise ValueError(
            "query, key and value must share their leading batch dimensions; got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    n = math.prod(batch)
    return batch, *(x.reshape((n, *x.shape[-3:])) for x in (query, key, value))


def _padding_segment_ids(
    mask: Any, batch: tuple[int, ...], seq_q: int, seq_k: int
) -> tuple[jax.Array, jax.Array]:
    """A padding mask as segment ids: (q_ids int32 [n, seq_q] of ones, kv_ids int32 [n, seq_k]:
    1 where the mask keeps key j, 0 where it drops it), n = prod(batch).

    `mask` must vary only over the batch and the keys: after padding its rank to ``len(batch) +
    3`` with leading 1s, its head and query axes have size 1, its key axis ``seq_k`` (or 1) and
    its batch axes broadcast to `batch`. Anything else is a NotImplementedError.
    """
    shape = tuple(getattr(mask, "shape", ()))
    rank = len(batch) + 3
    full = (1,) * (rank - len(shape)) + shape
    padding_like = (
        getattr(mask, "dtype", None) is not None
        and len(shape) <= rank
        and full[-3] == 1
        and full[-2] == 1
        and full[-1] in (1, seq_k)
        and all(m in (1, b) for m, b in zip(full[:-3], batch, strict=True))
    )
    if not padding_like:
        raise NotImplementedError(
            f"mask: jax_fa4 takes a padding mask only, one that varies over the batch and the "
            f"keys (shape [batch..., 1, 1, kv_length] = {(*batch, 1, 1, seq_k)} or broadcastable "
            f"to it); got {_describe(mask)}. For causal attention make the function with "
            "jax_fa4.flax.make_attention_fn(causal=True) (or call nnx.MultiHeadAttention with "
            "is_causal=True) instead of passing nn.make_causal_mask(...). For key padding pass "
            "key_padding[:, None, None, :] instead of make_attention_mask(query_padding, "
            f"key_padding). For other masks use {_DEFAULT_ATTENTION_HINT} or "
            "jax.nn.dot_product_attention"
        )
    n = math.prod(batch)
    keep = jnp.broadcast_to(jnp.reshape(mask, full)[..., 0, 0, :], (*batch, seq_k)) != 0
    kv_ids = keep.reshape(n, seq_k).astype(jnp.int32)
    q_ids = jnp.ones((n, seq_q), jnp.int32)
    return q_ids, kv_ids


@dataclasses.dataclass(frozen=True)
class FlashAttentionFn:
    """A Flax-compatible attention function backed by :func:`jax_fa4.attention`.

    Make it with :func:`make_attention_fn`. Instances are immutable, hashable and compare by
    value, so they can sit in a Flax module's static attributes (``nnx`` graph definitions,
    ``linen`` dataclass fields) and in ``jax.jit`` cache keys.

    Attributes:
      causal: apply a causal mask, jax_fa4's semantics: with ``seq_q != seq_k`` it is aligned to
        the bottom-right corner (query ``i`` sees keys ``j <= i + seq_k - seq_q``).
      softmax_scale: multiplies ``q . k``; None means ``1 / sqrt(head_dim)``, as Flax does.
      deterministic_backward: bitwise reproducible gradients (:func:`jax_fa4.attention`'s
        ``deterministic``); not Flax's ``deterministic`` call argument, which is about dropout.
      local_window_size: the sliding window ``(left, right)`` (None: no window), as
        :func:`jax_fa4.attention` takes it.
      logits_soft_cap: the soft cap ``c`` of the scores (None: none).
    """

    causal: bool = False
    softmax_scale: float | None = None
    deterministic_backward: bool = False
    local_window_size: tuple[int | None, int | None] | None = None
    logits_soft_cap: float | None = None

    def __call__(
        self,
        query: jax.Array,
        key: jax.Array,
        value: jax.Array,
        bias: jax.Array | None = None,
        mask: jax.Array | None = None,
        broadcast_dropout: bool = True,
        dropout_rng: jax.Array | None = None,
        dropout_rate: float = 0.0,
        deterministic: bool = False,
        dtype: Any = None,
        precision: Any = None,
        module: Any = None,
        promote_dtype: Callable[..., Any] | None = None,
        is_causal: bool = False,
        force_fp32_for_softmax: bool = False,
        einsum_dot_general: Callable[..., Any] | None = None,
        qk_attn_weights_einsum: Callable[..., Any] | None = None,
        attn_weights_value_einsum: Callable[..., Any] | None = None,
        **unsupported: Any,
    ) -> jax.Array:
        """Attention over ``[batch..., length, heads, head_dim]`` inputs, as Flax calls it.

        Every parameter of Flax's ``dot_product_attention`` (nnx and linen) is named here, so
        that linen (which passes only the keywords an ``attention_fn`` declares) hands over all
        of them and none is dropped unseen. ``heads`` of ``key``/``value`` may divide those of
        ``query`` (grouped-query attention). ``is_causal=True`` (nnx's call argument, Flax's
        top-left-aligned causal mask) is honoured when ``query`` and ``key`` have the same length,
        where the two alignments agree; otherwise it is an error. ``broadcast_dropout`` and
        ``dropout_rng`` only matter with dropout, which must be off. ``mask`` may be a padding
        mask (module docstring): shape ``[batch..., 1, 1, kv_length]`` or broadcastable to it.

        Returns:
          ``[batch..., q_length, heads, v_head_dim]`` in the computation dtype.

        Raises:
          ValueError / NotImplementedError / TypeError naming the argument the kernel cannot
          honour and what to use instead.
        """
        if unsupported:
            names = ", ".join(sorted(unsupported))
            raise TypeError(
                f"jax_fa4's attention_fn got argument(s) it does not know how to honour: {names}. "
                f"Drop them, or use {_DEFAULT_ATTENTION_HINT} (for RoPE, rotate query and key "
                "before attention)"
            )
        if bias is not None:
            raise NotImplementedError(
                f"bias: jax_fa4 takes no attention bias (got {_describe(bias)}); use "
                f"{_DEFAULT_ATTENTION_HINT} or jax.nn.dot_product_attention for biased attention"
            )
        if module is not None:
            raise NotImplementedError(
                "module (sow_weights=True): jax_fa4 never forms the attention weights, so it "
                f"cannot sow them; call without sow_weights, or use {_DEFAULT_ATTENTION_HINT} "
                "to inspect attention weights"
            )
        for name, fn in (
            ("einsum_dot_general", einsum_dot_general),
            ("qk_attn_weights_einsum", qk_attn_weights_einsum),
            ("attn_weights_value_einsum", attn_weights_value_einsum),
        ):
            if fn is not None:
                raise NotImplementedError(
                    f"{name}: jax_fa4 runs its own kernel and cannot use a custom einsum (got "
                    f"{fn!r}); leave it unset, or use {_DEFAULT_ATTENTION_HINT}"
                )
        _check_dropout(dropout_rate, deterministic)
        _check_precision(precision)
        check_flag("force_fp32_for_softmax", force_fp32_for_softmax)
        is_causal = check_flag("is_causal", is_causal)

        query, key, value = _promote(query, key, value, dtype, promote_dtype)
        batch, q, k, v = _to_4d(query, key, value)
        if is_causal and q.shape[1] != k.shape[1]:
            raise NotImplementedError(
                f"is_causal=True with query length {q.shape[1]} != key length {k.shape[1]}: "
                "Flax's causal mask is aligned to the top-left corner and jax_fa4's to the "
                "bottom-right (FlashAttention 2+); they agree only for equal lengths. Make the "
                "function with make_attention_fn(causal=True) for the bottom-right alignment, or "
                f"use {_DEFAULT_ATTENTION_HINT}"
            )
        segment_ids = None
        if mask is not None:
            segment_ids = _padding_segment_ids(mask, batch, q.shape[1], k.shape[1])
        o = attention(
            q,
            k,
            v,
            causal=self.causal or is_causal,
            softmax_scale=self.softmax_scale,
            local_window_size=self.local_window_size,
            segment_ids=segment_ids,
            logits_soft_cap=self.logits_soft_cap,
            deterministic=self.deterministic_backward,
        )
        return o.reshape((*batch, *o.shape[1:]))


def make_attention_fn(
    causal: bool = False,
    *,
    softmax_scale: float | None = None,
    deterministic_backward: bool = False,
    local_window_size: int | tuple[int | None, int | None] | None = None,
    logits_soft_cap: float | None = None,
) -> FlashAttentionFn:
    """Flax attention_fn for ``nnx.MultiHeadAttention`` or ``linen.MultiHeadDotProductAttention``.

    Args:
      causal: causal attention, chosen here because the kernel skips masked blocks instead of
        reading a mask. Pass this instead of ``nn.make_causal_mask(...)`` (a mask is an error).
        With ``seq_q != seq_k`` jax_fa4 aligns the mask to the bottom-right corner.
      softmax_scale: multiplies ``q . k`` (a static positive number); None means
        ``1 / sqrt(head_dim)``, Flax's default.
      deterministic_backward: make the backward bitwise reproducible (:func:`jax_fa4.attention`
        with ``deterministic=True``: same inputs, same gradient bits on every run). Named so to
        keep it apart from Flax's ``deterministic`` call argument, which turns dropout off.
      local_window_size: a sliding window, as :func:`jax_fa4.attention` takes it: a non-negative
        int ``w`` (``(w, w)``) or a pair ``(left, right)`` of non-negative ints or None: query i
        sees keys ``i - left <= j <= i + right`` (bottom-right aligned when the lengths differ).
        ``causal=True`` with ``(w, 0)`` or ``w`` is the usual causal window of ``w + 1`` keys.
      logits_soft_cap: a positive float ``c``: scores become ``c * tanh(s / c)`` (Gemma 2).

    Returns:
      A :class:`FlashAttentionFn` (hashable, compares by value). Its errors are listed in the
      module docstring of :mod:`jax_fa4.flax`.
    """
    causal = check_flag("causal", causal)
    deterministic_backward = check_flag("deterministic_backward", deterministic_backward)
    if softmax_scale is not None:
        softmax_scale = check_softmax_scale(softmax_scale, 1)
    window = check_window(local_window_size)
    return FlashAttentionFn(
        causal=causal,
        softmax_scale=softmax_scale,
        deterministic_backward=deterministic_backward,
        local_window_size=None if window == (None, None) else window,
        logits_soft_cap=check_softcap(logits_soft_cap),
    )
