"""Every bad variant argument raises at trace time, naming the argument, what was given and
what is allowed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerance import random_qkv

import jax_fa4

B, SQ, SK, HQ, HKV, D = 2, 8, 12, 4, 2, 32


def _qkv(sk=SK):
    return random_qkv(jax.random.key(0), B, SQ, sk, HQ, HKV, D, D, jnp.float32)


def _raises(exc, match, sk=SK, **kwargs):
    q, k, v = _qkv(sk)
    with pytest.raises(exc, match=match):
        jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, **kwargs)).trace(q, k, v)


@pytest.mark.parametrize(
    "window, match",
    [
        (-1, r"local_window_size's left and right bound must be non-negative; got -1"),
        ((3, -2), r"local_window_size's right bound must be non-negative; got -2"),
        ((-4, None), r"local_window_size's left bound must be non-negative; got -4"),
        (2.5, r"left and right bound must be a non-negative int or None; got float 2.5"),
        ((1, 2.0), r"right bound must be a non-negative int or None; got float 2.0"),
        ((1, 2, 3), r"an int or a pair \(left, right\); got a tuple of 3 entries \(1, 2, 3\)"),
        ((4,), r"got a tuple of 1 entries"),
        (True, r"must be a non-negative int or None; got bool True"),
        ("8", r"got str '8'"),
        (np.array([3, 4]), r"an int or a pair \(left, right\); got a numpy array of shape \(2,\)"),
    ],
    ids=lambda x: repr(x) if not isinstance(x, str) else None,
)
def test_bad_window(window, match):
    _raises(ValueError, match + ".*Allowed: None \\(no window\\)", local_window_size=window)


def test_window_numpy_int_is_taken():
    q, k, v = _qkv()
    a = jax_fa4.attention(q, k, v, local_window_size=(np.int64(3), np.int32(1)))
    b = jax_fa4.attention(q, k, v, local_window_size=(3, 1))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_traced_static_arguments():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"right bound must be a static Python int, not a traced"):
        jax.jit(lambda q, w: jax_fa4.attention(q, k, v, local_window_size=(2, w))).trace(q, 3)
    with pytest.raises(ValueError, match=r"left and right bound must be a static Python int"):
        jax.jit(lambda q, w: jax_fa4.attention(q, k, v, local_window_size=w)).trace(q, 3)
    with pytest.raises(ValueError, match=r"logits_soft_cap must be a static Python float, not a"):
        jax.jit(lambda q, c: jax_fa4.attention(q, k, v, logits_soft_cap=c)).trace(q, 30.0)


@pytest.mark.parametrize(
    "cap, match",
    [
        (0.0, r"logits_soft_cap must be positive and finite; got 0.0"),
        (-3.0, r"positive and finite; got -3.0"),
        (float("inf"), r"positive and finite; got inf"),
        (float("nan"), r"positive and finite; got nan"),
        (True, r"logits_soft_cap must be a positive finite real number; got bool True"),
        ("30", r"got str '30'"),
        (np.array([30.0]), r"a positive finite real scalar; got a numpy array of shape \(1,\)"),
    ],
    ids=repr,
)
def test_bad_soft_cap(cap, match):
    _raises(ValueError, match + ".*Allowed: None or a static positive", logits_soft_cap=cap)


def test_soft_cap_concrete_scalars_are_taken():
    q, k, v = _qkv()
    want = np.asarray(jax_fa4.attention(q, k, v, logits_soft_cap=30.0))
    for cap in (30, np.float32(30.0), jnp.asarray(30.0), np.asarray(30.0)):
        np.testing.assert_array_equal(
            np.asarray(jax_fa4.attention(q, k, v, logits_soft_cap=cap)), want
        )


@pytest.mark.parametrize(
    "sinks, exc, match",
    [
        (
            jnp.zeros((HQ + 1,)),
            ValueError,
            r"sinks must have shape \[heads_q\]; got an array of shape \(5,\)",
        ),
        (jnp.zeros((B, HQ)), ValueError, r"shape \[heads_q\]; got an array of shape \(2, 4\)"),
        (
            jnp.zeros((HQ,), jnp.int32),
            ValueError,
            r"sinks must be floating-point; got an array of shape \(4,\) and dtype int32",
        ),
        (jnp.zeros((HQ,), bool), ValueError, r"floating-point; got .* dtype bool"),
        ("sinks", TypeError, r"sinks must be an array; got str 'sinks'"),
    ],
    ids=["heads+1", "batch_heads", "int", "bool", "str"],
)
def test_bad_sinks(sinks, exc, match):
    _raises(
        exc, match + r".*Allowed: a floating-point array of shape \[heads_q\] = \(4,\)", sinks=sinks
    )


@pytest.mark.parametrize("name", ["query_seq_lengths", "key_value_seq_lengths"])
@pytest.mark.parametrize(
    "lengths, match",
    [
        (
            jnp.ones((B + 1,), jnp.int32),
            r"must have shape \[batch\] = \(2,\); got an array of shape \(3,\)",
        ),
        (jnp.ones((B, 1), jnp.int32), r"shape \[batch\] = \(2,\); got an array of shape \(2, 1\)"),
        (jnp.ones((), jnp.int32), r"shape \[batch\] = \(2,\); got an array of shape \(\)"),
        (
            jnp.ones((B,), jnp.float32),
            r"must have an integer dtype; got an array of shape \(2,\) and dtype float32",
        ),
        (jnp.ones((B,), bool), r"integer dtype; got .* dtype bool"),
    ],
    ids=["batch+1", "rank2", "scalar", "float", "bool"],
)
def test_bad_lengths(name, lengths, match):
    _raises(ValueError, name + " .*" + match + r".*Allowed: an integer array", **{name: lengths})


def test_lengths_not_an_array():
    _raises(TypeError, r"query_seq_lengths must be an array; got int 3", query_seq_lengths=3)
    # A Python list is converted.
    q, k, v = _qkv()
    a = jax_fa4.attention(q, k, v, query_seq_lengths=[3, 5])
    b = jax_fa4.attention(q, k, v, query_seq_lengths=jnp.array([3, 5]))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_segment_ids():
    ids_q = jnp.zeros((B, SQ), jnp.int32)
    ids_k = jnp.zeros((B, SK), jnp.int32)
    _raises(
        ValueError,
        r"segment_ids as one array needs seq_q == seq_k; got seq_q 8, seq_k 12. Pass a pair",
        segment_ids=ids_q,
    )
    _raises(
        ValueError,
        r"segment_ids must have shape \[batch, seq\] = \(2, 8\); got an array of shape \(2, 9\)",
        sk=SQ,
        segment_ids=jnp.zeros((B, SQ + 1), jnp.int32),
    )
    _raises(
        ValueError,
        r"kv_segment_ids must have shape \[batch, seq_k\] = \(2, 12\); got an array of shape "
        r"\(2, 8\)",
        segment_ids=(ids_q, ids_q),
    )
    _raises(
        ValueError,
        r"q_segment_ids must have shape \[batch, seq_q\] = \(2, 8\); got an array of shape \(8,\)",
        segment_ids=(ids_q[0], ids_k),
    )
    _raises(
        ValueError,
        r"q_segment_ids must have an integer dtype; got an array of shape \(2, 8\) and dtype "
        r"float32",
        segment_ids=(ids_q.astype(jnp.float32), ids_k),
    )
    _raises(
        ValueError,
        r"segment_ids must have an integer dtype; got .* dtype bool",
        sk=SQ,
        segment_ids=jnp.zeros((B, SQ), bool),
    )
    _raises(
        ValueError,
        r"segment_ids must be one array \[batch, seq\] or a pair .*; got a tuple of 3 entries",
        segment_ids=(ids_q, ids_k, ids_k),
    )
    _raises(
        TypeError, r"kv_segment_ids must be an array; got NoneType None", segment_ids=(ids_q, None)
    )


def test_segment_ids_past_int32_are_an_error_not_a_wrap():
    """Host ids of a wider integer type are checked to fit int32 before the cast: 2**32 would
    otherwise wrap onto 0 and match a key whose id is 0."""
    ids_q = np.full((B, SQ), 2**32, np.int64)
    ids_k = np.zeros((B, SK), np.int64)
    _raises(
        ValueError,
        r"q_segment_ids must hold values that fit int32 \(-2147483648..2147483647\).*got int64 "
        r"values from 4294967296 to 4294967296",
        segment_ids=(ids_q, ids_k),
    )
    _raises(
        ValueError,
        r"kv_segment_ids must hold values that fit int32.*got uint32 values from 2147483648 to "
        r"2147483648",
        segment_ids=(np.zeros((B, SQ), np.int32), np.full((B, SK), 2**31, np.uint32)),
    )
    _raises(
        ValueError,
        r"^segment_ids must hold values that fit int32.*got uint64 values from 0 to "
        r"18446744073709551615",
        sk=SQ,
        segment_ids=np.array([[0] * (SQ - 1) + [2**64 - 1]] * B, np.uint64),
    )
    # Wide types whose values fit are cast exactly: the same result as int32 ids.
    q, k, v = _qkv(SQ)
    ids = np.array([[0, 0, 0, 5, 5, 7, 7, 7], [1, 1, 2, 2, 2, 2, 3, 3]])
    want = jax_fa4.attention(q, k, v, causal=True, segment_ids=ids.astype(np.int32))
    for dtype in (np.int64, np.uint32, np.uint64):
        got = jax_fa4.attention(q, k, v, causal=True, segment_ids=ids.astype(dtype))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_segment_ids_rows_as_a_list_say_how_they_were_read():
    """A list of two rows (a batch of 2 written as nested lists) is read as the pair (q_ids,
    kv_ids): the shape error says so and how to pass rows."""
    rows = [[0] * SQ, [1] * SQ]
    _raises(
        ValueError,
        r"q_segment_ids must have shape \[batch, seq_q\] = \(2, 8\); got .* shape \(8,\).*A list "
        r"of two entries is read as the pair \(q_segment_ids, kv_segment_ids\); pass per-row ids "
        r"as one array \[batch, seq\]",
        sk=SQ,
        segment_ids=rows,
    )
