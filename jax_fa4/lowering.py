"""Lowerings of fa4_fwd_p and fa4_bwd_p to the XLA FFI targets, one rule per platform.

Registered when this module is imported (jax_fa4's ``__init__`` does):

* ``cpu``  -> custom calls ``jax_fa4_fwd_cpu`` / ``jax_fa4_bwd_cpu``;
* ``cuda`` -> ``jax_fa4_fwd_cuda`` / ``jax_fa4_bwd_cuda`` (Hopper, sm_90a; each custom call has
  one more result than the primitive, its uint8 device workspace (the forward's third, empty but
  for split-KV decode shapes; the backward's fourth), which the rule drops);
* ``rocm`` and any other platform -> a NotImplementedError.

The custom calls have a fixed arity. The forward takes q [b, sq, hq, d], k [b, sk, hkv, d],
v [b, sk, hkv, dv], then q_lengths, kv_lengths (int32 [b]), q_segment_ids (int32 [b, sq]),
kv_segment_ids (int32 [b, sk]) and sinks (float32 [b, hq]), and gives o [b, sq, hq, dv], lse
float32 [b, hq, sq]; the backward takes (q, k, v, o, lse, do, dlse, q_lengths, kv_lengths,
q_segment_ids, kv_segment_ids) and gives (dq, dk, dv). An extra operand the primitive was not
given (:mod:`jax_fa4.primitives`, its ``extras``) is a zero-element placeholder of shape [0] and
its dtype. The CUDA calls also take q_segment_ranges and kv_segment_ranges (int32
[b, ceil(s / 64), 2]: per 64-position chunk the min and max id, the last chunk over its valid
positions only), computed here from the segment ids (placeholders without them). Attributes:
softmax_scale (f64), causal (i1), window_left and window_right (i64; ``1 << 30`` for an
unbounded side), softcap (f64; 0 for none) and, for the backward, deterministic (i1).

Under a multi-device ``jax.jit`` the rule lowers the primitive through its custom_partitioning
wrapper instead (:func:`jax_fa4.sharding.lower_partitioned`); the per-shard programs that the
partitioner then lowers come back to the same rule in a manual axis context and get the plain
custom call. Every check (built targets, GPU generation, dtype and head dims) runs here, at
lowering time, never inside a partitioning callback, where an exception can abort the process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

from jax_fa4 import _ffi, sharding
from jax_fa4.primitives import BWD_EXTRAS, EXTRAS, fa4_bwd_p, fa4_fwd_p
from jax_fa4.validation import check_cuda_support

# A rule (ctx, *operands, **params) -> the primitive's results, as MLIR values.
LoweringRule = Callable[..., Sequence["mlir.ir.Value"]]


def _check_target(name: str, platform: str) -> None:
    """Raises NotImplementedError when the extension was built without target `name`."""
    if not _ffi.has_target(name, platform):
        if platform == "cuda" and not _ffi.built_with_cuda():
            raise NotImplementedError(
                "jax_fa4 was built without its CUDA kernels (no nvcc was found when it was "
                "installed), so it cannot run on this GPU. Reinstall it where the CUDA toolkit "
                "(nvcc 12.4+) is on PATH, or run on the CPU with jax.default_device"
            )
        raise NotImplementedError(f"jax_fa4 has no {platform} kernel for {name!r}")


def _check_sm90() -> None:
    """Raises NotImplementedError when a local GPU is not a Hopper (compute capability 9.0)."""
    for dev in jax.local_devices():
        if dev.platform != "gpu":
            continue
        cc = getattr(dev, "compute_capability", None)
        if cc is not None and str(cc) != "9.0":
            raise NotImplementedError(
                f"jax_fa4's CUDA kernels need a Hopper GPU (compute capability 9.0, sm_90a: "
                f"H100/H200); {dev.device_kind} has compute capability {cc}"
            )


def _cuda_bwd_workspace(ctx: mlir.LoweringRuleContext) -> list[jax.core.ShapedArray]:
    """The Hopper backward's float32 workspace (dQ accumulator, lse*log2e, delta'), as one uint8
    result ``[nbytes]`` of its custom call; its size comes from the extension
    (cuda/hopper/bwd/workspace.h), from q's static shape [b, sq, hq, d]."""
    b, sq, hq, d = ctx.avals_in[0].shape
    if not all(isinstance(x, int) for x in (b, sq, hq, d)):
        raise NotImplementedError(
            f"jax_fa4's CUDA backward needs static shapes (its workspace size depends on them); "
            f"got q of shape {ctx.avals_in[0].shape}"
        )
    nbytes = _ffi.cuda_bwd_workspace_bytes(b, sq, hq, d)
    return [jax.core.ShapedArray((nbytes,), jnp.uint8)]


def _cuda_fwd_workspace(ctx: mlir.LoweringRuleContext) -> list[jax.core.ShapedArray]:
    """The Hopper forward's split-KV decode scratch (float32 partial outputs and LSEs), as one
    uint8 result ``[nbytes]`` of its custom call (``[0]`` for shapes the decode path does not
    split); its size comes from the extension (cuda/hopper/decode/plan.h), from q's and k's
    static shapes [b, sq, hq, d] and [b, sk, hkv, d]."""
    q_shape, k_shape = ctx.avals_in[0].shape, ctx.avals_in[1].shape
    if not all(isinstance(x, int) for x in (*q_shape, *k_shape)):
        raise NotImplementedError(
            f"jax_fa4's CUDA forward needs static shapes (its workspace size depends on them); "
            f"got q of shape {q_shape} and k of shape {k_shape}"
        )
    b, sq, hq, d = q_shape
    _, sk, hkv, _ = k_shape
    nbytes = _ffi.cuda_fwd_workspace_bytes(b, sq, sk, hq, hkv, d)
    return [jax.core.ShapedArray((nbytes,), jnp.uint8)]


# Results a target writes besides the primitive's outputs (device workspace): the custom call
# gets them after the outputs, and the lowering drops them. XLA allocates them like any output.
_EXTRA_RESULTS: dict[str, Callable[[mlir.LoweringRuleContext], list[jax.core.ShapedArray]]] = {
    "jax_fa4_fwd_cuda": _cuda_fwd_workspace,
    "jax_fa4_bwd_cuda": _cuda_bwd_workspace,
}


def _ffi_call(
    target: str, ctx: mlir.LoweringRuleContext, *args: mlir.ir.Value, **params: object
) -> Sequence[mlir.ir.Value]:
    """The custom call of `target` on this lowering's operands, with its extra results if any;
    returns the primitive's results only."""
    extra = _EXTRA_RESULTS.get(target)
    if extra is None:
        return jax.ffi.ffi_lowering(target)(ctx, *args, **params)
    n_out = len(ctx.avals_out)
    # ffi_lowering takes the custom call's result types and layouts from ctx.avals_out.
    call_ctx = ctx.replace(avals_out=[*ctx.avals_out, *extra(ctx)])
    return list(jax.ffi.ffi_lowering(target)(call_ctx, *args, **params))[:n_out]


# Window bound meaning "unbounded" in the custom calls' attributes (the kernels read any bound
# of this magnitude or more as unbounded).
WINDOW_UNBOUNDED = 1 << 30
# The chunk of positions whose min / max segment id the CUDA kernels read (kSegmentChunk).
SEGMENT_CHUNK = 64

_EXTRA_DTYPES = {
    "q_lengths": np.int32,
    "kv_lengths": np.int32,
    "q_segment_ids": np.int32,
    "kv_segment_ids": np.int32,
    "sinks": np.float32,
}


def _window_attr(bound: int | None) -> np.int64:
    """A window bound as the i64 attribute (None -> unbounded; saturated at +-(1 << 30))."""
    if bound is None:
        return np.int64(WINDOW_UNBOUNDED)
    return np.int64(max(-WINDOW_UNBOUNDED, min(WINDOW_UNBOUNDED, int(bound))))


def segment_ranges(ids: jax.Array) -> jax.Array:
    """Per 64-position chunk of each row, the (min, max) segment id: int32 [b, ceil(s/64), 2]
    from ids int32 [b, s]; the last chunk's positions beyond s do not count."""
    b, s = ids.shape
    chunks = -(-s // SEGMENT_CHUNK)
    pad = chunks * SEGMENT_CHUNK - s
    info = jnp.iinfo(jnp.int32)
    lo = jnp.pad(ids, ((0, 0), (0, pad)), constant_values=info.max)
    hi = jnp.pad(ids, ((0, 0), (0, pad)), constant_values=info.min)
    lo = lo.reshape(b, chunks, SEGMENT_CHUNK).min(axis=2)
    hi = hi.reshape(b, chunks, SEGMENT_CHUNK).max(axis=2)
    return jnp.stack([lo, hi], axis=2).astype(jnp.int32)


def _placeholder(dtype) -> tuple[mlir.ir.Value, jax.core.ShapedArray]:
    """A zero-element [0] operand of `dtype` for an absent extra, with its aval."""
    return mlir.ir_constant(np.zeros((0,), dtype)), jax.core.ShapedArray((0,), dtype)


def _full_operands(
    ctx: mlir.LoweringRuleContext,
    args: Sequence[mlir.ir.Value],
    n_regular: int,
    extras: Sequence[str],
    names: Sequence[str],
    platform: str,
) -> tuple[list[mlir.ir.Value], list[jax.core.ShapedArray]]:
    """The custom call's fixed operand list and their avals: the regular operands, then one per
    name of `names` (the given extra, or a placeholder), then on CUDA the segment ranges."""
    values = list(args[:n_regular])
    avals = list(ctx.avals_in[:n_regular])
    given = dict(
        zip(extras, zip(args[n_regular:], ctx.avals_in[n_regular:], strict=True), strict=True)
    )
    for name in names:
        value, aval = given.get(name) or _placeholder(_EXTRA_DTYPES[name])
        values.append(value)
        avals.append(aval)
    if platform == "cuda":
        if "q_segment_ids" in given:
            ids = [given["q_segment_ids"], given["kv_segment_ids"]]
            out_avals = [
                jax.core.ShapedArray((a.shape[0], -(-a.shape[1] // SEGMENT_CHUNK), 2), np.int32)
                for _, a in ids
            ]
            sub = ctx.replace(avals_in=[a for _, a in ids], avals_out=out_avals)
            ranges = mlir.lower_fun(
                lambda qi, ki: (segment_ranges(qi), segment_ranges(ki)), multiple_results=True
            )(sub, *(x for x, _ in ids))
            values.extend(mlir.flatten_ir_values(ranges))
            avals.extend(out_avals)
        else:
            for _ in range(2):
                value, aval = _placeholder(np.int32)
                values.append(value)
                avals.append(aval)
    return values, avals


def _lower(kind: str, platform: str) -> LoweringRule:
    """The lowering rule of fa4_{kind}_p (kind "fwd" or "bwd") on `platform` ("cpu", "cuda")."""
    target = (_ffi.FWD_TARGET if kind == "fwd" else _ffi.BWD_TARGET).format(platform=platform)
    n_regular, names = (3, EXTRAS) if kind == "fwd" else (7, BWD_EXTRAS)

    def rule(
        ctx: mlir.LoweringRuleContext,
        *args: mlir.ir.Value,
        softmax_scale: float,
        causal: bool,
        window_left: int | None = None,
        window_right: int | None = None,
        softcap: float | None = None,
        extras: tuple[str, ...] = (),
        **bwd_params: object,
    ) -> Sequence[mlir.ir.Value]:
        _check_target(target, platform)
        if platform == "cuda":
            _check_sm90()
            q_aval, _, v_aval = ctx.avals_in[:3]
            check_cuda_support(q_aval.dtype, q_aval.shape[3], v_aval.shape[3])
        params: dict[str, object] = dict(
            softmax_scale=float(softmax_scale),
            causal=bool(causal),
            window_left=window_left,
            window_right=window_right,
            softcap=softcap,
            extras=tuple(extras),
        )
        if kind == "bwd":  # deterministic: the backward's only extra parameter
            params["deterministic"] = bool(bwd_params.pop("deterministic", False))
        assert not bwd_params, f"unknown parameters of fa4_{kind}: {sorted(bwd_params)}"
        # The checks above run here, at lowering, never inside a partitioning callback (where an
        # exception can abort the process).
        if sharding.partitions_here(ctx):
            return sharding.lower_partitioned(kind, ctx, *args, **params)
        # Per-shard lowerings of a partitioned program come back through this rule (their
        # context is manual, so partitions_here is False): the extra results are added there.
        values, avals = _full_operands(ctx, args, n_regular, extras, names, platform)
        attrs: dict[str, object] = dict(
            softmax_scale=float(softmax_scale),
            causal=bool(causal),
            window_left=_window_attr(window_left),
            window_right=_window_attr(window_right),
            softcap=float(0.0 if softcap is None else softcap),
        )
        if kind == "bwd":
            attrs["deterministic"] = params["deterministic"]
        return _ffi_call(target, ctx.replace(avals_in=avals), *values, **attrs)

    return rule


def _lower_unsupported(platform: str) -> LoweringRule:
    """A rule that raises NotImplementedError naming `platform` (no kernel there)."""

    def rule(ctx: mlir.LoweringRuleContext, *args: mlir.ir.Value, **params: object):
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
