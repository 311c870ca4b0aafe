"""A few training steps of a small causal transformer on the GPU: jax_fa4's kernels (forward and
backward) against the same model on jax.nn.dot_product_attention, from the same weights on the
same batches. Skips without a GPU.

The model computes in bfloat16 with float32 parameters, so the two runs drift apart by rounding
only; the check is that every step's loss agrees within a bound a wrong gradient would break
(a backward that is off by a scale, a transposed head or a dropped block changes the trajectory
by far more), and that both actually learn.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_fa4

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "gpu", reason="needs a GPU (trains on the Hopper CUDA kernels)"
)

VOCAB, SEQ, BATCH, D_MODEL, LAYERS, STEPS, LR = 64, 512, 8, 256, 2, 30, 1e-3


def _init(key: jax.Array, heads: int) -> dict:
    ks = iter(jax.random.split(key, 4 + 6 * LAYERS))
    w = lambda *s: jax.random.normal(next(ks), s, jnp.float32) / np.sqrt(s[0])  # noqa: E731
    params = {
        "emb": jax.random.normal(next(ks), (VOCAB, D_MODEL), jnp.float32) * 0.02,
        "layers": [],
    }
    for _ in range(LAYERS):
        params["layers"].append(
            {
                "qkv": w(D_MODEL, 3 * D_MODEL),
                "o": w(D_MODEL, D_MODEL),
                "up": w(D_MODEL, 4 * D_MODEL),
                "down": w(4 * D_MODEL, D_MODEL),
            }
        )
    params["out"] = w(D_MODEL, VOCAB) * 0.1
    return params


def _forward(params: dict, tokens: jax.Array, heads: int, attn) -> jax.Array:
    dt = jnp.bfloat16
    x = params["emb"][tokens].astype(dt)
    b, s, _ = x.shape
    for layer in params["layers"]:
        h = x * jax.lax.rsqrt(
            jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-6
        ).astype(dt)
        qkv = (h @ layer["qkv"].astype(dt)).reshape(b, s, 3, heads, D_MODEL // heads)
        a = attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]).reshape(b, s, D_MODEL)
        x = x + a @ layer["o"].astype(dt)
        h = x * jax.lax.rsqrt(
            jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-6
        ).astype(dt)
        x = x + jax.nn.gelu(h @ layer["up"].astype(dt)) @ layer["down"].astype(dt)
    return (x @ params["out"].astype(dt)).astype(jnp.float32)


def _losses(heads: int, attn) -> list[float]:
    params = _init(jax.random.key(0), heads)
    # A learnable stream: random 7-token seeds repeated, so every token after the first 7 is a copy.
    rng = np.random.default_rng(0)

    def loss_fn(p: dict, tokens: jax.Array) -> jax.Array:
        logits = _forward(p, tokens[:, :-1], heads, attn)
        return jnp.mean(
            -jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1)
        )

    @jax.jit
    def step(p: dict, m: dict, v: dict, t: jax.Array, tokens: jax.Array):
        # Adam, written out (no optimizer dependency).
        loss, g = jax.value_and_grad(loss_fn)(p, tokens)
        m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        c1, c2 = 1 - 0.9**t, 1 - 0.999**t
        p = jax.tree.map(lambda w, a, b: w - LR * (a / c1) / (jnp.sqrt(b / c2) + 1e-8), p, m, v)
        return p, m, v, loss

    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    out = []
    for t in range(1, STEPS + 1):
        seed = rng.integers(0, VOCAB, (BATCH, 7))
        tokens = jnp.asarray(np.tile(seed, (1, (SEQ + 1) // 7 + 1))[:, : SEQ + 1], jnp.int32)
        params, m, v, loss = step(params, m, v, jnp.float32(t), tokens)
        out.append(float(loss))
    return out


@pytest.mark.parametrize("heads", [4, 2], ids=["hd64", "hd128"])
def test_training_loss_matches_jax_nn(heads: int) -> None:
    ours = _losses(heads, lambda q, k, v: jax_fa4.attention(q, k, v, causal=True))
    ref = _losses(heads, lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True))
    worst = np.max(np.abs(np.subtract(ours, ref)))
    print(
        f"heads={heads}: jax_fa4 losses {ours[0]:.4f} -> {ours[-1]:.4f}, "
        f"jax.nn {ref[0]:.4f} -> {ref[-1]:.4f}, max diff {worst:.4f}"
    )
    assert np.all(np.isfinite(ours))
    # Both learn (from ln 64 = 4.16; 30 Adam steps reach about 3.5 here).
    assert np.mean(ours[-5:]) < np.mean(ours[:5]) - 0.3, ours
    assert np.mean(ref[-5:]) < np.mean(ref[:5]) - 0.3, ref
    # Same trajectory up to bfloat16 rounding at every step: on the CPU path the two agree to
    # 0.14%; 1.5% leaves room for the GPU kernels' different rounding.
    diff = np.abs(np.subtract(ours, ref))
    assert np.all(diff <= 0.015 * np.abs(ref) + 0.01), list(zip(ours, ref, strict=True))
