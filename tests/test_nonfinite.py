"""Non-finite inputs stay where the math puts them (CPU kernels).

A NaN or Inf planted in k, v, q or dO must reach only the outputs and gradients that depend on it
through keys and queries that see each other: a query row that cannot see a key (causal mask) must
come out bit for bit as it does without the planted value, forward and backward, and so must the
gradients of a key that the planted query cannot see. docs/design.md (numerics) states the rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import case_key, random_qkv

import jax_fa4

# (seq_q, seq_k): equal, more keys than queries, more queries than keys (rows 0..79 see nothing).
SEQS = [(200, 200), (150, 230), (230, 150)]
HQ, HKV, D = 4, 2, 32
GROUP = HQ // HKV
PLANT_HEAD = 0  # kv head 0 serves q heads 0 and 1; q heads 2 and 3 never meet the planted value
PLANT_COL = 3  # the head-dim column of the planted element


def _sees(sq: int, sk: int) -> np.ndarray:
    """[sq, sk] bool: query i sees key j (causal, bottom-right aligned)."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)


@jax.jit
def _fwd_bwd(q, k, v, do, dlse):
    (o, lse), vjp = jax.vjp(
        lambda q, k, v: jax_fa4.attention(q, k, v, causal=True, return_lse=True), q, k, v
    )
    return o, lse, *vjp((do, dlse))


def _inputs(sq: int, sk: int, dtype):
    q, k, v = random_qkv(
        case_key("nonfinite", sq, sk, jnp.dtype(dtype).name), 1, sq, sk, HQ, HKV, D, D, dtype
    )
    kd, kl = jax.random.split(case_key("nonfinite cotangents", sq, sk), 2)
    do = jax.random.normal(kd, (1, sq, HQ, D), jnp.float32).astype(dtype)
    dlse = jax.random.normal(kl, (1, HQ, sq), jnp.float32)
    return q, k, v, do, dlse


def _run(*args) -> dict[str, np.ndarray]:
    o, lse, dq, dk, dv = _fwd_bwd(*args)
    names = ("o", "lse", "dq", "dk", "dv")
    return {n: np.asarray(x, np.float64) for n, x in zip(names, (o, lse, dq, dk, dv), strict=True)}


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    # The clean run is finite but for the lse -inf of rows that see no key.
    assert not np.isnan(want).any() and not np.isposinf(want).any(), f"{what}: clean run"
    np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("tensor", ["k", "v"])
@pytest.mark.parametrize("seqs", SEQS, ids=lambda s: f"sq{s[0]}_sk{s[1]}")
@pytest.mark.parametrize(
    "dtype", params([jnp.float32, jnp.bfloat16], [jnp.float32], lambda d: jnp.dtype(d).name)
)
def test_planted_key_reaches_only_rows_that_see_it(seqs, tensor, value, dtype):
    """A non-finite element in key j's K or V row: every query that cannot see key j has the
    clean o, lse and dq; under a NaN in V, the rows that see j are NaN in that column only, and
    dV (which does not depend on V) is the clean one everywhere."""
    sq, sk = seqs
    args = _inputs(sq, sk, dtype)
    clean = _run(*args)
    j = (sk - sq) + 100 if sk > sq else 100  # a key in the middle of a 64-key block
    j = min(j, sk - 1)
    q, k, v, do, dlse = args
    if tensor == "k":
        k = k.at[0, j, PLANT_HEAD, PLANT_COL].set(value)
    else:
        v = v.at[0, j, PLANT_HEAD, PLANT_COL].set(value)
    got = _run(q, k, v, do, dlse)

    blind = ~_sees(sq, sk)[:, j]  # query rows that cannot see key j
    assert blind.any() and (~blind).any()
    heads = slice(PLANT_HEAD * GROUP, (PLANT_HEAD + 1) * GROUP)  # the q heads of kv head 0
    others = slice((PLANT_HEAD + 1) * GROUP, HQ)
    _assert_same(got["o"][0, blind][:, heads], clean["o"][0, blind][:, heads], "o, blind rows")
    _assert_same(
        got["lse"][0, heads][:, blind], clean["lse"][0, heads][:, blind], "lse, blind rows"
    )
    _assert_same(got["dq"][0, blind][:, heads], clean["dq"][0, blind][:, heads], "dq, blind rows")
    for name in ("o", "dq"):
        _assert_same(got[name][0, :, others], clean[name][0, :, others], f"{name}, other heads")
    _assert_same(got["lse"][0, others], clean["lse"][0, others], "lse, other heads")
    for name in ("dk", "dv"):
        _assert_same(got[name][0, :, 1:], clean[name][0, :, 1:], f"{name}, other kv head")
    if tensor == "v":
        _assert_same(got["dv"], clean["dv"], "dv (independent of v)")
        if np.isnan(value):
            seen = got["o"][0, ~blind][:, heads]
            assert np.isnan(seen[..., PLANT_COL]).all(), "o: rows that see the NaN"
            others_cols = np.delete(seen, PLANT_COL, axis=-1)
            _assert_same(
                others_cols,
                np.delete(clean["o"][0, ~blind][:, heads], PLANT_COL, -1),
                "o, the other columns of rows that see the NaN",
            )


@pytest.mark.parametrize(
    "value", params([np.nan, np.inf], [np.nan], lambda x: "nan" if np.isnan(x) else "inf")
)
@pytest.mark.parametrize("tensor", ["q", "do"])
@pytest.mark.parametrize("seqs", SEQS, ids=lambda s: f"sq{s[0]}_sk{s[1]}")
def test_planted_query_reaches_only_keys_it_sees(seqs, tensor, value):
    """A non-finite element in query row i's Q or dO: every other query row has the clean o,
    lse and dq, and every key that row i cannot see has the clean dk and dv."""
    sq, sk = seqs
    args = _inputs(sq, sk, jnp.float32)
    clean = _run(*args)
    i = 170 if sq > sk else 70  # a row in the middle of a 64-row block, seeing some keys
    q, k, v, do, dlse = args
    h = PLANT_HEAD * GROUP + 1  # a q head of kv head 0
    if tensor == "q":
        q = q.at[0, i, h, PLANT_COL].set(value)
    else:
        do = do.at[0, i, h, PLANT_COL].set(value)
    got = _run(q, k, v, do, dlse)

    sees = _sees(sq, sk)[i]
    assert sees.any() and (~sees).any()
    rest = np.arange(sq) != i
    for name in ("o", "dq"):
        _assert_same(got[name][0, rest], clean[name][0, rest], f"{name}, other rows")
    _assert_same(got["lse"][0, :, rest], clean["lse"][0, :, rest], "lse, other rows")
    for name in ("dk", "dv"):
        _assert_same(got[name][0, ~sees], clean[name][0, ~sees], f"{name}, keys row {i} can't see")
        _assert_same(got[name][0, :, 1:], clean[name][0, :, 1:], f"{name}, other kv head")
    if tensor == "q":
        assert not np.isfinite(got["o"][0, i, h]).all()


# ---------------------------------------------------------------------------------------------
# seq_k = 0: output 0 and lse -inf whatever q holds
# ---------------------------------------------------------------------------------------------


def _empty_keys(value, causal_rows: int = 5):
    q = jax.random.normal(case_key("no keys", causal_rows), (2, causal_rows, 4, 16), jnp.float32)
    q = q.at[1, 2, 3, 0].set(value).at[0, 0, 0, 5].set(-value)
    k = jnp.zeros((2, 0, 2, 16), jnp.float32)
    v = jnp.zeros((2, 0, 2, 8), jnp.float32)
    return q, k, v


def _assert_no_keys_answer(o, lse, shape):
    o, lse = np.asarray(o), np.asarray(lse)
    assert o.shape == shape
    np.testing.assert_array_equal(o, 0.0)
    assert np.isneginf(lse).all()


@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_no_keys_ignores_nonfinite_q(value, causal):
    """With seq_k = 0 every row sees no key: o = 0 and lse = -inf exactly, eager, under jit and
    vmap, and zero gradients, even with a NaN or Inf somewhere in q."""
    q, k, v = _empty_keys(value)

    def call(q, k, v):
        return jax_fa4.attention(q, k, v, causal=causal, return_lse=True)

    _assert_no_keys_answer(*call(q, k, v), (2, 5, 4, 8))
    _assert_no_keys_answer(*jax.jit(call)(q, k, v), (2, 5, 4, 8))
    o, lse = jax.vmap(call)(q[None], k[None], v[None])
    _assert_no_keys_answer(o[0], lse[0], (2, 5, 4, 8))

    def loss(q, k, v):
        o, lse = call(q, k, v)
        return jnp.sum(o.astype(jnp.float32) ** 2) + jnp.sum(jnp.where(jnp.isinf(lse), 0.0, lse))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for g, x in zip(grads, (q, k, v), strict=True):
        assert g.shape == x.shape
        np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_no_keys_ignores_nonfinite_q_in_shard_map():
    """The same inside shard_map (the results vary over the batch axis like q)."""
    q, k, v = _empty_keys(np.nan, causal_rows=3)
    q, k, v = (jnp.concatenate([x] * 4) for x in (q, k, v))  # batch 8: one row per device
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.sharding.PartitionSpec("data")
    fn = jax.shard_map(
        lambda q, k, v: jax_fa4.attention(q, k, v, return_lse=True),
        mesh=mesh,
        in_specs=spec,
        out_specs=(spec, spec),
    )
    _assert_no_keys_answer(*jax.jit(fn)(q, k, v), (8, 3, 4, 8))


def test_cpu_kernel_with_no_keys_ignores_nonfinite_q():
    """The CPU kernels themselves, reached through the primitives: no key, no arithmetic on q."""
    from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p

    q, k, v = _empty_keys(np.nan)
    o, lse = jax.jit(lambda q, k, v: fa4_fwd_p.bind(q, k, v, softmax_scale=0.25, causal=False))(
        q, k, v
    )
    _assert_no_keys_answer(o, lse, (2, 5, 4, 8))
    do = jnp.full(o.shape, jnp.nan, o.dtype)
    dlse = jnp.zeros(lse.shape, jnp.float32)
    dq, dk, dv = jax.jit(
        lambda *a: fa4_bwd_p.bind(*a, softmax_scale=0.25, causal=False, deterministic=False)
    )(q, k, v, o, lse, do, dlse)
    np.testing.assert_array_equal(np.asarray(dq), 0.0)
    assert dk.shape == k.shape and dv.shape == v.shape
