"""How a jax_fa4/cuDNN ratio is written (bench_attention's tables, notebook 03). No jax import."""

from __future__ import annotations


def ratio_text(r: float) -> str:
    """r with two decimals, four within 0.005 of 1.0 (where two would print 0.998 as "1.00"), and
    more where a ratio below 1.0 would still round up to 1."""
    digits = 4 if 0.995 <= r < 1.005 else 2
    text = f"{r:.{digits}f}"
    while r < 1.0 and float(text) >= 1.0:
        digits += 2
        text = f"{r:.{digits}f}"
    return text
