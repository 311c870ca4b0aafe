"""The Hopper backward kernel through the whole Python path (jax.grad of jax_fa4.attention ->
fa4_bwd_p -> "jax_fa4_bwd_cuda"), against the float64 oracle's gradients by the error rule of
docs/design.md (max error <= 2x plain XLA's error in the same dtype + a small floor). Skips
without a GPU.

Output poisoning: XLA owns the output buffers, so before each call we allocate and free NaN-filled
arrays of the gradients' sizes (the allocator tends to hand the same memory back), and every
gradient element is checked to be finite. tests/gpu/cuda/bwd_kernel_check.cu poisons for certain.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import WORST, assert_close_by_rule, random_qkv

import jax_fa4
from jax_fa4 import _ffi

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "gpu", reason="needs a GPU (these test the Hopper CUDA kernel)"
)

HEAD_DIMS = [64, 128, 256]
DTYPES = [jnp.bfloat16, jnp.float16]

# (batch, seq_q, seq_k, heads_q, heads_kv): lengths that are not tile multiples, seq_q != seq_k
# both ways (with causal, rows that see no key), GQA ratios 1/2/4/8, batch 1 and odd batches.
SHAPES = [
    (1, 1, 1, 1, 1),
    (3, 17, 17, 4, 2),
    (1, 127, 127, 8, 1),
    (2, 1000, 1000, 2, 2),
    (2, 127, 1000, 4, 4),
    (1, 1000, 127, 8, 2),
    (5, 129, 129, 8, 4),
    (1, 200, 333, 8, 8),
]


def _id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}".format(*shape)


def _poison_allocator(shapes_dtypes):
    """Leaves freed NaN-filled blocks of the gradients' sizes for the allocator to hand back."""
    junk = [jnp.full(s, jnp.nan, d) for s, d in shapes_dtypes]
    jax.block_until_ready(junk)
    del junk


def _loss(attn, q, k, v, w, wl):
    o, lse = attn(q, k, v)
    finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
    acc = jnp.float64 if o.dtype == jnp.float64 else jnp.float32
    return jnp.sum(o.astype(acc) * w) + jnp.sum(finite_lse * wl)


def _grads(q, k, v, w, wl, causal, softmax_scale=None, deterministic=False):
    def fa4(q, k, v):
        return jax_fa4.attention(
            q,
            k,
            v,
            causal=causal,
            softmax_scale=softmax_scale,
            return_lse=True,
            deterministic=deterministic,
        )

    return jax.jit(jax.grad(lambda *a: _loss(fa4, *a, w, wl), argnums=(0, 1, 2)))(q, k, v)


def _ref_grads(q, k, v, w, wl, causal, dtype, softmax_scale=None):
    def ref(q, k, v):
        return jax_fa4.attention_reference(
            q, k, v, causal=causal, softmax_scale=softmax_scale, compute_dtype=dtype
        )

    if dtype == jnp.float64:
        q, k, v = (x.astype(jnp.float64) for x in (q, k, v))
    return jax.jit(jax.grad(lambda *a: _loss(ref, *a, w, wl), argnums=(0, 1, 2)))(q, k, v)


def _check(tag, q, k, v, w, wl, causal, softmax_scale=None, deterministic=False):
    dtype = q.dtype
    _poison_allocator([(q.shape, dtype), (k.shape, dtype), (v.shape, dtype)])
    grads = _grads(q, k, v, w, wl, causal, softmax_scale, deterministic)
    oracle = _ref_grads(q, k, v, w, wl, causal, jnp.float64, softmax_scale)
    baseline = _ref_grads(q, k, v, w, wl, causal, dtype, softmax_scale)
    for name, g, o, bl, x in zip(
        ("dq", "dk", "dv"), grads, oracle, baseline, (q, k, v), strict=True
    ):
        assert g.dtype == dtype and g.shape == x.shape, f"{name} {tag}: {g.dtype} {g.shape}"
        assert np.isfinite(np.asarray(g, np.float32)).all(), f"{name} {tag}: non-finite entries"
        assert_close_by_rule(f"{name} {tag}", g, o, bl, dtype)
    return grads


def _weights(b, sq, hq, d, with_lse, seed=11):
    w = jax.random.normal(jax.random.key(seed), (b, sq, hq, d), jnp.float32)
    wl = jax.random.normal(jax.random.key(seed + 1), (b, hq, sq), jnp.float32) * float(with_lse)
    return w, wl


@pytest.fixture(autouse=True, scope="module")
def _record_worst_ratio():
    """Under pytest-xdist the terminal summary sees no worker's ratios: append ours to a file."""
    yield
    path = os.environ.get("FA4_WORST_RATIO_FILE")
    if path and WORST:
        ratio, name = max(WORST)
        with open(path, "a") as f:
            f.write(f"{len(WORST)} checks; worst error / allowed bound = {ratio:.3f} ({name})\n")


def test_extension_has_the_cuda_backward():
    assert _ffi.built_with_cuda(), "jax_fa4 was built without nvcc: no CUDA kernels"
    assert _ffi.has_target("jax_fa4_bwd_cuda", "cuda")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_grad_matches_oracle(shape, head_dim, dtype, causal):
    b, sq, sk, hq, hkv = shape
    key = jax.random.key(hash((shape, head_dim, jnp.dtype(dtype).name, causal)) % 2**31)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, head_dim, head_dim, dtype)
    w, wl = _weights(b, sq, hq, head_dim, with_lse=False)
    _check(
        f"{_id(shape)} d{head_dim} {jnp.dtype(dtype).name} causal={causal}", q, k, v, w, wl, causal
    )


# The lse cotangent (dlse) folds into delta' = rowsum(dO * O) - dlse.
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("shape", [(2, 300, 200, 4, 2), (1, 129, 500, 2, 1)], ids=_id)
def test_grad_through_lse(shape, head_dim, causal):
    b, sq, sk, hq, hkv = shape
    key = jax.random.key(hash((shape, head_dim, causal, "lse")) % 2**31)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, head_dim, head_dim, jnp.bfloat16)
    w, wl = _weights(b, sq, hq, head_dim, with_lse=True)
    _check(f"{_id(shape)} d{head_dim} lse causal={causal}", q, k, v, w, wl, causal)


def test_lse_cotangent_alone():
    """Only lse is differentiated (o's cotangent is zero): dS = P * dlse exactly."""
    q, k, v = random_qkv(jax.random.key(21), 1, 257, 300, 4, 2, 128, 128, jnp.bfloat16)
    w = jnp.zeros((1, 257, 4, 128), jnp.float32)
    wl = jax.random.normal(jax.random.key(22), (1, 4, 257), jnp.float32)
    _check("lse only", q, k, v, w, wl, True)


def test_rows_that_see_no_key_get_zero_dq():
    # Bottom-right causal, seq_q 300 > seq_k 100: queries 0..199 see nothing.
    q, k, v = random_qkv(jax.random.key(7), 2, 300, 100, 4, 2, 128, 128, jnp.bfloat16)
    w, wl = _weights(2, 300, 4, 128, with_lse=True)
    dq, dk, dv = _check("no-key rows", q, k, v, w, wl, True)
    np.testing.assert_array_equal(np.asarray(dq[:, :200], np.float32), 0.0)


def test_large_logits_do_not_overflow():
    q, k, v = random_qkv(jax.random.key(9), 1, 256, 256, 2, 2, 128, 128, jnp.bfloat16)
    q, k = q * 8, k * 8
    w, wl = _weights(1, 256, 2, 128, with_lse=False)
    _check("large logits", q, k, v, w, wl, False)


def test_custom_softmax_scale():
    q, k, v = random_qkv(jax.random.key(8), 2, 300, 257, 4, 1, 64, 64, jnp.float16)
    w, wl = _weights(2, 300, 4, 64, with_lse=True)
    _check("scale=0.37", q, k, v, w, wl, True, softmax_scale=0.37)


def test_long_sequence_many_query_blocks():
    # Many main-loop steps per CTA (the Q/dO rings and the P/dS double buffer wrap many times).
    q, k, v = random_qkv(jax.random.key(23), 1, 3000, 3000, 2, 1, 128, 128, jnp.bfloat16)
    w, wl = _weights(1, 3000, 2, 128, with_lse=False)
    _check("seq 3000 GQA 2", q, k, v, w, wl, True)


@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
def test_dk_dv_repeat_bitwise(head_dim):
    """dK and dV are summed in registers by one CTA: two runs must give the same bits (a race
    would show as a difference). dQ goes through float atomics and may differ in the last bits
    (unless deterministic=True: test_deterministic_repeats_bitwise_and_matches_oracle)."""
    q, k, v = random_qkv(jax.random.key(24), 2, 700, 600, 8, 2, head_dim, head_dim, jnp.bfloat16)
    w, wl = _weights(2, 700, 8, head_dim, with_lse=True)
    g1 = _grads(q, k, v, w, wl, True)
    g2 = _grads(q, k, v, w, wl, True)
    for a, b in zip(g1[1:], g2[1:], strict=True):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


# deterministic=True: the dQ adds of each query block are ordered by key block (a semaphore per
# (batch, q head, query block)), so two runs give the same bits for dq as well as dk and dv. The
# shapes cover GQA, seq_q != seq_k both ways (causal with seq_q > seq_k: query blocks no key
# block visits), many key blocks per query block (long waits), and the last, ragged blocks.
DET_SHAPES = [
    (2, 700, 600, 8, 2),
    (1, 1000, 127, 8, 2),
    (2, 127, 1000, 4, 4),
    (1, 1500, 1500, 2, 1),
]


def _bits(x):
    return np.asarray(x).view(np.uint16)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("shape", DET_SHAPES, ids=_id)
def test_deterministic_repeats_bitwise_and_matches_oracle(shape, head_dim, dtype, causal):
    b, sq, sk, hq, hkv = shape
    key = jax.random.key(hash((shape, head_dim, jnp.dtype(dtype).name, causal, "det")) % 2**31)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, head_dim, head_dim, dtype)
    w, wl = _weights(b, sq, hq, head_dim, with_lse=True)
    tag = f"{_id(shape)} d{head_dim} {jnp.dtype(dtype).name} causal={causal} deterministic"
    g1 = _check(tag, q, k, v, w, wl, causal, deterministic=True)  # poisons, checks vs the oracle
    for run in range(2):
        _poison_allocator([(x.shape, x.dtype) for x in (q, k, v)])
        g2 = _grads(q, k, v, w, wl, causal, deterministic=True)
        for name, a, b_ in zip(("dq", "dk", "dv"), g1, g2, strict=True):
            np.testing.assert_array_equal(
                _bits(a), _bits(b_), err_msg=f"{name} {tag}: run {run + 2} differs from run 1"
            )


def test_deterministic_and_default_agree_closely():
    """Only the order of the float32 dQ adds differs between the modes: dk, dv bitwise equal,
    dq within float32 rounding of the sum (then one rounding to bf16)."""
    q, k, v = random_qkv(jax.random.key(26), 2, 700, 600, 8, 2, 128, 128, jnp.bfloat16)
    w, wl = _weights(2, 700, 8, 128, with_lse=True)
    det = _grads(q, k, v, w, wl, True, deterministic=True)
    dflt = _grads(q, k, v, w, wl, True)
    for name, a, b_ in zip(("dq", "dk", "dv"), det, dflt, strict=True):
        a, b_ = np.asarray(a, np.float32), np.asarray(b_, np.float32)
        atol = 1e-2 * float(np.abs(b_).max()) if name == "dq" else 0.0
        np.testing.assert_allclose(a, b_, rtol=0, atol=atol, err_msg=name)


def test_deterministic_under_vmap_repeats_bitwise():
    n, b, s, h, d = 3, 1, 700, 4, 64
    keys = jax.random.split(jax.random.key(27), 3)
    q, k, v = (
        jax.random.normal(kk, (n, b, s, h, d), jnp.float32).astype(jnp.bfloat16) for kk in keys
    )

    def loss(q, k, v):
        o = jax_fa4.attention(q, k, v, causal=True, deterministic=True)
        return jnp.sum(o.astype(jnp.float32) ** 2)

    fn = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2))))
    g1 = fn(q, k, v)
    _poison_allocator([(x.shape, x.dtype) for x in (q, k, v)])
    g2 = fn(q, k, v)
    for a, b_ in zip(g1, g2, strict=True):
        assert np.isfinite(np.asarray(a, np.float32)).all()
        np.testing.assert_array_equal(_bits(a), _bits(b_))


def test_vmap_of_grad_equals_per_example_grads():
    n, b, s, h, d = 3, 1, 130, 4, 64
    keys = jax.random.split(jax.random.key(25), 3)
    q, k, v = (
        jax.random.normal(kk, (n, b, s, h, d), jnp.float32).astype(jnp.bfloat16) for kk in keys
    )

    def loss(q, k, v):
        return jnp.sum(jax_fa4.attention(q, k, v, causal=True).astype(jnp.float32) ** 2)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    batched = jax.jit(jax.vmap(grad))(q, k, v)
    for i in range(n):
        single = jax.jit(grad)(q[i], k[i], v[i])
        for a, b_ in zip(batched, single, strict=True):
            np.testing.assert_allclose(
                np.asarray(a[i], np.float32), np.asarray(b_, np.float32), rtol=2e-2, atol=2e-2
            )


def test_hlo_holds_the_cuda_backward_custom_call():
    q, k, v = random_qkv(jax.random.key(12), 1, 64, 64, 2, 2, 64, 64, jnp.bfloat16)

    def loss(q):
        return jax_fa4.attention(q, k, v, causal=True).astype(jnp.float32).sum()

    text = jax.jit(jax.grad(loss)).lower(q).as_text()
    assert "jax_fa4_bwd_cuda" in text


def _raw_bwd(
    q, k, v, o, lse, do, dlse, *, softmax_scale=0.125, causal=False, deterministic=False, ws_extra=0
):
    """Calls the FFI target directly, skipping every Python-side check; returns (dq, dk, dv).
    The 4th result is the uint8 workspace, ws_extra bytes more than the extension asks for."""
    b, sq, hq, d = q.shape
    ws_bytes = _ffi.cuda_bwd_workspace_bytes(b, sq, hq, d) + ws_extra
    call = jax.ffi.ffi_call(
        "jax_fa4_bwd_cuda",
        (
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct(k.shape, k.dtype),
            jax.ShapeDtypeStruct(v.shape, v.dtype),
            jax.ShapeDtypeStruct((ws_bytes,), jnp.uint8),
        ),
    )
    i32 = jnp.zeros((0,), jnp.int32)
    # q/kv lengths, q/kv segment ids, q/kv segment ranges: absent ([0] placeholders).
    out = call(
        q,
        k,
        v,
        o,
        lse,
        do,
        dlse,
        *(i32,) * 6,
        softmax_scale=np.float64(softmax_scale),
        causal=causal,
        window_left=np.int64(1 << 30),
        window_right=np.int64(1 << 30),
        softcap=np.float64(0.0),
        deterministic=deterministic,
    )
    return tuple(out[:3])


def _raw_inputs(b, sq, sk, hq, hkv, d, dtype, seed=13):
    q, k, v = random_qkv(jax.random.key(seed), b, sq, sk, hq, hkv, d, d, dtype)
    o = jnp.zeros_like(q)
    lse = jnp.zeros((b, hq, sq), jnp.float32)
    return q, k, v, o, lse, jnp.ones_like(q), jnp.zeros_like(lse)


@pytest.mark.parametrize(
    "dtype,head_dim,match",
    [
        (jnp.float32, 64, "bfloat16 and float16"),
        (jnp.bfloat16, 96, "head_dim 96"),
    ],
)
def test_handler_rejects_unsupported_inputs_with_an_error(dtype, head_dim, match):
    args = _raw_inputs(1, 16, 16, 2, 2, head_dim, dtype)
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(_raw_bwd(*args))


def test_handler_rejects_bad_gqa_and_scale_then_still_works():
    args = _raw_inputs(1, 16, 16, 3, 2, 64, jnp.bfloat16)
    with pytest.raises(Exception, match="multiple of heads_kv"):
        jax.block_until_ready(_raw_bwd(*args))
    args = _raw_inputs(1, 16, 16, 2, 2, 64, jnp.bfloat16)
    with pytest.raises(Exception, match="softmax_scale"):
        jax.block_until_ready(_raw_bwd(*args, softmax_scale=-1.0))
    dq, dk, dv = _raw_bwd(*args)
    for g in (dq, dk, dv):
        assert np.isfinite(np.asarray(g, np.float32)).all()


def test_handler_checks_the_workspace_size():
    args = _raw_inputs(2, 130, 40, 4, 2, 64, jnp.bfloat16)
    with pytest.raises(Exception, match=r"workspace \(4th result\) has .* bytes; .* needs"):
        jax.block_until_ready(_raw_bwd(*args, ws_extra=-1))
    # A larger workspace than needed is fine and gives the same gradients.
    exact = [np.asarray(g, np.float32) for g in _raw_bwd(*args)]
    larger = [np.asarray(g, np.float32) for g in _raw_bwd(*args, ws_extra=4096 + 48)]
    for name, a, b in zip(("dq", "dk", "dv"), exact, larger, strict=True):
        assert np.isfinite(a).all(), name
        # dQ is summed by atomics (the order may vary); dK and dV repeat bitwise.
        atol = 1e-2 * float(np.abs(a).max()) if name == "dq" else 0.0
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=name)
    # Deterministic mode reads its semaphores from the same workspace (at any base offset the
    # split aligns): exact repeats, including with the larger, differently placed workspace.
    det = [np.asarray(g, np.float32) for g in _raw_bwd(*args, deterministic=True)]
    det2 = [
        np.asarray(g, np.float32) for g in _raw_bwd(*args, deterministic=True, ws_extra=4096 + 48)
    ]
    for name, a, b in zip(("dq", "dk", "dv"), det, det2, strict=True):
        assert np.isfinite(a).all(), name
        np.testing.assert_array_equal(a, b, err_msg=f"{name} deterministic")


# ---------------------------------------------------------------------------------------------
# Attention variants (window, lengths, segment ids, soft cap, sinks) on the Hopper backward
# ---------------------------------------------------------------------------------------------

VARIANT_SHAPES = [(2, 300, 500, 4, 2), (1, 1000, 1000, 2, 1), (3, 129, 129, 8, 4)]
VARIANT_FEATURES = [
    ("window_pair",),
    ("window_diagonal",),
    ("lengths",),
    ("packed",),
    ("random_ids",),
    ("softcap",),
    ("sinks",),
    ("window_pair", "packed", "lengths", "softcap", "sinks"),
]


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", params(DTYPES, [jnp.bfloat16], lambda d: jnp.dtype(d).name))
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("features", VARIANT_FEATURES, ids="+".join)
@pytest.mark.parametrize("shape", params(VARIANT_SHAPES, [VARIANT_SHAPES[0]], _id))
def test_variant_grads_match_oracle(shape, features, head_dim, dtype, causal, deterministic):
    """dq, dk, dv, d sinks of a loss of o and lse, against the float64 oracle."""
    from test_variants import check_variant, variant_kwargs

    if deterministic and (dtype != jnp.bfloat16 or shape != VARIANT_SHAPES[0]):
        pytest.skip("deterministic: one dtype and shape per head dim")
    b, sq, sk, hq, hkv = shape
    full = (b, sq, sk, hq, hkv, head_dim, head_dim)
    kwargs = variant_kwargs(jax.random.key(sum(shape) + head_dim), features, b, sq, sk, hq)
    if "window_pair" in features and sq >= 1000:
        kwargs["local_window_size"] = (200, 64)
    if deterministic:
        kwargs["deterministic"] = True

    def poison(q, k, v):
        _poison_allocator([(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)])

    # One key per row: the cancelling terms |dO . v| ~ sqrt(head_dim) (check_variant's doc).
    floor_at = float(np.sqrt(head_dim)) if "window_diagonal" in features else 1e-2
    check_variant(
        "+".join(features) + f" d{head_dim}",
        full,
        dtype,
        kwargs,
        causal=causal,
        jit_oracle=True,
        before_call=poison,
        grad_min_magnitude=floor_at,
    )


def test_variant_padding_rows_and_invisible_keys_get_zero_gradients():
    b, sq, sk, hq, hkv, d = 2, 300, 260, 4, 2, 128
    q, k, v = random_qkv(jax.random.key(31), b, sq, sk, hq, hkv, d, d, jnp.bfloat16)
    q_len = jnp.array([200, 300], jnp.int32)
    kv_len = jnp.array([130, 260], jnp.int32)
    sinks = jnp.linspace(-1.0, 1.0, hq, dtype=jnp.float32)

    def loss(q, k, v, sinks):
        o, lse = jax_fa4.attention(
            q,
            k,
            v,
            local_window_size=(64, 64),
            query_seq_lengths=q_len,
            key_value_seq_lengths=kv_len,
            sinks=sinks,
            return_lse=True,
        )
        return jnp.sum(o.astype(jnp.float32) ** 2) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0))

    _poison_allocator([(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)])
    dq, dk, dv, ds = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, sinks)
    dq, dk, dv = (np.asarray(x, np.float32) for x in (dq, dk, dv))
    for x in (dq, dk, dv, np.asarray(ds)):
        assert np.isfinite(x).all()
    np.testing.assert_array_equal(dq[0, 200:], 0.0)
    np.testing.assert_array_equal(dk[0, 130:], 0.0)
    np.testing.assert_array_equal(dv[0, 130:], 0.0)
