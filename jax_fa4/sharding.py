"""Automatic partitioning of the attention primitives under ``jax.jit`` (custom_partitioning).

When a multi-device ``jax.jit`` computation holds ``fa4_fwd_p`` / ``fa4_bwd_p``, their lowering
(:mod:`jax_fa4.lowering`, through :func:`partitions_here` and :func:`lower_partitioned`) wraps
the kernel in :func:`jax.experimental.custom_partitioning.custom_partitioning` with

* a Shardy ``sharding_rule`` (the default partitioner since jax 0.7): factors
  ``q [b, s, (h g), d]``, ``k [b, t, h, d]``, ``v [b, t, h, e]`` -> ``o [b, s, (h g), e]``,
  ``lse [b, (h g), s]``, where ``g = heads_q / heads_kv`` (GQA: q head ``h * g + i`` uses kv head
  ``h``, so splitting q heads splits the kv heads with the same mesh axes). ``d`` and ``e`` (head
  dims) need replication. The extra operands follow: lengths ``[b]``, q segment ids ``[b, s]``,
  kv segment ids ``[b, t]``, sinks ``[b, (h g)]``. The backward's rule is the same with o/do,
  lse/dlse -> dq, dk, dv.
* the GSPMD callback ``infer_sharding_from_operands`` (used only when Shardy is turned off), and
* a ``partition`` callback that decides, from the shardings that reach it, what each device
  runs (:class:`Plan`), and returns the operand shardings that plan needs; the partitioner
  reshards (all-gathers) any operand that does not already have them, so no layout is ever
  miscomputed:

  - batch and/or heads split: each device runs the kernel on its shard, no communication. The
    kv heads are split by the same axes as the q heads when ``heads_kv % n == 0``; when
    ``n % heads_kv == 0`` instead (MQA, or GQA split further than heads_kv), k and v keep all
    their heads, each device slices the one kv head its q heads use, and the backward sums
    dK/dV over the heads axes;
  - q's sequence split over axes A with a causal mask (needs ``seq_q == seq_k``): k and v split
    the same way (resharded if they are not) and ring attention over A
    (:func:`jax_fa4.ring_engine.ring_fwd_local`, contiguous layout, balanced by moving the
    chunks into the zig-zag order first);
  - q's sequence split without a mask: the same ring when k's sequence is split over A too,
    otherwise each device attends its queries to all keys (the backward sums dK/dV over A);
  - anything else (head-dim splits, sequence or head counts the axes do not divide, a causal
    q split with ``seq_q != seq_k``): replicated on that axis, then computed exactly.

  A call with a variant (window, lengths, segment ids, soft cap, sinks) splits its batch and
  heads as above, its lengths and segment ids with the batch and its sinks with the batch and
  the q heads. A split of its sequence (``seq_q == seq_k``) runs the ring with the variant (k and
  v split the same way, the kv segment ids travelling with their block, the window shifted per
  ring step and the steps that see nothing skipped, the sinks added once at the end), except
  lengths together with a causal mask or a window, which the ring cannot do exactly: that
  sequence is replicated, then computed exactly.

Inside ``shard_map`` (all mesh axes manual) and on one device the kernel is lowered directly;
the partitioning machinery is not involved, so the persistent compilation cache works there.
Under multi-device ``jit`` it is involved, with custom_partitioning's known caveats: its
compiled programs miss the persistent compilation cache, and an exception inside a partitioning
callback can abort the process (these callbacks are therefore kept free of checks that can
fail; argument checks run before, at trace and lowering time). Do not set jax's
``jax_remove_custom_partitioning_ptr_from_cache_key`` for programs holding jax_fa4 calls: the
partitioning callbacks receive the static parameters (one :class:`Params`: ``softmax_scale``,
``causal``, the window, the soft cap, the extra operands' names and the backward's
``deterministic``), which then no longer reach the cache key, so two programs differing only
in them would share a cache entry. Set the environment variable ``JAX_FA4_AUTO_PARTITION=0``
before importing jax_fa4 to lower the plain kernel everywhere instead: the partitioner then
replicates attention's operands (correct, but it all-gathers them), and the program caches like
any other.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import (
    ArrayMapping,
    CompoundFactor,
    SdyShardingRule,
    custom_partitioning,
)
from jax.interpreters import mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_fa4 import _compat, ring_engine
from jax_fa4.primitives import fa4_bwd_p, fa4_fwd_p

ENABLED: bool = os.environ.get("JAX_FA4_AUTO_PARTITION", "1").strip().lower() not in (
    "0",
    "false",
    "no",
    "off",
)

Axes = tuple[str, ...]
# What custom_partitioning's callbacks receive: the mesh (an empty one when the computation has
# no named mesh) and, per operand/result, a jax.ShapeDtypeStruct with a .sharding (decoded or
# not) or, for the Shardy rule, an MLIR type with a .shape.
Mesh = Any
ShapeInfo = Any
# A partition callback's result: (mesh, per-device body, result shardings, operand shardings).
Partition = tuple[Mesh, Callable[..., tuple[jax.Array, ...]], tuple, tuple]


# ---------------------------------------------------------------------------------------------
# What each device runs
# ---------------------------------------------------------------------------------------------


def _axes(entry: str | tuple[str, ...] | None) -> Axes:
    """A PartitionSpec entry as a tuple of mesh axis names."""
    if entry is None:
        return ()
    if isinstance(entry, tuple):
        return tuple(entry)
    return (entry,)


def _entry(axes: Axes) -> str | Axes | None:
    """Mesh axis names as a PartitionSpec entry (None, one name or a tuple of names)."""
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


@dataclass(frozen=True)
class Plan:
    """How one attention call is split over the mesh (mesh axis names per dimension).

    batch: q, k, v, o, lse split over these axes. heads: q's heads (and o's, lse's) split over
    these axes; k's and v's too when ``kv_heads``, else k and v keep all their heads on every
    device and each device picks the one kv head its q heads use (MQA/GQA split further than
    heads_kv). seq: q's sequence split over these axes; with ``ring`` k's and v's too (ring
    attention over ``seq``), else k and v are whole on every device.
    """

    batch: Axes = ()
    heads: Axes = ()
    kv_heads: bool = True
    seq: Axes = ()
    ring: bool = False

    def q_spec(self) -> P:
        return P(_entry(self.batch), _entry(self.seq), _entry(self.heads), None)

    def kv_spec(self) -> P:
        seq = self.seq if self.ring else ()
        heads = self.heads if self.kv_heads else ()
        return P(_entry(self.batch), _entry(seq), _entry(heads), None)

    def lse_spec(self) -> P:
        return P(_entry(self.batch), _entry(self.heads), _entry(self.seq))


def plan_for(
    mesh_shape: dict[str, int],
    q_spec: tuple | None,
    k_spec: tuple | None,
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    causal: bool,
    variant: bool = False,
    variant_ring: bool = False,
) -> Plan:
    """Picks the split of one attention call from its operands' specs (see the module doc).

    q_spec / k_spec: padded PartitionSpec entries of q and k, or None when unknown. `variant`:
    the call has a window, lengths, segment ids, a soft cap or sinks; `variant_ring`: the ring can
    run that variant exactly (not lengths with a causal mask or a window). A variant's sequence
    split is a ring or nothing (the kernel's masks cannot be offset per device). Batch and heads
    split as without a variant. Never raises: whatever it cannot run exactly is left replicated.
    """
    if q_spec is None:
        return Plan()
    k_spec = k_spec if k_spec is not None else (None,) * 4
    known = set(mesh_shape)

    def size(axes: Axes) -> int:
        out = 1
        for a in axes:
            out *= int(mesh_shape[a])
        return out

    def usable(axes: Axes, used: set) -> bool:
        return bool(axes) and set(axes) <= known and not set(axes) & used and size(axes) > 1

    _, sq, hq, _ = q_shape
    sk, hkv = k_shape[1], k_shape[2]
    batch = _axes(q_spec[0])
    batch = batch if usable(batch, set()) else ()
    used = set(batch)

    heads, kv_heads = _axes(q_spec[2]), True
    if not usable(heads, used) or hq % size(heads):
        heads = ()
    elif hkv % size(heads) == 0:
        pass  # q heads h*g .. and their kv heads h .. land on the same device
    elif size(heads) % hkv == 0:
        kv_heads = False  # each device's q heads share one kv head
    else:
        heads = ()
    used |= set(heads)

    seq = _axes(q_spec[1])
    if (variant and not variant_ring) or not usable(seq, used) or sq % size(seq):
        return Plan(batch, heads, kv_heads)
    n = size(seq)
    ringable = seq == ring_engine.in_mesh_order(seq, list(mesh_shape))
    if causal or variant:
        if not ringable:
            return Plan(batch, heads, kv_heads)
        # The kernel's masks cannot be offset, so a causal (or variant) split of q's sequence
        # needs the keys split the same way: the ring, which gives every block pair its own
        # mask (causal: full, empty or diagonal; windows shifted; ids and lengths per block).
        if sq == sk and sk % n == 0:
            return Plan(batch, heads, kv_heads, seq, ring=True)
        return Plan(batch, heads, kv_heads)
    ring_ok = ringable and _axes(k_spec[1]) == seq and sk % n == 0
    return Plan(batch, heads, kv_heads, seq, ring=ring_ok)


@dataclass(frozen=True)
class Params:
    """The primitives' static parameters (:mod:`jax_fa4.primitives`), one hashable value: the
    partitioning callbacks' static argument. ``deterministic`` is None for the forward."""

    softmax_scale: float
    causal: bool
    window_left: int | None = None
    window_right: int | None = None
    softcap: float | None = None
    extras: tuple[str, ...] = ()
    deterministic: bool | None = None

    @property
    def variant(self) -> bool:
        """Whether anything beyond dense / causal attention is asked for."""
        return bool(
            self.window_left is not None
            or self.window_right is not None
            or self.softcap is not None
            or self.extras
        )

    def bind_params(self) -> dict[str, object]:
        out: dict[str, object] = dict(
            softmax_scale=self.softmax_scale,
            causal=self.causal,
            window_left=self.window_left,
            window_right=self.window_right,
            softcap=self.softcap,
            extras=self.extras,
        )
        if self.deterministic is not None:
            out["deterministic"] = self.deterministic
        return out


def _plan_from_shapes(mesh: Mesh, arg_shapes: Sequence[ShapeInfo], params: Params) -> Plan:
    """The plan of one call from its operands q [b, sq, hq, d] and k [b, sk, hkv, d]."""
    q, k = arg_shapes[0], arg_shapes[1]
    if getattr(mesh, "empty", True):
        return Plan()
    banded = params.causal or params.window_left is not None or params.window_right is not None
    lengths = "q_lengths" in params.extras or "kv_lengths" in params.extras
    return plan_for(
        dict(mesh.shape),
        _compat.spec_of(q.sharding, mesh, 4),
        _compat.spec_of(k.sharding, mesh, 4),
        tuple(q.shape),
        tuple(k.shape),
        params.causal,
        params.variant,
        variant_ring=not (lengths and banded),
    )


# ---------------------------------------------------------------------------------------------
# Shardy rules
# ---------------------------------------------------------------------------------------------


def _shape(t: ShapeInfo) -> tuple[int, ...]:
    return tuple(t.shape)


def _q_heads(hq: int, hkv: int) -> tuple[str | CompoundFactor, dict[str, int]]:
    """The q-heads factor: ``(h g)`` for GQA (h = kv heads, major), ``h`` without GQA, ``g``
    (unrelated to k's size-1 head axis) for MQA."""
    g = hq // hkv if hkv and hq % hkv == 0 else 1
    if g == 1:
        return "h", {}
    if hkv == 1:  # MQA: a size-1 factor cannot be part of a compound one
        return "g", {}
    return CompoundFactor("h", "g"), {"g": g}


def _extra_mappings(extras: Sequence[str], qh: str | CompoundFactor) -> list[ArrayMapping]:
    """Shardy's factors of the extra operands: lengths ``[b]``, q ids ``[b, s]``, kv ids
    ``[b, t]``, sinks ``[b, (h g)]``."""
    factors = {
        "q_lengths": ("b",),
        "kv_lengths": ("b",),
        "q_segment_ids": ("b", "s"),
        "kv_segment_ids": ("b", "t"),
        "sinks": ("b", qh),
    }
    return [ArrayMapping(*factors[name]) for name in extras]


def _fwd_rule(
    params: Params,
    mesh: Mesh,
    value_types: Sequence[ShapeInfo],
    result_types: Sequence[ShapeInfo],
) -> SdyShardingRule:
    """Shardy's factors of the forward (module doc): (q, k, v, *extras) -> (o, lse)."""
    del mesh, result_types
    hq, hkv = _shape(value_types[0])[2], _shape(value_types[1])[2]
    qh, sizes = _q_heads(hq, hkv)
    return SdyShardingRule(
        (
            ArrayMapping("b", "s", qh, "d"),
            ArrayMapping("b", "t", "h", "d"),
            ArrayMapping("b", "t", "h", "e"),
            *_extra_mappings(params.extras, qh),
        ),
        (ArrayMapping("b", "s", qh, "e"), ArrayMapping("b", qh, "s")),
        need_replication_factors=("d", "e"),
        **sizes,
    )


def _bwd_rule(
    params: Params,
    mesh: Mesh,
    value_types: Sequence[ShapeInfo],
    result_types: Sequence[ShapeInfo],
) -> SdyShardingRule:
    """Shardy's factors of the backward: (q, k, v, o, lse, do, dlse, *extras) -> (dq, dk, dv)."""
    del mesh, result_types
    hq, hkv = _shape(value_types[0])[2], _shape(value_types[1])[2]
    qh, sizes = _q_heads(hq, hkv)
    q = ArrayMapping("b", "s", qh, "d")
    k = ArrayMapping("b", "t", "h", "d")
    v = ArrayMapping("b", "t", "h", "e")
    o = ArrayMapping("b", "s", qh, "e")
    lse = ArrayMapping("b", qh, "s")
    return SdyShardingRule(
        (q, k, v, o, lse, o, lse, *_extra_mappings(params.extras, qh)),
        (q, k, v),
        need_replication_factors=("d", "e"),
        **sizes,
    )


# ---------------------------------------------------------------------------------------------
# Partition callbacks (these run inside XLA's partitioner: keep them free of failing checks)
# ---------------------------------------------------------------------------------------------


def _fwd_impl(*args: Any) -> tuple[jax.Array, jax.Array]:
    """The unpartitioned forward: (q, k, v, *extras, params) -> (o [b, sq, hq, dv], lse float32
    [b, hq, sq])."""
    *ops, params = args
    return tuple(fa4_fwd_p.bind(*ops, **params.bind_params()))


def _bwd_impl(*args: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The unpartitioned backward: (q, k, v, o, lse, do, dlse, *extras, params) -> (dq, dk, dv)
    shaped like (q, k, v)."""
    *ops, params = args
    return tuple(fa4_bwd_p.bind(*ops, **params.bind_params()))


def _named_mesh(mesh: Mesh, arg_shapes: Sequence[ShapeInfo]) -> jax.sharding.Mesh:
    """`mesh`, or, when the computation has no named mesh (then the plan is empty and everything
    is replicated), a one-axis mesh over the computation's devices."""
    if not getattr(mesh, "empty", True):
        return mesh
    devices = sorted(arg_shapes[0].sharding.device_set, key=lambda d: d.id)
    return jax.sharding.Mesh(np.array(devices), ("_jax_fa4_devices",))


def _shardings(
    mesh: jax.sharding.Mesh, plan: Plan
) -> tuple[NamedSharding, NamedSharding, NamedSharding]:
    """(q/o/do/dq, k/v/dk/dv, lse/dlse) shardings of `plan`."""
    return (
        NamedSharding(mesh, plan.q_spec()),
        NamedSharding(mesh, plan.kv_spec()),
        NamedSharding(mesh, plan.lse_spec()),
    )


def _extra_shardings(
    mesh: jax.sharding.Mesh, plan: Plan, extras: Sequence[str]
) -> tuple[NamedSharding, ...]:
    """The extras' shardings under `plan`: lengths split with the batch, segment ids with the
    batch and their sequence (the kv ids' only in a ring, where k's is split too), sinks with the
    batch and the q heads."""
    b, h, s = _entry(plan.batch), _entry(plan.heads), _entry(plan.seq)
    kv_seq = s if plan.ring else None
    specs = {
        "q_lengths": P(b),
        "kv_lengths": P(b),
        "q_segment_ids": P(b, s),
        "kv_segment_ids": P(b, kv_seq),
        "sinks": P(b, h),
    }
    return tuple(NamedSharding(mesh, specs[name]) for name in extras)


def _fwd_infer(
    params: Params,
    mesh: Mesh,
    arg_shapes: Sequence[ShapeInfo],
    result_shape: Sequence[ShapeInfo],
) -> tuple[NamedSharding, NamedSharding]:
    """GSPMD: the (o, lse) shardings the forward's plan gives."""
    del result_shape
    plan = _plan_from_shapes(mesh, arg_shapes, params)
    q_s, _, lse_s = _shardings(_named_mesh(mesh, arg_shapes), plan)
    return (q_s, lse_s)


def _ring_variant(params: Params, extra_ops: Sequence[jax.Array]) -> dict[str, Any]:
    """The ring engine's variant arguments from the primitive's parameters and extra operands
    (the backward's extras have no sinks: its lse holds them)."""
    out: dict[str, Any] = dict(
        window_left=params.window_left, window_right=params.window_right, softcap=params.softcap
    )
    out.update(zip(params.extras, extra_ops, strict=True))
    return out


def _pick_kv_head(plan: Plan, *kvs: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array | None]:
    """Each device's slice of the kv heads when only q's heads are split (``not kv_heads``):
    ((k, v) [b, t, 1, d] each, the kv head's index), or (kvs unchanged, None) otherwise."""
    if not plan.heads or plan.kv_heads:
        return kvs, None
    hkv = kvs[0].shape[2]
    devices_per_kv_head = jax.lax.axis_size(_entry(plan.heads)) // hkv
    idx = jax.lax.axis_index(_entry(plan.heads)) // devices_per_kv_head
    return tuple(jax.lax.dynamic_slice_in_dim(x, idx, 1, axis=2) for x in kvs), idx


def _fwd_partition(
    params: Params,
    mesh: Mesh,
    arg_shapes: Sequence[ShapeInfo],
    result_shape: Sequence[ShapeInfo],
) -> Partition:
    """The forward's per-device body under its plan, and the shardings it needs."""
    del result_shape
    plan = _plan_from_shapes(mesh, arg_shapes, params)
    mesh = _named_mesh(mesh, arg_shapes)
    q_s, kv_s, lse_s = _shardings(mesh, plan)
    extra_s = _extra_shardings(mesh, plan, params.extras)

    def lower_fn(q, k, v, *extra_ops):
        (k, v), _ = _pick_kv_head(plan, k, v)
        if plan.ring:
            return ring_engine.ring_fwd_local(
                q,
                k,
                v,
                axis_name=_entry(plan.seq),
                causal=params.causal,
                softmax_scale=params.softmax_scale,
                layout="contiguous",
                **_ring_variant(params, extra_ops),
            )
        return _fwd_impl(q, k, v, *extra_ops, params)

    return mesh, lower_fn, (q_s, lse_s), (q_s, kv_s, kv_s, *extra_s)


def _bwd_infer(
    params: Params,
    mesh: Mesh,
    arg_shapes: Sequence[ShapeInfo],
    result_shape: Sequence[ShapeInfo],
) -> tuple[NamedSharding, NamedSharding, NamedSharding]:
    """GSPMD: the (dq, dk, dv) shardings the backward's plan gives."""
    del result_shape
    plan = _plan_from_shapes(mesh, arg_shapes, params)
    q_s, kv_s, _ = _shardings(_named_mesh(mesh, arg_shapes), plan)
    return (q_s, kv_s, kv_s)


def _bwd_partition(
    params: Params,
    mesh: Mesh,
    arg_shapes: Sequence[ShapeInfo],
    result_shape: Sequence[ShapeInfo],
) -> Partition:
    """The backward's per-device body under its plan, and the shardings it needs."""
    del result_shape
    plan = _plan_from_shapes(mesh, arg_shapes, params)
    mesh = _named_mesh(mesh, arg_shapes)
    q_s, kv_s, lse_s = _shardings(mesh, plan)
    extra_s = _extra_shardings(mesh, plan, params.extras)

    def lower_fn(q, k, v, o, lse, do, dlse, *extra_ops):
        hkv = k.shape[2]
        (k_loc, v_loc), kv_idx = _pick_kv_head(plan, k, v)
        if plan.ring:
            dq, dk, dv = ring_engine.ring_bwd_local(
                q,
                k_loc,
                v_loc,
                o,
                lse,
                do,
                dlse,
                axis_name=_entry(plan.seq),
                causal=params.causal,
                softmax_scale=params.softmax_scale,
                layout="contiguous",
                deterministic=bool(params.deterministic),
                **_ring_variant(params, extra_ops),
            )
        else:
            dq, dk, dv = _bwd_impl(q, k_loc, v_loc, o, lse, do, dlse, *extra_ops, params)
        # k and v whole over an axis that splits the queries: their gradients are partial sums.
        sum_axes = () if plan.ring else plan.seq
        if kv_idx is not None:  # put this device's kv head back among all of them
            dk, dv = (
                jax.lax.dynamic_update_slice_in_dim(
                    jnp.zeros((*x.shape[:2], hkv, x.shape[3]), jnp.float32),
                    x.astype(jnp.float32),
                    kv_idx,
                    axis=2,
                )
                for x in (dk, dv)
            )
            sum_axes = sum_axes + plan.heads
        if sum_axes:
            dk, dv = (
                jax.lax.psum(x.astype(jnp.float32), _entry(sum_axes)).astype(k.dtype)
                for x in (dk, dv)
            )
        return dq, dk, dv

    operand_s = (q_s, kv_s, kv_s, q_s, lse_s, q_s, lse_s, *extra_s)
    return mesh, lower_fn, (q_s, kv_s, kv_s), operand_s


@functools.cache
def _partitioned(kind: str, n_operands: int) -> custom_partitioning:
    """The custom_partitioning wrapper of fa4_{kind}_p with `n_operands` array operands (the
    regular ones and the extras) followed by one static :class:`Params`."""
    impl, partition, infer, rule = (
        (_fwd_impl, _fwd_partition, _fwd_infer, _fwd_rule)
        if kind == "fwd"
        else (_bwd_impl, _bwd_partition, _bwd_infer, _bwd_rule)
    )

    # custom_partitioning reads its function's signature: give it one with fixed arity.
    def fixed(*args):
        return impl(*args)

    cp = custom_partitioning(fixed, static_argnums=(n_operands,))
    cp.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule,
        decode_shardings=False,  # read with _compat.spec_of, which never raises
    )
    return cp


# ---------------------------------------------------------------------------------------------
# Used by the primitives' lowering rules (jax_fa4.lowering)
# ---------------------------------------------------------------------------------------------


def partitions_here(ctx: mlir.LoweringRuleContext) -> bool:
    """Whether this lowering is of a multi-device, automatically partitioned computation.

    False on one device, inside shard_map (the kernel runs on the shard it is given) and when
    the device assignment is unknown (e.g. jax.export with an abstract mesh); the kernel is then
    lowered directly, and an automatic partitioner would replicate its operands.
    """
    if not ENABLED or _compat.ShardingContext is None:
        return False
    ctx_axes = ctx.module_context.axis_context
    if not isinstance(ctx_axes, _compat.ShardingContext):
        return False
    return ctx_axes.num_devices > 1 and ctx_axes.device_assignment is not None


def lower_partitioned(
    kind: str,
    ctx: mlir.LoweringRuleContext,
    *args: mlir.ir.Value,
    **params: Any,
) -> Sequence[mlir.ir.Value]:
    """Lowers fa4_{kind}_p (kind "fwd" or "bwd") through its custom_partitioning wrapper;
    `params` are the primitive's (softmax_scale, causal, window_left, window_right, softcap,
    extras, and the backward's deterministic). Returns the primitive's results."""
    static = Params(**params)
    cp = _partitioned(kind, len(args))

    def fun(*xs):
        return cp(*xs, static)

    return mlir.lower_fun(fun, multiple_results=True)(ctx, *args)


if ENABLED and _compat.prim_requires_devices_during_lowering is not None:
    # custom_partitioning needs the device assignment while lowering (jax CHANGELOG 0.4.24).
    _compat.prim_requires_devices_during_lowering.add(fa4_fwd_p)
    _compat.prim_requires_devices_during_lowering.add(fa4_bwd_p)
