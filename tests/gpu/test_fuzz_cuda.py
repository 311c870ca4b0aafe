"""A seeded random fuzz of the Hopper kernels through the whole Python path: forward (o, lse) and
gradients (dq, dk, dv, d sinks) of jax_fa4.attention against the float64 oracle
(jax_fa4.attention_reference) by the error rule of tests/tolerance.py. Skips without a GPU.

Each case is drawn by its own numpy Generator, seeded by (FA4_FUZZ_SEED, case index), so a case
is the same whatever FA4_FUZZ_CASES is (default seed 23, 300 cases). One case draws:

- batch 1-4, heads_kv 1-4, a GQA ratio 1-8 (heads_q = ratio * heads_kv);
- seq_q and seq_k independently in 1..5000: about a third from the tile boundaries +-1 (1, 2,
  63-65, 79-81, 127-129, 175-177, 191-193, 255-257, 383-385, 1023-1025, 2047-2049,
  4095-4097, 5000), the rest log-uniform or uniform; one case in ten has seq_q == seq_k;
- head dim 64, 128 or 256; bfloat16 or float16; causal or not;
- softmax_scale: the default 1 / sqrt(head_dim) or uniform in [0.02, 1.0];
- an input magnitude log-uniform in [0.1, 8] that q and k are multiplied by (v is unit normal);
- two cases in five: variants, one to three of (or all five) window (random left and right,
  either unbounded), lengths (query, key or both; 0 and over-long ones sometimes), segment ids
  (sorted: packed documents; or unsorted random ids), soft cap (uniform in [1, 30]) and sinks;
- one case in eight: the deterministic backward; three in four: the loss also weighs lse.

The loss is sum(o * w) + sum(finite lse * wl) with normal weights; the outputs and gradients are
checked finite after the allocator was poisoned with NaN blocks of their sizes (as in
test_fwd_cuda.py). One addition to the rule for the gradients: the baseline error is the larger
of plain XLA's and that of the float64 gradient whose delta = rowsum(dO * O) takes o as stored
(rounded to the dtype), which every FlashAttention backward reads. Plain XLA's autodiff has no
such term, and where only a few rows see more than one key (seq_k 2 against 220 causal queries:
two rows per head) its max error can be far below it by chance (found on the CPU kernels: dq
1.2e-2 against XLA's 7e-4 in the same row).

The work is bounded: batch and heads are redrawn until batch * heads_q * seq_q * seq_k <= 2e8
(the float64 oracle's score matrix: 1.6 GB) and batch * heads_q * max(seq_q, seq_k) * head_dim
<= 2e7 (the tensors), so that the file runs in a few minutes with `pytest -n 12`
(XLA_PYTHON_CLIENT_PREALLOCATE=false, as tests/gpu/validate.sh sets it). The largest cases' oracle
(float64 scores and their gradients) takes about 7 GB of GPU memory for a moment: with 16 workers
two such cases ran out of the H200's memory together (each passes alone), with 8 none did.

A case's id holds its index and every drawn parameter (case0017-b2_sq129_..._d128-bf16-causal-
...); its lengths, segment ids, sinks and tensors come from the same seed. To rerun one case:
`pytest tests/gpu/test_fuzz_cuda.py -k case0017` (with FA4_FUZZ_SEED if it was not the default);
another sample: `FA4_FUZZ_SEED=5 FA4_FUZZ_CASES=1000 pytest -n 8 tests/gpu/test_fuzz_cuda.py`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerance import LSE_MIN_MAGNITUDE, WORST, assert_close_by_rule, max_abs_err, random_qkv

import jax_fa4
from jax_fa4.reference import visibility

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "gpu", reason="needs a GPU (these test the Hopper CUDA kernels)"
)

BASE_SEED = int(os.environ.get("FA4_FUZZ_SEED", "23"))
NUM_CASES = int(os.environ.get("FA4_FUZZ_CASES", "300"))
MAX_SEQ = 5000
MAX_WORK = 2e8  # batch * heads_q * seq_q * seq_k
MAX_ELEMENTS = 2e7  # batch * heads_q * max(seq_q, seq_k) * head_dim
# The kernels' tiles: 128 / 192 query rows, key blocks of 80 / 128 / 176 (fwd/config.cuh), the
# backward's 64 / 128 query rows and 128 keys; and the persistent kernels' seq_k limits.
TILE_LENGTHS = (1, 2, 63, 64, 65, 79, 80, 81, 127, 128, 129, 175, 176, 177, 191, 192, 193)
TILE_LENGTHS += (255, 256, 257, 383, 384, 385, 1023, 1024, 1025, 2047, 2048, 2049)
TILE_LENGTHS += (4095, 4096, 4097, 5000)
FEATURE_GROUPS = ("window", "lengths", "ids", "softcap", "sinks")


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """One drawn case; the data (tensors, lengths, ids, sinks, loss weights) come from
    `data_seed`."""

    index: int
    batch: int
    seq_q: int
    seq_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: str
    causal: bool
    softmax_scale: float | None
    magnitude: float
    window: tuple[int | None, int | None] | None
    lengths: str | None  # "q", "kv" or "both"
    ids: str | None  # "packed" (sorted) or "random"
    softcap: float | None
    sinks: bool
    deterministic: bool
    with_lse: bool
    data_seed: int

    @property
    def id(self) -> str:
        dt = {"bfloat16": "bf16", "float16": "fp16"}[self.dtype]
        scale = "default" if self.softmax_scale is None else f"{self.softmax_scale:.4g}"
        parts = [
            f"case{self.index:04d}",
            f"b{self.batch}_sq{self.seq_q}_sk{self.seq_k}_hq{self.heads_q}_hkv{self.heads_kv}"
            f"_d{self.head_dim}",
            dt,
            "causal" if self.causal else "full",
            f"scale{scale}",
            f"mag{self.magnitude:.3g}",
        ]
        if self.window is not None:
            left, right = ("inf" if w is None else str(w) for w in self.window)
            parts.append(f"window{left}_{right}")
        if self.lengths is not None:
            parts.append(f"{self.lengths}len")
        if self.ids is not None:
            parts.append(f"{self.ids}ids")
        if self.softcap is not None:
            parts.append(f"softcap{self.softcap:.3g}")
        if self.sinks:
            parts.append("sinks")
        if self.deterministic:
            parts.append("det")
        if self.with_lse:
            parts.append("lse")
        return "-".join(parts)


def _draw_seq(rng: np.random.Generator, max_seq: int) -> int:
    u = rng.random()
    if u < 0.35:
        return int(rng.choice([s for s in TILE_LENGTHS if s <= max_seq]))
    if u < 0.7:
        return int(min(max_seq, max(1, round(math.exp(rng.uniform(0, math.log(max_seq)))))))
    return int(rng.integers(1, max_seq + 1))


def _draw_window(rng: np.random.Generator, sq: int, sk: int) -> tuple[int | None, int | None]:
    def side() -> int | None:
        u = rng.random()
        if u < 0.2:
            return None
        if u < 0.5:
            return int(rng.integers(0, 17))
        return int(rng.integers(0, 2 * max(sq, sk) + 1))

    left, right = side(), side()
    if left is None and right is None:
        left = int(rng.integers(0, max(sq, sk) + 1))
    return left, right


def draw_case(
    base_seed: int,
    index: int,
    *,
    max_seq: int = MAX_SEQ,
    max_work: float = MAX_WORK,
    max_elements: float = MAX_ELEMENTS,
    head_dims: tuple[int, ...] = (64, 128, 256),
) -> FuzzCase:
    """The case `index` of the sample seeded by `base_seed` (independent of the other cases)."""
    rng = np.random.default_rng([base_seed, index])
    sq = _draw_seq(rng, max_seq)
    sk = sq if rng.random() < 0.1 else _draw_seq(rng, max_seq)
    d = int(rng.choice(head_dims))
    while True:  # always ends: batch 1 and one head fit any lengths
        b = int(rng.integers(1, 5))
        hkv = int(rng.integers(1, 5))
        hq = hkv * int(rng.integers(1, 9))
        if b * hq * sq * sk <= max_work and b * hq * max(sq, sk) * d <= max_elements:
            break
    dtype = str(rng.choice(["bfloat16", "float16"]))
    causal = bool(rng.random() < 0.5)
    scale = None if rng.random() < 0.5 else float(rng.uniform(0.02, 1.0))
    magnitude = float(math.exp(rng.uniform(math.log(0.1), math.log(8.0))))
    groups: tuple[str, ...] = ()
    if rng.random() < 0.4:
        n = int(rng.choice([1, 2, 3, 5], p=[0.5, 0.3, 0.1, 0.1]))
        groups = tuple(rng.choice(FEATURE_GROUPS, size=n, replace=False))
    window = _draw_window(rng, sq, sk) if "window" in groups else None
    lengths = str(rng.choice(["q", "kv", "both"])) if "lengths" in groups else None
    ids = str(rng.choice(["packed", "random"])) if "ids" in groups else None
    softcap = float(rng.uniform(1.0, 30.0)) if "softcap" in groups else None
    return FuzzCase(
        index=index,
        batch=b,
        seq_q=sq,
        seq_k=sk,
        heads_q=hq,
        heads_kv=hkv,
        head_dim=d,
        dtype=dtype,
        causal=causal,
        softmax_scale=scale,
        magnitude=magnitude,
        window=window,
        lengths=lengths,
        ids=ids,
        softcap=softcap,
        sinks="sinks" in groups,
        deterministic=bool(rng.random() < 0.125),
        with_lse=bool(rng.random() < 0.75),
        data_seed=int(rng.integers(0, 2**31)),
    )


def _draw_lengths(rng: np.random.Generator, b: int, s: int) -> np.ndarray:
    """int32 [b]: mostly in 1..s, sometimes 0, s or over-long (clamped to s by the library)."""
    out = rng.integers(1, s + 1, size=b)
    u = rng.random(b)
    out[u < 0.1] = 0
    out[(u >= 0.1) & (u < 0.25)] = s
    out[(u >= 0.25) & (u < 0.3)] = s + 7
    return out.astype(np.int32)


def _draw_ids(rng: np.random.Generator, kind: str, b: int, s: int) -> np.ndarray:
    """int32 [b, s]: non-decreasing documents of random lengths, or unsorted random ids."""
    if kind == "packed":
        mean_doc = float(rng.choice([4.0, 12.0, 100.0, 700.0]))
        return np.cumsum(rng.random((b, s)) < 1.0 / mean_doc, axis=1).astype(np.int32)
    return rng.integers(0, int(rng.choice([2, 3, 5])), size=(b, s)).astype(np.int32)


def variant_arrays(case: FuzzCase) -> tuple[dict, np.ndarray | None]:
    """(the array keyword arguments: lengths and segment ids, the sinks or None) of a case."""
    rng = np.random.default_rng([case.data_seed, 1])
    b, sq, sk = case.batch, case.seq_q, case.seq_k
    arrays: dict = {}
    if case.lengths in ("q", "both"):
        arrays["query_seq_lengths"] = _draw_lengths(rng, b, sq)
    if case.lengths in ("kv", "both"):
        arrays["key_value_seq_lengths"] = _draw_lengths(rng, b, sk)
    if case.ids is not None:
        q_ids = _draw_ids(rng, case.ids, b, sq)
        if sq == sk and rng.random() < 0.7:
            arrays["segment_ids"] = q_ids
        else:
            arrays["segment_ids"] = (q_ids, _draw_ids(rng, case.ids, b, sk))
    sinks = (2.0 * rng.standard_normal(case.heads_q)).astype(np.float32) if case.sinks else None
    return arrays, sinks


Attn = Callable[..., tuple[jax.Array, jax.Array]]


def _outputs_and_grads(attn: Attn, q, k, v, sinks, arrays: dict, w, wl):
    """(o, lse, gradients wrt (q, k, v[, sinks])) of sum(o * w) + sum(finite lse * wl)."""
    argnums = (0, 1, 2, 3) if sinks is not None else (0, 1, 2)

    def loss(q, k, v, sinks):
        o, lse = attn(q, k, v, sinks, arrays)
        acc = jnp.float64 if o.dtype == jnp.float64 else jnp.float32
        finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0).astype(acc)
        return jnp.sum(o.astype(acc) * w) + jnp.sum(finite_lse * wl), (o, lse)

    (_, (o, lse)), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(q, k, v, sinks)
    return o, lse, grads


def _larger_error(oracle, *candidates):
    """The candidate baseline farthest (max abs error) from the oracle."""
    return max(candidates, key=lambda c: max_abs_err(c, oracle))


def _poison_allocator(shapes_dtypes: list[tuple[tuple[int, ...], object]]) -> None:
    """Leaves freed NaN-filled blocks of the outputs' sizes for the allocator to hand back."""
    junk = [jnp.full(s, jnp.nan, d) for s, d in shapes_dtypes]
    jax.block_until_ready(junk)
    del junk


def run_case(case: FuzzCase) -> None:
    """jax_fa4.attention on the drawn case against the float64 oracle: o, lse, dq, dk, dv and
    d sinks by the error rule, every output finite (lse: or -inf where the oracle is)."""
    dtype = jnp.dtype(case.dtype)
    b, sq, sk, hq, hkv, d = (
        case.batch,
        case.seq_q,
        case.seq_k,
        case.heads_q,
        case.heads_kv,
        case.head_dim,
    )
    key = jax.random.key(case.data_seed)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, d, d, jnp.float32)
    q, k, v = (
        (q * case.magnitude).astype(dtype),
        (k * case.magnitude).astype(dtype),
        v.astype(dtype),
    )
    kw_w, kw_l = jax.random.split(jax.random.fold_in(key, 7))
    w = jax.random.normal(kw_w, (b, sq, hq, d), jnp.float32)
    wl = jax.random.normal(kw_l, (b, hq, sq), jnp.float32) * float(case.with_lse)
    np_arrays, np_sinks = variant_arrays(case)
    arrays = jax.tree.map(jnp.asarray, np_arrays)
    sinks = None if np_sinks is None else jnp.asarray(np_sinks)
    static = dict(
        causal=case.causal,
        softmax_scale=case.softmax_scale,
        local_window_size=case.window,
        logits_soft_cap=case.softcap,
    )

    def fa4(q, k, v, sinks, arrays):
        return jax_fa4.attention(
            q,
            k,
            v,
            sinks=sinks,
            return_lse=True,
            deterministic=case.deterministic,
            **static,
            **arrays,
        )

    def reference(compute_dtype) -> Attn:
        def f(q, k, v, sinks, arrays):
            return jax_fa4.attention_reference(
                q, k, v, sinks=sinks, compute_dtype=compute_dtype, **static, **arrays
            )

        return f

    def oracles(q, k, v, sinks, arrays, w, wl):
        up = [None if x is None else x.astype(jnp.float64) for x in (q, k, v, sinks)]
        (o64, lse64), vjp = jax.vjp(
            lambda q, k, v, sinks: reference(jnp.float64)(q, k, v, sinks, arrays), *up
        )
        w64 = w.astype(jnp.float64)
        dlse = jnp.where(jnp.isfinite(lse64), wl, 0.0).astype(jnp.float64)
        exact = [g for g in vjp((w64, dlse)) if g is not None]
        # delta = rowsum(dO * O) from o as stored (rounded to the dtype) differs from the exact
        # one by err; the backward then acts as if lse's cotangent were dlse - err.
        # (reduce_precision: XLA may fold a convert to the dtype and back, excess precision.)
        fi = jnp.finfo(dtype)
        stored = jax.lax.reduce_precision(o64, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
        err = jnp.einsum("bqhd,bqhd->bhq", w64, stored - o64)
        stored_o = [g for g in vjp((w64, dlse - err)) if g is not None]
        plain = _outputs_and_grads(reference(dtype), q, k, v, sinks, arrays, w, wl)
        visible, _ = visibility(
            b, sq, sk, causal=case.causal, local_window_size=case.window, **arrays
        )
        most_keys = jnp.max(jnp.sum(visible, axis=-1, dtype=jnp.int32))
        return (o64, lse64, exact), plain, stored_o, most_keys

    outputs = [((b, sq, hq, d), dtype), ((b, hq, sq), jnp.float32)]
    _poison_allocator(outputs + [(x.shape, dtype) for x in (q, k, v)])
    o, lse, grads = jax.jit(lambda *a: _outputs_and_grads(fa4, *a, w, wl))(q, k, v, sinks, arrays)
    (o64, lse64, g64), (ob, lseb, gb), g_stored_o, most_keys = jax.jit(oracles)(
        q, k, v, sinks, arrays, w, wl
    )

    tag = case.id
    assert o.dtype == dtype and o.shape == (b, sq, hq, d), f"{tag}: o {o.dtype} {o.shape}"
    assert lse.dtype == jnp.float32 and lse.shape == (b, hq, sq), f"{tag}: lse {lse.shape}"
    o_np, lse_np = np.asarray(o, np.float32), np.asarray(lse)
    assert np.isfinite(o_np).all(), f"{tag}: o has non-finite entries (unwritten or NaN)"
    assert not np.isnan(lse_np).any(), f"{tag}: lse has NaN entries (unwritten?)"
    assert (np.isfinite(lse_np) | np.isneginf(np.asarray(lse64))).all(), f"{tag}: lse not finite"
    assert_close_by_rule(f"o {tag}", o, o64, ob, dtype)
    assert_close_by_rule(
        f"lse {tag}", lse, lse64, lseb.astype(jnp.float32), dtype, LSE_MIN_MAGNITUDE
    )
    # When no row sees two keys, every gradient is a cancellation (dS = P (dP - D) with P = 1)
    # whose float32 rounding follows |dO . v| ~ sqrt(head_dim), which XLA's autodiff of the
    # oracle happens to cancel exactly (tests/test_variants.py: check_variant's doc).
    grad_floor = float(np.sqrt(d)) if int(most_keys) <= 1 else 1e-2
    for name, got, want, plain, stored, x in zip(
        ("dq", "dk", "dv", "dsinks"), grads, g64, gb, g_stored_o, (q, k, v, sinks), strict=False
    ):
        base = _larger_error(want, plain, stored)
        assert got.shape == x.shape and got.dtype == x.dtype, f"{name} {tag}: {got.dtype}"
        assert np.isfinite(np.asarray(got, np.float32)).all(), f"{name} {tag}: non-finite entries"
        if name == "dsinks":  # a float32 sum over every row: floored at magnitude 1 like lse
            assert_close_by_rule(f"{name} {tag}", got, want, base, jnp.float32, LSE_MIN_MAGNITUDE)
        else:
            assert_close_by_rule(f"{name} {tag}", got, want, base, dtype, grad_floor)


CASES = [draw_case(BASE_SEED, i) for i in range(NUM_CASES)]


@pytest.fixture(autouse=True, scope="module")
def _record_worst_ratio():
    """Under pytest-xdist the terminal summary sees no worker's ratios: append ours to a file."""
    yield
    path = os.environ.get("FA4_WORST_RATIO_FILE")
    if path and WORST:
        ratio, name = max(WORST)
        with open(path, "a") as f:
            f.write(f"{len(WORST)} checks; worst error / allowed bound = {ratio:.3f} ({name})\n")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fuzz_case_matches_oracle(case: FuzzCase):
    run_case(case)
