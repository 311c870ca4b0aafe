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


# ---------------------------------------------------------------------------------------------
# The variants: window, lengths, segment ids, soft cap, sinks
# ---------------------------------------------------------------------------------------------

_WINDOW_ALLOWED = (
    "None (no window), a non-negative Python int w (meaning (w, w)), or a pair (left, right) of "
    "non-negative Python ints or None (unbounded on that side), e.g. local_window_size=(1024, 0)"
)


def _is_static_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _window_side(side: str, x: object) -> int | None:
    if x is None:
        return None
    if isinstance(x, jax.core.Tracer):
        raise ValueError(
            f"local_window_size's {side} bound must be a static Python int, not {_describe(x)}: "
            f"the window is fixed when the kernel call is traced. Allowed: {_WINDOW_ALLOWED}"
        )
    if not _is_static_int(x):
        raise ValueError(
            f"local_window_size's {side} bound must be a non-negative int or None; got "
            f"{_describe(x)}. Allowed: {_WINDOW_ALLOWED}"
        )
    if int(x) < 0:
        raise ValueError(
            f"local_window_size's {side} bound must be non-negative; got {int(x)}. Allowed: "
            f"{_WINDOW_ALLOWED}"
        )
    return int(x)


def check_window(local_window_size: object) -> tuple[int | None, int | None]:
    """(left, right) of a ``local_window_size`` argument; None is unbounded on that side.

    Key j is visible from query i (after the lengths' offset) only if ``i - left <= j <= i +
    right``. Raises ValueError for negative, non-integer, traced or wrong-arity windows.
    """
    if local_window_size is None:
        return None, None
    if isinstance(local_window_size, (tuple, list)):
        if len(local_window_size) != 2:
            raise ValueError(
                f"local_window_size must be an int or a pair (left, right); got a "
                f"{type(local_window_size).__name__} of {len(local_window_size)} entries "
                f"{tuple(local_window_size)!r}. Allowed: {_WINDOW_ALLOWED}"
            )
        left, right = local_window_size
        return _window_side("left", left), _window_side("right", right)
    if isinstance(local_window_size, (jax.core.Tracer, jax.Array, np.ndarray)) and np.ndim(
        local_window_size
    ):
        raise ValueError(
            f"local_window_size must be an int or a pair (left, right); got "
            f"{_describe(local_window_size)}. Allowed: {_WINDOW_ALLOWED}"
        )
    w = _window_side("left and right", local_window_size)
    return w, w


_SOFTCAP_ALLOWED = "None or a static positive finite Python float, e.g. logits_soft_cap=30.0"


def check_softcap(logits_soft_cap: object) -> float | None:
    """The soft cap as a Python float, or None; raises ValueError unless it is a static positive
    finite real number (a concrete 0-d array is converted with ``float()``)."""
    if logits_soft_cap is None:
        return None
    if isinstance(logits_soft_cap, jax.core.Tracer):
        raise ValueError(
            f"logits_soft_cap must be a static Python float, not {_describe(logits_soft_cap)}: "
            f"the soft cap is fixed when the kernel call is traced. Allowed: {_SOFTCAP_ALLOWED}"
        )
    if isinstance(logits_soft_cap, (jax.Array, np.ndarray, np.generic)):
        dtype = np.dtype(logits_soft_cap.dtype)
        if np.shape(logits_soft_cap) != () or dtype == np.bool_ or dtype.kind not in "fiu":
            raise ValueError(
                f"logits_soft_cap must be a positive finite real scalar; got "
                f"{_describe(logits_soft_cap)}. Allowed: {_SOFTCAP_ALLOWED}"
            )
    elif isinstance(logits_soft_cap, bool) or not isinstance(logits_soft_cap, numbers.Real):
        raise ValueError(
            f"logits_soft_cap must be a positive finite real number; got "
            f"{_describe(logits_soft_cap)}. Allowed: {_SOFTCAP_ALLOWED}"
        )
    cap = float(logits_soft_cap)
    if not (math.isfinite(cap) and cap > 0.0):
        raise ValueError(
            f"logits_soft_cap must be positive and finite; got {cap}. Allowed: {_SOFTCAP_ALLOWED}"
        )
    return cap


def _describe_array(x: object) -> str:
    if isinstance(x, jax.core.Tracer):
        aval = x.aval
        return f"a traced array of shape {tuple(aval.shape)} and dtype {aval.dtype}"
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return f"an array of shape {tuple(shape)} and dtype {np.dtype(dtype).name}"
    return f"{type(x).__name__} {x!r}"


def _as_array(name: str, x: object, allowed: str) -> jax.Array:
    """x as a jax array (Python lists and NumPy arrays are converted); raises TypeError."""
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        return jnp.asarray(x)
    if isinstance(x, (list, tuple)):
        try:
            return jnp.asarray(x)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"{name} must be an array; got {_describe_array(x)}. Allowed: {allowed}"
            ) from err
    raise TypeError(f"{name} must be an array; got {_describe_array(x)}. Allowed: {allowed}")


def _check_int_array(name: str, x: object, shape: tuple[int, ...], what: str) -> jax.Array:
    """x checked to be an integer array of `shape` ([batch] or [batch, seq]), not yet cast."""
    allowed = f"an integer array (int32, or another integer dtype cast to int32) of shape {what}"
    arr = _as_array(name, x, allowed)
    dtype = np.dtype(arr.dtype)
    if dtype == np.bool_ or dtype.kind not in "iu":
        raise ValueError(
            f"{name} must have an integer dtype; got {_describe_array(arr)}. Allowed: {allowed}"
        )
    if tuple(arr.shape) != shape:
        raise ValueError(
            f"{name} must have shape {what} = {shape}; got {_describe_array(arr)}. "
            f"Allowed: {allowed}"
        )
    return arr


def _host_wide_ints(x: object) -> np.ndarray | None:
    """x's values on the host when x is an integer array known at trace time (NumPy values,
    lists, concrete arrays) of a type wider than int32, else None (tracers, int32 and narrower
    types, which are not copied to the host, and anything that is no integer array: its checks
    come later and name it). With 64-bit types off, jnp.asarray would wrap such values into
    int32 before any check or clamp could see them."""
    if isinstance(x, jax.core.Tracer) or not isinstance(
        x, (np.ndarray, np.generic, list, tuple, jax.Array)
    ):
        return None

    def fits(dtype: np.dtype) -> bool:  # not an integer type, or one int32 holds
        return dtype == np.bool_ or dtype.kind not in "iu" or np.can_cast(dtype, np.int32)

    if hasattr(x, "dtype") and fits(np.dtype(x.dtype)):
        return None
    try:
        host = np.asarray(x)
    except (TypeError, ValueError):  # a list holding tracers (TracerArrayConversionError)
        return None
    return None if fits(host.dtype) else host


def check_seq_lengths(name: str, lengths: object, batch: int, seq: int) -> jax.Array | None:
    """``query_seq_lengths`` / ``key_value_seq_lengths``: None, or an integer array ``[batch]``,
    returned as int32 whose values the kernels (and the ring's block arithmetic) clamp to
    ``[0, seq]``: an int32 array passes through untouched, so a decode step whose cache lengths
    are an argument runs no XLA op before the kernel; other integer dtypes are clamped before
    the cast (values known on the host, there), so that a huge int64 length cannot wrap around."""
    if lengths is None:
        return None
    host = _host_wide_ints(lengths)
    # Only a valid array: a bad one reaches the checks below as given, and its error names it.
    if host is not None and host.shape == (batch,):
        lengths = np.clip(host, 0, seq).astype(np.int32)
    arr = _check_int_array(name, lengths, (batch,), "[batch]")
    if np.dtype(arr.dtype) == np.int32:
        return arr
    return jnp.clip(arr, 0, seq).astype(jnp.int32)


_INT32 = np.iinfo(np.int32)


def _ids_in_int32(name: str, x: object) -> object:
    """Segment ids known on the host of an integer type wider than int32 (_host_wide_ints):
    their values checked to fit int32 and cast there, since a cast would wrap an id past the
    range onto another one (2**32 would match 0). Anything else is returned as given: traced
    ids of a wider type are cast as documented (their values must fit)."""
    host = _host_wide_ints(x)
    if host is None or host.size == 0:
        return x
    lo, hi = host.min(), host.max()
    if lo < _INT32.min or hi > _INT32.max:
        raise ValueError(
            f"{name} must hold values that fit int32 ({_INT32.min}..{_INT32.max}), since the "
            f"kernels compare ids as int32; got {host.dtype} values from {lo} to {hi}. Renumber "
            "the documents (only equality between a query's and a key's id matters)"
        )
    return host.astype(np.int32)


def check_segment_ids(
    segment_ids: object, batch: int, seq_q: int, seq_k: int
) -> tuple[jax.Array, jax.Array] | None:
    """``segment_ids``: None, an integer array ``[batch, seq]`` (needs ``seq_q == seq_k``) or a
    pair ``(q_ids [batch, seq_q], kv_ids [batch, seq_k])``; returns (q_ids, kv_ids) as int32
    (other integer dtypes are cast: their values must fit in int32, which is checked wherever
    the values are known at trace time)."""
    if segment_ids is None:
        return None
    if isinstance(segment_ids, (tuple, list)):  # a pair (a nested list is not an array here)
        if len(segment_ids) != 2:
            raise ValueError(
                f"segment_ids must be one array [batch, seq] or a pair (q_segment_ids, "
                f"kv_segment_ids); got a {type(segment_ids).__name__} of {len(segment_ids)} "
                "entries"
            )
        try:
            q_ids = _check_int_array(
                "q_segment_ids",
                _ids_in_int32("q_segment_ids", segment_ids[0]),
                (batch, seq_q),
                "[batch, seq_q]",
            )
            kv_ids = _check_int_array(
                "kv_segment_ids",
                _ids_in_int32("kv_segment_ids", segment_ids[1]),
                (batch, seq_k),
                "[batch, seq_k]",
            )
        except (TypeError, ValueError) as err:
            if np.ndim(segment_ids[0]) == 1 and np.ndim(segment_ids[1]) == 1:
                # Two rows of ids look like a batch of 2 written as a list of rows.
                raise type(err)(
                    f"{err}. (A {type(segment_ids).__name__} of two entries is read as the pair "
                    "(q_segment_ids, kv_segment_ids); pass per-row ids as one array [batch, seq], "
                    "e.g. np.asarray(rows))"
                ) from err
            raise
        return q_ids.astype(jnp.int32), kv_ids.astype(jnp.int32)
    if seq_q != seq_k:
        raise ValueError(
            f"segment_ids as one array needs seq_q == seq_k; got seq_q {seq_q}, seq_k {seq_k}. "
            "Pass a pair (q_segment_ids [batch, seq_q], kv_segment_ids [batch, seq_k]) instead"
        )
    ids = _check_int_array(
        "segment_ids", _ids_in_int32("segment_ids", segment_ids), (batch, seq_q), "[batch, seq]"
    )
    ids = ids.astype(jnp.int32)
    return ids, ids


def check_sinks(sinks: object, heads_q: int) -> jax.Array | None:
    """``sinks``: None, or a floating-point array ``[heads_q]`` (returned unchanged: its
    gradient comes back in its dtype)."""
    if sinks is None:
        return None
    allowed = f"a floating-point array of shape [heads_q] = ({heads_q},)"
    arr = _as_array("sinks", sinks, allowed)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        raise ValueError(
            f"sinks must be floating-point; got {_describe_array(arr)}. Allowed: {allowed}"
        )
    if tuple(arr.shape) != (heads_q,):
        raise ValueError(
            f"sinks must have shape [heads_q]; got {_describe_array(arr)}. Allowed: {allowed}"
        )
    return arr
