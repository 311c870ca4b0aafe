"""The Hopper backward's custom call, as lowered for CUDA (no GPU needed: jax.export for "cuda").

jax_fa4_bwd_cuda takes its float32 workspace (with the deterministic mode's int32 semaphores) as a
4th, uint8 result of the custom call (sized by the extension's cuda_bwd_workspace_bytes, the C++
formula the handler checks against), which the lowering drops, and the attributes softmax_scale,
causal and deterministic. The export runs in a fresh interpreter with two host devices (for
shard_map).
"""

from __future__ import annotations

import re
import textwrap

import pytest
from lowering_script import run_result_script

from jax_fa4 import _ffi

pytestmark = pytest.mark.skipif(
    not _ffi.built_with_cuda(), reason="this build has no CUDA kernels (no nvcc at install)"
)

# b, sq, sk, hq, hkv, d: GQA, seq_q != seq_k, seq_q not a multiple of the 128-row padding.
SHAPE = (2, 100, 70, 4, 2, 64)

_SCRIPT = textwrap.dedent(
    """
    import json, re, sys
    import jax, jax.numpy as jnp
    from jax import export
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jax_fa4
    from jax_fa4 import _ffi

    b, sq, sk, hq, hkv, d = SHAPE
    q = jax.ShapeDtypeStruct((b, sq, hq, d), jnp.bfloat16)
    k = jax.ShapeDtypeStruct((b, sk, hkv, d), jnp.bfloat16)

    def grad_of(det):
        def loss(q, k, v):
            o = jax_fa4.attention(q, k, v, causal=True, deterministic=det)
            return jnp.sum(o.astype(jnp.float32) ** 2)

        return jax.grad(loss, argnums=(0, 1, 2))

    grad = grad_of(False)

    def bwd_lines(fn, *args):
        exported = export.export(
            jax.jit(fn),
            platforms=["cuda"],
            disabled_checks=[
                export.DisabledSafetyCheck.custom_call(f"jax_fa4_{kind}_cuda")
                for kind in ("fwd", "bwd")
            ],
        )(*args)
        return [l for l in exported.mlir_module().splitlines() if "@jax_fa4_bwd_cuda(" in l]

    def bwd_calls(fn, *args):
        lines = bwd_lines(fn, *args)
        return [re.findall(r"tensor<([^>]*)>", l.rsplit(") -> (", 1)[1]) for l in lines]

    def attrs(fn, *args):
        return [re.findall(r"([a-z_]+) = (true|false)", l) for l in bwd_lines(fn, *args)]

    out = {"has_target": _ffi.has_target("jax_fa4_bwd_cuda", "cuda")}
    try:
        out["jit"] = bwd_calls(grad, q, k, k)
        out["attrs"] = {str(det): attrs(grad_of(det), q, k, k) for det in (False, True)}
        out["jit_det"] = bwd_calls(grad_of(True), q, k, k)
        stack = lambda s: jax.ShapeDtypeStruct((3, *s.shape), s.dtype)
        out["vmap"] = bwd_calls(jax.vmap(grad), stack(q), stack(k), stack(k))
        # shard_map: the per-shard lowering goes through the same rule (as do the per-shard
        # lowerings of jax_fa4.sharding's custom_partitioning, also in a manual axis context).
        mesh = jax.make_mesh((2,), ("b",), devices=jax.devices()[:2])
        sharding = NamedSharding(mesh, P("b"))
        shard = lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding)
        sm = jax.shard_map(grad, mesh=mesh, in_specs=P("b"), out_specs=P("b"))
        out["shard_map"] = bwd_calls(sm, shard(q), shard(k), shard(k))
    except NotImplementedError as err:
        out["error"] = str(err)
    print("RESULT " + json.dumps(out))
    """
)


def _run() -> dict:
    return run_result_script(f"SHAPE = {SHAPE!r}\n" + _SCRIPT)


def _workspace_elems(types: list[str]) -> int:
    m = re.fullmatch(r"(\d+)xui8", types[-1])
    assert m, f"the last result of jax_fa4_bwd_cuda is not a rank-1 uint8 buffer: {types}"
    return int(m.group(1))


def test_cuda_backward_has_a_workspace_result_of_the_extensions_size():
    out = _run()
    assert out["has_target"] is True
    assert "error" not in out, out.get("error")
    b, sq, sk, hq, hkv, d = SHAPE
    for case, batch in (("jit", b), ("vmap", 3 * b), ("shard_map", b // 2)):
        calls = out[case]
        assert len(calls) == 1, (case, calls)
        types = calls[0]
        assert types[:3] == [
            f"{batch}x{sq}x{hq}x{d}xbf16",
            f"{batch}x{sk}x{hkv}x{d}xbf16",
            f"{batch}x{sk}x{hkv}x{d}xbf16",
        ], (case, types)
        assert len(types) == 4, (case, types)
        nbytes = _workspace_elems(types)
        assert nbytes == _ffi.cuda_bwd_workspace_bytes(batch, sq, hq, d), case
        # At least the float32 dQ accumulator, lse*log2e and delta' of the unpadded rows, and
        # the deterministic mode's int32 semaphore per 64 of them.
        assert nbytes >= 4 * batch * hq * sq * (d + 2) + 4 * batch * hq * (sq // 64), case
    # deterministic changes the attribute, not the buffers (the semaphores are always there).
    assert out["jit_det"] == out["jit"]
    for det in (False, True):
        (found,) = out["attrs"][str(det)]
        assert dict(found) == {"causal": "true", "deterministic": str(det).lower()}, found


def _formula(b, sq, hq, d):
    """cuda/hopper/bwd/workspace.h's layout in Python: dq_accum, the semaphores + the tile
    counter, lse2, delta, each rounded up to 256 bytes, + 256 slack. Query rows are padded to
    a multiple of 128, and at head dim 128 first to a multiple of 80 (the 80-row tile)."""
    padded = (sq + 79) // 80 * 80 if d == 128 else sq
    rows = b * hq * ((padded + 127) // 128 * 128)

    def up(x):
        return (x + 255) // 256 * 256

    return up(4 * rows * d) + up(4 * (rows // 64 + 1)) + up(4 * rows) + up(4 * rows) + 256


@pytest.mark.parametrize(
    "shape",
    [
        (1, 1, 1, 64),
        (2, 100, 4, 64),
        (3, 1000, 8, 128),
        (1, 128, 2, 128),
        (1, 129, 3, 256),
        (0, 0, 0, 64),
    ],
)
def test_workspace_bytes_follow_the_formula(shape):
    assert _ffi.cuda_bwd_workspace_bytes(*shape) == _formula(*shape)


def test_workspace_bytes_come_from_the_extension():
    small = _ffi.cuda_bwd_workspace_bytes(1, 1, 1, 64)
    assert small >= 4 * (64 + 2)
    # Padded to whole 128-row blocks: 1 and 128 query rows need the same workspace.
    assert _ffi.cuda_bwd_workspace_bytes(1, 128, 1, 64) == small
    assert _ffi.cuda_bwd_workspace_bytes(1, 129, 1, 64) > small
    # At head dim 128 the rows are padded to 80 first: 128 rows take two 80-row blocks (160
    # rows, then 256), as 160 do, and more than 80 rows (one block, 128).
    hd128 = _ffi.cuda_bwd_workspace_bytes(1, 128, 1, 128)
    assert hd128 == _ffi.cuda_bwd_workspace_bytes(1, 160, 1, 128)
    assert hd128 > _ffi.cuda_bwd_workspace_bytes(1, 80, 1, 128)
    assert _ffi.cuda_bwd_workspace_bytes(0, 0, 0, 64) >= 0
    with pytest.raises(ValueError, match="non-negative"):
        _ffi.cuda_bwd_workspace_bytes(-1, 1, 1, 64)
