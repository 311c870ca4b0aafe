"""The Hopper forward kernel through the whole Python path (jax_fa4.attention -> fa4_fwd_p ->
"jax_fa4_fwd_cuda"), against a float64 oracle by the error rule of docs/design.md. Skips without
a GPU.

Output poisoning: XLA owns the output buffers, so they cannot be pre-filled from Python. Before
each call we allocate and free NaN-filled arrays of the outputs' sizes (the allocator tends to hand
the same memory back), and every output element is checked to be finite (lse: finite, or -inf
exactly where the oracle is). tests/gpu/cuda/fwd_kernel_check.cu poisons the outputs for certain.
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

# (batch, seq_q, seq_k, heads_q, heads_kv): seq lengths that are not tile multiples, seq_q != seq_k
# both ways (with causal, rows that see no key), GQA ratios 1/2/4/8, batch 1 and odd batches.
SHAPES = [
    (1, 1, 1, 1, 1),
    (3, 17, 17, 4, 2),
    (1, 127, 127, 8, 1),
    (2, 1000, 1000, 2, 2),
    # hd128 at 3000 keys: the persistent kernel under the mask, the one-tile kernel without
    # (fwd_persistent_max_seq_k in cuda/hopper/fwd/heuristics.h: 4096 causal, 2048 not).
    (1, 3000, 3000, 2, 1),
    (2, 127, 1000, 4, 4),
    (1, 1000, 127, 8, 2),
    (5, 129, 129, 8, 4),
    (1, 1, 500, 2, 1),
    (1, 200, 333, 8, 8),
    (1, 4200, 4200, 2, 1),  # seq_k > 4096: hd64 / hd128's non-persistent kernels
]


def _id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}".format(*shape)


def _poison_allocator(b, sq, hq, d, dtype):
    """Leaves freed NaN-filled blocks of the outputs' sizes for the allocator to hand back."""
    junk = [
        jnp.full((b, sq, hq, d), jnp.nan, dtype),
        jnp.full((b, hq, sq), jnp.nan, jnp.float32),
    ]
    jax.block_until_ready(junk)
    del junk


_oracle64 = jax.jit(
    lambda q, k, v, causal: jax_fa4.attention_reference(
        q, k, v, causal=causal, compute_dtype=jnp.float64
    ),
    static_argnums=3,
)
_plain = jax.jit(
    lambda q, k, v, causal: jax_fa4.attention_reference(
        q, k, v, causal=causal, compute_dtype=q.dtype
    ),
    static_argnums=3,
)
_fa4 = jax.jit(
    lambda q, k, v, causal: jax_fa4.attention(q, k, v, causal=causal, return_lse=True),
    static_argnums=3,
)


def _check(tag, q, k, v, causal, o, lse):
    dtype = q.dtype
    o64, lse64 = _oracle64(q, k, v, causal)
    o_x, lse_x = _plain(q, k, v, causal)
    o_np, lse_np = np.asarray(o, np.float64), np.asarray(lse, np.float64)
    assert np.isfinite(o_np).all(), f"{tag}: o has non-finite entries (unwritten or NaN)"
    assert not np.isnan(lse_np).any(), f"{tag}: lse has NaN entries (unwritten?)"
    assert (np.isfinite(lse_np) | np.isneginf(np.asarray(lse64))).all(), f"{tag}: lse not finite"
    assert_close_by_rule(f"o {tag}", o, o64, o_x, dtype)
    assert_close_by_rule(f"lse {tag}", lse, lse64, lse_x.astype(jnp.float32), dtype)


_REGISTRATION_WORKAROUND = []


@pytest.fixture(autouse=True, scope="module")
def _cuda_target_registered():
    """Makes sure XLA can find "jax_fa4_fwd_cuda" before any test runs.

    jaxlib files a registration under the platform name it is given, and its GPU client reads the
    one filed under "CUDA"; a registration under "cuda" is never seen ("No FFI handler registered
    for jax_fa4_fwd_cuda on a platform CUDA"). If jax_fa4/_ffi.py registered it under "cuda", we
    register it again under "CUDA" so the kernel can still be tested, and
    test_ffi_registration_reaches_the_gpu_client reports the bug.
    """
    q = jax.random.normal(jax.random.key(0), (1, 8, 1, 64), jnp.float32).astype(jnp.bfloat16)
    try:
        jax.block_until_ready(jax_fa4.attention(q, q, q))
    except jax.errors.JaxRuntimeError as err:
        if "No FFI handler registered" not in str(err):
            raise
        for name, capsule in _ffi._jax_fa4_ext.registrations()["cuda"].items():
            jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
        _REGISTRATION_WORKAROUND.append(str(err).splitlines()[0])
    yield
    # Under pytest-xdist the terminal summary sees no worker's ratios: append ours to a file.
    path = os.environ.get("FA4_WORST_RATIO_FILE")
    if path and WORST:
        ratio, name = max(WORST)
        with open(path, "a") as f:
            f.write(f"{len(WORST)} checks; worst error / allowed bound = {ratio:.3f} ({name})\n")


def test_ffi_registration_reaches_the_gpu_client():
    assert not _REGISTRATION_WORKAROUND, (
        "jax_fa4._ffi registered the CUDA targets under a platform name XLA's GPU client does not "
        "read (register with platform='CUDA', not 'cuda'); the tests re-registered them. Error: "
        + _REGISTRATION_WORKAROUND[0]
    )


def test_extension_has_the_cuda_kernel():
    assert _ffi.built_with_cuda(), "jax_fa4 was built without nvcc: no CUDA kernels"
    assert _ffi.has_target("jax_fa4_fwd_cuda", "cuda")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_forward_matches_oracle(shape, head_dim, dtype, causal):
    b, sq, sk, hq, hkv = shape
    key = jax.random.key(hash((shape, head_dim, jnp.dtype(dtype).name, causal)) % 2**31)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, head_dim, head_dim, dtype)
    _poison_allocator(b, sq, hq, head_dim, dtype)
    o, lse = _fa4(q, k, v, causal)
    assert o.dtype == dtype and o.shape == (b, sq, hq, head_dim)
    assert lse.dtype == jnp.float32 and lse.shape == (b, hq, sq)
    _check(
        f"{_id(shape)} d{head_dim} {jnp.dtype(dtype).name} causal={causal}", q, k, v, causal, o, lse
    )


def test_rows_that_see_no_key_are_zero_with_lse_minus_inf():
    q, k, v = random_qkv(jax.random.key(7), 2, 300, 100, 4, 2, 128, 128, jnp.bfloat16)
    _poison_allocator(2, 300, 4, 128, jnp.bfloat16)
    o, lse = _fa4(q, k, v, True)
    # Bottom-right alignment: query i sees keys j <= i - 200; rows 0..199 see nothing.
    np.testing.assert_array_equal(np.asarray(o[:, :200], np.float32), 0.0)
    assert np.isneginf(np.asarray(lse[:, :, :200])).all()
    assert np.isfinite(np.asarray(lse[:, :, 200:])).all()


def test_custom_softmax_scale():
    q, k, v = random_qkv(jax.random.key(8), 2, 300, 257, 4, 1, 64, 64, jnp.float16)
    o, lse = jax.jit(
        lambda q, k, v: jax_fa4.attention(q, k, v, softmax_scale=0.37, return_lse=True)
    )(q, k, v)
    o64, lse64 = jax_fa4.attention_reference(q, k, v, softmax_scale=0.37, compute_dtype=jnp.float64)
    o_x, lse_x = jax_fa4.attention_reference(q, k, v, softmax_scale=0.37, compute_dtype=jnp.float16)
    assert_close_by_rule("o scale=0.37", o, o64, o_x, jnp.float16)
    assert_close_by_rule("lse scale=0.37", lse, lse64, lse_x.astype(jnp.float32), jnp.float16)


def test_large_logits_do_not_overflow():
    q, k, v = random_qkv(jax.random.key(9), 1, 256, 256, 2, 2, 128, 128, jnp.bfloat16)
    q, k = q * 8, k * 8  # logits ~ 64 * sqrt(128) / sqrt(128) = O(64): exp would overflow f32
    o, lse = _fa4(q, k, v, False)
    _check("large logits", q, k, v, False, o, lse)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_eager_and_jit_agree_bitwise(causal):
    q, k, v = random_qkv(jax.random.key(10), 3, 257, 300, 4, 2, 128, 128, jnp.bfloat16)
    o_eager = jax_fa4.attention(q, k, v, causal=causal)
    o_jit = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=causal))(q, k, v)
    np.testing.assert_array_equal(np.asarray(o_eager, np.float32), np.asarray(o_jit, np.float32))


@pytest.mark.parametrize(
    "in_axes", [(0, None, None), (0, 0, 0), (None, 1, 1), (2, 0, None)], ids=str
)
def test_vmap_equals_per_example_calls(in_axes):
    n, b, s, h, d = 3, 2, 130, 4, 64
    keys = jax.random.split(jax.random.key(11), 3)
    shapes = []
    for ax in in_axes:
        shape = [b, s, h, d]
        if ax is not None:
            shape.insert(ax, n)
        shapes.append(tuple(shape))
    q, k, v = (
        jax.random.normal(kk, sh, jnp.float32).astype(jnp.bfloat16)
        for kk, sh in zip(keys, shapes, strict=True)
    )

    def f(q, k, v):
        return jax_fa4.attention(q, k, v, causal=True, return_lse=True)

    o, lse = jax.jit(jax.vmap(f, in_axes=in_axes))(q, k, v)

    def take(x, ax, i):
        return x if ax is None else jnp.take(x, i, axis=ax)

    for i in range(n):
        oi, lsei = f(*(take(x, ax, i) for x, ax in zip((q, k, v), in_axes, strict=True)))
        np.testing.assert_array_equal(np.asarray(o[i], np.float32), np.asarray(oi, np.float32))
        np.testing.assert_array_equal(np.asarray(lse[i]), np.asarray(lsei))


def test_hlo_holds_the_cuda_custom_call():
    q, k, v = random_qkv(jax.random.key(12), 1, 64, 64, 2, 2, 64, 64, jnp.bfloat16)
    text = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=True)).lower(q, k, v).as_text()
    assert "jax_fa4_fwd_cuda" in text


def _raw_fwd(q, k, v, *, softmax_scale=0.125, causal=False, ws_extra=0):
    """Calls the FFI target directly, skipping every Python-side check; returns (o, lse).
    The 3rd result is the uint8 workspace, ws_extra bytes more than the extension asks for."""
    b, sq, hq, d = q.shape
    _, sk, hkv, _ = k.shape
    ws_bytes = _ffi.cuda_fwd_workspace_bytes(b, sq, sk, hq, hkv, d) + ws_extra
    call = jax.ffi.ffi_call(
        "jax_fa4_fwd_cuda",
        (
            jax.ShapeDtypeStruct((b, sq, hq, d), q.dtype),
            jax.ShapeDtypeStruct((b, hq, sq), jnp.float32),
            jax.ShapeDtypeStruct((ws_bytes,), jnp.uint8),
        ),
    )
    i32, f32 = jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.float32)
    # q/kv lengths, q/kv segment ids, sinks, q/kv segment ranges: absent ([0] placeholders).
    out = call(
        q,
        k,
        v,
        i32,
        i32,
        i32,
        i32,
        f32,
        i32,
        i32,
        softmax_scale=np.float64(softmax_scale),
        causal=bool(causal),
        window_left=np.int64(1 << 30),
        window_right=np.int64(1 << 30),
        softcap=np.float64(0.0),
    )
    return tuple(out[:2])


@pytest.mark.parametrize(
    "dtype,head_dim,match",
    [
        (jnp.float32, 64, "bfloat16 and float16"),
        (jnp.bfloat16, 96, "head_dim 96"),
        (jnp.float16, 32, "head_dim 32"),
    ],
)
def test_handler_rejects_unsupported_inputs_with_an_error(dtype, head_dim, match):
    q, k, v = random_qkv(jax.random.key(13), 1, 16, 16, 2, 2, head_dim, head_dim, dtype)
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(_raw_fwd(q, k, v))


def test_handler_rejects_bad_gqa_and_scale():
    q, k, v = random_qkv(jax.random.key(14), 1, 16, 16, 3, 2, 64, 64, jnp.bfloat16)
    with pytest.raises(Exception, match="multiple of heads_kv"):
        jax.block_until_ready(_raw_fwd(q, k, v))
    q, k, v = random_qkv(jax.random.key(15), 1, 16, 16, 2, 2, 64, 64, jnp.bfloat16)
    with pytest.raises(Exception, match="softmax_scale"):
        jax.block_until_ready(_raw_fwd(q, k, v, softmax_scale=-1.0))
    # The process is still healthy after the errors: a good call works.
    o, lse = _raw_fwd(q, k, v)
    assert np.isfinite(np.asarray(o, np.float32)).all()


def test_handler_checks_the_workspace_size():
    # One token, 8 query heads per kv head, 4096 keys: the split-KV decode plan needs scratch.
    q, k, v = random_qkv(jax.random.key(18), 1, 1, 4096, 8, 1, 128, 128, jnp.bfloat16)
    assert _ffi.cuda_fwd_workspace_bytes(1, 1, 4096, 8, 1, 128) > 0
    with pytest.raises(Exception, match=r"workspace \(3rd result\) has .* bytes; .* needs"):
        jax.block_until_ready(_raw_fwd(q, k, v, ws_extra=-1))
    # A prefill shape needs none; a larger workspace than needed is fine and changes nothing.
    q, k, v = random_qkv(jax.random.key(19), 2, 130, 40, 4, 2, 64, 64, jnp.bfloat16)
    assert _ffi.cuda_fwd_workspace_bytes(2, 130, 40, 4, 2, 64) == 0
    exact = [np.asarray(x) for x in _raw_fwd(q, k, v)]
    larger = [np.asarray(x) for x in _raw_fwd(q, k, v, ws_extra=4096 + 48)]
    for name, a, b in zip(("o", "lse"), exact, larger, strict=True):
        assert np.isfinite(np.asarray(a, np.float32)).all(), name
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_python_layer_rejects_float32_and_odd_head_dims_at_trace_time():
    q, k, v = random_qkv(jax.random.key(16), 1, 16, 16, 2, 2, 64, 64, jnp.float32)
    with pytest.raises(NotImplementedError, match="bfloat16"):
        jax.jit(jax_fa4.attention).lower(q, k, v)
    q, k, v = random_qkv(jax.random.key(17), 1, 16, 16, 2, 2, 96, 96, jnp.bfloat16)
    with pytest.raises(NotImplementedError, match="head_dim"):
        jax.jit(jax_fa4.attention).lower(q, k, v)


# ---------------------------------------------------------------------------------------------
# Attention variants (window, lengths, segment ids, soft cap, sinks) on the Hopper forward
# ---------------------------------------------------------------------------------------------

# (batch, seq_q, seq_k, heads_q, heads_kv): several 128-row / key blocks, so that block skipping
# (windows, lengths, segment ranges) is exercised; seq_q != seq_k both ways; GQA. Quick: the
# first shape in bfloat16 (every feature, head dim and mask); the slow run: the whole grid.
VARIANT_SHAPES = [(2, 300, 500, 4, 2), (1, 1000, 1000, 2, 1), (3, 129, 129, 8, 4)]
VARIANT_FEATURES = [
    ("window",),
    ("window_pair",),
    ("window_left_only",),
    ("window_right_only",),
    ("window_diagonal",),
    ("lengths",),
    ("packed",),
    ("random_ids",),
    ("softcap",),
    ("sinks",),
    ("window_pair", "packed", "lengths", "softcap", "sinks"),
    ("packed", "sinks"),
    ("window_pair", "softcap"),
]


def _poison_for(dv):
    def poison(q, k, v):
        b, sq, hq, _ = q.shape
        _poison_allocator(b, sq, hq, dv, q.dtype)

    return poison


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", params(DTYPES, [jnp.bfloat16], lambda d: jnp.dtype(d).name))
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("features", VARIANT_FEATURES, ids="+".join)
@pytest.mark.parametrize("shape", params(VARIANT_SHAPES, [VARIANT_SHAPES[0]], _id))
def test_variant_forward_matches_oracle(shape, features, head_dim, dtype, causal):
    from test_variants import check_variant, variant_kwargs

    b, sq, sk, hq, hkv = shape
    full = (b, sq, sk, hq, hkv, head_dim, head_dim)
    kwargs = variant_kwargs(jax.random.key(sum(shape) + head_dim), features, b, sq, sk, hq)
    if ("window" in features or "window_pair" in features) and sq >= 1000:
        kwargs["local_window_size"] = (200, 64)  # a band of blocks: the others are skipped
    check_variant(
        "+".join(features) + f" d{head_dim}",
        full,
        dtype,
        kwargs,
        causal=causal,
        grads=False,
        jit_oracle=True,
        before_call=_poison_for(head_dim),
    )


def test_variant_rows_without_keys_get_zero_and_the_sink():
    """Padding rows: o 0, lse -inf; rows that see no key: o 0, lse = sink."""
    b, sq, sk, hq, hkv, d = 2, 300, 200, 4, 2, 128
    q, k, v = random_qkv(jax.random.key(21), b, sq, sk, hq, hkv, d, d, jnp.bfloat16)
    sinks = jnp.linspace(-1.0, 2.0, hq, dtype=jnp.float32)
    q_len = jnp.array([250, 300], jnp.int32)
    kv_len = jnp.array([200, 0], jnp.int32)
    _poison_allocator(b, sq, hq, d, jnp.bfloat16)
    o, lse = jax.jit(
        lambda q, k, v: jax_fa4.attention(
            q,
            k,
            v,
            causal=True,
            query_seq_lengths=q_len,
            key_value_seq_lengths=kv_len,
            sinks=sinks,
            return_lse=True,
        )
    )(q, k, v)
    o, lse = np.asarray(o, np.float32), np.asarray(lse)
    # Row 0: off = -50, queries 0..49 see nothing, 250.. are padding; row 1 has no keys.
    np.testing.assert_array_equal(o[0, :50], 0.0)
    np.testing.assert_array_equal(o[0, 250:], 0.0)
    np.testing.assert_array_equal(o[1], 0.0)
    sink = np.asarray(sinks)[:, None]
    np.testing.assert_array_equal(lse[0, :, :50], np.broadcast_to(sink, (hq, 50)))
    assert np.isneginf(lse[0, :, 250:]).all()
    np.testing.assert_array_equal(lse[1], np.broadcast_to(sink, (hq, sq)))
    assert np.isfinite(lse[0, :, 50:250]).all()


def test_hlo_holds_the_segment_ranges():
    q, k, v = random_qkv(jax.random.key(22), 2, 200, 200, 2, 2, 64, 64, jnp.bfloat16)
    ids = jnp.repeat(jnp.arange(4, dtype=jnp.int32), 50)[None].repeat(2, 0)
    text = (
        jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, segment_ids=ids))
        .lower(q, k, v)
        .as_text()
    )
    (call,) = [line for line in text.splitlines() if "@jax_fa4_fwd_cuda(" in line]
    assert "tensor<2x4x2xi32>" in call  # ceil(200 / 64) = 4 chunks of (min, max)
