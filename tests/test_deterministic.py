"""``deterministic=True`` on the CPU: the parameter reaches every path (jit, grad, vmap,
automatic partitioning, ring attention, the Flax adapter) and the kernel's FFI attribute.

The CPU backward is deterministic either way (no atomics: every sum runs in a fixed order), so
here deterministic=True must give exactly the default's gradients, and those pass the tolerance
rule against the float64 oracle. The GPU's ordered dQ adds are tested in tests/gpu.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from tolerance import assert_close_by_rule, random_qkv

import jax_fa4
from jax_fa4.flax import make_attention_fn

# (batch, seq_q, seq_k, heads_q, heads_kv, head_dim): GQA, seq_q != seq_k both ways (with causal,
# rows that see no key), lengths that are not block multiples.
SHAPES = [
    (2, 70, 70, 4, 2, 64),
    (1, 130, 45, 4, 1, 64),
    (1, 45, 200, 2, 2, 128),
]


def _id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*shape)


def _loss(attn, q, k, v, w, wl):
    o, lse = attn(q, k, v)
    finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
    acc = jnp.float64 if o.dtype == jnp.float64 else jnp.float32
    return jnp.sum(o.astype(acc) * w) + jnp.sum(finite_lse * wl)


def _grad_fn(causal, deterministic, w, wl):
    def fa4(q, k, v):
        return jax_fa4.attention(
            q, k, v, causal=causal, return_lse=True, deterministic=deterministic
        )

    return jax.grad(lambda *a: _loss(fa4, *a, w, wl), argnums=(0, 1, 2))


def _bits(x):
    return np.asarray(x).view(np.uint8)


# Slow: on the CPU the flag changes nothing; the tests after this one check that it reaches the
# kernel from every path (the quick ones: jit, grad, vmap, Flax).
@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_deterministic_grads_equal_default_and_pass_the_rule(shape, dtype, causal):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = random_qkv(
        jax.random.key(hash((shape, causal)) % 2**31), b, sq, sk, hq, hkv, d, d, dtype
    )
    w = jax.random.normal(jax.random.key(1), (b, sq, hq, d), jnp.float32)
    wl = jax.random.normal(jax.random.key(2), (b, hq, sq), jnp.float32)
    det = jax.jit(_grad_fn(causal, True, w, wl))
    g1, g2 = det(q, k, v), det(q, k, v)
    default = jax.jit(_grad_fn(causal, False, w, wl))(q, k, v)

    def ref(dt):
        return lambda q, k, v: jax_fa4.attention_reference(q, k, v, causal=causal, compute_dtype=dt)

    q64, k64, v64 = (x.astype(jnp.float64) for x in (q, k, v))
    oracle = jax.grad(lambda *a: _loss(ref(jnp.float64), *a, w, wl), argnums=(0, 1, 2))(
        q64, k64, v64
    )
    baseline = jax.grad(lambda *a: _loss(ref(dtype), *a, w, wl), argnums=(0, 1, 2))(q, k, v)
    tag = f"{_id(shape)} {jnp.dtype(dtype).name} causal={causal} deterministic"
    for name, a, b_, dflt, o, bl in zip(
        ("dq", "dk", "dv"), g1, g2, default, oracle, baseline, strict=True
    ):
        np.testing.assert_array_equal(_bits(a), _bits(b_), err_msg=f"{name} {tag}: rerun")
        np.testing.assert_array_equal(_bits(a), _bits(dflt), err_msg=f"{name} {tag}: vs default")
        assert_close_by_rule(f"{name} {tag}", a, o, bl, dtype)


def test_the_flag_reaches_the_backward_primitive_and_the_cpu_custom_call():
    q, k, v = random_qkv(jax.random.key(3), 1, 20, 20, 2, 1, 64, 64, jnp.float32)
    w = jnp.ones((1, 20, 2, 64), jnp.float32)
    wl = jnp.zeros((1, 2, 20), jnp.float32)
    for det in (False, True):
        fn = _grad_fn(True, det, w, wl)
        jaxpr = str(jax.make_jaxpr(fn)(q, k, v))
        assert re.search(rf"fa4_bwd\[[^\]]*deterministic={det}", jaxpr), jaxpr
        # The forward has no such parameter.
        assert not re.search(r"fa4_fwd\[[^\]]*deterministic", jaxpr), jaxpr
        text = jax.jit(fn).lower(q, k, v).as_text()
        calls = [line for line in text.splitlines() if "@jax_fa4_bwd_cpu(" in line]
        assert len(calls) == 1, calls
        assert f"deterministic = {str(det).lower()}" in calls[0], calls[0]


def test_vmap_of_deterministic_grad_equals_per_example_grads():
    n, b, s, h, d = 3, 1, 40, 2, 64
    keys = jax.random.split(jax.random.key(4), 3)
    q, k, v = (jax.random.normal(kk, (n, b, s, h, d), jnp.float32) for kk in keys)

    def loss(q, k, v):
        o = jax_fa4.attention(q, k, v, causal=True, deterministic=True)
        return jnp.sum(o**2)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    jaxpr = str(jax.make_jaxpr(jax.vmap(grad))(q, k, v))
    assert "deterministic=True" in jaxpr
    batched = jax.jit(jax.vmap(grad))(q, k, v)
    for i in range(n):
        single = jax.jit(grad)(q[i], k[i], v[i])
        for a, e in zip(batched, single, strict=True):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(e), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [1, "yes", None, np.array([True])], ids=repr)
def test_non_bool_deterministic_is_a_trace_time_error(bad):
    q = jnp.ones((1, 8, 2, 32), jnp.float32)
    given = re.escape(f"got {type(bad).__name__}")
    with pytest.raises(ValueError, match=rf"deterministic must be a Python bool; {given}"):
        jax_fa4.attention(q, q, q, deterministic=bad)


def test_traced_deterministic_is_a_trace_time_error():
    q = jnp.ones((1, 8, 2, 32), jnp.float32)
    with pytest.raises(ValueError, match=r"deterministic must be a Python bool; got"):
        jax.jit(lambda q, f: jax_fa4.attention(q, q, q, deterministic=f)).trace(q, True)


def test_numpy_bool_is_accepted():
    q = jnp.ones((1, 8, 2, 32), jnp.float32)
    jax_fa4.attention(q, q, q, deterministic=np.bool_(True))


def _mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_partitioned_jit_passes_the_flag_and_matches_one_device(causal):
    """Batch + sequence split under jit: custom_partitioning (deterministic is one of its static
    args) and, for the sequence, the ring backward inside it."""
    mesh = _mesh((2, 4), ("b", "s"))
    q, k, v = random_qkv(jax.random.key(5), 2, 64, 64, 4, 2, 32, 32, jnp.float32)
    spec = P("b", "s")
    args = [jax.device_put(x, NamedSharding(mesh, spec)) for x in (q, k, v)]

    def grads(det):
        def loss(q, k, v):
            o, lse = jax_fa4.attention(q, k, v, causal=causal, return_lse=True, deterministic=det)
            return jnp.sum(o**2) + jnp.sum(jnp.sin(lse))

        return jax.grad(loss, argnums=(0, 1, 2))

    got = jax.jit(grads(True))(*args)
    again = jax.jit(grads(True))(*args)
    want = jax.jit(grads(False))(q, k, v)
    for a, a2, e in zip(got, again, want, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(a2))
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=2e-5, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_attention_deterministic(layout):
    n = 4
    mesh = _mesh((n,), ("x",))
    q, k, v = random_qkv(jax.random.key(6), 1, 64, 64, 2, 1, 32, 32, jnp.float32)
    zz = layout == "zigzag"

    def grads(det):
        def body(q, k, v):
            return jax_fa4.ring_attention(
                q, k, v, axis_name="x", causal=True, layout=layout, deterministic=det
            )

        sm = jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"),) * 3, out_specs=P(None, "x"))

        def loss(q, k, v):
            if zz:
                q, k, v = (jax_fa4.to_zigzag(x, n) for x in (q, k, v))
            return jnp.sum(sm(q, k, v) ** 2)

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))

    jaxpr = str(jax.make_jaxpr(grads(True))(q, k, v))
    assert "deterministic=True" in jaxpr and "deterministic=False" not in jaxpr
    got, again = grads(True)(q, k, v), grads(True)(q, k, v)

    def one_device(q, k, v):
        return jnp.sum(jax_fa4.attention(q, k, v, causal=True) ** 2)

    want = jax.grad(one_device, argnums=(0, 1, 2))(q, k, v)
    for a, a2, e in zip(got, again, want, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(a2))
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=2e-5, atol=2e-5)


def test_ring_attention_rejects_a_non_bool_deterministic():
    mesh = _mesh((2,), ("x",))
    q = jnp.ones((1, 8, 2, 32), jnp.float32)
    body = lambda q: jax_fa4.ring_attention(q, q, q, axis_name="x", deterministic="no")  # noqa: E731
    with pytest.raises(ValueError, match=r"deterministic must be a Python bool; got str 'no'"):
        jax.shard_map(body, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"))(q)


def test_flax_adapter_deterministic_backward():
    """make_attention_fn(deterministic_backward=True) is the kernel's flag; Flax's own
    ``deterministic`` call argument (no dropout) stays independent of it."""
    fn = make_attention_fn(causal=True, deterministic_backward=True)
    assert fn.deterministic_backward and hash(fn) == hash(
        make_attention_fn(causal=True, deterministic_backward=True)
    )
    assert fn != make_attention_fn(causal=True)
    q, k, v = random_qkv(jax.random.key(7), 2, 16, 16, 2, 2, 32, 32, jnp.float32)

    def loss(q, fn, flax_deterministic):
        return jnp.sum(fn(q, k, v, deterministic=flax_deterministic) ** 2)

    jaxpr = str(jax.make_jaxpr(jax.grad(lambda q: loss(q, fn, False)))(q))
    assert "deterministic=True" in jaxpr
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda q: loss(q, make_attention_fn(), True)))(q))
    assert "deterministic=False" in jaxpr
    with pytest.raises(ValueError, match=r"deterministic_backward must be a Python bool; got int"):
        make_attention_fn(deterministic_backward=1)


def test_binding_the_backward_primitive_without_the_flag_means_false():
    """fa4_bwd_p is public and ``deterministic`` is optional on it: a bind without it still
    evaluates, lowers (attribute false) and batches."""
    q, k, v = random_qkv(jax.random.key(8), 1, 16, 16, 2, 2, 32, 32, jnp.float32)
    o, lse = jax_fa4.fa4_fwd_p.bind(q, k, v, softmax_scale=0.25, causal=False)

    def bwd(q, k, v, o, lse):
        return jax_fa4.fa4_bwd_p.bind(q, k, v, o, lse, o, lse, softmax_scale=0.25, causal=False)

    text = jax.jit(bwd).lower(q, k, v, o, lse).as_text()
    assert "deterministic = false" in text
    stack = [jnp.stack([x, x]) for x in (q, k, v, o, lse)]
    batched = jax.jit(jax.vmap(bwd))(*stack)
    for a, e in zip(batched, bwd(q, k, v, o, lse), strict=True):
        np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(e))
