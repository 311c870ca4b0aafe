"""The two JAX primitives behind jax_fa4.attention and their rules.

fa4_fwd_p(q, k, v) -> (o, lse)
fa4_bwd_p(q, k, v, o, lse, do, dlse) -> (dq, dk, dv)

q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv], o/do [b, sq, hq, dv], lse/dlse float32
[b, hq, sq]. Parameters: softmax_scale (Python float, lowered as f64) and causal (bool, i1); the
backward also deterministic (bool, i1, default False when not bound: bitwise reproducible
gradients; the CUDA kernel then orders its dQ adds, the CPU kernel always is and ignores it).
Each primitive has an abstract evaluation, a lowering per platform to an XLA FFI target
(jax_fa4_{fwd,bwd}_{cpu,cuda}; jax_fa4_bwd_cuda's custom call has a fourth result, its uint8
device workspace, which the lowering drops) and a batching rule that folds the vmapped axis into
the kernel's batch (or, for the forward with only q mapped, into its heads): never a loop. Under a
multi-device jit the lowering wraps the kernel in jax_fa4.sharding's custom_partitioning; in
shard_map, outputs vary over the union of the inputs' varying manual axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir, xla

from jax_fa4 import _compat, _ffi
from jax_fa4.validation import check_cuda_support

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


def _fwd_abstract_eval(q, k, v, *, softmax_scale: float, causal: bool):
    del softmax_scale, causal
    b, sq, hq, _ = q.shape
    dv = v.shape[3]
    # Inside shard_map(check_vma=True) an output varies wherever any input does (jax #36008).
    varying = _compat.union_varying_axes((q, k, v))
    o = _aval_like(q, (b, sq, hq, dv), q.dtype, (0, 1, 2, 3), varying)
    lse = _aval_like(q, (b, hq, sq), jnp.float32, (0, 2, 1), varying)
    return o, lse


def _bwd_abstract_eval(
    q, k, v, o, lse, do, dlse, *, softmax_scale: float, causal: bool, deterministic: bool = False
):
    del softmax_scale, causal, deterministic
    varying = _compat.union_varying_axes((q, k, v, o, lse, do, dlse))
    return tuple(_compat.with_varying_axes(x.update(), varying) for x in (q, k, v))


fa4_fwd_p.def_abstract_eval(_fwd_abstract_eval)
fa4_bwd_p.def_abstract_eval(_bwd_abstract_eval)
fa4_fwd_p.def_impl(lambda *args, **params: xla.apply_primitive(fa4_fwd_p, *args, **params))
fa4_bwd_p.def_impl(lambda *args, **params: xla.apply_primitive(fa4_bwd_p, *args, **params))


# ---------------------------------------------------------------------------------------------
# Lowering, one rule per platform
# ---------------------------------------------------------------------------------------------


def _check_target(name: str, platform: str) -> None:
    if not _ffi.has_target(name, platform):
        if platform == "cuda" and not _ffi.built_with_cuda():
            raise NotImplementedError(
                "jax_fa4 was built without its CUDA kernels (no nvcc was found when it was "
                "installed), so it cannot run on this GPU. Reinstall it where the CUDA toolkit "
                "(nvcc 12.4+) is on PATH, or run on the CPU with jax.default_device"
            )
        raise NotImplementedError(f"jax_fa4 has no {platform} kernel for {name!r}")


def _check_sm90() -> None:
    for dev in jax.local_devices():
        if dev.platform != "gpu":
            continue
        cc = getattr(dev, "compute_capability", None)
        if cc is not None and str(cc) != "9.0":
            raise NotImplementedError(
                f"jax_fa4's CUDA kernels need a Hopper GPU (compute capability 9.0, sm_90a: "
                f"H100/H200); {dev.device_kind} has compute capability {cc}"
            )


def _cuda_bwd_workspace(ctx) -> list[jax.core.ShapedArray]:
    """The Hopper backward's float32 workspace (dQ accumulator, lse*log2e, delta'), as one uint8
    result of its custom call; its size comes from the extension (cuda/hopper/bwd_workspace.h)."""
    b, sq, hq, d = ctx.avals_in[0].shape
    if not all(isinstance(x, int) for x in (b, sq, hq, d)):
        raise NotImplementedError(
            f"jax_fa4's CUDA backward needs static shapes (its workspace size depends on them); "
            f"got q of shape {ctx.avals_in[0].shape}"
        )
    nbytes = _ffi.cuda_bwd_workspace_bytes(b, sq, hq, d)
    return [jax.core.ShapedArray((nbytes,), jnp.uint8)]


# Results a target writes besides the primitive's outputs (device workspace): the custom call
# gets them after the outputs, and the lowering drops them. XLA allocates them like any output.
_EXTRA_RESULTS = {"jax_fa4_bwd_cuda": _cuda_bwd_workspace}


def _ffi_call(target: str, ctx, *args, **params):
    """The custom call of `target` on this lowering's operands, with its extra results if any."""
    extra = _EXTRA_RESULTS.get(target)
    if extra is None:
        return jax.ffi.ffi_lowering(target)(ctx, *args, **params)
    n_out = len(ctx.avals_out)
    # ffi_lowering takes the custom call's result types and layouts from ctx.avals_out.
    call_ctx = ctx.replace(avals_out=[*ctx.avals_out, *extra(ctx)])
    return list(jax.ffi.ffi_lowering(target)(call_ctx, *args, **params))[:n_out]


def _lower(kind: str, platform: str):
    target = (_ffi.FWD_TARGET if kind == "fwd" else _ffi.BWD_TARGET).format(platform=platform)

    def rule(ctx, *args, softmax_scale: float, causal: bool, **bwd_params):
        _check_target(target, platform)
        if platform == "cuda":
            _check_sm90()
            q_aval, _, v_aval = ctx.avals_in[:3]
            check_cuda_support(q_aval.dtype, q_aval.shape[3], v_aval.shape[3])
        params = dict(softmax_scale=float(softmax_scale), causal=bool(causal))
        if kind == "bwd":  # deterministic: the backward's only extra parameter
            params["deterministic"] = bool(bwd_params.pop("deterministic", False))
        assert not bwd_params, f"unknown parameters of fa4_{kind}: {sorted(bwd_params)}"
        # Checks above run here, at lowering, never inside a partitioning callback (where an
        # exception can abort the process).
        from jax_fa4 import sharding

        if sharding.partitions_here(ctx):
            return sharding.lower_partitioned(kind, ctx, *args, **params)
        # Per-shard lowerings of a partitioned program come back through this rule (their
        # context is manual, so partitions_here is False): the extra results are added there.
        return _ffi_call(target, ctx, *args, **params)

    return rule


def _lower_unsupported(platform: str):
    def rule(ctx, *args, **params):
        raise NotImplementedError(
            f"jax_fa4 has kernels for the CPU and for NVIDIA Hopper GPUs only; got platform "
            f"{platform!r}"
        )

    return rule


for _prim, _kind in ((fa4_fwd_p, "fwd"), (fa4_bwd_p, "bwd")):
    mlir.register_lowering(_prim, _lower_unsupported("this one"))
    mlir.register_lowering(_prim, _lower(_kind, "cpu"), platform="cpu")
    mlir.register_lowering(_prim, _lower(_kind, "cuda"), platform="cuda")
    mlir.register_lowering(_prim, _lower_unsupported("rocm"), platform="rocm")


# ---------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------


def _axis_size(args, dims) -> int:
    for x, d in zip(args, dims, strict=True):
        if d is not None:
            return x.shape[d]
    raise AssertionError("batching rule called with no mapped operand")


def _fold_into_batch(args, dims, size: int) -> list[jax.Array]:
    """Moves each mapped axis (broadcasting unmapped operands) into axis 0: [n*b, ...]."""
    out = []
    for x, d in zip(args, dims, strict=True):
        x = jnp.broadcast_to(x, (size, *x.shape)) if d is None else jnp.moveaxis(x, d, 0)
        out.append(x.reshape((size * x.shape[1], *x.shape[2:])))
    return out


def _unfold_batch(x: jax.Array, size: int) -> jax.Array:
    return x.reshape((size, x.shape[0] // size, *x.shape[1:]))


def _fwd_batch(args, dims, *, softmax_scale: float, causal: bool):
    q, k, v = args
    qd, kd, vd = dims
    size = _axis_size(args, dims)
    params = dict(softmax_scale=softmax_scale, causal=causal)
    if kd is None and vd is None:
        # Only q is mapped: the n copies of each q head become n extra q heads that share the same
        # kv head, placed next to each other so q head (h*n + i) still maps to kv head h // group.
        b, sq, hq, d = q.shape[:qd] + q.shape[qd + 1 :]
        qh = jnp.moveaxis(q, qd, 3).reshape(b, sq, hq * size, d)
        o, lse = fa4_fwd_p.bind(qh, k, v, **params)
        o = o.reshape(b, sq, hq, size, o.shape[-1])
        lse = lse.reshape(b, hq, size, sq)
        return (o, lse), (3, 2)
    o, lse = fa4_fwd_p.bind(*_fold_into_batch(args, dims, size), **params)
    return (_unfold_batch(o, size), _unfold_batch(lse, size)), (0, 0)


def _bwd_batch(args, dims, *, softmax_scale: float, causal: bool, deterministic: bool = False):
    size = _axis_size(args, dims)
    outs = fa4_bwd_p.bind(
        *_fold_into_batch(args, dims, size),
        softmax_scale=softmax_scale,
        causal=causal,
        deterministic=deterministic,
    )
    return [_unfold_batch(x, size) for x in outs], (0, 0, 0)


batching.primitive_batchers[fa4_fwd_p] = _fwd_batch
batching.primitive_batchers[fa4_bwd_p] = _bwd_batch
