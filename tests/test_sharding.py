"""jax_fa4.attention on 8 CPU devices: automatic partitioning under jit, and shard_map.

Every sharded result is compared with the same call on one device (forward and gradients).
The HLO checks read the compiled (partitioned) program.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from selection import params
from tolerance import random_qkv

import jax_fa4
from jax_fa4.sharding import Plan, plan_for

COLLECTIVES = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")


def _mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


def _put(mesh, x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def _fwd(causal):
    return lambda q, k, v: jax_fa4.attention(q, k, v, causal=causal, return_lse=True)


def _grads(causal):
    def loss(q, k, v):
        o, lse = jax_fa4.attention(q, k, v, causal=causal, return_lse=True)
        return jnp.sum(o**2) + jnp.sum(jnp.sin(lse))

    return jax.grad(loss, argnums=(0, 1, 2))


def collectives_in(fn, *args) -> dict[str, int]:
    """Collective ops of the compiled, partitioned program, counted by kind."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = re.search(r"\s(" + "|".join(COLLECTIVES) + r")(-start)?\(", line)
        if m:
            found[m.group(1)] = found.get(m.group(1), 0) + 1
    return found


def _assert_same(got, want, tol=2e-5):
    for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert a.shape == e.shape
        scale = max(float(jnp.max(jnp.abs(e))), 1.0)
        assert float(jnp.max(jnp.abs(a - e))) <= tol * scale


def _run(mesh, q_spec, kv_spec, shapes, causal, *, grads=True):
    """Sharded jit of forward (and grads) vs one device; returns the collectives found."""
    (b, sq, hq, d), (sk, hkv) = shapes
    q, k, v = random_qkv(jax.random.key(sq * hq + sk), b, sq, sk, hq, hkv, d, d, jnp.float32)
    args = (_put(mesh, q, q_spec), _put(mesh, k, kv_spec), _put(mesh, v, kv_spec))
    found = {}
    fns = [_fwd(causal)] + ([_grads(causal)] if grads else [])
    for i, fn in enumerate(fns):
        _assert_same(jax.jit(fn)(*args), fn(q, k, v))
        for kind, count in collectives_in(fn, *args).items():
            found[f"{'bwd' if i else 'fwd'}:{kind}"] = count
    return found


# ---------------------------------------------------------------------------------------------
# Batch and heads: no communication at all
# ---------------------------------------------------------------------------------------------

NO_COMM = [
    # (mesh shape, names, q spec, kv spec, ((b, sq, hq, d), (sk, hkv)))
    ((2, 4), ("b", "h"), P("b", None, "h"), P("b", None, "h"), ((4, 24, 8, 16), (24, 4))),
    ((8,), ("b",), P("b"), P("b"), ((8, 17, 2, 16), (33, 1))),  # MQA, seq_q != seq_k
    ((8,), ("h",), P(None, None, "h"), P(None, None, "h"), ((2, 16, 16, 32), (16, 8))),
    ((2, 4), ("b", "h"), P(("b", "h")), P(("b", "h")), ((8, 16, 2, 16), (16, 2))),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("mesh_shape", "names", "q_spec", "kv_spec", "shapes"),
    params(NO_COMM, NO_COMM[:1], unpack=True),  # by default: batch and heads on a 2-D mesh
)
def test_batch_heads_split_has_no_collectives(mesh_shape, names, q_spec, kv_spec, shapes, causal):
    mesh = _mesh(mesh_shape, names)
    found = _run(mesh, q_spec, kv_spec, shapes, causal)
    assert found == {}, f"collectives in the partitioned program: {found}"


def test_outputs_keep_the_input_sharding():
    mesh = _mesh((2, 4), ("b", "h"))
    q, k, v = random_qkv(jax.random.key(0), 4, 16, 16, 8, 4, 16, 16, jnp.float32)
    spec = P("b", None, "h")
    args = (_put(mesh, q, spec), _put(mesh, k, spec), _put(mesh, v, spec))
    o, lse = jax.jit(_fwd(True))(*args)
    assert o.sharding.spec == P("b", None, "h") and lse.sharding.spec == P("b", "h")
    dq, dk, dv = jax.jit(_grads(True))(*args)
    assert dq.sharding.spec == dk.sharding.spec == dv.sharding.spec == spec
    # Each device ran the kernel on its own [2, 16, 2, 16] shard.
    text = jax.jit(_fwd(True)).lower(*args).compile().as_text()
    assert re.search(r"f32\[2,16,2,16\].*custom_call_target=\"jax_fa4_fwd_cpu\"", text)


def test_gqa_q_heads_split_beyond_kv_heads():
    """16 q heads over 8 devices, 2 kv heads: each device gets 2 q heads and picks their kv head
    locally (no all-gather of q); the backward sums dK/dV over the devices sharing a kv head."""
    mesh = _mesh((8,), ("h",))
    found = _run(mesh, P(None, None, "h"), P(), ((2, 16, 16, 16), (16, 2)), causal=True)
    assert not any(key.startswith("fwd:") for key in found), found
    assert found.get("bwd:all-reduce"), found


# ---------------------------------------------------------------------------------------------
# Sequence splits and layouts the kernel cannot take: still exact
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", params([False, True], [False]))
def test_sequence_split_runs_the_ring_under_jit(causal):
    """q and k split over the sequence: ring attention inside the partitioned program (K/V
    move by collective-permute, nothing is all-gathered)."""
    mesh = _mesh((2, 4), ("b", "s"))
    found = _run(mesh, P("b", "s"), P("b", "s"), ((2, 32, 4, 16), (32, 2)), causal)
    assert found.get("fwd:collective-permute") and found.get("bwd:collective-permute"), found
    assert not any("all-gather" in key for key in found), found


def test_query_only_sequence_split_without_mask():
    """Queries split, keys whole on every device: local kernel, dK/dV summed in the backward."""
    mesh = _mesh((8,), ("s",))
    found = _run(mesh, P(None, "s"), P(), ((2, 64, 4, 16), (24, 2)), causal=False)
    assert set(found) == {"bwd:all-reduce"}, found


RESHARDED = [
    (P(None, "x"), P(), ((2, 32, 2, 16), (24, 2))),  # causal, seq_q != seq_k: cannot split
    (P(None, None, None, "x"), P(None, None, None, "x"), ((2, 16, 2, 16), (16, 2))),  # d
    (P(None, None, "x"), P(), ((2, 16, 24, 16), (16, 3))),  # 3 kv heads, 8 devices
]


@pytest.mark.parametrize(
    ("q_spec", "kv_spec", "shapes"), params(RESHARDED, RESHARDED[:1], unpack=True)
)
def test_layouts_it_cannot_run_are_resharded(q_spec, kv_spec, shapes):
    mesh = _mesh((8,), ("x",))
    found = _run(mesh, q_spec, kv_spec, shapes, causal=True)
    assert "fwd:all-gather" in found, found  # replicated first, then computed exactly


@pytest.mark.slow
def test_uneven_splits_inside_jit_are_exact():
    """Shardings jax would refuse on inputs (uneven splits) can still arise inside a program."""
    mesh = _mesh((4,), ("x",))
    q, k, v = random_qkv(jax.random.key(9), 6, 18, 18, 4, 2, 16, 16, jnp.float32)

    def fn(q, k, v, spec):
        q, k, v = (
            jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec)) for x in (q, k, v)
        )
        return _fwd(True)(q, k, v), _grads(True)(q, k, v)

    want = (_fwd(True)(q, k, v), _grads(True)(q, k, v))
    for spec in (P("x"), P(None, "x")):  # batch 6 and sequence 18 over 4 devices
        _assert_same(jax.jit(fn, static_argnums=3)(q, k, v, spec), want)


def test_single_device_jit_lowers_the_kernel_directly():
    q, k, v = random_qkv(jax.random.key(0), 1, 16, 16, 2, 2, 16, 16, jnp.float32)
    text = jax.jit(_grads(True)).lower(q, k, v).as_text()
    assert "CustomSPMDPartitioning" not in text
    assert "jax_fa4_fwd_cpu" in text and "jax_fa4_bwd_cpu" in text


# ---------------------------------------------------------------------------------------------
# shard_map: the primitive runs per shard
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_shard_map_per_shard(causal):
    mesh = _mesh((2, 4), ("b", "h"))
    q, k, v = random_qkv(jax.random.key(1), 4, 16, 16, 8, 4, 16, 16, jnp.float32)
    spec = P("b", None, "h")
    sm = jax.shard_map(
        _fwd(causal), mesh=mesh, in_specs=(spec,) * 3, out_specs=(spec, P("b", "h")), check_vma=True
    )
    _assert_same(jax.jit(sm)(q, k, v), _fwd(causal)(q, k, v))

    def loss(q, k, v):
        o, lse = sm(q, k, v)
        return jnp.sum(o**2) + jnp.sum(jnp.sin(lse))

    _assert_same(jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v), _grads(causal)(q, k, v))
    text = jax.jit(sm).lower(q, k, v).as_text()
    assert "CustomSPMDPartitioning" not in text


def test_shard_map_replicated_kv_gradients_are_summed():
    """q split over the sequence, k and v replicated (check_vma=True): the gradients of k and v
    are sums over the devices. Without the varying-axes handling they came back per device."""
    mesh = _mesh((8,), ("s",))
    q, k, v = random_qkv(jax.random.key(2), 2, 64, 16, 4, 2, 16, 16, jnp.float32)
    sm = jax.shard_map(
        _fwd(False),
        mesh=mesh,
        in_specs=(P(None, "s"), P(), P()),
        out_specs=(P(None, "s"), P(None, None, "s")),
        check_vma=True,
    )
    _assert_same(jax.jit(sm)(q, k, v), _fwd(False)(q, k, v))

    def loss(q, k, v):
        o, lse = sm(q, k, v)
        return jnp.sum(o**2) + jnp.sum(jnp.sin(lse))

    _assert_same(jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v), _grads(False)(q, k, v))


def test_primitive_outputs_vary_over_the_union_of_input_axes():
    mesh = _mesh((8,), ("s",))
    q, k, v = random_qkv(jax.random.key(3), 1, 16, 16, 2, 2, 16, 16, jnp.float32)

    def body(q, k, v):
        o, lse = jax_fa4.fa4_fwd_p.bind(q, k, v, softmax_scale=0.25, causal=False)
        assert jax.typeof(o).mat.varying == jax.typeof(lse).mat.varying == frozenset({"s"})
        grads = jax_fa4.fa4_bwd_p.bind(q, k, v, o, lse, o, lse, softmax_scale=0.25, causal=False)
        assert all(jax.typeof(g).mat.varying == frozenset({"s"}) for g in grads)
        return o

    jax.make_jaxpr(
        jax.shard_map(body, mesh=mesh, in_specs=(P(None, "s"), P(), P()), out_specs=P(None, "s"))
    )(q, k, v)


# ---------------------------------------------------------------------------------------------
# The plan (pure Python) and the switches
# ---------------------------------------------------------------------------------------------


def test_plan_decisions():
    mesh = {"b": 2, "h": 4, "s": 4}
    q, k = (2, 32, 8, 16), (2, 32, 4, 16)
    assert plan_for(mesh, ("b", None, "h", None), None, q, k, True) == Plan(("b",), ("h",))
    assert plan_for(mesh, (None, None, None, "h"), None, q, k, True) == Plan()  # head dim
    # GQA: 8 q heads over 4 devices with 2 kv heads -> q only, each device picks its kv head.
    assert plan_for(mesh, (None, None, "h", None), None, q, (2, 32, 2, 16), False) == Plan(
        (), ("h",), kv_heads=False
    )
    assert plan_for(mesh, (None, None, "h", None), None, q, (2, 32, 3, 16), False) == Plan()
    assert plan_for(mesh, (None, "s", None, None), (None, "s", None, None), q, k, True) == Plan(
        seq=("s",), ring=True
    )
    # Causal, q split only: the keys must follow (ring) when the lengths allow it.
    assert plan_for(mesh, (None, "s", None, None), None, q, k, True).ring
    assert plan_for(mesh, (None, "s", None, None), None, q, (2, 16, 4, 16), True) == Plan()
    assert plan_for(mesh, (None, "s", None, None), None, q, (2, 16, 4, 16), False) == Plan(
        seq=("s",)
    )
    assert plan_for(mesh, (None, "s", None, None), None, (2, 30, 8, 16), k, False) == Plan()
    assert plan_for(mesh, ("b", "b", None, None), None, q, k, False) == Plan(("b",))
    # A ring over two axes needs them in the mesh's order (ppermute pairs devices that way).
    two = {"x": 2, "y": 4}
    assert plan_for(two, (None, ("x", "y"), None, None), None, q, k, True).ring
    assert plan_for(two, (None, ("y", "x"), None, None), None, q, k, True) == Plan()
    yx = (None, ("y", "x"), None, None)
    assert plan_for(two, yx, yx, q, k, False) == Plan(seq=("y", "x"))  # queries split, k whole
    assert plan_for(two, yx, None, q, k, False, variant=True, variant_ring=True) == Plan()
    assert plan_for(mesh, None, None, q, k, False) == Plan()


@pytest.mark.slow
def test_gspmd_partitioner_path():
    """With Shardy off, the GSPMD callbacks (infer_sharding_from_operands) give the same."""
    if not hasattr(jax.config, "jax_use_shardy_partitioner"):
        pytest.skip("this jax has no GSPMD switch")
    old = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        mesh = _mesh((2, 4), ("b", "h"))
        found = _run(mesh, P("b", None, "h"), P("b", None, "h"), ((2, 16, 8, 16), (16, 4)), True)
        assert found == {}, found
    finally:
        jax.config.update("jax_use_shardy_partitioner", old)


def test_auto_partition_can_be_switched_off(tmp_path):
    """JAX_FA4_AUTO_PARTITION=0: plain kernel everywhere; the partitioner replicates (exact)."""
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
        import jax_fa4
        mesh = jax.make_mesh((4,), ("b",), axis_types=(AxisType.Auto,))
        x = jax.random.normal(jax.random.key(0), (4, 16, 2, 16))
        xs = jax.device_put(x, NamedSharding(mesh, P("b")))
        f = jax.jit(lambda q: jax_fa4.attention(q, q, q, causal=True))
        assert jnp.allclose(f(xs), jax_fa4.attention(x, x, x, causal=True), atol=1e-6)
        text = f.lower(xs).as_text()
        assert "CustomSPMDPartitioning" not in text and not jax_fa4.sharding.ENABLED
        print("ok")
        """
    )
    env = dict(os.environ, JAX_FA4_AUTO_PARTITION="0")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,  # import the installed package, not a source tree in the working directory
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_explicit_sharding_mesh():
    """A mesh with Explicit axes (jax.make_mesh's default in recent jax): same partitioning, and
    the outputs' types carry the sharding."""
    mesh = jax.make_mesh((2, 4), ("b", "h"), axis_types=(AxisType.Explicit,) * 2)
    q, k, v = random_qkv(jax.random.key(4), 4, 16, 16, 8, 4, 16, 16, jnp.float32)
    spec = P("b", None, "h")
    args = (_put(mesh, q, spec), _put(mesh, k, spec), _put(mesh, v, spec))
    with jax.set_mesh(mesh):
        o, lse = jax.jit(_fwd(True))(*args)
        grads = jax.jit(_grads(True))(*args)
        assert jax.typeof(o).sharding.spec == P("b", None, "h", None)
        assert jax.typeof(lse).sharding.spec == P("b", "h", None)
        found = collectives_in(_grads(True), *args)
    _assert_same((o, lse), _fwd(True)(q, k, v))
    _assert_same(grads, _grads(True)(q, k, v))
    assert found == {}, found


@pytest.mark.parametrize("ring", params([False, True], [False]))  # the ring: test_ring_attention
def test_shard_map_without_check_vma(ring):
    mesh = _mesh((8,), ("s",))
    q, k, v = random_qkv(jax.random.key(5), 1, 64, 64, 2, 2, 16, 16, jnp.float32)
    if ring:

        def body(q, k, v):
            return jax_fa4.ring_attention(
                q, k, v, axis_name="s", causal=True, layout="contiguous", return_lse=True
            )

        in_specs = (P(None, "s"),) * 3
    else:
        body, in_specs = _fwd(False), (P(None, "s"), P(), P())
    sm = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=in_specs,
        out_specs=(P(None, "s"), P(None, None, "s")),
        check_vma=False,
    )
    ref = _fwd(ring)

    def loss(f):
        return lambda q, k, v: jnp.sum(f(q, k, v)[0] ** 2) + jnp.sum(jnp.sin(f(q, k, v)[1]))

    _assert_same(jax.jit(sm)(q, k, v), ref(q, k, v))
    _assert_same(
        jax.jit(jax.grad(loss(sm), argnums=(0, 1, 2)))(q, k, v),
        jax.grad(loss(ref), argnums=(0, 1, 2))(q, k, v),
    )


@pytest.mark.parametrize("causal", params([True, False], [True]))
def test_sequence_split_over_axes_out_of_mesh_order(causal):
    """q, k, v split over ("y", "x") of a ("x", "y") mesh: the result equals one device (no ring
    over axes out of the mesh's order; with them in order the ring runs)."""
    mesh = _mesh((2, 4), ("x", "y"))
    q, k, v = random_qkv(jax.random.key(9), 2, 64, 64, 2, 2, 16, 16, jnp.float32)
    for axes in (("y", "x"), ("x", "y")):
        args = tuple(_put(mesh, x, P(None, axes)) for x in (q, k, v))
        _assert_same(jax.jit(_fwd(causal))(*args), _fwd(causal)(q, k, v))
        _assert_same(jax.jit(_grads(causal))(*args), _grads(causal)(q, k, v))
        permutes = collectives_in(_fwd(causal), *args).get("collective-permute", 0)
        assert (permutes > 0) == (axes == ("x", "y")), (axes, permutes)
