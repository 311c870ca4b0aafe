"""Train a small byte-level decoder-only transformer (flax.nnx) whose attention is jax_fa4.

The corpus is one every machine has offline: the ``.py`` sources of the Python standard library of
the running interpreter (``sysconfig.get_paths()["stdlib"]``, without ``site-packages``). Files
are split by a hash of their relative path into a training set and a held-out set (about 5%), so
the split is the same on every run and every machine with the same Python version.

Packed sequences: every row of a batch holds pieces of several files (documents) back to back,
each a random crop of a random file, about 2-8 per row (:func:`pack_rows`). The model sees them
through segment ids: attention is causal inside each document and never crosses into another
(``jax_fa4.attention(q, k, v, causal=True, segment_ids=ids)``; with ``--attention jax_nn``,
``jax.nn.dot_product_attention(..., is_causal=True)`` with the equivalent dense same-document
mask), positions restart at 0 in each document, and the loss skips the byte that follows a
document's last one (it belongs to the next document).

The model: byte embeddings (256 symbols) plus learned positions, pre-LayerNorm blocks of
self-attention (q/k/v and output projections, ``nnx.LinearGeneral``) and a GELU MLP, a float32
residual stream, sublayers computing in ``--dtype`` (bfloat16 on a GPU, float32 on the CPU by
default), logits tied to the embedding. AdamW with warm-up and cosine decay, gradient clipping.

Sampling after training uses a KV cache (:meth:`Trainer.generate`): one prefill over the prompt
returns each layer's K and V (a cache ``[1, seq_len, heads, head_dim]`` per layer), then one jitted
decode step per byte, the cache donated, writes the new K and V at the cache length
(``jax.lax.dynamic_update_slice``) and attends with ``jax_fa4.attention(q, k_cache, v_cache,
causal=True, key_value_seq_lengths=cache_len)`` (``--attention jax_nn``:
``jax.nn.dot_product_attention(q, k_cache, v_cache, key_value_seq_lengths=cache_len)``). The
learned positions stop at ``seq_len``: when the context is full it restarts from its last
``seq_len // 2`` bytes, prefilled again at positions 0, 1, ... Generated tokens/s is timed after a
warm-up (compilation excluded), batch 1.

Data parallelism (``--data-parallel N``, 0: every device): each batch's rows are split over N
devices, the model and optimizer replicated on each; under ``jax.jit`` the attention runs on each
device's rows (the automatic partitioning splits the batch, segment ids with it) and XLA sums
the gradients. The losses equal the one-device run's up to float rounding.

Outputs under ``--out``: ``loss.png`` (training and held-out loss), ``metrics.json`` (losses, eval
losses, training tokens/s, the generated sample and its tokens/s), ``checkpoints/`` (orbax;
``--resume`` continues from the newest). With ``--compare`` both attention variants train from the
same initial weights on the same batches: ``<out>/jax_fa4/``, ``<out>/jax_nn/``, and
``compare.png`` + ``compare.json`` side by side (both tokens/s per attention).

Examples::

    python3 examples/train_byte_lm.py --tiny --out /tmp/byte_lm          # CPU, under a minute
    python3 examples/train_byte_lm.py --compare --steps 1000 --out runs/byte_lm_h200   # GPU
    python3 examples/train_byte_lm.py --data-parallel 0 --batch-size 64 --out runs/byte_lm_dp
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm import tqdm

import jax_fa4

ATTENTIONS = ("jax_fa4", "jax_nn")
SAMPLE_PROMPT = b"import os\n\ndef "  # what the sample after training continues


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines a run (written into metrics.json)."""

    attention: str = "jax_fa4"
    steps: int = 1000
    batch_size: int = 32
    seq_len: int = 1024
    d_model: int = 512
    num_heads: int = 4  # head_dim = d_model // num_heads = 128 (the GPU kernel: 64, 128, 256)
    num_layers: int = 6
    mlp_ratio: int = 4
    dtype: str = "auto"  # "auto": bfloat16 on a GPU, float32 on the CPU
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_batches: int = 8
    ckpt_every: int = 500
    seed: int = 0
    heldout_percent: float = 5.0
    max_corpus_mb: float | None = None  # read only this much of the standard library
    jax_nn_implementation: str | None = None  # None: jax.nn picks (cuDNN on a GPU when it can)
    sample_bytes: int = 200
    progress: bool = True
    # Data parallelism: the batch split over this many devices (0: every device of the machine),
    # the model and optimizer replicated; XLA sums the gradients across them.
    data_parallel: int = 1

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def dp_devices(self) -> list[jax.Device]:
        """The devices the batch is split over (data_parallel; 0: all of them)."""
        devices = jax.devices()
        n = len(devices) if self.data_parallel == 0 else self.data_parallel
        if not 1 <= n <= len(devices):
            raise ValueError(
                f"data_parallel={self.data_parallel}: this machine has {len(devices)} devices "
                "(0 means all of them)"
            )
        if self.batch_size % n:
            raise ValueError(
                f"batch_size={self.batch_size} must be a multiple of the {n} data-parallel devices"
            )
        return devices[:n]

    def compute_dtype(self) -> jnp.dtype:
        """The dtype the sublayers compute in (parameters stay float32)."""
        if self.dtype == "auto":
            return jnp.dtype(jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16)
        return jnp.dtype(self.dtype)


# --tiny: a CI-sized run (a few seconds of training on two CPU cores).
TINY = dict(
    steps=40,
    batch_size=8,
    seq_len=128,
    d_model=64,
    num_heads=1,  # head_dim 64: a size the GPU kernel takes too
    num_layers=2,
    learning_rate=3e-3,
    warmup_steps=5,
    eval_every=10,
    eval_batches=2,
    ckpt_every=20,
    max_corpus_mb=4.0,
    sample_bytes=48,
)


# ---------------------------------------------------------------------------------------------
# Data


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The standard library's sources as bytes, split by file into train and held-out."""

    train: np.ndarray  # uint8
    heldout: np.ndarray  # uint8
    root: str
    train_files: int
    heldout_files: int
    train_starts: np.ndarray  # int64 [train_files]: where each file starts in ``train``
    heldout_starts: np.ndarray  # int64 [heldout_files]


def _path_hash(rel: str) -> int:
    return int.from_bytes(hashlib.sha1(rel.encode()).digest()[:8], "little")


def load_stdlib_corpus(heldout_percent: float = 5.0, max_mb: float | None = None) -> Corpus:
    """Reads the running interpreter's standard library ``.py`` files (not site-packages).

    Files are visited in the order of a hash of their relative path (a deterministic shuffle), up
    to ``max_mb`` megabytes; a file goes to the held-out set when its hash falls in the lowest
    ``heldout_percent`` percent.
    """
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages"))
        for name in filenames:
            if name.endswith(".py"):
                rels.append((pathlib.Path(dirpath) / name).relative_to(root).as_posix())
    if not rels:
        raise RuntimeError(f"no .py files under the standard library directory {root}")
    rels.sort(key=_path_hash)
    budget = math.inf if max_mb is None else max_mb * 1e6
    train, heldout, size = [], [], 0
    for rel in rels:
        if size >= budget:
            break
        try:
            data = (root / rel).read_bytes()
        except OSError:
            continue
        size += len(data)
        is_heldout = _path_hash(rel) % 10_000 < heldout_percent * 100
        (heldout if is_heldout else train).append(data)
    if not heldout:  # a tiny budget may draw no held-out file: hold out the last one read
        heldout.append(train.pop())
    train = [f for f in train if f]  # empty files (__init__.py) are no documents
    heldout = [f for f in heldout if f] or heldout

    def starts(files: list[bytes]) -> np.ndarray:
        return np.cumsum([0] + [len(f) for f in files[:-1]]).astype(np.int64)

    return Corpus(
        train=np.frombuffer(b"".join(train), np.uint8),
        heldout=np.frombuffer(b"".join(heldout), np.uint8),
        root=str(root),
        train_files=len(train),
        heldout_files=len(heldout),
        train_starts=starts(train),
        heldout_starts=starts(heldout),
    )


@dataclasses.dataclass(frozen=True)
class Batch:
    """Packed rows of ``seq_len + 1`` bytes: the model reads ``[:, :-1]``, predicts ``[:, 1:]``.

    tokens, segment_ids, positions: int32 ``[batch, seq_len + 1]``; segment_ids number the
    documents of a row 1, 2, ...; positions count from 0 in each document.
    """

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray

    def as_tuple(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.tokens, self.segment_ids, self.positions


def pack_rows(
    data: np.ndarray, starts: np.ndarray, rng: np.random.Generator, rows: int, length: int
) -> Batch:
    """`rows` rows of `length` bytes, each packed with random crops of random files.

    A piece is a crop of one file (a document), from a random offset, of a random length in
    ``[length // 8, length // 2]`` (shorter when the file or the row ends first); pieces follow
    each other until the row is full.
    """
    ends = np.append(starts[1:], len(data))
    lo, hi = max(2, length // 8), max(2, length // 2)
    tokens = np.zeros((rows, length), np.int32)
    segment_ids = np.zeros((rows, length), np.int32)
    positions = np.zeros((rows, length), np.int32)
    for row in range(rows):
        filled, doc = 0, 0
        while filled < length:
            f = int(rng.integers(len(starts)))
            size = int(ends[f] - starts[f])
            want = min(int(rng.integers(lo, hi + 1)), length - filled, size)
            offset = int(starts[f] + rng.integers(0, size - want + 1))
            doc += 1
            tokens[row, filled : filled + want] = data[offset : offset + want]
            segment_ids[row, filled : filled + want] = doc
            positions[row, filled : filled + want] = np.arange(want)
            filled += want
    return Batch(tokens, segment_ids, positions)


def train_batch(corpus: Corpus, step: int, cfg: Config) -> Batch:
    """Packed training rows; a function of (seed, step) only, so resumable."""
    rng = np.random.default_rng([cfg.seed, step])
    return pack_rows(corpus.train, corpus.train_starts, rng, cfg.batch_size, cfg.seq_len + 1)


def eval_batches(corpus: Corpus, cfg: Config) -> list[Batch]:
    """Fixed packed rows of the held-out set (the same on every run)."""
    if len(corpus.heldout) < cfg.seq_len + 2:
        raise ValueError(
            f"held-out set has {len(corpus.heldout)} bytes, fewer than seq_len + 2 = "
            f"{cfg.seq_len + 2}; raise --max-corpus-mb"
        )
    rng = np.random.default_rng([cfg.seed, 2**31 - 1])
    return [
        pack_rows(corpus.heldout, corpus.heldout_starts, rng, cfg.batch_size, cfg.seq_len + 1)
        for _ in range(cfg.eval_batches)
    ]


# ---------------------------------------------------------------------------------------------
# Model


# An attention function of this model: (q, k, v [batch, seq, heads, head_dim], segment_ids int32
# [batch, seq]) -> [batch, seq, heads, head_dim], causal inside each document.
AttentionFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]

# A decode attention function: (q [batch, 1, heads, head_dim], k_cache, v_cache [batch, seq_len,
# heads, head_dim], cache_len int32 [batch]) -> [batch, 1, heads, head_dim]: the one query of
# sequence b sees the keys [0, cache_len[b]) of its cache (its own key included, at cache_len - 1).
DecodeAttentionFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


class AttentionFns(NamedTuple):
    """One attention kind: the packed function (training, full forward, prefill) and the decode
    function (one new token against the KV cache)."""

    packed: AttentionFn
    decode: DecodeAttentionFn


def jax_fa4_packed_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array
) -> jax.Array:
    """jax_fa4: causal attention inside each document of a packed row (segment ids)."""
    return jax_fa4.attention(q, k, v, causal=True, segment_ids=segment_ids)


def jax_fa4_decode_attention(
    q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, cache_len: jax.Array
) -> jax.Array:
    """jax_fa4's decode call. With lengths, jax_fa4 aligns causal masks to the end of the visible
    keys (query i of seq_q sits at position ``cache_len - seq_q + i``): the one query sits at
    ``cache_len - 1`` and sees the keys ``[0, cache_len)``; keys past the length are never read."""
    return jax_fa4.attention(q, k_cache, v_cache, causal=True, key_value_seq_lengths=cache_len)


def jax_nn_packed_attention(implementation: str | None = None) -> AttentionFn:
    """The baseline: ``jax.nn.dot_product_attention(..., is_causal=True)`` with the dense
    same-document mask ``[batch, 1, seq, seq]`` that the segment ids stand for."""

    def attention_fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
        same_doc = segment_ids[:, None, :, None] == segment_ids[:, None, None, :]
        return jax.nn.dot_product_attention(
            q, k, v, mask=same_doc, is_causal=True, implementation=implementation
        )

    return attention_fn


def jax_nn_decode_attention(implementation: str | None = None) -> DecodeAttentionFn:
    """The baseline's decode: ``jax.nn.dot_product_attention(q, k_cache, v_cache,
    key_value_seq_lengths=cache_len)``. Not ``is_causal``: jax.nn aligns its causal mask top-left
    (the one query would see key 0 only); for one query the visible keys are exactly those below
    the length."""

    def attention_fn(
        q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, cache_len: jax.Array
    ) -> jax.Array:
        return jax.nn.dot_product_attention(
            q, k_cache, v_cache, key_value_seq_lengths=cache_len, implementation=implementation
        )

    return attention_fn


def attention_fns_for(cfg: Config) -> AttentionFns:
    """The packed and decode attention functions of ``cfg.attention``."""
    if cfg.attention == "jax_fa4":
        return AttentionFns(jax_fa4_packed_attention, jax_fa4_decode_attention)
    if cfg.attention == "jax_nn":
        impl = cfg.jax_nn_implementation
        return AttentionFns(jax_nn_packed_attention(impl), jax_nn_decode_attention(impl))
    raise ValueError(f"attention must be one of {ATTENTIONS}; got {cfg.attention!r}")


class KVCache(NamedTuple):
    """One layer's keys and values, ``[batch, seq_len, heads, head_dim]`` each, in the compute
    dtype. Row j of sequence b holds the token at position j; the rows at and past the sequence's
    cache length are zeros after a prefill and never read."""

    k: jax.Array
    v: jax.Array


def _write_row(cache: jax.Array, row: jax.Array, index: jax.Array) -> jax.Array:
    """cache [batch, seq_len, heads, head_dim] with ``row[b]`` ([1, heads, head_dim]) written at
    ``index[b]`` (int32 [batch], each in ``[0, seq_len)``) of each sequence."""

    def one(c: jax.Array, r: jax.Array, i: jax.Array) -> jax.Array:
        zero = jnp.zeros_like(i)  # the start indices share one dtype (int64 under x64)
        return jax.lax.dynamic_update_slice(c, r.astype(c.dtype), (i, zero, zero))

    return jax.vmap(one)(cache, row, index)


class SelfAttention(nnx.Module):
    """Multi-head self-attention over packed rows: q/k/v projections, the attention function,
    output projection; [batch, seq, d_model] -> [batch, seq, d_model] in the compute dtype.

    Three paths: ``__call__`` (training and the full forward), ``prefill`` (the same, also
    returning the layer's :class:`KVCache`) and ``decode`` (one new token against the cache).
    """

    def __init__(self, cfg: Config, attention: AttentionFns, *, rngs: nnx.Rngs):
        dtype, d, h = cfg.compute_dtype(), cfg.d_model, cfg.num_heads
        self.qkv = nnx.LinearGeneral(
            d, (3, h, cfg.head_dim), use_bias=False, dtype=dtype, rngs=rngs
        )
        self.out = nnx.LinearGeneral(
            (h, cfg.head_dim), d, axis=(-2, -1), use_bias=False, dtype=dtype, rngs=rngs
        )
        self.attention_fn = attention.packed
        self.decode_fn = attention.decode

    def _attend(
        self, x: jax.Array, segment_ids: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(output [batch, seq, d_model], k, v [batch, seq, heads, head_dim])."""
        qkv = self.qkv(x)  # [batch, seq, 3, heads, head_dim]
        k, v = qkv[:, :, 1], qkv[:, :, 2]
        return self.out(self.attention_fn(qkv[:, :, 0], k, v, segment_ids)), k, v

    def __call__(self, x: jax.Array, segment_ids: jax.Array) -> jax.Array:
        return self._attend(x, segment_ids)[0]

    def prefill(
        self, x: jax.Array, segment_ids: jax.Array, lengths: jax.Array
    ) -> tuple[jax.Array, KVCache]:
        """x [batch, seq_len, d_model], the first ``lengths[b]`` rows real (int32 [batch]) ->
        (output [batch, seq_len, d_model], the cache: k and v, zeros at and past the lengths)."""
        out, k, v = self._attend(x, segment_ids)
        real = (jnp.arange(x.shape[1]) < lengths[:, None])[:, :, None, None]
        return out, KVCache(jnp.where(real, k, 0), jnp.where(real, v, 0))

    def decode(
        self, x: jax.Array, cache: KVCache, cache_len: jax.Array
    ) -> tuple[jax.Array, KVCache]:
        """x [batch, 1, d_model]: the token at position ``cache_len[b]`` (int32 [batch], below
        seq_len) of each sequence -> (output [batch, 1, d_model], the cache with its k and v
        written at row cache_len); it attends to the cache's rows ``[0, cache_len]``."""
        qkv = self.qkv(x)  # [batch, 1, 3, heads, head_dim]
        cache = KVCache(
            _write_row(cache.k, qkv[:, :, 1], cache_len),
            _write_row(cache.v, qkv[:, :, 2], cache_len),
        )
        o = self.decode_fn(qkv[:, :, 0], cache.k, cache.v, cache_len + 1)
        return self.out(o), cache


class Block(nnx.Module):
    """Pre-LayerNorm transformer block: causal self-attention (per document) and a GELU MLP;
    the same three paths as :class:`SelfAttention`."""

    def __init__(self, cfg: Config, attention: AttentionFns, *, rngs: nnx.Rngs):
        dtype = cfg.compute_dtype()
        d = cfg.d_model
        self.ln1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = SelfAttention(cfg, attention, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, rngs=rngs)
        self.fc1 = nnx.Linear(d, cfg.mlp_ratio * d, dtype=dtype, rngs=rngs)
        self.fc2 = nnx.Linear(cfg.mlp_ratio * d, d, dtype=dtype, rngs=rngs)

    def _mlp_residual(self, x: jax.Array) -> jax.Array:
        return x + self.fc2(nnx.gelu(self.fc1(self.ln2(x)))).astype(x.dtype)

    def __call__(self, x: jax.Array, segment_ids: jax.Array) -> jax.Array:
        return self._mlp_residual(x + self.attn(self.ln1(x), segment_ids).astype(x.dtype))

    def prefill(
        self, x: jax.Array, segment_ids: jax.Array, lengths: jax.Array
    ) -> tuple[jax.Array, KVCache]:
        a, cache = self.attn.prefill(self.ln1(x), segment_ids, lengths)
        return self._mlp_residual(x + a.astype(x.dtype)), cache

    def decode(
        self, x: jax.Array, cache: KVCache, cache_len: jax.Array
    ) -> tuple[jax.Array, KVCache]:
        a, cache = self.attn.decode(self.ln1(x), cache, cache_len)
        return self._mlp_residual(x + a.astype(x.dtype)), cache


class ByteLM(nnx.Module):
    """Decoder-only byte-level language model; logits tied to the byte embedding.

    ``__call__`` is the full forward over packed rows; ``prefill`` and ``decode`` generate with a
    KV cache of ``seq_len`` positions per layer (one :class:`KVCache` per block).
    """

    def __init__(self, cfg: Config, attention: AttentionFns, *, rngs: nnx.Rngs):
        if cfg.d_model % cfg.num_heads:
            raise ValueError(f"d_model {cfg.d_model} is not a multiple of heads {cfg.num_heads}")
        self.embed = nnx.Embed(256, cfg.d_model, rngs=rngs)
        self.pos = nnx.Embed(cfg.seq_len, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, attention, rngs=rngs) for _ in range(cfg.num_layers)])
        self.ln_f = nnx.LayerNorm(cfg.d_model, rngs=rngs)

    def __call__(
        self,
        tokens: jax.Array,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
    ) -> jax.Array:
        """int32 tokens [batch, seq] (segment ids and positions int32 [batch, seq]; default: one
        document per row) -> float32 logits [batch, seq, 256]."""
        if segment_ids is None:
            segment_ids = jnp.ones(tokens.shape, jnp.int32)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1]), tokens.shape)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, segment_ids)
        return self.embed.attend(self.ln_f(x))

    def prefill(
        self, tokens: jax.Array, lengths: jax.Array
    ) -> tuple[jax.Array, tuple[KVCache, ...]]:
        """int32 tokens [batch, seq_len], the first ``lengths[b]`` (int32 [batch], >= 1) of each
        row the prompt at positions 0, 1, ... (the rest padding) -> (float32 logits [batch, 256]
        of the byte after each prompt, one KVCache per block holding the prompt)."""
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1]), tokens.shape)
        x = self.embed(tokens) + self.pos(positions)
        segment_ids = jnp.ones(tokens.shape, jnp.int32)  # padding follows: causal hides it
        caches = []
        for block in self.blocks:
            x, cache = block.prefill(x, segment_ids, lengths)
            caches.append(cache)
        last = x[jnp.arange(x.shape[0]), lengths - 1]  # [batch, d_model]
        return self.embed.attend(self.ln_f(last)), tuple(caches)

    def decode(
        self, tokens: jax.Array, cache_len: jax.Array, caches: Sequence[KVCache]
    ) -> tuple[jax.Array, tuple[KVCache, ...]]:
        """One step: int32 tokens [batch], each at position ``cache_len[b]`` (int32 [batch],
        below seq_len: the number of tokens in the caches) -> (float32 logits [batch, 256] of
        the byte after it, the caches with it written at row cache_len)."""
        x = self.embed(tokens[:, None]) + self.pos(cache_len[:, None])  # [batch, 1, d_model]
        new_caches = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, cache = block.decode(x, cache, cache_len)
            new_caches.append(cache)
        return self.embed.attend(self.ln_f(x[:, 0])), tuple(new_caches)


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        0.0,
        cfg.learning_rate,
        warmup_steps=min(cfg.warmup_steps, max(cfg.steps - 1, 1)),
        decay_steps=max(cfg.steps, 2),
        end_value=cfg.learning_rate * 0.1,
    )
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(
            schedule,
            b2=0.95,
            weight_decay=cfg.weight_decay,
            mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params),
        ),
    )


def loss_fn(model: ByteLM, batch: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
    """Mean next-byte cross-entropy in nats over the predictions inside a document (the byte
    after a document's last one starts the next document: not predicted). batch: (tokens,
    segment_ids, positions), int32 [batch, seq_len + 1] each."""
    tokens, segment_ids, positions = batch
    logits = model(tokens[:, :-1], segment_ids[:, :-1], positions[:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    same_doc = (segment_ids[:, 1:] == segment_ids[:, :-1]).astype(losses.dtype)
    return jnp.sum(losses * same_doc) / jnp.maximum(jnp.sum(same_doc), 1.0)


# ---------------------------------------------------------------------------------------------
# Training


def choose_next(logits: jax.Array, key: jax.Array, temperature: float) -> jax.Array:
    """The next byte, int32 [batch], from float32 logits [batch, 256]: the argmax when
    ``temperature`` is 0, else a draw from ``softmax(logits / temperature)``."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, logits / temperature).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Generation:
    """What :meth:`Trainer.generate` returns."""

    tokens: bytes  # the generated bytes
    logits: np.ndarray  # float32 [len(tokens), 256]: the logits each byte was chosen from
    seconds: float  # wall time of the generation (prefills and decode steps), after a warm-up
    prefills: int  # 1 + the re-prefills when the context was full

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.tokens) / self.seconds if self.tokens and self.seconds > 0 else None


@dataclasses.dataclass
class Trainer:
    """Model and optimizer as one (graphdef, state) pair, with jitted steps."""

    cfg: Config
    graphdef: Any
    state: Any
    mesh: jax.sharding.Mesh | None = None  # data parallelism over its "data" axis, or None

    @classmethod
    def create(cls, cfg: Config) -> Trainer:
        devices = cfg.dp_devices()
        model = ByteLM(cfg, attention_fns_for(cfg), rngs=nnx.Rngs(cfg.seed))
        optimizer = nnx.Optimizer(model, make_optimizer(cfg), wrt=nnx.Param)
        graphdef, state = nnx.split((model, optimizer))
        mesh = (
            jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)
            if len(devices) > 1
            else None
        )
        trainer = cls(cfg, graphdef, state, mesh)
        trainer.place_state()
        trainer._compile()
        return trainer

    def place_state(self) -> None:
        """With data parallelism, the model and optimizer replicated on every device."""
        if self.mesh is not None:
            self.state = jax.device_put(self.state, NamedSharding(self.mesh, P()))

    def place_batch(self, batch: tuple[np.ndarray, ...]) -> tuple[jax.Array, ...]:
        """The batch's arrays (rows first) split over the data-parallel devices (as they are
        without data parallelism)."""
        if self.mesh is None:
            return batch
        sharding = NamedSharding(self.mesh, P("data"))
        return tuple(jax.device_put(x, sharding) for x in batch)

    def _compile(self) -> None:
        graphdef = self.graphdef

        def step(state: Any, batch: tuple[jax.Array, ...]) -> tuple[Any, jax.Array]:
            model, optimizer = nnx.merge(graphdef, state)
            loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
            optimizer.update(model, grads)
            return nnx.state((model, optimizer)), loss

        def evaluate(state: Any, batch: tuple[jax.Array, ...]) -> jax.Array:
            model, _ = nnx.merge(graphdef, state)
            return loss_fn(model, batch)

        def prefill(
            state: Any,
            window: jax.Array,
            lengths: jax.Array,
            key: jax.Array,
            step: jax.Array,
            temperature: float,
        ) -> tuple[jax.Array, jax.Array, tuple[KVCache, ...]]:
            model, _ = nnx.merge(graphdef, state)
            logits, caches = model.prefill(window, lengths)
            return choose_next(logits, jax.random.fold_in(key, step), temperature), logits, caches

        def decode_step(
            state: Any,
            caches: tuple[KVCache, ...],
            tokens: jax.Array,
            cache_len: jax.Array,
            key: jax.Array,
            step: jax.Array,
            temperature: float,
        ) -> tuple[jax.Array, jax.Array, tuple[KVCache, ...]]:
            model, _ = nnx.merge(graphdef, state)
            logits, caches = model.decode(tokens, cache_len, caches)
            return choose_next(logits, jax.random.fold_in(key, step), temperature), logits, caches

        self.step = jax.jit(step, donate_argnums=0)
        self.evaluate = jax.jit(evaluate)
        # (state, window int32 [batch, seq_len], lengths int32 [batch], key, step) ->
        # (next bytes int32 [batch], logits float32 [batch, 256], caches)
        self.prefill = jax.jit(prefill, static_argnames="temperature")
        # (state, caches (donated), bytes int32 [batch] at positions cache_len int32 [batch],
        # key, step) -> (next bytes, logits, caches with the bytes written at cache_len)
        self.decode_step = jax.jit(decode_step, donate_argnums=1, static_argnames="temperature")

    def num_params(self) -> int:
        model, _ = nnx.merge(self.graphdef, self.state)
        return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))

    def eval_loss(self, batches: Sequence[Batch]) -> float:
        return float(
            np.mean(
                [float(self.evaluate(self.state, self.place_batch(b.as_tuple()))) for b in batches]
            )
        )

    def _prefill(
        self, context: Sequence[int], key: jax.Array, step: int, temperature: float
    ) -> tuple[jax.Array, jax.Array, tuple[KVCache, ...]]:
        """Prefill of one sequence: ``context`` (1 to seq_len bytes) at positions 0, 1, ..."""
        window = np.zeros((1, self.cfg.seq_len), np.int32)
        window[0, : len(context)] = context
        lengths = np.array([len(context)], np.int32)
        return self.prefill(self.state, window, lengths, key, step, temperature=temperature)

    def generate(self, prompt: bytes, n: int, temperature: float = 0.8) -> Generation:
        """Generates n bytes after prompt with a KV cache: one prefill over the prompt's last
        seq_len bytes, then one jitted decode step per byte (the cache donated and updated in
        place). ``temperature`` 0 is greedy; otherwise the draws use the key ``seed + 1``.

        The learned positions stop at seq_len - 1, so the cache holds at most seq_len bytes. When
        a byte would not fit (the context full), the context restarts from its last
        ``seq_len // 2`` bytes (at least 1): they are prefilled again at positions 0, 1, ...
        Each byte is thus predicted from all bytes since the last restart, exactly what the full
        forward over those bytes predicts.

        The timing excludes compilation: a prefill and a decode step run first, untimed.
        """
        if not prompt:
            raise ValueError("generate needs a prompt of at least one byte")
        if n <= 0:
            return Generation(b"", np.zeros((0, 256), np.float32), 0.0, 0)
        s = self.cfg.seq_len
        keep = max(1, s // 2)
        context = list(prompt[-s:])  # the bytes prefilled last
        key = jax.random.key(self.cfg.seed + 1)

        # warm-up (compilation): a prefill and a decode step whose results are dropped
        token, _, caches = self._prefill(context, key, 0, temperature)
        if n > 1:
            cache_len = np.array([min(len(context), s - 1)], np.int32)
            args = (self.state, caches, token, cache_len, key, 0)
            token, _, caches = self.decode_step(*args, temperature=temperature)
        jax.block_until_ready(token)

        start = time.perf_counter()
        token, step_logits, caches = self._prefill(context, key, 0, temperature)
        tokens, logits = [token], [step_logits]  # device arrays: no transfer (nor wait) per step
        pending = [token]  # the bytes generated since the last prefill (the last one not fed)
        length, prefills = len(context), 1  # length: the bytes in the cache
        for step in range(1, n):
            if length == s:  # the context full: restart from its last `keep` bytes
                context = (context + [int(t[0]) for t in jax.device_get(pending)])[-keep:]
                token, step_logits, caches = self._prefill(context, key, step, temperature)
                length, pending, prefills = len(context), [], prefills + 1
            else:  # feed the last byte at position `length`
                cache_len = np.array([length], np.int32)
                token, step_logits, caches = self.decode_step(
                    self.state, caches, token, cache_len, key, step, temperature=temperature
                )
                length += 1
            tokens.append(token)
            logits.append(step_logits)
            pending.append(token)
        jax.block_until_ready(tokens)
        seconds = time.perf_counter() - start
        out = bytes(int(t[0]) for t in jax.device_get(tokens))
        return Generation(out, np.concatenate(jax.device_get(logits)), seconds, prefills)

    def sample(self, prompt: bytes, n: int, temperature: float = 0.8) -> bytes:
        """Generates n bytes after prompt (:meth:`generate`, with a KV cache)."""
        return self.generate(prompt, n, temperature).tokens


def _checkpoint_manager(directory: pathlib.Path) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=2, create=True)
    return ocp.CheckpointManager(directory.absolute(), options=options)


def _save(mngr: ocp.CheckpointManager, step: int, trainer: Trainer, history: dict) -> None:
    mngr.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(trainer.state),
            history=ocp.args.JsonSave(history),
        ),
    )


def _restore(mngr: ocp.CheckpointManager, step: int, trainer: Trainer) -> dict:
    """Loads checkpoint ``step`` into ``trainer``; returns the loss history saved with it."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, trainer.state)
    restored = mngr.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), history=ocp.args.JsonRestore()
        ),
    )
    trainer.state = restored.state
    trainer.place_state()
    return dict(restored.history)


def restore_trainer(cfg: Config, checkpoints: pathlib.Path, step: int | None = None) -> Trainer:
    """A Trainer (model + optimizer) loaded from an orbax checkpoint of a run with config ``cfg``.

    ``step`` None takes the newest checkpoint.
    """
    trainer = Trainer.create(cfg)
    mngr = _checkpoint_manager(checkpoints)
    step = mngr.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint under {checkpoints}")
    _restore(mngr, step, trainer)
    mngr.close()
    return trainer


def train(cfg: Config, out: pathlib.Path, corpus: Corpus | None = None, resume: bool = False):
    """Trains one model; writes loss.png, metrics.json and checkpoints/ under ``out``.

    Returns the metrics dict (also written to metrics.json).
    """
    out.mkdir(parents=True, exist_ok=True)
    corpus = corpus or load_stdlib_corpus(cfg.heldout_percent, cfg.max_corpus_mb)
    evals = eval_batches(corpus, cfg)
    trainer = Trainer.create(cfg)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    docs_per_row = float(np.mean([b.segment_ids.max(axis=1).mean() for b in evals]))
    dp = f" x {trainer.mesh.size} (data parallel)" if trainer.mesh is not None else ""
    print(
        f"[{cfg.attention}] {trainer.num_params() / 1e6:.2f}M parameters, head_dim "
        f"{cfg.head_dim}, compute dtype {cfg.compute_dtype().name}, device "
        f"{jax.devices()[0].device_kind}{dp}; corpus {len(corpus.train) / 1e6:.1f} MB train "
        f"({corpus.train_files} files), {len(corpus.heldout) / 1e6:.2f} MB held out "
        f"({corpus.heldout_files} files) from {corpus.root}",
        flush=True,
    )
    print(
        f"[{cfg.attention}] packed sequences: {docs_per_row:.1f} documents (file crops) per row "
        f"of {cfg.seq_len} bytes on average, segment ids, causal attention inside each document",
        flush=True,
    )

    mngr = _checkpoint_manager(out / "checkpoints")
    history: dict[str, list] = {"train_loss": [], "eval": []}
    start = 0
    if resume and mngr.latest_step() is not None:
        start = int(mngr.latest_step())
        history = _restore(mngr, start, trainer)
        print(f"[{cfg.attention}] resumed from step {start} ({out / 'checkpoints'})", flush=True)

    train_seconds, timed_steps, compile_seconds = 0.0, 0, None
    pending: list[jax.Array] = []
    bar = tqdm(
        total=cfg.steps,
        initial=start,
        desc=cfg.attention,
        disable=not cfg.progress,
        file=sys.stderr,
        mininterval=1.0,
        dynamic_ncols=True,
    )
    seg_start, seg_steps = time.perf_counter(), 0

    def flush_losses() -> None:
        history["train_loss"].extend(float(x) for x in jax.device_get(pending))
        pending.clear()

    for step in range(start, cfg.steps):
        batch = trainer.place_batch(train_batch(corpus, step, cfg).as_tuple())
        trainer.state, loss = trainer.step(trainer.state, batch)
        pending.append(loss)
        if compile_seconds is None:  # the first step compiles: time it apart
            loss.block_until_ready()
            compile_seconds = time.perf_counter() - seg_start
            seg_start, seg_steps = time.perf_counter(), 0
        else:
            seg_steps += 1
        done = step + 1
        is_eval = done % cfg.eval_every == 0 or done == cfg.steps
        is_ckpt = done % cfg.ckpt_every == 0 or done == cfg.steps
        if is_eval or is_ckpt or len(pending) >= 50:
            jax.block_until_ready(trainer.state)
            train_seconds += time.perf_counter() - seg_start
            timed_steps += seg_steps
            flush_losses()
            if is_eval:
                history["eval"].append([done, trainer.eval_loss(evals)])
            if is_ckpt:
                _save(mngr, done, trainer, history)
            postfix = {"loss": f"{history['train_loss'][-1]:.3f}"}
            if history["eval"]:
                postfix["heldout"] = f"{history['eval'][-1][1]:.3f}"
            if train_seconds > 0:
                postfix["tok/s"] = f"{timed_steps * tokens_per_step / train_seconds:,.0f}"
            bar.set_postfix(postfix, refresh=False)
            seg_start, seg_steps = time.perf_counter(), 0
        bar.update(1)
    bar.close()
    mngr.wait_until_finished()
    mngr.close()

    tokens_per_s = timed_steps * tokens_per_step / train_seconds if train_seconds > 0 else None
    generation = trainer.generate(SAMPLE_PROMPT, cfg.sample_bytes)
    sample = generation.tokens.decode("utf-8", "replace")
    metrics = {
        "config": dataclasses.asdict(cfg),
        "compute_dtype": cfg.compute_dtype().name,
        "device": jax.devices()[0].device_kind,
        "data_parallel_devices": 1 if trainer.mesh is None else trainer.mesh.size,
        "backend": jax.default_backend(),
        "versions": _versions(),
        "corpus": {
            "root": corpus.root,
            "train_bytes": int(len(corpus.train)),
            "heldout_bytes": int(len(corpus.heldout)),
            "train_files": corpus.train_files,
            "heldout_files": corpus.heldout_files,
        },
        "params": trainer.num_params(),
        "packing": {
            "segment_ids": True,
            "documents_per_row": docs_per_row,
            "attention": "causal inside each document",
        },
        "tokens_per_step": tokens_per_step,
        "train_loss": history["train_loss"],
        "eval": history["eval"],
        "final_eval_loss": history["eval"][-1][1] if history["eval"] else None,
        "tokens_per_s": tokens_per_s,
        "timed_steps": timed_steps,
        "train_seconds": train_seconds,
        "compile_seconds": compile_seconds,
        "sample": sample,
        "generate_tokens_per_s": generation.tokens_per_s,
        "generate": {
            "method": "KV cache: one prefill, then one jitted decode step per byte; when the "
            "context is full, a re-prefill of its last seq_len // 2 bytes",
            "prompt": SAMPLE_PROMPT.decode(),
            "tokens": len(generation.tokens),
            "batch": 1,
            "temperature": 0.8,
            "seconds": generation.seconds,
            "prefills": generation.prefills,
            "tokens_per_s": generation.tokens_per_s,
        },
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    plot_losses({cfg.attention: metrics}, out / "loss.png")
    last = history["train_loss"][-1] if history["train_loss"] else float("nan")
    tps = f"{tokens_per_s:,.0f}" if tokens_per_s else "n/a (too few steps)"
    print(
        f"[{cfg.attention}] steps {cfg.steps}: train loss {last:.4f}, held-out loss "
        f"{metrics['final_eval_loss']:.4f} nats/byte; tokens/s {tps} "
        f"(excluding compilation {compile_seconds or 0:.1f} s and evaluation)",
        flush=True,
    )
    if sample:
        gen_tps = f"{generation.tokens_per_s:,.0f}" if generation.tokens_per_s else "n/a"
        print(
            f"[{cfg.attention}] sample after {SAMPLE_PROMPT.decode()!r}: {sample!r}; generated "
            f"tokens/s {gen_tps} (KV-cache decode, batch 1, excluding compilation)",
            flush=True,
        )
    print(f"[{cfg.attention}] wrote {out / 'loss.png'}, {out / 'metrics.json'}", flush=True)
    return metrics


def _versions() -> dict[str, str]:
    import flax

    return {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "jax_fa4": jax_fa4.__version__,
    }


def smooth(xs: Sequence[float]) -> list[float]:
    """Debiased exponential moving average, its window about 1/30 of the run (at least 2 steps)."""
    beta = 1.0 - min(0.5, 30.0 / max(len(xs), 1))
    out, acc = [], 0.0
    for t, x in enumerate(xs, 1):
        acc = beta * acc + (1.0 - beta) * x
        out.append(acc / (1.0 - beta**t))
    return out


def loss_figure(runs: dict[str, dict]) -> Any:
    """A matplotlib Figure: training loss (raw, faint; smoothed) and held-out loss per run.

    Built without pyplot (the Agg canvas renders it), so it never changes the caller's backend.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=110)
    ax = fig.subplots()
    styles = [("-", "o"), ("--", "s"), (":", "^")]
    for i, (name, m) in enumerate(runs.items()):
        if not m.get("train_loss"):
            continue
        color, (line, marker) = f"C{i}", styles[i % len(styles)]
        steps = np.arange(1, len(m["train_loss"]) + 1)
        tps = m.get("tokens_per_s")
        label = name + (f" ({tps:,.0f} tokens/s)" if tps else "")
        ax.plot(steps, m["train_loss"], color=color, alpha=0.2, lw=0.8)
        ax.plot(steps, smooth(m["train_loss"]), line, color=color, lw=1.6, label=f"{label} train")
        if m.get("eval"):
            ev = np.asarray(m["eval"], dtype=float)
            ax.plot(
                ev[:, 0], ev[:, 1], marker, color=color, ms=6, mfc="none", label=f"{name} held-out"
            )
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/byte)")
    ax.set_title("byte-level LM on the Python standard library")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_losses(runs: dict[str, dict], path: pathlib.Path) -> None:
    """Writes :func:`loss_figure` as a PNG."""
    loss_figure(runs).savefig(path)


def compare(cfg: Config, out: pathlib.Path, resume: bool = False) -> dict:
    """Both attention variants from the same initial weights on the same batches."""
    corpus = load_stdlib_corpus(cfg.heldout_percent, cfg.max_corpus_mb)
    runs: dict[str, dict] = {}
    for attention in ATTENTIONS:
        run_cfg = dataclasses.replace(cfg, attention=attention)
        try:
            runs[attention] = train(run_cfg, out / attention, corpus, resume=resume)
        except (NotImplementedError, ValueError) as err:  # e.g. no GPU backward yet
            print(f"[{attention}] failed: {type(err).__name__}: {err}", flush=True)
            runs[attention] = {"error": f"{type(err).__name__}: {err}"}
    summary: dict[str, Any] = {"config": dataclasses.asdict(cfg), "runs": runs}
    a, b = (runs[n].get("train_loss") for n in ATTENTIONS)
    if a and b:
        n = min(len(a), len(b))
        diff = np.abs(np.asarray(a[:n]) - np.asarray(b[:n]))
        summary["max_abs_train_loss_diff"] = float(diff.max())
        summary["final_eval_loss"] = {k: runs[k]["final_eval_loss"] for k in ATTENTIONS}
        summary["tokens_per_s"] = {k: runs[k]["tokens_per_s"] for k in ATTENTIONS}
        fa4, ref = summary["tokens_per_s"]["jax_fa4"], summary["tokens_per_s"]["jax_nn"]
        summary["speedup_jax_fa4_over_jax_nn"] = fa4 / ref if fa4 and ref else None
        summary["generate_tokens_per_s"] = {k: runs[k]["generate_tokens_per_s"] for k in ATTENTIONS}
    (out / "compare.json").write_text(json.dumps(summary, indent=1))
    plot_losses(runs, out / "compare.png")
    print(
        "\n| attention | final train loss | held-out loss | training tokens/s "
        "| generated tokens/s (KV cache, batch 1) |"
    )
    print("|---|---|---|---|---|")
    for name, m in runs.items():
        if "error" in m:
            print(f"| {name} | failed: {m['error'][:60]} | | | |")
            continue
        tps = f"{m['tokens_per_s']:,.0f}" if m["tokens_per_s"] else "n/a"
        gen = m["generate_tokens_per_s"]
        gen_tps = f"{gen:,.0f}" if gen else "n/a"
        row = f"{m['train_loss'][-1]:.4f} | {m['final_eval_loss']:.4f} | {tps} | {gen_tps}"
        print(f"| {name} | {row} |")
    if "max_abs_train_loss_diff" in summary:
        print(f"max |train loss difference| over steps: {summary['max_abs_train_loss_diff']:.3g}")
    print(f"wrote {out / 'compare.png'}, {out / 'compare.json'}", flush=True)
    return summary


def parse_args(argv: Sequence[str] | None = None) -> tuple[Config, pathlib.Path, bool, bool]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="CI size: a few CPU seconds of training")
    p.add_argument("--attention", choices=ATTENTIONS, default=None)
    p.add_argument("--compare", action="store_true", help="train both attentions side by side")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/byte_lm"))
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--d-model", type=int)
    p.add_argument("--heads", type=int, dest="num_heads")
    p.add_argument("--layers", type=int, dest="num_layers")
    p.add_argument("--lr", type=float, dest="learning_rate")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float16", "float32"))
    p.add_argument("--eval-every", type=int)
    p.add_argument("--eval-batches", type=int)
    p.add_argument("--ckpt-every", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--max-corpus-mb", type=float)
    p.add_argument("--sample-bytes", type=int)
    p.add_argument(
        "--jax-nn-implementation",
        choices=("xla", "cudnn"),
        help="for --attention jax_nn (default: jax.nn chooses)",
    )
    p.add_argument(
        "--data-parallel",
        type=int,
        metavar="N",
        help="split each batch over N devices (0: all; default 1), the model replicated",
    )
    p.add_argument("--no-progress", action="store_false", dest="progress", default=None)
    args = vars(p.parse_args(argv))
    tiny, out, do_compare, resume = (args.pop(k) for k in ("tiny", "out", "compare", "resume"))
    given = {k: v for k, v in args.items() if v is not None}
    cfg = Config(**{**(TINY if tiny else {}), **given})
    for name in ("steps", "batch_size", "seq_len", "eval_every", "ckpt_every", "eval_batches"):
        if getattr(cfg, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(cfg, name)}")
    if cfg.d_model % cfg.num_heads:
        p.error(f"--d-model {cfg.d_model} must be a multiple of --heads {cfg.num_heads}")
    try:
        cfg.dp_devices()
    except ValueError as err:
        p.error(f"--data-parallel: {err}")
    return cfg, out, do_compare, resume


def main(argv: Sequence[str] | None = None) -> dict:
    cfg, out, do_compare, resume = parse_args(argv)
    if do_compare:
        return compare(cfg, out, resume=resume)
    return train(cfg, out, resume=resume)


if __name__ == "__main__":
    main()
