"""Trace-time checks of attention's arguments: every bad input gets an error naming it."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16), jnp.dtype(jnp.float32))
MAX_HEAD_DIM = 256
# The Hopper kernels are instantiated for these only (cuda/hopper config structs).
CUDA_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
CUDA_HEAD_DIMS = (64, 128, 256)


@dataclass(frozen=True)
class AttentionDims:
    """Sizes read off q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv]."""

    batch: int
    seq_q: int
    seq_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int


def _dtype_names(dtypes: tuple[np.dtype, ...]) -> str:
    return ", ".join(d.name for d in dtypes)


def check_qkv(q: jax.Array, k: jax.Array, v: jax.Array) -> AttentionDims:
    """Checks ranks, shapes and dtypes of q, k, v; returns their sizes. Raises ValueError."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = getattr(x, "shape", None)
        if shape is None or getattr(x, "dtype", None) is None:
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if len(shape) != 4:
            raise ValueError(
                f"{name} must have rank 4 [batch, seq, heads, head_dim]; got shape {tuple(shape)} "
                f"(rank {len(shape)})"
            )
        if jnp.dtype(x.dtype) not in SUPPORTED_DTYPES:
            raise ValueError(
                f"{name} has dtype {jnp.dtype(x.dtype).name}; supported dtypes are "
                f"{_dtype_names(SUPPORTED_DTYPES)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            "q, k and v must share one dtype; got "
            f"q {jnp.dtype(q.dtype).name}, k {jnp.dtype(k.dtype).name}, v {jnp.dtype(v.dtype).name}"
        )
    b, sq, hq, d = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(
            f"batch sizes differ: q {b}, k {k.shape[0]}, v {v.shape[0]} (axis 0 of each)"
        )
    if v.shape[1] != k.shape[1]:
        raise ValueError(
            f"k and v must have the same sequence length; got k {k.shape[1]}, v {v.shape[1]} "
            "(axis 1)"
        )
    if v.shape[2] != k.shape[2]:
        raise ValueError(
            f"k and v must have the same number of heads; got k {k.shape[2]}, v {v.shape[2]} "
            "(axis 2)"
        )
    if k.shape[3] != d:
        raise ValueError(f"q and k must have the same head_dim; got q {d}, k {k.shape[3]} (axis 3)")
    hkv = k.shape[2]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(
            f"heads of q ({hq}) must be a multiple of heads of k and v ({hkv}) "
            "(grouped-query attention)"
        )
    for name, dim in (("q/k", d), ("v", v.shape[3])):
        if not 1 <= dim <= MAX_HEAD_DIM:
            raise ValueError(
                f"head_dim of {name} is {dim}; supported head dims are 1..{MAX_HEAD_DIM}"
            )
    return AttentionDims(b, sq, k.shape[1], hq, hkv, d, v.shape[3])


def _describe(x: object) -> str:
    """What a softmax_scale argument is, for an error message."""
    if isinstance(x, jax.core.Tracer):
        aval = getattr(x, "aval", None)
        shape = tuple(getattr(aval, "shape", ()))
        dtype = getattr(aval, "dtype", None)
        return f"a traced value of shape {shape} and dtype {dtype} (inside jit, grad or vmap)"
    if isinstance(x, jax.Array):
        return f"a concrete jax array of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, np.ndarray):
        return f"a numpy array of shape {x.shape} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"


_SCALE_ALLOWED = (
    "a static Python float (or int), a NumPy scalar, or a concrete 0-d array, e.g. "
    "softmax_scale=0.125 or softmax_scale=float(x)"
)


def check_softmax_scale(softmax_scale: object, head_dim: int) -> float:
    """Returns the scale as a Python float (default 1/sqrt(head_dim)); raises on bad values.

    The scale picks the kernel's arithmetic at trace time, so it must be known then: a Python or
    NumPy real number, or a concrete (not traced) 0-d jax or NumPy array, which is converted
    with ``float()``. A traced scale (an argument of a jitted function) is refused: fold it into
    q instead (``attention(q * (s * d**0.5), k, v)`` scales the scores by ``s``).
    """
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(softmax_scale, jax.core.Tracer):
        raise ValueError(
            f"softmax_scale must be a static Python number, not {_describe(softmax_scale)}: the "
            "scale is fixed when the kernel call is traced. Pass a Python float from outside "
            "the traced function (e.g. softmax_scale=0.125, or float(x) of a concrete array), "
            "or fold a traced scale into q instead"
        )
    if isinstance(softmax_scale, (jax.Array, np.ndarray, np.generic)):
        dtype = np.dtype(softmax_scale.dtype)
        if np.shape(softmax_scale) != ():
            raise ValueError(
                f"softmax_scale must be a scalar; got {_describe(softmax_scale)}. Allowed: "
                f"{_SCALE_ALLOWED}"
            )
        if dtype == np.bool_ or dtype.kind not in "fiu":
            raise ValueError(
                f"softmax_scale must be a positive finite real number or None; got "
                f"{_describe(softmax_scale)}. Allowed: {_SCALE_ALLOWED}"
            )
    elif isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise ValueError(
            f"softmax_scale must be a positive finite real number or None; got "
            f"{_describe(softmax_scale)}. Allowed: {_SCALE_ALLOWED}"
        )
    scale = float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"softmax_scale must be positive and finite; got {scale}")
    return scale


def check_flag(name: str, value: object) -> bool:
    """Static options must be Python/NumPy bools: a traced flag cannot pick a kernel."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be a Python bool; got {type(value).__name__} {value!r}")


def check_cuda_support(dtype: np.dtype, head_dim: int, head_dim_v: int) -> None:
    """The Hopper kernels' coverage; anything else is a NotImplementedError at trace time."""
    dtype = jnp.dtype(dtype)
    if dtype not in CUDA_DTYPES:
        raise NotImplementedError(
            f"jax_fa4 on the GPU supports dtypes {_dtype_names(CUDA_DTYPES)}; got {dtype.name}. "
            "Cast q, k, v to bfloat16 or float16 (float32 runs only on the CPU)"
        )
    if head_dim not in CUDA_HEAD_DIMS or head_dim_v != head_dim:
        raise NotImplementedError(
            f"jax_fa4 on the GPU supports head_dim in {CUDA_HEAD_DIMS} with v's head_dim equal "
            f"to q's; got q/k head_dim {head_dim}, v head_dim {head_dim_v}"
        )
