"""The attention variants under vmap (every extra mapped or not, several axes), jit,
checkpoint, deterministic=True, and the automatic partitioning (8 CPU devices); the lowered
custom calls for the CPU and, exported without a GPU, for CUDA (fixed arity, [0] placeholders,
the window / soft cap attributes, the segment ranges)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from selection import params
from test_variants import packed_ids
from tolerance import case_key, random_qkv

import jax_fa4
from jax_fa4.lowering import segment_ranges

N = 3  # size of the vmapped axis
B, SQ, SK, HQ, HKV, D = 2, 33, 47, 4, 2, 32


def _close(got, want, what, tol=2e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol, err_msg=what)


def _extras(seed):
    """Lengths (one out of range), segment id pairs, sinks: random, never zeros."""
    k1, k2, k3, k4, k5 = jax.random.split(case_key("extras", seed), 5)
    return dict(
        query_seq_lengths=jax.random.randint(k1, (B,), SQ // 2, SQ + 4),
        key_value_seq_lengths=jax.random.randint(k2, (B,), SK // 2, SK + 1),
        q_ids=packed_ids(k3, B, SQ),
        kv_ids=packed_ids(k4, B, SK),
        sinks=jax.random.normal(k5, (HQ,), jnp.float32),
    )


def _attn(q, k, v, ql, kl, qi, ki, sinks):
    return jax_fa4.attention(
        q,
        k,
        v,
        causal=True,
        local_window_size=(20, 5),
        query_seq_lengths=ql,
        key_value_seq_lengths=kl,
        segment_ids=(qi, ki),
        logits_soft_cap=3.0,
        sinks=sinks,
        return_lse=True,
    )


NAMES = ("q", "k", "v", "ql", "kl", "qi", "ki", "sinks")
# Which operands are mapped: q only (folded into the heads, sinks shared), q and the sinks
# (heads fold, per-copy sinks), everything (batch fold), k/v and the ids (batch fold).
MAPPED = {
    "q": ("q",),
    "q+sinks": ("q", "sinks"),
    "all": NAMES,
    "kv+ids+lengths": ("k", "v", "ql", "kl", "qi", "ki"),
    "sinks": ("sinks",),
}


@pytest.mark.parametrize("axis", params(["first", "inner"], ["inner"]))
@pytest.mark.parametrize("mapped", params(list(MAPPED), ["q+sinks", "all", "sinks"]))
def test_vmap_equals_per_example_calls(mapped, axis):
    """vmap over any subset of the operands, at axis 0 or an inner axis, equals a loop of
    per-example calls (forward and the gradients of every float operand)."""
    q, k, v = random_qkv(case_key("vmap"), B, SQ, SK, HQ, HKV, D, D, jnp.float32)
    ex = _extras(0)
    base = dict(zip(NAMES, (q, k, v, *ex.values()), strict=True))
    args, in_axes = [], []
    for name in NAMES:
        x = base[name]
        if name not in MAPPED[mapped]:
            args.append(x)
            in_axes.append(None)
            continue
        if jnp.issubdtype(x.dtype, jnp.integer):
            # Different per copy: lengths shrink, ids shift (same documents, other numbers).
            stacked = jnp.stack([jnp.maximum(x - n, 0) if x.ndim == 1 else x + n for n in range(N)])
        else:
            stacked = jnp.stack([x * (1.0 + 0.25 * n) + 0.1 * n for n in range(N)])
        ax = 0 if axis == "first" else min(1, x.ndim)
        args.append(jnp.moveaxis(stacked, 0, ax))
        in_axes.append(ax)

    def loss(*a):
        o, lse = _attn(*a)
        return jnp.sum(o * o) + jnp.sum(jnp.where(jnp.isfinite(lse), jnp.sin(lse), 0.0))

    float_args = (0, 1, 2, 7)
    fwd = jax.jit(jax.vmap(_attn, in_axes=tuple(in_axes)))
    grad = jax.jit(jax.vmap(jax.grad(loss, argnums=float_args), in_axes=tuple(in_axes)))
    o, lse = fwd(*args)
    gs = grad(*args)
    one_fwd = jax.jit(_attn)
    one_grad = jax.jit(jax.grad(loss, argnums=float_args))
    for n in range(N):
        a_n = [
            x if ax is None else jnp.take(x, n, axis=ax)
            for x, ax in zip(args, in_axes, strict=True)
        ]
        o_n, lse_n = one_fwd(*a_n)
        _close(o[n], o_n, f"o[{n}]")
        np.testing.assert_array_equal(np.isinf(lse[n]), np.isinf(lse_n))
        _close(
            jnp.where(jnp.isinf(lse[n]), 0, lse[n]), jnp.where(jnp.isinf(lse_n), 0, lse_n), "lse"
        )
        for name, g, g_n in zip(("dq", "dk", "dv", "dsinks"), gs, one_grad(*a_n), strict=True):
            _close(g[n], g_n, f"{name}[{n}]", tol=1e-5)


def test_vmap_of_two_axes():
    """vmap of vmap: the outer axis maps everything, the inner one q and the sinks only."""
    q, k, v = random_qkv(case_key("vmap2"), B, SQ, SK, HQ, HKV, D, D, jnp.float32)
    ex = _extras(1)
    stack = lambda x, n: jnp.stack([x * (1 + 0.5 * i) for i in range(n)])  # noqa: E731
    qs = stack(stack(q, 2), 3)  # [3, 2, ...]
    sinks = stack(stack(ex["sinks"], 2), 3)
    ks, vs = stack(k, 3), stack(v, 3)
    inner = jax.vmap(_attn, in_axes=(0, None, None, None, None, None, None, 0))
    outer = jax.vmap(inner, in_axes=(0, 0, 0, None, None, None, None, 0))
    rest = (ex["query_seq_lengths"], ex["key_value_seq_lengths"], ex["q_ids"], ex["kv_ids"])
    o, lse = jax.jit(outer)(qs, ks, vs, *rest, sinks)
    f = jax.jit(_attn)
    for i in range(3):
        for j in range(2):
            o_ij, _ = f(qs[i, j], ks[i], vs[i], *rest, sinks[i, j])
            _close(o[i, j], o_ij, f"o[{i}, {j}]")


def _loss_fn(deterministic=False, remat=False):
    def attn(q, k, v, sinks, ex):
        o, lse = jax_fa4.attention(
            q,
            k,
            v,
            local_window_size=(9, 2),
            query_seq_lengths=ex["query_seq_lengths"],
            segment_ids=(ex["q_ids"], ex["kv_ids"]),
            sinks=sinks,
            logits_soft_cap=4.0,
            return_lse=True,
            deterministic=deterministic,
        )
        return jnp.sum(o**2) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0))

    return jax.checkpoint(attn) if remat else attn


def test_checkpoint_and_deterministic_give_the_same_gradients():
    """jax.checkpoint (the forward recomputed in the backward) and deterministic=True give the
    default's gradients bit for bit on the CPU; two deterministic runs are identical."""
    q, k, v = random_qkv(case_key("remat"), B, SQ, SK, HQ, HKV, D, D, jnp.float32)
    ex = _extras(2)
    runs = {}
    for name, det, remat in (("plain", False, False), ("remat", False, True), ("det", True, False)):
        g = jax.jit(jax.grad(_loss_fn(det, remat), argnums=(0, 1, 2, 3)))
        runs[name] = g(q, k, v, ex["sinks"], ex)
        if det:
            again = g(q, k, v, ex["sinks"], ex)
            for a, b in zip(runs[name], again, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for name in ("remat", "det"):
        for a, b in zip(runs[name], runs["plain"], strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_sinks_gradient_in_the_sinks_dtype():
    """bfloat16 / float64 sinks: the kernel reads them as float32; the gradient comes back in
    the sinks' own dtype."""
    q, k, v = random_qkv(case_key("sink dtype"), B, SQ, SK, HQ, HKV, D, D, jnp.float32)
    for dt in (jnp.bfloat16, jnp.float64):
        sinks = jnp.linspace(-1.0, 1.0, HQ).astype(dt)
        g = jax.grad(lambda s: jnp.sum(jax_fa4.attention(q, k, v, sinks=s) ** 2))(sinks)
        assert g.dtype == jnp.dtype(dt) and g.shape == (HQ,)
        assert np.isfinite(np.asarray(g, np.float64)).all()


# ---------------------------------------------------------------------------------------------
# Lowering
# ---------------------------------------------------------------------------------------------


def _custom_calls(text: str, target: str) -> list[str]:
    return [line for line in text.splitlines() if f"@{target}(" in line]


def test_cpu_custom_calls_have_fixed_arity_and_the_variant_attributes():
    q, k, v = random_qkv(case_key("lower"), B, SQ, SK, HQ, HKV, D, D, jnp.float32)
    dense = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v)).lower(q, k, v).as_text()
    (fwd,) = _custom_calls(dense, "jax_fa4_fwd_cpu")
    # q, k, v, then [0] placeholders for q/kv lengths, q/kv segment ids (int32) and sinks.
    operands = re.findall(r"tensor<([^>]*)>", fwd.split("->")[0].rsplit(":", 1)[1])
    assert operands[3:] == ["0xi32"] * 4 + ["0xf32"], operands
    assert "window_left = 1073741824 : i64" in fwd and "window_right = 1073741824 : i64" in fwd
    assert "softcap = 0.000000e+00 : f64" in fwd

    ex = _extras(3)

    def loss(q, k, v, sinks):
        o = jax_fa4.attention(
            q,
            k,
            v,
            causal=True,
            local_window_size=(5, None),
            key_value_seq_lengths=ex["key_value_seq_lengths"],
            segment_ids=(ex["q_ids"], ex["kv_ids"]),
            logits_soft_cap=30.0,
            sinks=sinks,
        )
        return jnp.sum(o)

    text = jax.jit(jax.grad(loss, argnums=(0, 3))).lower(q, k, v, ex["sinks"]).as_text()
    (fwd,) = _custom_calls(text, "jax_fa4_fwd_cpu")
    (bwd,) = _custom_calls(text, "jax_fa4_bwd_cpu")
    f_ops = re.findall(r"tensor<([^>]*)>", fwd.split("->")[0].rsplit(":", 1)[1])
    b_ops = re.findall(r"tensor<([^>]*)>", bwd.split("->")[0].rsplit(":", 1)[1])
    assert f_ops[3:] == ["0xi32", f"{B}xi32", f"{B}x{SQ}xi32", f"{B}x{SK}xi32", f"{B}x{HQ}xf32"]
    assert b_ops[7:] == ["0xi32", f"{B}xi32", f"{B}x{SQ}xi32", f"{B}x{SK}xi32"]
    for call in (fwd, bwd):
        assert "window_left = 5 : i64" in call and "window_right = 1073741824 : i64" in call
        assert "softcap = 3.000000e+01 : f64" in call and "causal = true" in call


def test_segment_ranges():
    """Per 64-position chunk the (min, max) id; the last chunk over its valid positions."""
    ids = np.random.default_rng(0).integers(-5, 9, size=(3, 150)).astype(np.int32)
    got = np.asarray(segment_ranges(jnp.asarray(ids)))
    assert got.shape == (3, 3, 2) and got.dtype == np.int32
    for c in range(3):
        chunk = ids[:, 64 * c : 64 * c + 64]
        np.testing.assert_array_equal(got[:, c, 0], chunk.min(axis=1))
        np.testing.assert_array_equal(got[:, c, 1], chunk.max(axis=1))


# ---------------------------------------------------------------------------------------------
# Automatic partitioning (8 CPU devices)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", params([P("b", None, "h"), P("b"), P(None, "s", "h")], [P("b", None, "h")], str)
)
def test_partitioned_variants_match_one_device(spec):
    """Batch and heads split (lengths and ids with the batch, sinks with the heads); a sequence
    split is replicated first. Forward and gradients equal the one-device call."""
    mesh = jax.make_mesh((2, 2, 2), ("b", "h", "s"), axis_types=(AxisType.Auto,) * 3)
    b, sq, sk, hq, hkv = 4, 40, 40, 4, 2
    q, k, v = random_qkv(case_key("shard", str(spec)), b, sq, sk, hq, hkv, D, D, jnp.float32)
    kl = jax.random.randint(case_key("kl"), (b,), 10, sk + 1)
    ids = packed_ids(case_key("ids"), b, sq)
    sinks = jax.random.normal(case_key("sinks"), (hq,), jnp.float32)

    def loss(q, k, v, kl, ids, sinks):
        o, lse = jax_fa4.attention(
            q,
            k,
            v,
            causal=True,
            local_window_size=7,
            key_value_seq_lengths=kl,
            segment_ids=ids,
            sinks=sinks,
            logits_soft_cap=5.0,
            return_lse=True,
        )
        return jnp.sum(o**2) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0)), o

    f = jax.value_and_grad(loss, argnums=(0, 1, 2, 5), has_aux=True)
    (l1, o1), g1 = jax.jit(f)(q, k, v, kl, ids, sinks)
    put = lambda x, s: jax.device_put(x, NamedSharding(mesh, s))  # noqa: E731
    args = (
        put(q, spec),
        put(k, spec),
        put(v, spec),
        put(kl, P(spec[0])),
        put(ids, P(spec[0])),
        put(sinks, P()),
    )
    (l8, o8), g8 = jax.jit(f)(*args)
    _close(o8, o1, "o", 1e-5)
    _close(l8, l1, "loss", 1e-4)
    for name, a, b_ in zip(("dq", "dk", "dv", "dsinks"), g8, g1, strict=True):
        _close(a, b_, name, 1e-4)


# (name, attention kwargs, whether the sequence split runs as a ring). Lengths with a causal mask
# or a window are what the ring cannot do exactly: that sequence is replicated.
SEQ_VARIANTS = {
    "window+ids+softcap+sinks": (
        dict(causal=True, local_window_size=(9, 0), logits_soft_cap=5.0),
        ("ids", "sinks"),
        True,
    ),
    "window both sides, ids": (dict(local_window_size=(6, 11)), ("ids",), True),
    "lengths+ids, not causal": (dict(), ("kl", "ql", "ids"), True),
    "lengths+causal": (dict(causal=True), ("kl",), False),
}


@pytest.mark.parametrize(
    "name", params(list(SEQ_VARIANTS), ["window+ids+softcap+sinks", "lengths+causal"])
)
def test_sequence_split_variants_ring_under_jit(name):
    """Plain jit with q, k, v (and the ids) split over the sequence: a variant the ring can do runs
    as the ring (collective-permutes, no all-gather), the rest is replicated first; forward and
    gradients (sinks included) equal the one-device call either way."""
    kw, extras, ring = SEQ_VARIANTS[name]
    mesh = jax.make_mesh((4,), ("s",), axis_types=(AxisType.Auto,))
    b, s, hq, hkv = 2, 48, 4, 2
    q, k, v = random_qkv(case_key("seq-ring", name), b, s, s, hq, hkv, D, D, jnp.float32)
    ops = dict(
        kl=jax.random.randint(case_key("kl", name), (b,), 5, s + 1),
        ql=jax.random.randint(case_key("ql", name), (b,), 5, s + 1),
        ids=packed_ids(case_key("ids", name), b, s),
        sinks=jax.random.normal(case_key("sinks", name), (hq,), jnp.float32),
    )
    ops = {n: x for n, x in ops.items() if n in extras}

    def loss(q, k, v, sinks=None, **rest):
        o, lse = jax_fa4.attention(
            q,
            k,
            v,
            key_value_seq_lengths=rest.get("kl"),
            query_seq_lengths=rest.get("ql"),
            segment_ids=rest.get("ids"),
            sinks=sinks,
            return_lse=True,
            **kw,
        )
        return jnp.sum(o**2) + jnp.sum(jnp.where(jnp.isfinite(lse), jnp.sin(lse), 0.0)), o

    argnums = (0, 1, 2, 3) if "sinks" in ops else (0, 1, 2)
    sinks = ops.pop("sinks", None)
    f = jax.value_and_grad(
        lambda q, k, v, sinks, rest: loss(q, k, v, sinks, **rest), argnums, has_aux=True
    )
    (l1, o1), g1 = jax.jit(f)(q, k, v, sinks, ops)
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    seq = P(None, "s")
    sharded = (put(q, seq), put(k, seq), put(v, seq), None if sinks is None else put(sinks, P()))
    rest = {n: put(x, seq if n == "ids" else P()) for n, x in ops.items()}
    (l4, o4), g4 = jax.jit(f)(*sharded, rest)
    if ring:  # the output stays split over the sequence
        assert o4.sharding.spec[1] == "s", o4.sharding
    _close(o4, o1, f"{name}: o", 1e-5)
    _close(l4, l1, f"{name}: loss", 1e-4)
    for what, a, b_ in zip(("dq", "dk", "dv", "dsinks"), g4, g1, strict=False):
        _close(a, b_, f"{name}: {what}", 1e-4)
    text = jax.jit(f).lower(*sharded, rest).compile().as_text()
    permutes = len(re.findall(r"\scollective-permute(-start)?\(", text))
    gathers = re.findall(r"= f32\[[^\]]*\][^=]*\sall-gather(-start)?\(", text)
    if ring:
        assert permutes > 0, f"{name}: no ring (no collective-permute) in the partitioned program"
        assert not gathers, f"{name}: a float operand was all-gathered: {gathers[:3]}"
    else:
        assert permutes == 0, f"{name}: lengths with a band must not run the ring"


_CUDA_EXPORT = """
import json, re
import jax, jax.numpy as jnp
from jax import export
import jax_fa4
from jax_fa4 import _ffi, lowering
# Lower for CUDA without a CUDA build: the targets need not exist to be lowered (only to run).
lowering._check_target = lambda *a: None
if not _ffi.built_with_cuda():
    _ffi.cuda_bwd_workspace_bytes = lambda b, sq, hq, d: 4096
    # The plan gives this prefill shape (GQA group 2 x 200 rows) no split-KV workspace.
    _ffi.cuda_fwd_workspace_bytes = lambda b, sq, sk, hq, hkv, d: 0
q = jax.ShapeDtypeStruct((2, 200, 4, 64), jnp.bfloat16)
k = jax.ShapeDtypeStruct((2, 130, 2, 64), jnp.bfloat16)
qi = jax.ShapeDtypeStruct((2, 200), jnp.int32)
ki = jax.ShapeDtypeStruct((2, 130), jnp.int32)

def loss(q, k, v, qi, ki):
    o = jax_fa4.attention(
        q, k, v, segment_ids=(qi, ki), local_window_size=(3, 0), sinks=jnp.ones(4)
    )
    return jnp.sum(o.astype(jnp.float32))

checks = [export.DisabledSafetyCheck.custom_call(f"jax_fa4_{n}_cuda") for n in ("fwd", "bwd")]
text = export.export(jax.jit(jax.grad(loss)), platforms=["cuda"], disabled_checks=checks)(
    q, k, k, qi, ki
).mlir_module()
out = {}
for line in text.splitlines():
    m = re.search(r"@(jax_fa4_(fwd|bwd)_cuda)\\(", line)
    if m:
        sig = line.rsplit(" : (", 1)[1]
        ins, outs = sig.split(") -> ")
        out[m.group(2)] = re.findall(r"tensor<([^>]*)>", ins)
        out[m.group(2) + "_results"] = re.findall(r"tensor<([^>]*)>", outs)
print("RESULT " + json.dumps(out))
"""


def test_cuda_custom_calls_take_the_segment_ranges():
    """Lowered for CUDA (no GPU needed): the forward has 10 operands and the backward 13, the
    last two the int32 [b, ceil(s / 64), 2] segment ranges (placeholders for absent extras).
    Each call has one uint8 workspace result after the primitive's: empty for the forward of
    this prefill shape (no split-KV decode), 4096 bytes (the stub's) or the extension's size
    for the backward."""
    proc = subprocess.run(
        [sys.executable, "-c", _CUDA_EXPORT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1][len("RESULT ") :])
    ranges = ["2x4x2xi32", "2x3x2xi32"]  # ceil(200 / 64) = 4, ceil(130 / 64) = 3 chunks
    assert out["fwd"][3:] == ["0xi32", "0xi32", "2x200xi32", "2x130xi32", "2x4xf32", *ranges]
    assert out["bwd"][7:] == ["0xi32", "0xi32", "2x200xi32", "2x130xi32", *ranges]
    assert out["fwd_results"] == ["2x200x4x64xbf16", "2x4x200xf32", "0xui8"]
    assert out["bwd_results"][:3] == ["2x200x4x64xbf16", "2x130x2x64xbf16", "2x130x2x64xbf16"]
    assert len(out["bwd_results"]) == 4 and out["bwd_results"][3].endswith("xui8")
