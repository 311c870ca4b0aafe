"""Every bad input raises at trace time, naming the argument, what was given and what is allowed."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_fa4
from jax_fa4 import _ffi


def _qkv(b=2, sq=8, sk=8, hq=4, hkv=2, d=32, dv=32, dtype=jnp.float32):
    return (
        jnp.ones((b, sq, hq, d), dtype),
        jnp.ones((b, sk, hkv, d), dtype),
        jnp.ones((b, sk, hkv, dv), dtype),
    )


def _raises(exc, match, *args, **kwargs):
    with pytest.raises(exc, match=match):
        jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, **kwargs)).trace(*args)


def test_wrong_rank():
    q, k, v = _qkv()
    _raises(ValueError, r"q must have rank 4 .*got shape \(2, 8, 4\)", q[..., 0], k, v)
    _raises(ValueError, r"k must have rank 4 .*rank 5", q, k[None], v)
    _raises(ValueError, r"v must have rank 4", q, k, v[0])


def test_batch_mismatch():
    q, k, v = _qkv()
    _raises(
        ValueError, r"batch sizes differ: q 2, k 3, v 2", q, jnp.ones((3, 8, 2, 32), jnp.float32), v
    )


def test_seq_k_mismatch():
    q, k, v = _qkv()
    _raises(
        ValueError,
        r"same sequence length; got k 8, v 9",
        q,
        k,
        jnp.ones((2, 9, 2, 32), jnp.float32),
    )


def test_kv_heads_mismatch():
    q, k, v = _qkv()
    _raises(
        ValueError,
        r"same number of heads; got k 2, v 1",
        q,
        k,
        jnp.ones((2, 8, 1, 32), jnp.float32),
    )


def test_head_dim_mismatch():
    q, k, v = _qkv()
    _raises(
        ValueError, r"same head_dim; got q 32, k 16", q, jnp.ones((2, 8, 2, 16), jnp.float32), v
    )


def test_heads_not_a_multiple():
    q, k, v = _qkv(hq=6, hkv=4)
    _raises(ValueError, r"heads of q \(6\) must be a multiple of heads of k and v \(4\)", q, k, v)


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.float64, jnp.complex64, jnp.float8_e4m3fn])
def test_unsupported_dtype(dtype):
    q, k, v = _qkv(dtype=dtype)
    _raises(ValueError, r"q has dtype .*supported dtypes are bfloat16, float16, float32", q, k, v)


def test_mixed_dtypes():
    q, k, v = _qkv()
    _raises(
        ValueError,
        r"share one dtype; got q float32, k bfloat16, v float32",
        q,
        k.astype(jnp.bfloat16),
        v,
    )


@pytest.mark.parametrize("d", [0, 257, 1024])
def test_head_dim_zero_or_too_large(d):
    q, k, v = _qkv(d=d, dv=32)
    _raises(ValueError, rf"head_dim of q/k is {d}; supported head dims are 1..256", q, k, v)
    q, k, v = _qkv(d=32, dv=d)
    _raises(ValueError, rf"head_dim of v is {d}; supported head dims are 1..256", q, k, v)


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_bad_softmax_scale(scale):
    _raises(ValueError, r"softmax_scale must be positive and finite", *_qkv(), softmax_scale=scale)


def test_softmax_scale_not_a_number():
    _raises(ValueError, r"softmax_scale must be a positive finite real", *_qkv(), softmax_scale="1")
    _raises(ValueError, r"softmax_scale must be a scalar", *_qkv(), softmax_scale=np.ones(2))


def test_softmax_scale_arrays_that_are_not_one_number():
    allowed = r"Allowed: a static Python float .*softmax_scale=float\(x\)"
    _raises(
        ValueError,
        r"softmax_scale must be a scalar; got a concrete jax array of shape \(2,\) and dtype "
        r"float32\. " + allowed,
        *_qkv(),
        softmax_scale=jnp.array([0.1, 0.2], jnp.float32),
    )
    _raises(
        ValueError,
        r"softmax_scale must be a positive finite real number or None; got a concrete jax array "
        r"of shape \(\) and dtype bool\. " + allowed,
        *_qkv(),
        softmax_scale=jnp.array(True),
    )
    _raises(
        ValueError,
        r"got a concrete jax array .* complex64",
        *_qkv(),
        softmax_scale=jnp.array(1 + 2j, jnp.complex64),
    )
    _raises(
        ValueError,
        r"softmax_scale must be positive and finite; got -0\.5",
        *_qkv(),
        softmax_scale=jnp.array(-0.5),
    )


def test_concrete_0d_softmax_scale_is_converted():
    """A concrete 0-d jax or NumPy array is a known number at trace time: it is taken as
    float(x), eagerly and when closed over by a jitted function, giving the same bits."""
    q, k, v = (x + jnp.arange(8, dtype=jnp.float32)[None, :, None, None] / 8 for x in _qkv())
    scale32 = float(np.float32(0.37))
    want = np.asarray(jax_fa4.attention(q, k, v, softmax_scale=scale32))
    for scale in (jnp.array(0.37, jnp.float32), np.float32(0.37), np.array(0.37, np.float32)):
        np.testing.assert_array_equal(
            np.asarray(jax_fa4.attention(q, k, v, softmax_scale=scale)), want
        )
        got = jax.jit(lambda q, k, v, s=scale: jax_fa4.attention(q, k, v, softmax_scale=s))(q, k, v)
        np.testing.assert_array_equal(np.asarray(got), want)
    assert not np.array_equal(want, np.asarray(jax_fa4.attention(q, k, v)))  # the scale matters


def test_traced_softmax_scale():
    q, k, v = _qkv()
    with pytest.raises(
        ValueError,
        match=r"softmax_scale must be a static Python number, not a traced value of shape \(\) "
        r"and dtype float.*Pass a Python float .*float\(x\) of a concrete array.*fold a traced "
        r"scale into q",
    ):
        jax.jit(lambda q, k, v, s: jax_fa4.attention(q, k, v, softmax_scale=s)).trace(q, k, v, 0.5)


def test_flags_must_be_bools():
    _raises(ValueError, r"causal must be a Python bool; got str 'yes'", *_qkv(), causal="yes")
    _raises(ValueError, r"return_lse must be a Python bool; got int 1", *_qkv(), return_lse=1)
    _raises(
        ValueError,
        r"deterministic must be a Python bool; got str 'on'",
        *_qkv(),
        deterministic="on",
    )


def test_not_an_array():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"k must be an array, got list"):
        jax_fa4.attention(q, [[1.0]], v)


# ---- platforms without a kernel: lowering for the GPU from this CPU-only machine -------------


def _export_for(platform, fn, *args):
    from jax import export

    return export.export(
        jax.jit(fn),
        platforms=[platform],
        disabled_checks=[
            export.DisabledSafetyCheck.custom_call(f"jax_fa4_{kind}_{platform}")
            for kind in ("fwd", "bwd")
        ],
    )(*args)


def test_rocm_has_no_kernel():
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match=r"CPU and for NVIDIA Hopper GPUs only.*rocm"):
        _export_for("rocm", jax_fa4.attention, q, k, v)


def test_second_derivatives_are_a_clear_error():
    """grad of grad, the Hessian and jvp of grad reach the primitives' JVP rules, which say what
    is supported instead of JAX's generic "Differentiation rule ... not implemented"."""
    q, k, v = _qkv()

    def f(q):
        return jnp.sum(jax_fa4.attention(q, k, v, causal=True) ** 2)

    msg = r"jax_fa4.attention is differentiable once, in reverse mode"
    with pytest.raises(NotImplementedError, match=msg):
        jax.grad(lambda q: jnp.sum(jax.grad(f)(q)))(q)
    with pytest.raises(NotImplementedError, match=msg):
        jax.hessian(lambda x: jax_fa4.attention(x, k, v)[0, 0, 0, 0])(q)
    with pytest.raises(NotImplementedError, match=msg):
        jax.jvp(jax.grad(f), (q,), (q,))
    assert jax.grad(f)(q).shape == q.shape  # first order is unaffected


@pytest.mark.skipif(_ffi.built_with_cuda(), reason="this build has the CUDA kernels")
def test_cuda_without_cuda_build_is_a_clear_error():
    q, k, v = _qkv(d=64, dv=64, dtype=jnp.bfloat16)
    with pytest.raises(NotImplementedError, match=r"built without its CUDA kernels"):
        _export_for("cuda", jax_fa4.attention, q, k, v)


@pytest.mark.skipif(not _ffi.built_with_cuda(), reason="this build has no CUDA kernels")
def test_cuda_lowering_checks_dtype_and_head_dim():
    q, k, v = _qkv(d=64, dv=64, dtype=jnp.bfloat16)
    exported = _export_for("cuda", jax_fa4.attention, q, k, v)
    assert "jax_fa4_fwd_cuda" in exported.mlir_module()
    with pytest.raises(NotImplementedError, match=r"dtypes bfloat16, float16; got float32"):
        _export_for("cuda", jax_fa4.attention, *_qkv(d=64, dv=64))
    with pytest.raises(
        NotImplementedError, match=r"head_dim in \(64, 128, 256\).*got q/k head_dim 32"
    ):
        _export_for("cuda", jax_fa4.attention, *_qkv(dtype=jnp.bfloat16))
