"""jax_fa4.flax: drop-in attention_fn for flax.nnx.MultiHeadAttention and
flax.linen.MultiHeadDotProductAttention.

Each numerical check runs the same module (same weights) three ways: with jax_fa4's attention_fn in
float32 (got), with Flax's default attention_fn in float32 (the plain-XLA baseline) and with the
default attention_fn in float64 (the oracle), and applies the error rule of docs/design.md to the
outputs and to the gradients with respect to every parameter and the inputs.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import assert_close_by_rule

flax = pytest.importorskip("flax")
from flax import linen as nn  # noqa: E402
from flax import nnx  # noqa: E402

from jax_fa4.flax import FlashAttentionFn, make_attention_fn  # noqa: E402
from jax_fa4.reference import attention_reference  # noqa: E402

F32, F64 = jnp.float32, jnp.float64
FEATURES, HEADS = 32, 4  # head_dim 8


def _inputs(shape, seed=0, dtype=F32):
    return jax.random.normal(jax.random.key(seed), shape, F32).astype(dtype)


def _cast_tree(tree, dtype):
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree
    )


def _check_trees(name, got, base, oracle, dtype):
    """The error rule of docs/design.md leaf by leaf (output, then every gradient).

    The gradient of the key projection's bias is zero in exact arithmetic (it adds the same
    q . b_k to every score of a query row, which the softmax cancels): what remains is rounding
    noise of the size of the other gradients, so its floor is taken at their scale.
    """
    leaves = [jax.tree_util.tree_leaves_with_path(t) for t in (got, base, oracle)]
    assert len(leaves[0]) == len(leaves[1]) == len(leaves[2])
    scale = max(float(np.abs(np.asarray(o, np.float64)).max()) for _, o in leaves[2])
    for (path, g), (_, b), (_, o) in zip(*leaves, strict=True):
        label = f"{name} {jax.tree_util.keystr(path)}"
        if "'key'" in label and "'bias'" in label:
            err = float(np.abs(np.asarray(g, np.float64) - np.asarray(o, np.float64)).max())
            base_err = float(np.abs(np.asarray(b, np.float64) - np.asarray(o, np.float64)).max())
            bound = 2.0 * base_err + 8.0 * float(jnp.finfo(dtype).eps) * scale
            assert err <= bound, f"{label}: {err:.3e} > {bound:.3e} (zero in exact arithmetic)"
        else:
            assert_close_by_rule(label, g, o, b, dtype)


# ---------------------------------------------------------------------------------------------
# nnx


def _nnx_mha(attention_fn=None, *, num_kv_heads=None, dtype=None, seed=0, **kw):
    extra = {} if attention_fn is None else {"attention_fn": attention_fn}
    return nnx.MultiHeadAttention(
        num_heads=HEADS,
        in_features=FEATURES,
        num_kv_heads=num_kv_heads,
        dtype=dtype,
        decode=False,
        rngs=nnx.Rngs(seed),
        **extra,
        **kw,
    )


def _nnx_value_and_grads(module, xq, xk, cot, call_kw, dtype):
    """Output and gradients (params, xq, xk) of sum(out * cot), everything cast to dtype."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    params = _cast_tree(params, dtype)

    def f(params, xq, xk):
        m = nnx.merge(graphdef, params, rest)
        out = m(xq, xk, **call_kw)
        return jnp.sum(out.astype(dtype) * cot.astype(dtype)), out

    (_, out), grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True))(
        params, xq.astype(dtype), xk.astype(dtype)
    )
    return out, grads


def _check_against_default(name, got_mod, default_mod, xq, xk, got_kw, default_kw, dtype=F32):
    seq_q, seq_k = xq.shape[-2], xk.shape[-2]
    cot = _inputs((*xq.shape[:-1], FEATURES), seed=7)
    got = _nnx_value_and_grads(got_mod, xq, xk, cot, got_kw, dtype)
    base = _nnx_value_and_grads(default_mod, xq, xk, cot, default_kw, dtype)
    oracle = _nnx_value_and_grads(default_mod, xq, xk, cot, default_kw, F64)
    assert got[0].dtype == base[0].dtype, (got[0].dtype, base[0].dtype)
    _check_trees(f"{name} sq={seq_q} sk={seq_k}", got, base, oracle, dtype)


NNX_CASES = [(False, None), (True, None), (False, 2), (True, 2)]  # (causal, num_kv_heads)


@pytest.mark.parametrize(("causal", "num_kv_heads"), params(NNX_CASES, [(True, 2)], unpack=True))
def test_nnx_matches_default(causal, num_kv_heads):
    """Same weights: outputs and gradients as Flax's default attention (causal: flax's mask)."""
    x = _inputs((2, 24, FEATURES))
    ours = _nnx_mha(make_attention_fn(causal=causal), num_kv_heads=num_kv_heads)
    default = _nnx_mha(num_kv_heads=num_kv_heads)
    np.testing.assert_array_equal(ours.query.kernel[...], default.query.kernel[...])
    default_kw = {"mask": nnx.make_causal_mask(x[..., 0])} if causal else {}
    _check_against_default(
        f"nnx causal={causal} kv={num_kv_heads}", ours, default, x, x, {}, default_kw
    )


def test_nnx_is_causal_call_argument():
    """nnx's own is_causal=True reaches the kernel (equal lengths, where alignments agree)."""
    x = _inputs((2, 17, FEATURES), seed=3)
    _check_against_default(
        "nnx is_causal", _nnx_mha(make_attention_fn()), _nnx_mha(), x, x,
        {"is_causal": True}, {"is_causal": True},
    )  # fmt: skip


def test_nnx_cross_attention_lengths_differ():
    xq, xk = _inputs((3, 9, FEATURES), seed=1), _inputs((3, 40, FEATURES), seed=2)
    _check_against_default("nnx cross", _nnx_mha(make_attention_fn()), _nnx_mha(), xq, xk, {}, {})


@pytest.mark.slow
def test_nnx_extra_batch_dims():
    """[batch..., length, features] with two batch dims, as Flax allows."""
    x = _inputs((2, 3, 16, FEATURES), seed=4)
    _check_against_default(
        "nnx 2 batch dims", _nnx_mha(make_attention_fn()), _nnx_mha(), x, x, {}, {}
    )


@pytest.mark.parametrize(
    "dtype", params([jnp.bfloat16, jnp.float16], [jnp.bfloat16], lambda d: jnp.dtype(d).name)
)
def test_nnx_computes_in_module_dtype(dtype):
    """dtype=... on the module: float32 params, computation and result in that dtype, like Flax."""
    x = _inputs((2, 32, FEATURES), seed=5)
    ours, default = _nnx_mha(make_attention_fn(), dtype=dtype), _nnx_mha(dtype=dtype)
    got, base = ours(x), default(x)
    assert got.dtype == base.dtype == jnp.dtype(dtype)
    # the oracle: the same weights and inputs, computed in float64 (a module with dtype=None)
    oracle = _nnx_value_and_grads(_nnx_mha(), x, x, jnp.zeros_like(x), {}, F64)[0]
    assert_close_by_rule(f"nnx dtype={jnp.dtype(dtype).name}", got, oracle, base, dtype)


@pytest.mark.slow
def test_nnx_dtype_none_follows_inputs():
    """dtype=None: the common dtype of q, k, v (here bfloat16 params and inputs)."""
    x = _inputs((1, 16, FEATURES), seed=6, dtype=jnp.bfloat16)
    ours = _nnx_mha(make_attention_fn(), param_dtype=jnp.bfloat16)
    default = _nnx_mha(param_dtype=jnp.bfloat16)
    assert ours(x).dtype == default(x).dtype == jnp.bfloat16


def test_nnx_under_jit_and_dropout_rate_when_deterministic():
    """nnx.jit works; a module with dropout_rate > 0 runs in evaluation (deterministic) mode."""
    x = _inputs((2, 16, FEATURES), seed=8)
    ours = _nnx_mha(make_attention_fn(causal=True), dropout_rate=0.1, deterministic=True)
    default = _nnx_mha(dropout_rate=0.1, deterministic=True)
    got = nnx.jit(lambda m, x: m(x))(ours, x)
    want = default(x, mask=nnx.make_causal_mask(x[..., 0]))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------------------------------------
# linen


def _linen_value_and_grads(module, params, x, cot, call_kw, dtype):
    def f(params, x):
        out = module.apply(params, x, **call_kw)
        return jnp.sum(out.astype(dtype) * cot.astype(dtype)), out

    params = _cast_tree(params, dtype)
    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))
    (_, out), grads = vg(params, x.astype(dtype))
    return out, grads


@pytest.mark.parametrize("causal", params([False, True], [True]))
def test_linen_matches_default(causal):
    x = _inputs((2, 24, FEATURES), seed=9)
    cot = _inputs(x.shape, seed=10)
    ours = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=make_attention_fn(causal))
    default = nn.MultiHeadDotProductAttention(num_heads=HEADS)
    params = default.init(jax.random.key(0), x)
    default_kw = {"mask": nn.make_causal_mask(x[..., 0])} if causal else {}
    got = _linen_value_and_grads(ours, params, x, cot, {}, F32)
    base = _linen_value_and_grads(default, params, x, cot, default_kw, F32)
    oracle = _linen_value_and_grads(default, params, x, cot, default_kw, F64)
    _check_trees(f"linen causal={causal}", got, base, oracle, F32)


@pytest.mark.slow
def test_linen_dtype_and_jit():
    x = _inputs((2, 16, FEATURES), seed=11)
    ours = nn.MultiHeadDotProductAttention(
        num_heads=HEADS,
        dtype=jnp.bfloat16,
        attention_fn=make_attention_fn(),
        force_fp32_for_softmax=True,
    )
    default = nn.MultiHeadDotProductAttention(num_heads=HEADS, dtype=jnp.bfloat16)
    params = default.init(jax.random.key(1), x)
    got = jax.jit(ours.apply)(params, x)
    base = default.apply(params, x)
    assert got.dtype == base.dtype == jnp.bfloat16
    oracle_module = nn.MultiHeadDotProductAttention(num_heads=HEADS)  # dtype None: float64
    oracle = _linen_value_and_grads(oracle_module, params, x, jnp.zeros_like(x), {}, F64)[0]
    assert_close_by_rule("linen bfloat16", got, oracle, base, jnp.bfloat16)


# ---------------------------------------------------------------------------------------------
# The function itself


def test_signature_names_every_flax_parameter():
    """linen passes only the keywords an attention_fn declares: ours declares all of Flax's."""
    ours = set(inspect.signature(make_attention_fn()).parameters)
    for fn in (nn.dot_product_attention, nnx.dot_product_attention):
        missing = set(inspect.signature(fn).parameters) - ours
        assert not missing, f"{fn.__module__}.{fn.__name__}: {missing}"


def test_value_semantics_and_softmax_scale():
    assert make_attention_fn(True) == make_attention_fn(causal=True)
    assert hash(make_attention_fn(True)) == hash(FlashAttentionFn(causal=True))
    assert make_attention_fn() != make_attention_fn(causal=True)
    q, k, v = (_inputs((2, 20, 4, 16), seed=s) for s in (1, 2, 3))
    got = make_attention_fn(softmax_scale=0.3)(q, k, v)
    want = jax.nn.dot_product_attention(q, k, v, scale=0.3)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)
    # rank 3 (no batch dim), as Flax's dot_product_attention allows
    got3 = make_attention_fn()(q[0], k[0], v[0], dtype=jnp.float32)
    np.testing.assert_allclose(
        np.asarray(got3), np.asarray(jax.nn.dot_product_attention(q, k, v)[0]), rtol=2e-5, atol=2e-6
    )


def test_precision_levels_accepted():
    q, k, v = (_inputs((1, 8, 2, 16), seed=s) for s in (1, 2, 3))
    fn = make_attention_fn()
    want = fn(q, k, v)
    for p in (None, jax.lax.Precision.HIGHEST, "highest", "float32", ("default", "highest")):
        np.testing.assert_array_equal(np.asarray(fn(q, k, v, precision=p)), np.asarray(want))


# ---------------------------------------------------------------------------------------------
# Errors: what the kernel cannot do is refused, with what to use instead


def _qkv(seq_q=8, seq_k=8):
    return (
        _inputs((1, seq_q, 2, 16), 1),
        _inputs((1, seq_k, 2, 16), 2),
        _inputs((1, seq_k, 2, 16), 3),
    )


def test_error_causal_mask_from_flax_points_at_causal_true():
    x = _inputs((1, 8, FEATURES))
    mha = _nnx_mha(make_attention_fn())
    with pytest.raises(NotImplementedError, match=r"mask: .*make_attention_fn\(causal=True\)"):
        mha(x, mask=nnx.make_causal_mask(x[..., 0]))
    lin = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=make_attention_fn())
    params = lin.init(jax.random.key(0), x)
    with pytest.raises(NotImplementedError, match=r"shape \(1, 1, 8, 8\).*is_causal=True"):
        lin.apply(params, x, mask=nn.make_causal_mask(x[..., 0]))


def test_nnx_decode_matches_default():
    """decode=True: one query against the cache, whose mask [b, 1, 1, max_length] (the filled
    slots) is a padding mask; step by step the same as Flax's default attention."""
    ours, default = _nnx_mha(make_attention_fn(causal=True)), _nnx_mha()
    for m in (ours, default):
        m.init_cache((2, 8, FEATURES))
    x = _inputs((2, 5, FEATURES), seed=18)
    for t in range(x.shape[1]):
        got, want = ours(x[:, t : t + 1], decode=True), default(x[:, t : t + 1], decode=True)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def test_error_bias():
    with pytest.raises(NotImplementedError, match=r"bias: .*float32 array of shape \(1, 2, 8, 8\)"):
        make_attention_fn()(*_qkv(), bias=jnp.zeros((1, 2, 8, 8), F32))


def test_error_dropout_when_training():
    x = _inputs((1, 8, FEATURES))
    mha = _nnx_mha(make_attention_fn(), dropout_rate=0.1)
    with pytest.raises(NotImplementedError, match=r"dropout_rate=0.1 with deterministic=False.*"):
        mha(x, deterministic=False)
    lin = nn.MultiHeadDotProductAttention(
        num_heads=HEADS, dropout_rate=0.2, attention_fn=make_attention_fn()
    )
    params = lin.init(jax.random.key(0), x, deterministic=True)
    with pytest.raises(NotImplementedError, match="nnx.Dropout"):
        lin.apply(params, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    fn = make_attention_fn()
    with pytest.raises(ValueError, match=r"dropout_rate must be in \[0, 1\); got 1.5"):
        fn(*_qkv(), dropout_rate=1.5, deterministic=True)
    with pytest.raises(ValueError, match="deterministic must be a Python bool"):
        jax.jit(lambda d: fn(*_qkv(), dropout_rate=0.1, deterministic=d))(True)
    with pytest.raises(ValueError, match="dropout_rate must be a static Python number"):
        jax.jit(lambda r: fn(*_qkv(), dropout_rate=r, deterministic=True))(0.1)


def test_error_sow_weights():
    x = _inputs((1, 8, FEATURES))
    with pytest.raises(NotImplementedError, match="sow_weights"):
        _nnx_mha(make_attention_fn())(x, sow_weights=True)
    lin = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=make_attention_fn())
    params = lin.init(jax.random.key(0), x)
    with pytest.raises(NotImplementedError, match="never forms the attention weights"):
        lin.apply(params, x, sow_weights=True)


def test_error_custom_einsums():
    x = _inputs((1, 8, FEATURES))
    lin = nn.MultiHeadDotProductAttention(
        num_heads=HEADS,
        attention_fn=make_attention_fn(),
        qk_attn_weights_einsum_cls=lambda: jnp.einsum,
        attn_weights_value_einsum_cls=lambda: jnp.einsum,
    )
    with pytest.raises(NotImplementedError, match="qk_attn_weights_einsum: .*custom einsum"):
        lin.init(jax.random.key(0), x)
    with pytest.raises(NotImplementedError, match="einsum_dot_general"):
        make_attention_fn()(*_qkv(), einsum_dot_general=jax.lax.dot_general)


@pytest.mark.parametrize(
    "precision", [jax.lax.DotAlgorithmPreset.BF16_BF16_F32, "fast-ish", ("highest",) * 3]
)
def test_error_precision(precision):
    with pytest.raises(ValueError, match="precision: jax_fa4 cannot honour"):
        make_attention_fn()(*_qkv(), precision=precision)


def test_error_dtype_the_kernel_lacks():
    x = _inputs((1, 8, FEATURES))
    with pytest.raises(ValueError, match=r"dtype: .*dtype=float64.*query float64"):
        _nnx_mha(make_attention_fn(), dtype=F64)(x)
    with pytest.raises(ValueError, match="dtype=None, giving query int32"):
        make_attention_fn()(*(jnp.ones((1, 4, 2, 8), jnp.int32),) * 3)


def test_error_is_causal_with_unequal_lengths():
    with pytest.raises(NotImplementedError, match="query length 4 != key length 8.*top-left"):
        make_attention_fn()(*_qkv(4, 8), is_causal=True)
    # causal=True at construction is jax_fa4's documented bottom-right alignment: it runs
    o = make_attention_fn(causal=True)(*_qkv(4, 8))
    assert o.shape == (1, 4, 2, 16)


def test_error_unknown_argument():
    with pytest.raises(TypeError, match="input_positions"):
        make_attention_fn()(*_qkv(), input_positions=jnp.arange(8))


def test_error_shapes():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"query must have shape .*rank >= 3.*\(8, 16\)"):
        make_attention_fn()(q[0, :, 0], k, v)
    with pytest.raises(ValueError, match="share their leading batch dimensions"):
        make_attention_fn()(q, jnp.concatenate([k, k]), jnp.concatenate([v, v]))
    with pytest.raises(TypeError, match="key must be an array"):
        make_attention_fn()(q, [1.0], v)


def test_error_factory_arguments():
    with pytest.raises(ValueError, match="causal must be a Python bool; got str 'yes'"):
        make_attention_fn("yes")
    with pytest.raises(ValueError, match="softmax_scale must be positive"):
        make_attention_fn(softmax_scale=-1.0)
    with pytest.raises(ValueError, match="is_causal must be a Python bool"):
        make_attention_fn()(*_qkv(), is_causal=None)


# ---------------------------------------------------------------------------------------------
# Variants: padding masks, windows, soft cap


def _key_padding(batch, seq_k, lengths):
    """bool [batch, seq_k]: key j is real iff j < lengths[b]."""
    return jnp.arange(seq_k)[None, :] < jnp.asarray(lengths)[:, None]


def _reference_attention_fn(**variant):
    """An attention_fn computing jax_fa4.attention_reference with `variant` in the inputs'
    dtype (float32 in, float32 math; float64 in: the float64 oracle)."""

    def attention_fn(query, key, value, dtype=None, **_):
        if dtype is not None:
            query, key, value = (x.astype(dtype) for x in (query, key, value))
        o, _ = attention_reference(query, key, value, **variant)
        return o.astype(query.dtype)

    return attention_fn


@pytest.mark.parametrize("causal", params([False, True], [True]))
def test_nnx_padding_mask_matches_default(causal):
    """A key padding mask [b, 1, 1, sk] is exact: the same as Flax's default with that mask (and
    Flax's causal mask); every query row sees at least one key here (key 0 is real)."""
    x = _inputs((2, 24, FEATURES), seed=12)
    pad = _key_padding(2, 24, [20, 13])[:, None, None, :]
    default_mask = nnx.combine_masks(pad, nnx.make_causal_mask(x[..., 0])) if causal else pad
    _check_against_default(
        f"nnx padding mask causal={causal}",
        _nnx_mha(make_attention_fn(causal=causal)),
        _nnx_mha(),
        x,
        x,
        {"mask": pad},
        {"mask": default_mask},
    )


@pytest.mark.slow
def test_nnx_padding_mask_broadcast_shapes_and_cross_attention():
    """Masks of shape [b, 1, 1, sk] and [1, 1, 1, sk] (one row for the whole batch), with cross
    attention (seq_q != seq_k)."""
    xq, xk = _inputs((2, 9, FEATURES), seed=13), _inputs((2, 30, FEATURES), seed=14)
    keep = _key_padding(2, 30, [30, 7])
    for got_mask in (keep[:, None, None, :], keep[:1, None, None, :]):
        want = jnp.broadcast_to(got_mask, (2, 1, 1, 30))
        _check_against_default(
            f"nnx padding mask {got_mask.shape}",
            _nnx_mha(make_attention_fn()),
            _nnx_mha(),
            xq,
            xk,
            {"mask": got_mask},
            {"mask": want},
        )


def test_padding_mask_row_without_keys_is_zero():
    """A batch entry whose mask hides every key: output 0 (jax_fa4's semantics), the other entry
    as jax.nn.dot_product_attention with that mask."""
    q, k, v = (_inputs((2, 8, 2, 16), seed=s) for s in (1, 2, 3))
    keep = jnp.array([[True] * 5 + [False] * 3, [False] * 8])
    o = make_attention_fn()(q, k, v, mask=keep[:, None, None, :])
    np.testing.assert_array_equal(np.asarray(o[1]), 0.0)
    want = jax.nn.dot_product_attention(q[:1], k[:1], v[:1], mask=keep[:1, None, None, :])
    np.testing.assert_allclose(np.asarray(o[:1]), np.asarray(want), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(
    "variant",
    params(
        [
            dict(causal=True, local_window_size=(5, 0)),
            dict(local_window_size=3, logits_soft_cap=0.7),
            dict(causal=True, local_window_size=(6, 0), logits_soft_cap=1.5, pad=True),
        ],
        [dict(causal=True, local_window_size=(6, 0), logits_soft_cap=1.5, pad=True)],
        lambda v: "-".join(f"{k}={x}" for k, x in v.items()),
    ),
)
def test_nnx_window_softcap_match_reference(variant):
    """make_attention_fn(causal, local_window_size, logits_soft_cap) (and a padding mask) in a
    module: outputs and gradients against the same module whose attention_fn is the reference."""
    variant = dict(variant)
    pad = variant.pop("pad", False)
    x = _inputs((2, 20, FEATURES), seed=15)
    got_kw, ref_variant = {}, dict(variant)
    if pad:
        keep = _key_padding(2, 20, [20, 11])
        got_kw["mask"] = keep[:, None, None, :]
        ones = jnp.ones((2, 20), jnp.int32)
        ref_variant["segment_ids"] = (ones, keep.astype(jnp.int32))
    _check_against_default(
        "nnx " + " ".join(f"{k}={v}" for k, v in variant.items()) + (" pad" if pad else ""),
        _nnx_mha(make_attention_fn(**variant)),
        _nnx_mha(_reference_attention_fn(**ref_variant)),
        x,
        x,
        got_kw,
        {},
    )


@pytest.mark.slow
def test_linen_padding_mask_and_window():
    x = _inputs((2, 16, FEATURES), seed=16)
    cot = _inputs(x.shape, seed=17)
    keep = _key_padding(2, 16, [16, 9])
    fn = make_attention_fn(causal=True, local_window_size=4)
    ours = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=fn)
    ref_fn = _reference_attention_fn(
        causal=True,
        local_window_size=4,
        segment_ids=(jnp.ones((2, 16), jnp.int32), keep.astype(jnp.int32)),
    )
    reference = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=ref_fn)
    params = reference.init(jax.random.key(0), x)
    mask = {"mask": keep[:, None, None, :]}
    got = _linen_value_and_grads(ours, params, x, cot, mask, F32)
    base = _linen_value_and_grads(reference, params, x, cot, {}, F32)
    oracle = _linen_value_and_grads(reference, params, x, cot, {}, F64)
    _check_trees("linen padding mask window", got, base, oracle, F32)


def test_variant_value_semantics_and_errors():
    assert make_attention_fn(local_window_size=4) == FlashAttentionFn(local_window_size=(4, 4))
    assert make_attention_fn(local_window_size=[3, None]).local_window_size == (3, None)
    assert make_attention_fn(logits_soft_cap=30).logits_soft_cap == 30.0
    assert hash(make_attention_fn(causal=True, local_window_size=(8, 0), logits_soft_cap=5.0))
    with pytest.raises(ValueError, match="non-negative"):
        make_attention_fn(local_window_size=-2)
    with pytest.raises(ValueError, match="logits_soft_cap must be positive"):
        make_attention_fn(logits_soft_cap=-1.0)


def test_error_masks_that_are_not_padding():
    q, k, v = _qkv()
    keep = jnp.ones((1, 8), bool)
    with pytest.raises(NotImplementedError, match=r"key_padding\[:, None, None, :\]"):
        # Flax's make_attention_mask(query_padding, key_padding) has a query axis
        make_attention_fn()(q, k, v, mask=nnx.make_attention_mask(keep, keep))
    with pytest.raises(NotImplementedError, match=r"shape \(1, 2, 1, 8\)"):  # varies over heads
        make_attention_fn()(q, k, v, mask=jnp.ones((1, 2, 1, 8), bool))
    with pytest.raises(NotImplementedError, match=r"shape \(1, 1, 1, 5\)"):  # wrong key length
        make_attention_fn()(q, k, v, mask=jnp.ones((1, 1, 1, 5), bool))
