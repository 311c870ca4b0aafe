"""Version-dependent and private JAX pieces, in one place.

jax_fa4 supports jax 0.10 and 0.11. Both spell the varying-manual-axes type of an aval
``aval.manual_axis_type`` (alias ``aval.mat``), a ``ManualAxisType(varying=...)``; jax up to 0.9
had a plain ``aval.vma`` frozenset instead, which is handled too. Everything private that
jax_fa4 touches (the set of primitives that need devices during lowering, the lowering axis
contexts) is imported here, so a jax upgrade that moves them breaks one file.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax

try:  # private: jax's own cuDNN attention uses the same hook (needed by custom_partitioning)
    from jax._src.dispatch import prim_requires_devices_during_lowering
except ImportError:  # pragma: no cover - a jax that moved it
    prim_requires_devices_during_lowering = None

try:  # private: tells a multi-device jit lowering from a shard_map body or a 1-device one
    from jax._src.sharding_impls import ShardingContext
except ImportError:  # pragma: no cover - a jax that moved it
    ShardingContext = None

try:  # private: what custom_partitioning itself uses to read an HLO sharding as a spec
    from jax._src.sharding_impls import parse_flatten_op_sharding
except ImportError:  # pragma: no cover - a jax that moved it
    parse_flatten_op_sharding = None


def varying_axes(aval) -> frozenset:
    """The manual mesh axes over which values of type `aval` vary (empty outside shard_map)."""
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", frozenset()))


def with_varying_axes(aval, varying: frozenset):
    """`aval` retyped to vary over exactly `varying` (a no-op when it already does)."""
    if varying_axes(aval) == varying:
        return aval
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return aval.update(manual_axis_type=type(mat)(varying=frozenset(varying)))
    if hasattr(aval, "vma"):  # jax <= 0.9
        return aval.update(vma=frozenset(varying))
    return aval


def union_varying_axes(avals: Iterable) -> frozenset:
    out: frozenset = frozenset()
    for aval in avals:
        out |= varying_axes(aval)
    return out


def cast_to_varying(x: jax.Array, axes: frozenset) -> jax.Array:
    """Marks `x` as varying over `axes` too (a no-op cast whose transpose is a psum).

    Inside ``shard_map(check_vma=True)``, an operand that is replicated over an axis (say k and v
    when only q's sequence is split) must be cast before it meets varying ones in a custom VJP:
    the cast's transpose then sums its cotangent over the axis, which is the right gradient.
    """
    missing = tuple(sorted(axes - varying_axes(jax.typeof(x)), key=str))
    if not missing:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, missing, to="varying")
    return jax.lax.pvary(x, missing)  # pragma: no cover - jax <= 0.7


def match_varying_axes(*xs: jax.Array) -> tuple[jax.Array, ...]:
    """Casts every array to vary over the union of their varying manual axes."""
    union = union_varying_axes(jax.typeof(x) for x in xs)
    return tuple(cast_to_varying(x, union) for x in xs)


def spec_of(sharding, mesh, ndim: int) -> tuple | None:
    """The PartitionSpec (padded to `ndim` entries) of `sharding` over `mesh`, or None.

    None when the sharding cannot be written as a spec over the mesh's axes (Shardy can split
    one mesh axis into sub-axes, e.g. the kv heads when the q heads are split further than
    heads_kv), or cannot be read at all. Runs inside XLA's partitioner, where an exception would
    abort compilation, so every failure means "unknown" (the caller then replicates).
    """
    try:
        spec = getattr(sharding, "spec", None)
        if spec is None or getattr(sharding, "mesh", None) != mesh:
            if parse_flatten_op_sharding is None or getattr(mesh, "empty", True):
                return None
            spec = parse_flatten_op_sharding(sharding._to_xla_hlo_sharding(ndim), mesh)[0]
        spec = tuple(spec)
        return spec + (None,) * (ndim - len(spec)) if len(spec) <= ndim else None
    except Exception:  # noqa: BLE001 - see the docstring
        return None
