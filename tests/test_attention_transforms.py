"""vmap (every operand combination, several axes), vmap(grad), jit, checkpoint on the CPU."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import random_qkv

import jax_fa4

N = 3  # size of the vmapped axis
SHAPE = (2, 33, 47, 4, 2, 32, 32)  # batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v


def _inputs(mapped, axes, seed=0):
    """q, k, v with a size-N axis inserted at axes[i] for each mapped operand."""
    q, k, v = random_qkv(jax.random.key(seed), *SHAPE, jnp.float32)
    out = []
    for i, x in enumerate((q, k, v)):
        if mapped[i]:
            stacked = jnp.stack([x * (1.0 + 0.25 * n) + 0.1 * n for n in range(N)], axis=0)
            out.append(jnp.moveaxis(stacked, 0, axes[i]))
        else:
            out.append(x)
    return out


def _slice(x, mapped, axis, n):
    return jnp.take(x, n, axis=axis) if mapped else x


COMBOS = [m for m in itertools.product([False, True], repeat=3) if any(m)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "axes", params([(0, 0, 0), (1, 2, 4), (4, 3, 1)], [(0, 0, 0), (1, 2, 4)], str)
)
@pytest.mark.parametrize(
    "mapped", COMBOS, ids=lambda m: "".join("qkv"[i] for i in range(3) if m[i])
)
def test_vmap_equals_per_example_calls(mapped, axes, causal):
    q, k, v = _inputs(mapped, axes)
    in_axes = tuple(a if m else None for a, m in zip(axes, mapped, strict=True))

    def f(q, k, v):
        return jax_fa4.attention(q, k, v, causal=causal, return_lse=True)

    o, lse = jax.vmap(f, in_axes=in_axes)(q, k, v)
    for n in range(N):
        args = [_slice(x, m, a, n) for x, m, a in zip((q, k, v), mapped, axes, strict=True)]
        o_n, lse_n = f(*args)
        np.testing.assert_allclose(np.asarray(o[n]), np.asarray(o_n), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(lse[n]), np.asarray(lse_n), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "mapped", COMBOS, ids=lambda m: "".join("qkv"[i] for i in range(3) if m[i])
)
def test_vmap_is_one_kernel_call_not_a_loop(mapped):
    q, k, v = _inputs(mapped, (0, 0, 0))
    in_axes = tuple(0 if m else None for m in mapped)

    def loss(q, k, v):
        return jnp.sum(jax_fa4.attention(q, k, v) ** 2)

    jaxpr = jax.make_jaxpr(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=in_axes))(q, k, v)
    text = str(jaxpr)
    assert text.count("fa4_fwd") == 1 and text.count("fa4_bwd") == 1, text
    assert "while" not in text and "scan" not in text


@pytest.mark.parametrize(
    "mapped", COMBOS, ids=lambda m: "".join("qkv"[i] for i in range(3) if m[i])
)
def test_vmap_of_grad_equals_per_example_grads(mapped):
    q, k, v = _inputs(mapped, (1, 0, 2), seed=1)
    axes = (1, 0, 2)
    in_axes = tuple(a if m else None for a, m in zip(axes, mapped, strict=True))

    def loss(q, k, v):
        return jnp.sum(jnp.sin(jax_fa4.attention(q, k, v, causal=True)))

    g = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=in_axes)(q, k, v)
    for n in range(N):
        args = [_slice(x, m, a, n) for x, m, a in zip((q, k, v), mapped, axes, strict=True)]
        g_n = jax.grad(loss, argnums=(0, 1, 2))(*args)
        for a, b in zip(g, g_n, strict=True):
            np.testing.assert_allclose(np.asarray(a[n]), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_nested_vmap():
    q, k, v = random_qkv(jax.random.key(3), 2, 20, 20, 2, 1, 32, 32, jnp.float32)
    qq = jnp.stack([jnp.stack([q * (i + 1) + j for j in range(2)]) for i in range(3)])  # [3,2,...]
    o = jax.vmap(jax.vmap(lambda q: jax_fa4.attention(q, k, v)))(qq)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(
                np.asarray(o[i, j]), np.asarray(jax_fa4.attention(qq[i, j], k, v)), atol=1e-6
            )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_vmap_over_an_empty_axis(causal):
    """A vmap over a size-0 axis gives empty results (forward, gradients, mapped lengths) with
    the per-example shapes behind the empty axis, as the unmapped empty problem does."""
    q, k, v = random_qkv(jax.random.key(6), 2, 5, 7, 2, 1, 8, 8, jnp.float32)
    e = lambda x: x[None][:0]  # noqa: E731
    attn = lambda q, k, v: jax_fa4.attention(q, k, v, causal=causal)  # noqa: E731
    assert jax.vmap(attn)(e(q), e(k), e(v)).shape == (0, 2, 5, 2, 8)
    assert jax.jit(jax.vmap(lambda q: attn(q, k, v)))(e(q)).shape == (0, 2, 5, 2, 8)
    dq, dk, dv = jax.grad(lambda q, k, v: jax.vmap(attn)(q, k, v).sum(), argnums=(0, 1, 2))(
        e(q), e(k), e(v)
    )
    assert (dq.shape, dk.shape, dv.shape) == ((0, 2, 5, 2, 8), (0, 2, 7, 1, 8), (0, 2, 7, 1, 8))
    gk = jax.grad(lambda k: jax.vmap(lambda q: attn(q, k, v))(e(q)).sum())(k)
    np.testing.assert_array_equal(np.asarray(gk), np.zeros_like(np.asarray(k)))
    lens = jnp.zeros((0, 2), jnp.int32)
    o = jax.vmap(lambda n: jax_fa4.attention(q, k, v, key_value_seq_lengths=n))(lens)
    assert o.shape == (0, 2, 5, 2, 8)


def test_grad_of_vmap_equals_sum_of_grads():
    q, k, v = _inputs((True, False, False), (0, 0, 0), seed=4)

    def loss(q, k, v):
        return jnp.sum(jax.vmap(lambda q: jax_fa4.attention(q, k, v), in_axes=(0,))(q) ** 2)

    gk = jax.grad(loss, argnums=1)(q, k, v)

    def per_example(k, qn):
        return jnp.sum(jax_fa4.attention(qn, k, v) ** 2)

    want = sum(jax.grad(per_example)(k, q[n]) for n in range(N))
    np.testing.assert_allclose(np.asarray(gk), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_jit_caches_one_compilation_per_shape():
    q, k, v = random_qkv(jax.random.key(5), 1, 16, 16, 2, 2, 32, 32, jnp.float32)
    f = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=True))
    a = f(q, k, v)
    b = f(q * 2, k, v)
    assert f._cache_size() == 1
    assert not np.allclose(np.asarray(a), np.asarray(b))


def test_checkpoint_gives_the_same_gradients():
    q, k, v = random_qkv(jax.random.key(6), 2, 40, 40, 4, 2, 32, 32, jnp.float32)

    def block(q, k, v):
        return jnp.tanh(jax_fa4.attention(q, k, v, causal=True)) * 2.0

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v) ** 2)

    g_plain = jax.grad(lambda *a: loss(block, *a), argnums=(0, 1, 2))(q, k, v)
    g_ckpt = jax.grad(lambda *a: loss(jax.checkpoint(block), *a), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_plain, g_ckpt, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda *a: loss(jax.checkpoint(block), *a)))(q, k, v))
    assert jaxpr.count("fa4_fwd") >= 2  # the forward is recomputed under the checkpoint


def test_disable_jit_runs_eagerly():
    q, k, v = random_qkv(jax.random.key(7), 1, 9, 9, 2, 2, 16, 16, jnp.float32)
    with jax.disable_jit():
        a = jax_fa4.attention(q, k, v)
    b = jax.jit(jax_fa4.attention)(q, k, v)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_hlo_holds_the_cpu_custom_call_with_its_attributes():
    q, k, v = random_qkv(jax.random.key(8), 1, 9, 9, 2, 2, 16, 16, jnp.float32)
    text = (
        jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=True, softmax_scale=0.5))
        .lower(q, k, v)
        .as_text()
    )
    assert "jax_fa4_fwd_cpu" in text
    assert "softmax_scale = 5.000000e-01 : f64" in text and "causal = true" in text
