"""jax_fa4.ring_attention inside shard_map on 8 CPU devices: equals one-device attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P
from selection import params
from tolerance import LSE_MIN_MAGNITUDE, assert_close_by_rule, random_qkv

import jax_fa4
from jax_fa4.reference import attention_reference

N = 8


def _mesh(shape=(N,), names=("x",)):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


def _ring_fn(mesh, axis, *, causal, layout, batch_axis=None, scale=None):
    """Natural-order (q, k, v) -> (o, lse) through ring_attention in shard_map(check_vma=True)."""
    n = int(np.prod([mesh.shape[a] for a in (axis if isinstance(axis, tuple) else (axis,))]))
    spec = P(batch_axis, axis)
    lse_spec = P(batch_axis, None, axis)

    def body(q, k, v):
        return jax_fa4.ring_attention(
            q,
            k,
            v,
            axis_name=axis,
            causal=causal,
            softmax_scale=scale,
            return_lse=True,
            layout=layout,
        )

    sm = jax.shard_map(
        body, mesh=mesh, in_specs=(spec,) * 3, out_specs=(spec, lse_spec), check_vma=True
    )
    zz = layout == "zigzag"

    def fn(q, k, v):
        if zz:
            q, k, v = (jax_fa4.to_zigzag(x, n) for x in (q, k, v))
        o, lse = sm(q, k, v)
        if zz:
            o, lse = jax_fa4.from_zigzag(o, n), jax_fa4.from_zigzag(lse, n, axis=2)
        return o, lse

    return fn


def _loss(fn):
    # Uses both outputs so that the lse cotangent (dlse) travels the ring too.
    def loss(q, k, v):
        o, lse = fn(q, k, v)
        return jnp.sum(o.astype(jnp.float32) ** 2) + jnp.sum(jnp.sin(lse))

    return loss


def _one_device(causal, scale=None):
    return lambda q, k, v: jax_fa4.attention(
        q, k, v, causal=causal, softmax_scale=scale, return_lse=True
    )


def _max_diff(a, b) -> float:
    return float(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - jnp.asarray(b, jnp.float32))))


# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------


def test_zigzag_indices_layout():
    idx = jax_fa4.zigzag_indices(16, 4)  # chunks of 2: device r holds chunks r, 7 - r
    np.testing.assert_array_equal(
        idx.reshape(4, 4), [[0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]]
    )
    x = np.arange(2 * 16 * 3).reshape(2, 16, 3)
    np.testing.assert_array_equal(jax_fa4.from_zigzag(jax_fa4.to_zigzag(x, 4), 4), x)
    xj = jnp.asarray(x)
    np.testing.assert_array_equal(jax_fa4.to_zigzag(xj, 4), jax_fa4.to_zigzag(x, 4))
    lse = np.arange(2 * 3 * 16).reshape(2, 3, 16)
    np.testing.assert_array_equal(
        jax_fa4.from_zigzag(jax_fa4.to_zigzag(lse, 4, axis=2), 4, axis=2), lse
    )


@pytest.mark.slow
def test_default_layout_is_the_natural_order():
    """ring_attention's default layout is what sharding a natural-order array gives."""
    q, k, v = random_qkv(jax.random.key(8), 1, 64, 64, 2, 2, 16, 16, jnp.float32)
    sm = jax.shard_map(
        lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x", causal=True),
        mesh=_mesh(),
        in_specs=P(None, "x"),
        out_specs=P(None, "x"),
    )
    assert _max_diff(jax.jit(sm)(q, k, v), jax_fa4.attention(q, k, v, causal=True)) < 2e-5


def test_zigzag_needs_divisible_length():
    with pytest.raises(ValueError, match="multiple of 2 x the number of shards"):
        jax_fa4.zigzag_indices(12, 4)


# ---------------------------------------------------------------------------------------------
# Agreement with one device
# ---------------------------------------------------------------------------------------------

CASES = [
    # (layout, causal, b, s, hq, hkv, d, dv)
    ("zigzag", True, 2, 64, 4, 2, 16, 16),
    ("zigzag", False, 1, 48, 4, 4, 16, 8),
    ("contiguous", True, 2, 40, 2, 1, 16, 16),  # MQA; odd local length: masked full blocks
    ("contiguous", True, 1, 64, 4, 2, 16, 16),  # even local length: moved to zig-zag inside
    ("contiguous", False, 1, 32, 8, 2, 32, 32),
]
# Run by default: the causal contiguous ring, which moves the chunks to the zig-zag order inside
# and runs the zig-zag ring (the non-causal ring runs by default in the cross-attention test below
# and under jit in test_sharding).
QUICK_CASES = [CASES[3]]


@pytest.mark.parametrize(
    ("layout", "causal", "b", "s", "hq", "hkv", "d", "dv"),
    params(CASES, QUICK_CASES, lambda c: "-".join(map(str, c)), unpack=True),
)
def test_ring_matches_one_device(layout, causal, b, s, hq, hkv, d, dv):
    q, k, v = random_qkv(jax.random.key(s + hq), b, s, s, hq, hkv, d, dv, jnp.float32)
    ring = _ring_fn(_mesh(), "x", causal=causal, layout=layout)
    ref = _one_device(causal)
    o1, lse1 = jax.jit(ring)(q, k, v)
    o0, lse0 = ref(q, k, v)
    assert _max_diff(o1, o0) < 2e-5 and _max_diff(lse1, lse0) < 2e-5
    g1 = jax.jit(jax.grad(_loss(ring), argnums=(0, 1, 2)))(q, k, v)
    g0 = jax.grad(_loss(ref), argnums=(0, 1, 2))(q, k, v)
    for name, a, e in zip(("dq", "dk", "dv"), g1, g0, strict=True):
        scale = float(jnp.max(jnp.abs(e)))
        assert _max_diff(a, e) < 1e-5 * max(scale, 1.0), (name, _max_diff(a, e))


def test_ring_cross_attention_different_lengths():
    """Without a mask the local q and k blocks may have different lengths."""
    q, _, _ = random_qkv(jax.random.key(1), 2, 16, 16, 4, 2, 16, 16, jnp.float32)
    _, k, v = random_qkv(jax.random.key(2), 2, 64, 64, 4, 2, 16, 16, jnp.float32)
    ring = _ring_fn(_mesh(), "x", causal=False, layout="contiguous")
    o1, lse1 = jax.jit(ring)(q, k, v)
    o0, lse0 = _one_device(False)(q, k, v)
    assert _max_diff(o1, o0) < 2e-5 and _max_diff(lse1, lse0) < 2e-5


@pytest.mark.slow
def test_ring_over_two_axes_with_batch_split():
    """Batch split over one mesh axis, the ring over a tuple of the other two."""
    mesh = _mesh((2, 2, 2), ("b", "s1", "s2"))
    q, k, v = random_qkv(jax.random.key(3), 4, 32, 32, 4, 2, 16, 16, jnp.float32)
    ring = _ring_fn(mesh, ("s1", "s2"), causal=True, layout="zigzag", batch_axis="b", scale=0.3)
    ref = _one_device(True, 0.3)
    o1, lse1 = jax.jit(ring)(q, k, v)
    o0, lse0 = ref(q, k, v)
    assert _max_diff(o1, o0) < 2e-5 and _max_diff(lse1, lse0) < 2e-5
    g1 = jax.jit(jax.grad(_loss(ring), argnums=(0, 1, 2)))(q, k, v)
    g0 = jax.grad(_loss(ref), argnums=(0, 1, 2))(q, k, v)
    for a, e in zip(g1, g0, strict=True):
        assert _max_diff(a, e) < 1e-5 * max(float(jnp.max(jnp.abs(e))), 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_ring_low_precision_by_rule(dtype):
    """16-bit inputs: the ring's o, lse and gradients pass the error rule of docs/design.md
    against a float64 oracle (the baseline: the plain jnp reference in the input dtype)."""
    q, k, v = random_qkv(jax.random.key(4), 2, 64, 64, 4, 2, 32, 32, dtype)
    o, lse = jax.jit(_ring_fn(_mesh(), "x", causal=True, layout="zigzag"))(q, k, v)
    o64, lse64 = attention_reference(q, k, v, causal=True, compute_dtype=jnp.float64)
    o_x, lse_x = attention_reference(q, k, v, causal=True, compute_dtype=dtype)
    assert o.dtype == dtype and lse.dtype == jnp.float32
    name = jnp.dtype(dtype).name
    assert_close_by_rule(f"ring o {name}", o, o64, o_x, dtype)
    assert_close_by_rule(f"ring lse {name}", lse, lse64, lse_x, dtype, LSE_MIN_MAGNITUDE)

    def ref_loss(compute_dtype):
        def loss(q, k, v):
            o, lse = attention_reference(q, k, v, causal=True, compute_dtype=compute_dtype)
            return jnp.sum(o.astype(jnp.float32) ** 2) + jnp.sum(jnp.sin(lse))

        return loss

    ring = _ring_fn(_mesh(), "x", causal=True, layout="zigzag")
    grads = jax.jit(jax.grad(_loss(ring), argnums=(0, 1, 2)))(q, k, v)
    g64 = jax.grad(ref_loss(jnp.float64), argnums=(0, 1, 2))(q, k, v)
    g_x = jax.grad(ref_loss(dtype), argnums=(0, 1, 2))(q, k, v)
    for gname, g, e, x in zip(("dq", "dk", "dv"), grads, g64, g_x, strict=True):
        assert g.dtype == dtype
        assert_close_by_rule(f"ring {gname} {name}", g, e, x, dtype)


def _kernel_calls(jaxpr) -> list[tuple[str, int]]:
    """(primitive, work) of every kernel call; work = batch * sq * sk, halved when causal."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("fa4_fwd", "fa4_bwd"):
            b, sq = eqn.invars[0].aval.shape[:2]
            sk = eqn.invars[1].aval.shape[1]
            out.append((eqn.primitive.name, b * sq * sk // (2 if eqn.params["causal"] else 1)))
        assert eqn.primitive.name not in ("cond", "switch"), "the ring must not branch"
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out += _kernel_calls(sub)
    return out


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_causal_steps_have_equal_work(layout):
    """Load balance, structurally: the causal ring has no branches (every device runs the same
    program) and every step costs the same. Local block 8 positions (chunks of c = 4), batch 1:
    the diagonal step is one causal 8 x 8 call (32 score entries), every other step one call on
    two stacked 4 x 4 block pairs (2 x 16). The contiguous layout (even local length) gets there
    by moving its chunks into the zig-zag order first."""
    q, k, v = random_qkv(jax.random.key(5), 1, 64, 64, 2, 2, 16, 16, jnp.float32)
    ring = _ring_fn(_mesh(), "x", causal=True, layout=layout)
    calls = _kernel_calls(jax.make_jaxpr(ring)(q, k, v).jaxpr)
    assert calls == [("fa4_fwd", 32)] * N
    calls = _kernel_calls(jax.make_jaxpr(jax.grad(_loss(ring), argnums=(0, 1, 2)))(q, k, v).jaxpr)
    assert calls == [("fa4_fwd", 32)] * N + [("fa4_bwd", 32)] * N


@pytest.mark.slow
def test_ring_under_vmap():
    mesh = _mesh()
    q, k, v = random_qkv(jax.random.key(6), 3, 32, 32, 2, 2, 16, 16, jnp.float32)
    ring = _ring_fn(mesh, "x", causal=True, layout="contiguous")

    def per_example(q, k, v):
        o, lse = ring(q[None], k[None], v[None])
        return o[0], lse[0]

    o1, lse1 = jax.jit(jax.vmap(per_example))(q, k, v)
    o0, lse0 = _one_device(True)(q, k, v)
    assert _max_diff(o1, o0) < 2e-5 and _max_diff(lse1, lse0) < 2e-5


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def _in_shard_map(fn, *args, specs=None):
    mesh = _mesh()
    specs = specs or (P(None, "x"),) * len(args)
    return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=P(None, "x"))(*args)


def test_error_outside_shard_map():
    q, k, v = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="axis_name='x' is not a bound mesh axis"):
        jax_fa4.ring_attention(q, k, v, axis_name="x")


def test_error_unknown_axis_name():
    q, k, v = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="axis_name='seq' is not a bound mesh axis"):
        _in_shard_map(lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="seq"), q, k, v)


def test_error_axes_out_of_mesh_order():
    """A tuple of ring axes out of the mesh's order is refused (ppermute pairs devices in the
    mesh's order, axis_index in the tuple's: the blocks would reach the wrong devices); in the
    mesh's order the same ring matches the reference."""
    mesh = _mesh((2, 4), ("x", "y"))
    q, k, v = random_qkv(jax.random.key(8), 1, 64, 64, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match=r"axis_name=\('y', 'x'\) lists the mesh axes out of"):
        _ring_fn(mesh, ("y", "x"), causal=True, layout="contiguous")(q, k, v)
    o, lse = jax.jit(_ring_fn(mesh, ("x", "y"), causal=True, layout="contiguous"))(q, k, v)
    ref = jax_fa4.attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(np.asarray(o), np.asarray(ref[0]), atol=2e-6, rtol=2e-6)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref[1]), atol=2e-6, rtol=2e-6)


def test_error_causal_needs_equal_lengths():
    q, _, _ = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    _, k, v = random_qkv(jax.random.key(7), 1, 32, 32, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="equal local sequence lengths"):
        _in_shard_map(
            lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x", causal=True), q, k, v
        )


def test_error_zigzag_needs_even_local_length():
    q, k, v = random_qkv(jax.random.key(7), 1, 24, 24, 2, 2, 16, 16, jnp.float32)  # 3 each
    with pytest.raises(ValueError, match="even local sequence length"):
        _in_shard_map(
            lambda q, k, v: jax_fa4.ring_attention(
                q, k, v, axis_name="x", causal=True, layout="zigzag"
            ),
            q,
            k,
            v,
        )


def test_error_bad_layout():
    q, k, v = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="layout must be one of"):
        _in_shard_map(
            lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x", layout="striped"),
            q,
            k,
            v,
        )


def test_error_kv_not_split_over_ring_axis():
    q, k, v = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="k and v must be split over the ring axis"):
        _in_shard_map(
            lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x"),
            q,
            k,
            v,
            specs=(P(None, "x"), P(), P()),
        )


# ---------------------------------------------------------------------------------------------
# Variants: window, segment ids, soft cap, sinks, lengths
# ---------------------------------------------------------------------------------------------

# Two rows of packed documents over 64 positions (8 per device): documents cross the blocks.
_IDS = np.array([[0] * 10 + [1] * 30 + [2] * 24, [5] * 3 + [6] * 50 + [7] * 11], np.int32)
_Q_LENS = np.array([40, 64], np.int32)
_KV_LENS = np.array([17, 70], np.int32)  # 70 > 64: clamped
# int32's extremes reach the ring as given: no block arithmetic may wrap them around.
_Q_LENS_EXTREME = np.array([40, 2**31 - 1], np.int32)
_KV_LENS_EXTREME = np.array([-(2**31), 2**31 - 1], np.int32)

# (name, layout, options); "ids", "q_lens", "kv_lens" and "sinks" stand for the arrays above.
VARIANT_CASES = [
    ("window-12-3-sinks", "contiguous", dict(local_window_size=(12, 3), sinks=True)),
    ("causal-window-5", "contiguous", dict(causal=True, local_window_size=5)),
    ("window-20", "contiguous", dict(local_window_size=20)),
    ("window-none-4", "contiguous", dict(local_window_size=(None, 4))),
    ("window-40-both-sides", "contiguous", dict(local_window_size=(40, 40))),
    ("zigzag-window-30-9", "zigzag", dict(local_window_size=(30, 9), causal=True)),
    ("zigzag-causal-ids-softcap", "zigzag", dict(causal=True, ids=True, logits_soft_cap=2.0)),
    ("causal-ids-sinks", "contiguous", dict(causal=True, ids=True, sinks=True)),
    ("window-ids", "contiguous", dict(local_window_size=(9, 0), ids=True)),
    ("softcap", "contiguous", dict(logits_soft_cap=1.5)),
    ("lengths-sinks", "contiguous", dict(q_lens=True, kv_lens=True, sinks=True)),
    ("zigzag-lengths", "zigzag", dict(q_lens=True, kv_lens=True)),
    ("kv-lengths-ids", "contiguous", dict(kv_lens=True, ids=True)),
    ("lengths-int32-extremes", "contiguous", dict(q_lens="extreme", kv_lens="extreme")),
]
QUICK_VARIANT_CASES = [VARIANT_CASES[6]]


def _variant_args(opts: dict, hq: int):
    """(keyword arguments of attention_reference over the whole sequence, sinks or None)."""
    opts = dict(opts)
    kw = {}
    if opts.pop("ids", False):
        kw["segment_ids"] = jnp.asarray(_IDS)
    q_lens, kv_lens = opts.pop("q_lens", False), opts.pop("kv_lens", False)
    if q_lens:
        kw["query_seq_lengths"] = jnp.asarray(_Q_LENS_EXTREME if q_lens == "extreme" else _Q_LENS)
    if kv_lens:
        kw["key_value_seq_lengths"] = jnp.asarray(
            _KV_LENS_EXTREME if kv_lens == "extreme" else _KV_LENS
        )
    sinks = None
    if opts.pop("sinks", False):
        sinks = jax.random.normal(jax.random.key(11), (hq,), jnp.float32) + 1.0
    kw.update(opts)
    return kw, sinks


def _variant_ring(layout: str, kw: dict):
    """Natural-order (q, k, v, sinks) -> (o, lse) through ring_attention with the variant options
    `kw` (segment ids split like q, lengths and sinks replicated), shard_map(check_vma=True)."""
    kw = dict(kw)
    ids = kw.pop("segment_ids", None)
    lens = {n: kw.pop(n) for n in ("query_seq_lengths", "key_value_seq_lengths") if n in kw}
    zz = layout == "zigzag"

    def body(q, k, v, ids, lens, sinks):
        return jax_fa4.ring_attention(
            q,
            k,
            v,
            axis_name="x",
            layout=layout,
            return_lse=True,
            segment_ids=ids,
            sinks=sinks,
            **lens,
            **kw,
        )

    sm = jax.shard_map(
        body,
        mesh=_mesh(),
        in_specs=(P(None, "x"),) * 4 + (P(), P()),
        out_specs=(P(None, "x"), P(None, None, "x")),
        check_vma=True,
    )

    def fn(q, k, v, sinks):
        i = ids
        if zz:
            q, k, v = (jax_fa4.to_zigzag(x, N) for x in (q, k, v))
            i = None if i is None else jax_fa4.to_zigzag(i, N)
        o, lse = sm(q, k, v, i, lens, sinks)
        if zz:
            o, lse = jax_fa4.from_zigzag(o, N), jax_fa4.from_zigzag(lse, N, axis=2)
        return o, lse

    return fn


def _outputs_and_grads(fn, argnums):
    """One jitted call: ((o, lse), gradients of sum(o^2) + sum(sin(lse)) over the finite lse
    entries (rows that see nothing have -inf))."""

    def loss(q, k, v, sinks):
        o, lse = fn(q, k, v, sinks)
        finite = jnp.where(jnp.isfinite(lse), lse, 0.0)
        return jnp.sum(o.astype(jnp.float32) ** 2) + jnp.sum(jnp.sin(finite)), (o, lse)

    def run(*args):
        (_, out), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(*args)
        return out, grads

    return jax.jit(run)


@pytest.mark.parametrize(
    ("name", "layout", "opts"),
    params(VARIANT_CASES, QUICK_VARIANT_CASES, lambda c: c[0], unpack=True),
)
def test_ring_variants_by_rule(name, layout, opts):
    """o, lse and the gradients (dq, dk, dv, d sinks) of the ring against the float64 reference
    over the whole sequence, by the error rule (baseline: the reference in float32)."""
    b, s, hq, hkv, d = 2, 64, 4, 2, 16
    q, k, v = random_qkv(jax.random.key(len(name)), b, s, s, hq, hkv, d, d, jnp.float32)
    kw, sinks = _variant_args(opts, hq)
    argnums = (0, 1, 2, 3) if sinks is not None else (0, 1, 2)

    def ref(compute_dtype):
        return lambda q, k, v, sinks: attention_reference(
            q, k, v, sinks=sinks, compute_dtype=compute_dtype, **kw
        )

    (o, lse), grads = _outputs_and_grads(_variant_ring(layout, kw), argnums)(q, k, v, sinks)
    (o64, lse64), g64 = _outputs_and_grads(ref(jnp.float64), argnums)(q, k, v, sinks)
    (o32, lse32), g32 = _outputs_and_grads(ref(jnp.float32), argnums)(q, k, v, sinks)
    assert o.dtype == jnp.float32
    assert_close_by_rule(f"ring {name} o", o, o64, o32, jnp.float32)
    assert_close_by_rule(f"ring {name} lse", lse, lse64, lse32, jnp.float32, LSE_MIN_MAGNITUDE)
    for gname, g, e, x in zip(("dq", "dk", "dv", "dsinks"), grads, g64, g32, strict=False):
        assert g.dtype == jnp.float32
        assert_close_by_rule(f"ring {name} {gname}", g, e, x, jnp.float32)


def _primitive_counts(jaxpr, acc=None) -> dict[str, int]:
    """How often each primitive appears in `jaxpr` (sub-jaxprs included)."""
    acc = {} if acc is None else acc
    for eqn in jaxpr.eqns:
        acc[eqn.primitive.name] = acc.get(eqn.primitive.name, 0) + 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            _primitive_counts(sub, acc)
    return acc


@pytest.mark.parametrize(
    ("window", "fwd_calls", "transfers"),
    [((5, 0), 2, 1), ((12, 3), 4, 3), (None, N, N - 1), ((10**6, 63), N, N - 1)],
)
def test_window_skips_invisible_steps(window, fwd_calls, transfers):
    """Local blocks of 8: a causal window of 5 sees the own block and the previous one (one
    transfer); (12, 3) sees two earlier blocks and the next one (steps 0, 1, 2 and n - 1: the
    next block comes the other way round); no window, or one spanning the whole sequence of 64:
    the whole ring. No branches; each
    transfer moves k and v (two ppermutes), the backward's dK/dV go home once per chain."""
    q, k, v = random_qkv(jax.random.key(5), 1, 64, 64, 2, 2, 16, 16, jnp.float32)
    fn = jax.shard_map(
        lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x", local_window_size=window),
        mesh=_mesh(),
        in_specs=P(None, "x"),
        out_specs=P(None, "x"),
    )
    counts = _primitive_counts(jax.make_jaxpr(fn)(q, k, v).jaxpr)
    assert counts["fa4_fwd"] == fwd_calls and counts["ppermute"] == 2 * transfers, counts
    assert "cond" not in counts and "switch" not in counts
    grad = jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))
    counts = _primitive_counts(jax.make_jaxpr(grad)(q, k, v).jaxpr)
    assert counts["fa4_bwd"] == fwd_calls, counts


def test_error_lengths_with_causal_or_window():
    q, k, v = random_qkv(jax.random.key(7), 2, 16, 16, 2, 2, 16, 16, jnp.float32)
    lens = jnp.array([5, 16], jnp.int32)
    for kw, what in ((dict(causal=True), "causal=True"), (dict(local_window_size=3), "window")):
        match = f"key_value_seq_lengths cannot be combined with .*{what}"
        with pytest.raises(ValueError, match=match):
            _in_shard_map(
                lambda q, k, v, kw=kw: jax_fa4.ring_attention(
                    q, k, v, axis_name="x", key_value_seq_lengths=lens, **kw
                ),
                q,
                k,
                v,
            )


def test_error_window_needs_equal_lengths():
    q, _, _ = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    _, k, v = random_qkv(jax.random.key(7), 1, 32, 32, 2, 2, 16, 16, jnp.float32)
    with pytest.raises(ValueError, match="local_window_size needs q and k to hold the same"):
        _in_shard_map(
            lambda q, k, v: jax_fa4.ring_attention(q, k, v, axis_name="x", local_window_size=4),
            q,
            k,
            v,
        )


def test_error_bad_variant_arguments():
    """The public checks of jax_fa4.attention (here on the local blocks)."""
    q, k, v = random_qkv(jax.random.key(7), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    bad = [
        (dict(local_window_size=-1), "non-negative"),
        (dict(logits_soft_cap=0.0), "logits_soft_cap"),
        (dict(sinks=jnp.zeros((3,))), "sinks must have shape"),
        (dict(segment_ids=jnp.zeros((1, 16), jnp.int32)), "segment_ids must have shape"),
    ]
    for kw, match in bad:
        with pytest.raises(ValueError, match=match):
            _in_shard_map(
                lambda q, k, v, kw=kw: jax_fa4.ring_attention(q, k, v, axis_name="x", **kw),
                q,
                k,
                v,
            )
