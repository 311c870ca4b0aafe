"""The Hopper forward's custom call, as lowered for CUDA (no GPU needed: jax.export for "cuda").

jax_fa4_fwd_cuda has a third, uint8 result after o and lse: the split-KV decode path's scratch
(float32 partial outputs and LSEs), sized by the extension's cuda_fwd_workspace_bytes (the C++
plan in cuda/hopper/decode/plan.h that the handler checks against) from q's and k's static shapes,
and dropped by the lowering. The export runs in a fresh interpreter with two host devices (for
shard_map). A build without the CUDA kernels has neither the target nor the size function, so
there the script lowers with the target check off and a stand-in size function; the test then
checks what the lowering does with the size, and the CUDA build's tests check the sizes too.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from lowering_script import run_result_script

from jax_fa4 import _ffi

# b, sq, sk, hq, hkv, d. PREFILL: 2 x 100 packed rows per kv head, the training forward's shape
# (no workspace). DECODE: one token, 8 query heads per kv head, 4096 keys: the decode plan splits
# the key range, so the workspace is not empty.
PREFILL = (2, 100, 70, 4, 2, 64)
DECODE = (2, 1, 4096, 8, 1, 128)

_SCRIPT = textwrap.dedent(
    """
    import json, re
    import jax, jax.numpy as jnp
    from jax import export
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jax_fa4
    from jax_fa4 import _ffi, lowering

    if _ffi.built_with_cuda():
        size_of = _ffi.cuda_fwd_workspace_bytes
    else:
        # The targets need not exist to be lowered (only to run); a stand-in size, nonzero for
        # the one-token cases, shows the lowering's use of it.
        lowering._check_target = lambda *a: None
        _ffi.cuda_bwd_workspace_bytes = lambda b, sq, hq, d: 4096
        size_of = lambda b, sq, sk, hq, hkv, d: 0 if sq > 1 else 256 * b
    asked = []

    def recorded(*shape):
        nbytes = size_of(*shape)
        asked.append([list(shape), nbytes])
        return nbytes

    _ffi.cuda_fwd_workspace_bytes = recorded

    def fwd_calls(fn, *args):
        exported = export.export(
            jax.jit(fn),
            platforms=["cuda"],
            disabled_checks=[
                export.DisabledSafetyCheck.custom_call(f"jax_fa4_{kind}_cuda")
                for kind in ("fwd", "bwd")
            ],
        )(*args)
        lines = [l for l in exported.mlir_module().splitlines() if "@jax_fa4_fwd_cuda(" in l]
        return [re.findall(r"tensor<([^>]*)>", l.rsplit(") -> ", 1)[1]) for l in lines]

    def attend(q, k, v):
        return jax_fa4.attention(q, k, v)

    def grad(q, k, v):
        loss = lambda q, k, v: jnp.sum(jax_fa4.attention(q, k, v).astype(jnp.float32) ** 2)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    stack = lambda s: jax.ShapeDtypeStruct((3, *s.shape), s.dtype)
    mesh = jax.make_mesh((2,), ("b",), devices=jax.devices()[:2])
    shard = lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=NamedSharding(mesh, P("b")))
    sm = jax.shard_map(attend, mesh=mesh, in_specs=P("b"), out_specs=P("b"))

    out = {}
    for name, (b, sq, sk, hq, hkv, d) in SHAPES.items():
        q = jax.ShapeDtypeStruct((b, sq, hq, d), jnp.bfloat16)
        k = jax.ShapeDtypeStruct((b, sk, hkv, d), jnp.bfloat16)
        cases = {
            "jit": (attend, q, k, k),
            "grad": (grad, q, k, k),
            "vmap": (jax.vmap(attend), stack(q), stack(k), stack(k)),
            "shard_map": (sm, shard(q), shard(k), shard(k)),
        }
        for case, (fn, *args) in cases.items():
            asked.clear()
            out[f"{name}/{case}"] = {"calls": fwd_calls(fn, *args), "asked": list(asked)}
    b, sq, sk, hq, hkv, d = SHAPES["decode"]
    # One symbolic scope for both: the batch n is shared by q and k.
    dyn_q = export.symbolic_shape(f"n, {sq}, {hq}, {d}")
    dyn_k = (dyn_q[0], sk, hkv, d)
    try:
        fwd_calls(
            attend,
            jax.ShapeDtypeStruct(dyn_q, jnp.bfloat16),
            jax.ShapeDtypeStruct(dyn_k, jnp.bfloat16),
            jax.ShapeDtypeStruct(dyn_k, jnp.bfloat16),
        )
        out["dynamic"] = None
    except NotImplementedError as err:
        out["dynamic"] = str(err)
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def lowered() -> dict:
    """The forward custom calls' result types and the sizes the lowering asked for, per case."""
    shapes = {"prefill": PREFILL, "decode": DECODE}
    return run_result_script(f"SHAPES = {shapes!r}\n" + _SCRIPT)


@pytest.mark.parametrize("name,shape", [("prefill", PREFILL), ("decode", DECODE)])
@pytest.mark.parametrize("case", ["jit", "grad", "vmap", "shard_map"])
def test_cuda_forward_has_a_workspace_result_of_the_asked_size(lowered, name, shape, case):
    b, sq, sk, hq, hkv, d = shape
    batch = {"vmap": 3 * b, "shard_map": b // 2}.get(case, b)
    found = lowered[f"{name}/{case}"]
    (types,) = found["calls"]
    # The size is asked for from the per-call shapes (vmap folds into the batch, shard_map
    # lowers the shard).
    ((asked_shape, nbytes),) = {(tuple(s), n) for s, n in found["asked"]}
    assert asked_shape == (batch, sq, sk, hq, hkv, d), found
    assert types == [f"{batch}x{sq}x{hq}x{d}xbf16", f"{batch}x{hq}x{sq}xf32", f"{nbytes}xui8"]
    if name == "prefill":
        assert nbytes == 0


def test_cuda_forward_with_dynamic_shapes_is_a_clear_error(lowered):
    assert lowered["dynamic"] is not None
    assert re.search(r"CUDA forward needs static shapes", lowered["dynamic"]), lowered["dynamic"]


@pytest.mark.skipif(not _ffi.built_with_cuda(), reason="this build has no CUDA kernels")
def test_forward_workspace_bytes_come_from_the_decode_plan(lowered):
    assert _ffi.cuda_fwd_workspace_bytes(*PREFILL) == 0
    assert _ffi.cuda_fwd_workspace_bytes(0, 0, 0, 0, 0, 64) == 0
    b, sq, sk, hq, hkv, d = DECODE
    # At least two splits' float32 partial outputs (and their LSEs) for the 8 packed rows.
    assert _ffi.cuda_fwd_workspace_bytes(*DECODE) >= 2 * 4 * b * hkv * (hq // hkv * sq) * (d + 1)
    assert lowered["decode/jit"]["asked"][0][1] == _ffi.cuda_fwd_workspace_bytes(*DECODE)
    with pytest.raises(ValueError, match="non-negative"):
        _ffi.cuda_fwd_workspace_bytes(-1, 1, 1, 1, 1, 64)
