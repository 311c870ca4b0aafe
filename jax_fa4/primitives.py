"""The two JAX primitives behind jax_fa4.attention: their abstract evaluation and batching.

fa4_fwd_p(q, k, v, *extras) -> (o, lse)
fa4_bwd_p(q, k, v, o, lse, do, dlse, *extras) -> (dq, dk, dv)

q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv], o/do [b, sq, hq, dv], lse/dlse float32
[b, hq, sq]. Parameters:

* ``softmax_scale`` (Python float, lowered as f64) and ``causal`` (bool; right bound
  ``min(right, 0)``, bottom-right aligned);
* ``window_left``, ``window_right``: Python int or None (unbounded; the default). Key j is
  visible from query i only if ``i + off - left <= j <= i + off + right``, ``off = kv_len -
  q_len``. They may be negative (ring attention's shifted blocks);
* ``softcap``: Python float or None (the default): the score ``s`` becomes ``c * tanh(s / c)``;
* ``extras``: a tuple of names, a subsequence (in this order) of :data:`EXTRAS`, naming the
  extra operands that follow the regular ones: ``q_lengths`` / ``kv_lengths`` int32 [b] (any
  values: the kernels clamp them to [0, sq] / [0, sk]), ``q_segment_ids`` int32 [b, sq] and
  ``kv_segment_ids`` int32 [b, sk] (both or neither), ``sinks`` float32 [b, hq] (forward only:
  the backward reads the sink through lse);
* the backward also ``deterministic`` (bool, default False when not bound: bitwise
  reproducible gradients; the CUDA kernel then orders its dQ adds, the CPU kernel always is and
  ignores it).

The defaults (no window, no soft cap, no extras) are dense / causal attention. Each primitive
has an abstract evaluation (in shard_map, outputs vary over the union of the inputs' varying
manual axes), an eager implementation (jit of the primitive alone) and a batching rule that
folds the vmapped axis into the kernel's batch (or, for the forward with only q (and sinks)
mapped, into its heads): never a loop.

Their lowerings to the XLA FFI targets are in :mod:`jax_fa4.lowering`, registered when the
package is imported; this module depends on nothing of jax_fa4 but :mod:`jax_fa4._compat`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, xla

from jax_fa4 import _compat

# The names of the optional operands, in the order they follow the regular ones.
EXTRAS = ("q_lengths", "kv_lengths", "q_segment_ids", "kv_segment_ids", "sinks")
# The backward never takes the sinks (the lse it is given includes them).
BWD_EXTRAS = EXTRAS[:4]

fa4_fwd_p = Primitive("fa4_fwd")
fa4_fwd_p.multiple_results = True
fa4_bwd_p = Primitive("fa4_bwd")
fa4_bwd_p.multiple_results = True


# ---------------------------------------------------------------------------------------------
# Abstract evaluation
# ---------------------------------------------------------------------------------------------


def _aval_like(
    like: jax.core.ShapedArray,
    shape: tuple[int, ...],
    dtype,
    axes: Sequence[int],
    varying: frozenset,
) -> jax.core.ShapedArray:
    """An aval of `shape` whose axis i is sharded like axis axes[i] of `like` (explicit sharding)
    and that varies over the manual axes `varying` (shard_map: the union of the inputs')."""
    sharding = like.sharding
    spec = getattr(sharding, "spec", None)
    if spec is not None and len(spec) == like.ndim and hasattr(sharding, "update"):
        new_spec = jax.sharding.PartitionSpec(*(spec[a] for a in axes))
        sharding = sharding.update(spec=new_spec)
    out = like.update(shape=shape, dtype=dtype, sharding=sharding)
    return _compat.with_varying_axes(out, varying)


def check_extras(extras: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """`extras` as a tuple, checked to be a subsequence of `allowed` with both segment ids or
    neither (an AssertionError otherwise: the public call never binds anything else)."""
    extras = tuple(extras)
    order = [allowed.index(n) for n in extras if n in allowed]
    assert len(order) == len(extras) and order == sorted(set(order)), (extras, allowed)
    assert ("q_segment_ids" in extras) == ("kv_segment_ids" in extras), extras
    return extras


def _fwd_abstract_eval(
    q: jax.core.ShapedArray,
    k: jax.core.ShapedArray,
    v: jax.core.ShapedArray,
    *extra_avals: jax.core.ShapedArray,
    softmax_scale: float,
    causal: bool,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    extras: tuple[str, ...] = (),
) -> tuple[jax.core.ShapedArray, jax.core.ShapedArray]:
    """q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv], extras as in the module doc ->
    o [b, sq, hq, dv] in q's dtype (sharded like q), lse float32 [b, hq, sq]."""
    del softmax_scale, causal, window_left, window_right, softcap
    assert len(check_extras(extras, EXTRAS)) == len(extra_avals), (extras, extra_avals)
    b, sq, hq, _ = q.shape
    dv = v.shape[3]
    # Inside shard_map(check_vma=True) an output varies wherever any input does (jax #36008).
    varying = _compat.union_varying_axes((q, k, v, *extra_avals))
    o = _aval_like(q, (b, sq, hq, dv), q.dtype, (0, 1, 2, 3), varying)
    lse = _aval_like(q, (b, hq, sq), jnp.float32, (0, 2, 1), varying)
    return o, lse


def _bwd_abstract_eval(
    q: jax.core.ShapedArray,
    k: jax.core.ShapedArray,
    v: jax.core.ShapedArray,
    o: jax.core.ShapedArray,
    lse: jax.core.ShapedArray,
    do: jax.core.ShapedArray,
    dlse: jax.core.ShapedArray,
    *extra_avals: jax.core.ShapedArray,
    softmax_scale: float,
    causal: bool,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    extras: tuple[str, ...] = (),
    deterministic: bool = False,
) -> tuple[jax.core.ShapedArray, jax.core.ShapedArray, jax.core.ShapedArray]:
    """(q, k, v, o, lse, do, dlse, *extras) as in the module doc -> (dq, dk, dv) shaped and
    typed like (q, k, v)."""
    del softmax_scale, causal, deterministic, window_left, window_right, softcap
    assert len(check_extras(extras, BWD_EXTRAS)) == len(extra_avals), (extras, extra_avals)
    varying = _compat.union_varying_axes((q, k, v, o, lse, do, dlse, *extra_avals))
    return tuple(_compat.with_varying_axes(x.update(), varying) for x in (q, k, v))


fa4_fwd_p.def_abstract_eval(_fwd_abstract_eval)
fa4_bwd_p.def_abstract_eval(_bwd_abstract_eval)
fa4_fwd_p.def_impl(lambda *args, **params: xla.apply_primitive(fa4_fwd_p, *args, **params))
fa4_bwd_p.def_impl(lambda *args, **params: xla.apply_primitive(fa4_bwd_p, *args, **params))


def _no_higher_order(name: str):
    """A JVP rule that refuses: the primitives are only ever differentiated through
    jax_fa4.attention's custom_vjp (first-order reverse mode); reaching one means a second
    derivative (grad of grad, hessian, jvp of grad), which the kernels do not provide."""

    def rule(primals: Sequence[jax.Array], tangents: Sequence[object], **params: object) -> None:
        del primals, tangents, params
        raise NotImplementedError(
            f"jax_fa4.attention is differentiable once, in reverse mode (jax.grad, jax.vjp, "
            f"jax.value_and_grad): a second derivative (grad of grad, jax.hessian, jvp of grad) "
            f"reached the {name} primitive, which has no derivative; forward mode (jax.jvp, "
            f"jax.jacfwd) is not supported either. Use jax.nn.dot_product_attention where higher "
            f"derivatives are needed."
        )

    return rule


ad.primitive_jvps[fa4_fwd_p] = _no_higher_order("fa4_fwd")
ad.primitive_jvps[fa4_bwd_p] = _no_higher_order("fa4_bwd")


# ---------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------


def _axis_size(args: Sequence[jax.Array], dims: Sequence[int | None]) -> int:
    """The size of the vmapped axis (dims[i]: the mapped axis of args[i], None if unmapped)."""
    for x, d in zip(args, dims, strict=True):
        if d is not None:
            return x.shape[d]
    raise AssertionError("batching rule called with no mapped operand")


def _fold_into_batch(
    args: Sequence[jax.Array], dims: Sequence[int | None], size: int
) -> list[jax.Array]:
    """Moves each mapped axis (broadcasting unmapped operands) into axis 0: x [..., n, ...] with
    x's own leading axis b becomes [n*b, ...] (n = `size`, major)."""
    out = []
    for x, d in zip(args, dims, strict=True):
        x = jnp.broadcast_to(x, (size, *x.shape)) if d is None else jnp.moveaxis(x, d, 0)
        out.append(x.reshape((size * x.shape[1], *x.shape[2:])))
    return out


def _inner_batch(x: jax.Array, d: int | None) -> int:
    """The batch b of one example: x's leading axis once its mapped axis d is taken out."""
    return x.shape[0] if d is None else (*x.shape[:d], *x.shape[d + 1 :])[0]


def _unfold_batch(x: jax.Array, size: int, batch: int) -> jax.Array:
    """Inverse of :func:`_fold_into_batch` for one result: [n*b, ...] -> [n, b, ...] (b given,
    not divided out, so a vmap over an empty axis, n = 0, works)."""
    return x.reshape((size, batch, *x.shape[1:]))


def _fwd_batch(
    args: Sequence[jax.Array],
    dims: Sequence[int | None],
    **params: object,
) -> tuple[tuple[jax.Array, jax.Array], tuple[int, int]]:
    """vmap of fa4_fwd_p: one kernel call on the folded batch, ((o, lse), their mapped axes)."""
    extras = tuple(params.get("extras", ()))
    q, k, v = args[:3]
    qd, kd, vd = dims[:3]
    size = _axis_size(args, dims)
    by_name = dict(zip(extras, zip(args[3:], dims[3:], strict=True), strict=True))
    others_unmapped = all(d is None for n, (_, d) in by_name.items() if n != "sinks")
    if qd is not None and kd is None and vd is None and others_unmapped:
        # Only q (and perhaps the sinks) is mapped: the n copies of each q head become n extra q
        # heads that share the same kv head, placed next to each other so q head (h*n + i) still
        # maps to kv head h // group. Lengths and segment ids are per batch entry: shared.
        b, sq, hq, d = q.shape[:qd] + q.shape[qd + 1 :]
        qh = jnp.moveaxis(q, qd, 3).reshape(b, sq, hq * size, d)
        new_args = [qh, k, v]
        for name, (x, xd) in by_name.items():
            if name == "sinks":  # [b, hq] -> [b, hq * n], head h*n + i from copy i of head h
                x = jnp.repeat(x, size, axis=1) if xd is None else jnp.moveaxis(x, xd, 2)
                x = x.reshape(b, hq * size)
            new_args.append(x)
        o, lse = fa4_fwd_p.bind(*new_args, **params)
        o = o.reshape(b, sq, hq, size, o.shape[-1])
        lse = lse.reshape(b, hq, size, sq)
        return (o, lse), (3, 2)
    o, lse = fa4_fwd_p.bind(*_fold_into_batch(args, dims, size), **params)
    b = _inner_batch(q, qd)
    return (_unfold_batch(o, size, b), _unfold_batch(lse, size, b)), (0, 0)


def _bwd_batch(
    args: Sequence[jax.Array],
    dims: Sequence[int | None],
    **params: object,
) -> tuple[list[jax.Array], tuple[int, int, int]]:
    """vmap of fa4_bwd_p: one kernel call on the folded batch (every extra operand has the
    batch as its leading axis), ([dq, dk, dv], mapped axes 0)."""
    size = _axis_size(args, dims)
    outs = fa4_bwd_p.bind(*_fold_into_batch(args, dims, size), **params)
    b = _inner_batch(args[0], dims[0])
    return [_unfold_batch(x, size, b) for x in outs], (0, 0, 0)


batching.primitive_batchers[fa4_fwd_p] = _fwd_batch
batching.primitive_batchers[fa4_bwd_p] = _bwd_batch
