"""The attention variants on the CPU (sliding window, padding lengths, segment ids, soft cap,
sinks), alone and combined, forward and gradients (dq, dk, dv, d sinks, through o and lse),
against the float64 oracle by the error rule (tests/tolerance.py); rows that see no key,
padding rows, clamped lengths, non-finite values in invisible keys, the early exits.

Transforms (vmap, checkpoint, deterministic) are in tests/test_variants_transforms.py and bad
inputs in tests/test_variants_errors.py.
"""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import LSE_MIN_MAGNITUDE, assert_close_by_rule, case_key, random_qkv

import jax_fa4
from jax_fa4 import _ffi

SOFTCAP = 2.0  # small enough to bend the scores of unit-normal inputs


def make_variant(key, feature: str, b: int, sq: int, sk: int, hq: int) -> dict:
    """The attention keyword arguments of one variant `feature`, with random (never zero)
    lengths, ids and sinks from `key`."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    if feature == "window":
        return {"local_window_size": 9}
    if feature == "window_pair":
        return {"local_window_size": (7, 3)}
    if feature == "window_left_only":
        return {"local_window_size": (11, None)}
    if feature == "window_right_only":
        return {"local_window_size": (None, 4)}
    if feature == "window_diagonal":
        return {"local_window_size": (0, 0)}
    if feature == "q_lengths":
        return {"query_seq_lengths": jax.random.randint(k1, (b,), sq // 3, sq + 1)}
    if feature == "kv_lengths":
        return {"key_value_seq_lengths": jax.random.randint(k2, (b,), sk // 3, sk + 1)}
    if feature == "lengths":
        return {
            "query_seq_lengths": jax.random.randint(k1, (b,), sq // 3, sq + 1),
            "key_value_seq_lengths": jax.random.randint(k2, (b,), sk // 3, sk + 1),
        }
    if feature == "packed":  # non-decreasing ids: documents packed along the row
        if sq == sk:
            return {"segment_ids": packed_ids(k3, b, sq)}
        return {"segment_ids": (packed_ids(k3, b, sq), packed_ids(k4, b, sk))}
    if feature == "random_ids":  # any ids: exact, with less block skipping
        q_ids = jax.random.randint(k3, (b, sq), 0, 3)
        if sq == sk:
            return {"segment_ids": q_ids}
        return {"segment_ids": (q_ids, jax.random.randint(k4, (b, sk), 0, 3))}
    if feature == "softcap":
        return {"logits_soft_cap": SOFTCAP}
    if feature == "sinks":
        return {"sinks": jax.random.normal(k4, (hq,), jnp.float32)}
    raise AssertionError(feature)


def packed_ids(key, b: int, s: int) -> jax.Array:
    """int32 [b, s]: documents of random lengths (a new one starts with probability 1/12)."""
    starts = jax.random.bernoulli(key, 1 / 12, (b, s)).astype(jnp.int32)
    return jnp.cumsum(starts, axis=1).astype(jnp.int32)


def variant_kwargs(key, features, b, sq, sk, hq) -> dict:
    out: dict = {}
    for n, f in enumerate(features):
        out.update(make_variant(jax.random.fold_in(key, n), f, b, sq, sk, hq))
    return out


def _loss(o, lse, w, wl):
    acc = jnp.float64 if o.dtype == jnp.float64 else jnp.float32
    finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
    return jnp.sum(o.astype(acc) * w) + jnp.sum(finite_lse.astype(acc) * wl)


def _value_and_grads(attn, q, k, v, sinks, w, wl):
    """(o, lse) and the gradients of a loss of both wrt (q, k, v[, sinks])."""
    argnums = (0, 1, 2, 3) if sinks is not None else (0, 1, 2)

    def loss(q, k, v, sinks):
        o, lse = attn(q, k, v, sinks)
        return _loss(o, lse, w, wl), (o, lse)

    (_, (o, lse)), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(q, k, v, sinks)
    return o, lse, grads


def check_variant(
    tag: str,
    shape: tuple[int, ...],
    dtype,
    kwargs: dict,
    *,
    causal: bool = False,
    grads: bool = True,
    with_lse: bool = True,
    grad_min_magnitude: float = 1e-2,
    jit_oracle: bool = False,
    before_call=None,
) -> None:
    """jax_fa4.attention with `kwargs` against the float64 reference: o, lse and (with `grads`)
    dq, dk, dv and d sinks of a loss of o (and of lse with `with_lse`), by the error rule.

    `grad_min_magnitude`: the magnitude the gradients' floor is taken at, at least (see
    tolerance.py): a row that sees one key has ``dS = P (dP - D) = dlse`` from two terms of
    magnitude ``|dO . v|`` that cancel in every fused backward (``D = rowsum(dO * O) - dlse``),
    while XLA's autodiff of the oracle happens to cancel them exactly. `jit_oracle`: compile
    the oracles (cheaper for a shape or dtype that only one case uses). `before_call(q, k, v)`
    runs just before the kernel (the GPU tests poison the allocator there)."""
    b, sq, sk, hq, hkv, d, dv = shape
    key = case_key(tag, shape, jnp.dtype(dtype).name, causal)
    q, k, v = random_qkv(key, *shape, dtype)
    kw = dict(kwargs)
    sinks = kw.pop("sinks", None)
    deterministic = kw.pop("deterministic", False)
    kw_w, kw_l = jax.random.split(jax.random.fold_in(key, 7))
    w = jax.random.normal(kw_w, (b, sq, hq, dv), jnp.float32)
    wl = jax.random.normal(kw_l, (b, hq, sq), jnp.float32) * float(with_lse)

    def fa4(q, k, v, sinks):
        return jax_fa4.attention(
            q,
            k,
            v,
            causal=causal,
            sinks=sinks,
            return_lse=True,
            deterministic=deterministic,
            **kw,
        )

    def ref(dt):
        def f(q, k, v, sinks):
            return jax_fa4.attention_reference(
                q, k, v, causal=causal, sinks=sinks, compute_dtype=dt, **kw
            )

        return f

    if grads:
        run = jax.jit(lambda *a: _value_and_grads(fa4, *a, w, wl))
    else:
        run = jax.jit(lambda *a: (*fa4(*a), ()))
    if before_call is not None:
        before_call(q, k, v)
    o, lse, g = run(q, k, v, sinks)
    assert o.dtype == q.dtype and o.shape == (b, sq, hq, dv)
    assert lse.dtype == jnp.float32 and lse.shape == (b, hq, sq)
    # Every element written (the GPU tests poison the allocator first): o finite, lse finite or
    # -inf, gradients finite.
    assert np.isfinite(np.asarray(o, np.float32)).all(), f"{tag}: o has non-finite entries"
    assert not np.isnan(np.asarray(lse)).any(), f"{tag}: lse has NaN entries"
    for x in g:
        assert np.isfinite(np.asarray(x, np.float32)).all(), f"{tag}: non-finite gradient"
    up = (q, k, v, None if sinks is None else sinks.astype(jnp.float64))
    up = tuple(None if x is None else x.astype(jnp.float64) for x in up)
    # The oracles run eagerly: their ops compile once per shape and are reused by every case of
    # that shape (jit would compile each case's whole program anew, ~1 s apiece on 2 cores).
    if grads:
        oracle64 = lambda *a: _value_and_grads(ref(jnp.float64), *a, w, wl)  # noqa: E731
        baseline = lambda *a: _value_and_grads(ref(dtype), *a, w, wl)  # noqa: E731
    else:
        oracle64 = lambda *a: (*ref(jnp.float64)(*a), ())  # noqa: E731
        baseline = lambda *a: (*ref(dtype)(*a), ())  # noqa: E731
    if jit_oracle:
        oracle64, baseline = jax.jit(oracle64), jax.jit(baseline)
    o64, lse64, g64 = oracle64(*up)
    ob, lseb, gb = baseline(q, k, v, sinks)
    name = f"{tag} {jnp.dtype(dtype).name} causal={causal}"
    assert_close_by_rule(f"o {name}", o, o64, ob, dtype)
    assert_close_by_rule(
        f"lse {name}", lse, lse64, lseb.astype(jnp.float32), dtype, LSE_MIN_MAGNITUDE
    )
    if not grads:
        return
    names = ("dq", "dk", "dv", "dsinks")
    for gname, got, want, base in zip(names, g, g64, gb, strict=False):
        if gname == "dsinks":
            assert got.dtype == sinks.dtype and got.shape == sinks.shape
            # The sinks' gradient is a float32 sum over every row of exp(sink - lse) times
            # rowsum(dO * O), with O rounded to the input dtype: like lse (a float32 result of
            # 16-bit inputs) its floor is one unit of the input dtype's rounding, at magnitude 1
            # at least (a float32 floor would leave 2x XLA's error alone, on two numbers a case,
            # which XLA's float16 sum on the GPU can beat by chance).
            assert_close_by_rule(f"{gname} {name}", got, want, base, dtype, LSE_MIN_MAGNITUDE)
        else:
            assert got.dtype == jnp.dtype(dtype)
            assert_close_by_rule(f"{gname} {name}", got, want, base, dtype, grad_min_magnitude)


# (batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v): GQA, lengths that are not
# block multiples, seq_q < seq_k, seq_q > seq_k and seq_q == seq_k (one-array segment ids). The
# quick cases share one shape (QUICK: seq_q < seq_k), so that the eager oracle's ops compile once.
SHAPES = [
    (2, 37, 53, 4, 2, 32, 32),
    (2, 45, 45, 4, 2, 32, 32),
    (2, 70, 37, 4, 1, 32, 16),
    (1, 150, 150, 2, 2, 64, 64),
]
QUICK = SHAPES[0]
FEATURES = [
    "window",
    "window_pair",
    "window_left_only",
    "window_right_only",
    "window_diagonal",
    "q_lengths",
    "kv_lengths",
    "lengths",
    "packed",
    "random_ids",
    "softcap",
    "sinks",
]
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]


def _sid(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}_d{}_dv{}".format(*shape)


# Quick: every feature with causal (test_combinations runs them together without); the slow
# run: both masks over every shape.
ALONE = [(s, f, c) for s in SHAPES for f in FEATURES for c in (False, True)]
QUICK_ALONE = [(QUICK, f, True) for f in FEATURES]


@pytest.mark.parametrize(
    "shape, feature, causal",
    params(
        ALONE,
        QUICK_ALONE,
        lambda c: f"{_sid(c[0])}-{c[1]}-{'causal' if c[2] else 'full'}",
        unpack=True,
    ),
)
def test_each_variant_alone(shape, feature, causal):
    """Every argument alone, with and without causal: forward and every gradient (float32)."""
    b, sq, sk, hq = shape[:4]
    kwargs = make_variant(case_key(feature, shape), feature, b, sq, sk, hq)
    # One key per row: the cancelling terms |dO . v| ~ sqrt(head_dim) (check_variant's doc).
    floor_at = float(np.sqrt(shape[6])) if feature == "window_diagonal" else 1e-2
    check_variant(feature, shape, jnp.float32, kwargs, causal=causal, grad_min_magnitude=floor_at)


@pytest.mark.parametrize("feature", ["window_pair", "lengths", "packed", "sinks"])
@pytest.mark.parametrize("shape", params([SHAPES[0], SHAPES[2]], [QUICK], _sid))
def test_each_variant_seq_q_differs_from_seq_k(shape, feature):
    b, sq, sk, hq = shape[:4]
    kwargs = make_variant(case_key(feature, shape), feature, b, sq, sk, hq)
    check_variant(feature, shape, jnp.float32, kwargs, causal=True)


@pytest.mark.parametrize("dtype", params(DTYPES, [jnp.bfloat16], lambda d: jnp.dtype(d).name))
@pytest.mark.parametrize("feature", params(FEATURES, ["softcap"]))
def test_each_variant_16bit(feature, dtype):
    shape = QUICK
    b, sq, sk, hq = shape[:4]
    kwargs = make_variant(case_key(feature, shape), feature, b, sq, sk, hq)
    check_variant(feature, shape, dtype, kwargs, causal=True, jit_oracle=True)


ALL = ("window_pair", "packed", "lengths", "softcap", "sinks")
COMBOS = [c for n in range(2, len(ALL) + 1) for c in itertools.combinations(ALL, n)]


# Every subset of two or more on the quick shape in float32 with both masks, and the full set
# over every shape, dtype and mask; quick: the full set on the quick shape in float32.
COMBO_CASES = [(c, QUICK, jnp.float32, m) for c in COMBOS for m in (False, True)] + [
    (ALL, s, dt, m)
    for s in SHAPES
    for dt in DTYPES
    for m in (False, True)
    if (s, dt) != (QUICK, jnp.float32)
]


def _combo_id(case) -> str:
    features, shape, dtype, causal = case
    mask = "causal" if causal else "full"
    return f"{'+'.join(features)}-{_sid(shape)}-{jnp.dtype(dtype).name}-{mask}"


@pytest.mark.parametrize(
    "features, shape, dtype, causal",
    params(
        COMBO_CASES,
        [(ALL, QUICK, jnp.float32, False), (ALL, QUICK, jnp.float32, True)],
        _combo_id,
        unpack=True,
    ),
)
def test_combinations(features, shape, dtype, causal):
    """Window + segment ids + lengths + soft cap + sinks (+ causal, GQA): everything at once by
    default; every subset of two or more, and everything over every shape and dtype, in the slow
    run."""
    b, sq, sk, hq = shape[:4]
    kwargs = variant_kwargs(case_key(features, shape), features, b, sq, sk, hq)
    check_variant("+".join(features), shape, dtype, kwargs, causal=causal)


def test_gradient_of_o_only_and_lse_only():
    """The lse's cotangent alone (a loss of lse only) and o's alone, with sinks and lengths."""
    shape = QUICK
    b, sq, sk, hq = shape[:4]
    kwargs = variant_kwargs(case_key("o/lse"), ("lengths", "sinks", "window_pair"), b, sq, sk, hq)
    check_variant("o only", shape, jnp.float32, kwargs, causal=True, with_lse=False)


# ---------------------------------------------------------------------------------------------
# Rows that see no key, padding rows, clamped lengths
# ---------------------------------------------------------------------------------------------


def _fwd_bwd(q, k, v, sinks, do, dlse, **kw):
    def f(q, k, v, sinks):
        return jax_fa4.attention(q, k, v, sinks=sinks, return_lse=True, **kw)

    (o, lse), vjp = jax.vjp(f, q, k, v, sinks)
    return o, lse, *vjp((do, dlse))


@pytest.mark.parametrize("with_sinks", [False, True], ids=["no_sinks", "sinks"])
def test_rows_without_keys_and_padding_rows(with_sinks):
    """Padding rows (i >= q_len): o 0, lse -inf (no sink), dq 0, and no gradient from them;
    rows that see no key (causal with kv_len < q_len, a segment id no key has, kv_len 0): o 0,
    lse -inf or the sink, dq 0; keys j >= kv_len: dk = dv = 0."""
    b, sq, sk, hq, hkv, d = QUICK[:6]
    q, k, v = random_qkv(case_key("empty rows", with_sinks), b, sq, sk, hq, hkv, d, d, jnp.float32)
    q_len = jnp.array([30, 37], jnp.int32)
    kv_len = jnp.array([12, 0], jnp.int32)
    ids = np.zeros((b, sq), np.int32)
    ids[0, 25:30] = 7  # queries 25..29 of row 0: an id that no key has
    kv_ids = np.zeros((b, sk), np.int32)
    sinks = jax.random.normal(case_key("sinks"), (hq,), jnp.float32) if with_sinks else None
    kd, kl = jax.random.split(case_key("cotangents"))
    do = jax.random.normal(kd, (b, sq, hq, d), jnp.float32)
    dlse = jax.random.normal(kl, (b, hq, sq), jnp.float32)
    kw = dict(
        causal=True,
        query_seq_lengths=q_len,
        key_value_seq_lengths=kv_len,
        segment_ids=(jnp.asarray(ids), jnp.asarray(kv_ids)),
    )
    o, lse, dq, dk, dv, *ds = jax.jit(lambda *a: _fwd_bwd(*a, **kw))(q, k, v, sinks, do, dlse)
    o, lse, dq, dk, dv = (np.asarray(x) for x in (o, lse, dq, dk, dv))
    # Which rows see no key: padding (row 0: i >= 30); causal with off = kv_len - q_len < 0
    # (row 0: i < 18 see nothing); row 0's queries 25..29 (their id); row 1 has no keys at all.
    empty = np.zeros((b, sq), bool)
    padding = np.arange(sq)[None, :] >= np.asarray(q_len)[:, None]
    empty |= padding
    empty[0, :18] = True
    empty[0, 25:30] = True
    empty[1, :] = True
    assert (o[empty] == 0).all()
    lse_empty = lse.transpose(0, 2, 1)[empty]  # [n, hq]
    if with_sinks:
        want = np.where(padding[empty][:, None], -np.inf, np.asarray(sinks)[None, :])
        np.testing.assert_array_equal(lse_empty, want)
    else:
        assert np.isneginf(lse_empty).all()
    assert np.isfinite(lse.transpose(0, 2, 1)[~empty]).all()
    assert (dq[empty] == 0).all()
    kv_pad = np.arange(sk)[None, :] >= np.asarray(kv_len)[:, None]
    assert (dk[kv_pad] == 0).all() and (dv[kv_pad] == 0).all()
    assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
    if with_sinks:
        # d sinks = sum over non-padding rows of exp(sink - lse) (dlse - rowsum(dO * O)): a row
        # that sees no key has o = 0 and lse = sink, so it contributes its dlse.
        delta = np.einsum("bqhd,bqhd->bhq", np.asarray(do), o)
        p = np.exp(np.asarray(sinks)[None, :, None] - np.where(np.isfinite(lse), lse, 0.0))
        term = np.where(np.isfinite(lse), p * (np.asarray(dlse) - delta), 0.0)
        np.testing.assert_allclose(np.asarray(ds[0]), term.sum(axis=(0, 2)), rtol=2e-5, atol=2e-5)
    # The same through the oracle.
    kw.pop("causal")
    check_variant("empty rows", QUICK, jnp.float32, {**kw, "sinks": sinks}, causal=True)


def test_int32_lengths_reach_the_kernel_as_given():
    """int32 lengths are the custom call's operands untouched (the kernels clamp them), so a
    decode step whose cache lengths are an argument lowers to the kernel alone, on the CPU and
    (in a build with the CUDA kernels, which CUDA lowering needs) for CUDA; another integer dtype
    is clamped before its cast to int32."""
    b, sq, sk, hq, hkv, d = 2, 4, 24, 2, 1, 64
    q, k, v = random_qkv(case_key("lowered"), b, sq, sk, hq, hkv, d, d, jnp.bfloat16)

    def ops(dtype, platform):
        def f(lengths):
            return jax_fa4.attention(q, k, v, causal=True, key_value_seq_lengths=lengths)

        traced = jax.jit(f).trace(jax.ShapeDtypeStruct((b,), dtype))
        text = traced.lower(lowering_platforms=(platform,)).as_text()
        return set(re.findall(r"stablehlo\.[a-z_]+", text))

    for platform in ("cpu", "cuda") if _ffi.built_with_cuda() else ("cpu",):
        assert ops(jnp.int32, platform) == {"stablehlo.constant", "stablehlo.custom_call"}
        assert {"stablehlo.maximum", "stablehlo.minimum"} <= ops(jnp.int16, platform)


def test_lengths_are_clamped_and_any_integer_dtype_is_taken():
    """Lengths below 0 act as 0, above the sequence as the sequence (a huge int64 one too);
    int8 / uint8 lengths and int16 / int64 segment ids give the int32 answer; one segment id
    array is the pair (ids, ids)."""
    b, sq, sk, hq, hkv, d = 3, 20, 24, 2, 1, 32
    q, k, v = random_qkv(case_key("clamp"), b, sq, sk, hq, hkv, d, d, jnp.float32)
    f = jax.jit(jax_fa4.attention, static_argnames=("return_lse",))
    got = f(
        q,
        k,
        v,
        query_seq_lengths=jnp.array([-5, 7, 99], jnp.int32),
        key_value_seq_lengths=jnp.array([30, -1, 10], jnp.int32),
        return_lse=True,
    )
    want = f(
        q,
        k,
        v,
        query_seq_lengths=jnp.array([0, 7, 20], jnp.int32),
        key_value_seq_lengths=jnp.array([24, 0, 10], jnp.int32),
        return_lse=True,
    )
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    extremes = f(
        q,
        k,
        v,
        query_seq_lengths=jnp.array([-(2**31), 7, 2**31 - 1], jnp.int32),
        key_value_seq_lengths=jnp.array([2**31 - 1, -(2**31), 10], jnp.int32),
        return_lse=True,
    )
    for x, y in zip(extremes, want, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    ql = np.array([3, 20, 11])
    base = f(q, k, v, query_seq_lengths=jnp.asarray(ql, jnp.int32))
    for dt in (np.int8, np.uint8):
        np.testing.assert_array_equal(
            np.asarray(f(q, k, v, query_seq_lengths=ql.astype(dt))), np.asarray(base)
        )
    big = f(q, k, v, query_seq_lengths=jnp.array([2**40, 20, 11], jnp.int64))
    np.testing.assert_array_equal(np.asarray(big)[1:], np.asarray(base)[1:])
    # Without 64-bit types too: a NumPy int64 length past int32, given to the (unjitted) call, is
    # clamped, not wrapped to 3 (a jitted function's int64 argument is converted by jit first).
    full = f(q, k, v, query_seq_lengths=jnp.array([sq, 20, 11], jnp.int32))
    jax.config.update("jax_enable_x64", False)
    try:
        huge = jax_fa4.attention(q, k, v, query_seq_lengths=np.array([2**32 + 3, 20, 11], np.int64))
    finally:
        jax.config.update("jax_enable_x64", True)
    np.testing.assert_array_equal(np.asarray(huge), np.asarray(full))
    # A list of traced lengths is no host value: it still works inside jit.
    listed = jax.jit(lambda a, c: jax_fa4.attention(q, k, v, query_seq_lengths=[a, 20, c]))
    np.testing.assert_array_equal(
        np.asarray(listed(jnp.int32(sq), jnp.int32(11))), np.asarray(full)
    )
    ids = packed_ids(case_key("ids"), b, sq)
    q2, k2, v2 = q[:, :, :, :], k[:, :sq], v[:, :sq]
    base = f(q2, k2, v2, segment_ids=ids)
    pair = f(q2, k2, v2, segment_ids=(ids, ids))  # one array means the same ids for q and kv
    np.testing.assert_array_equal(np.asarray(pair), np.asarray(base))
    for dt in (jnp.int16, jnp.int64):
        np.testing.assert_array_equal(
            np.asarray(f(q2, k2, v2, segment_ids=ids.astype(dt))), np.asarray(base)
        )


@pytest.mark.parametrize(
    "with_sinks", params([False, True], [True], ["no_sinks", "sinks"].__getitem__)
)
def test_no_keys_at_all(with_sinks):
    """seq_k == 0: no kernel; o 0, lse -inf (or the sink on the non-padding rows); d sinks is
    the sum of dlse over the non-padding rows; dq 0."""
    b, sq, hq, d = 2, 5, 4, 32
    q = jax.random.normal(case_key("no keys"), (b, sq, hq, d), jnp.float32)
    k = jnp.zeros((b, 0, 2, d), jnp.float32)
    sinks = jnp.arange(1.0, hq + 1.0) if with_sinks else None
    q_len = jnp.array([3, 9], jnp.int32)
    do = jnp.ones((b, sq, hq, d), jnp.float32)
    dlse = jax.random.normal(case_key("dlse"), (b, hq, sq), jnp.float32)
    o, lse, dq, dk, dv, *ds = jax.jit(
        lambda *a: _fwd_bwd(*a, query_seq_lengths=q_len, local_window_size=3)
    )(q, k, k, sinks, do, dlse)
    assert (np.asarray(o) == 0).all() and (np.asarray(dq) == 0).all()
    rows = np.arange(sq)[None, :] < np.asarray([3, 5])[:, None]
    if with_sinks:
        want = np.where(rows[:, None, :], np.asarray(sinks)[None, :, None], -np.inf)
        np.testing.assert_array_equal(np.asarray(lse), np.broadcast_to(want, lse.shape))
        want_ds = np.where(rows[:, None, :], np.asarray(dlse), 0.0).sum(axis=(0, 2))
        np.testing.assert_allclose(np.asarray(ds[0]), want_ds, rtol=1e-6)
    else:
        assert np.isneginf(np.asarray(lse)).all()


@pytest.mark.parametrize("value", params([np.nan, np.inf], [np.nan], lambda x: str(x)))
def test_nonfinite_in_invisible_keys_and_padding_rows_does_not_leak(value):
    """NaN / Inf planted in k and v beyond kv_len, outside every query's window, in a segment
    no query has, and in q and dO of padding rows: o, lse, dq, dk, dv are bit for bit those of
    the clean inputs."""
    b, sq, sk, hq, hkv, d = 2, 70, 90, 4, 2, 32
    q, k, v = random_qkv(case_key("plant", sq, sk), b, sq, sk, hq, hkv, d, d, jnp.float32)
    kd, kl = jax.random.split(case_key("plant cotangents"))
    do = jax.random.normal(kd, (b, sq, hq, d), jnp.float32)
    dlse = jax.random.normal(kl, (b, hq, sq), jnp.float32)
    q_len = jnp.array([60, 70], jnp.int32)
    kv_len = jnp.array([80, 85], jnp.int32)
    q_ids = np.zeros((b, sq), np.int32)
    kv_ids = np.zeros((b, sk), np.int32)
    kv_ids[:, 5] = 3  # key 5: a segment no query has
    sinks = jax.random.normal(case_key("plant sinks"), (hq,), jnp.float32)
    kw = dict(
        local_window_size=(40, 0),
        query_seq_lengths=q_len,
        key_value_seq_lengths=kv_len,
        segment_ids=(jnp.asarray(q_ids), jnp.asarray(kv_ids)),
        logits_soft_cap=SOFTCAP,
    )
    run = jax.jit(lambda *a: _fwd_bwd(*a, **kw))
    clean = [np.asarray(x) for x in run(q, k, v, sinks, do, dlse)]
    # Row 0: off = 20, window (40, 0): query 0 sees keys 0..20 -> key 0 is visible; key 1 of
    # row 0 is visible too. Keys 85..89 (beyond kv_len), key 5 (segment 3), key 2 of row 1
    # (off = 15: query i sees i - 25 .. i + 15; every query sees key 2 up to i = 27 -> use the
    # keys beyond the length and the foreign segment only).
    kp = k.at[:, 85:, 0, 3].set(value).at[:, 5, 1, 0].set(value).at[0, 80:85, :, 2].set(value)
    vp = v.at[:, 86, 1, :].set(value).at[:, 5, 0, 1].set(value)
    qp = q.at[0, 60:, :, 4].set(value)
    dop = do.at[0, 61, 2, :].set(value)
    planted = [np.asarray(x) for x in run(qp, kp, vp, sinks, dop, dlse)]
    names = ("o", "lse", "dq", "dk", "dv", "dsinks")
    for name, got, want in zip(names, planted, clean, strict=True):
        assert not np.isnan(want).any() and not np.isposinf(want).any(), f"{name}: clean run"
        if name in ("dk", "dv"):
            # The planted keys' own gradients are 0 in both (no query sees them).
            assert (got[:, 85:] == 0).all() and (got[:, 5] == 0).all(), name
            assert (got[0, 80:] == 0).all(), name
        np.testing.assert_array_equal(got, want, err_msg=name)
