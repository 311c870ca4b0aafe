"""benchmarks/bench_attention.py: the ratio column of its tables (what the README's tables copy)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_attention.py"
_spec = importlib.util.spec_from_file_location("bench_attention", _PATH)
assert _spec is not None and _spec.loader is not None
bench_attention = importlib.util.module_from_spec(_spec)
sys.modules["bench_attention"] = bench_attention
_spec.loader.exec_module(bench_attention)

fmt = bench_attention.format_ratio


def test_ratio_two_decimals_away_from_one() -> None:
    assert fmt(1.0627) == "1.06x"
    assert fmt(1.1829) == "1.18x"
    assert fmt(0.9412) == "**0.94x**"


def test_ratio_four_decimals_near_one_and_below_one_never_rounds_up() -> None:
    assert fmt(0.9984) == "**0.9984x**"  # two decimals would print 1.00x
    assert fmt(1.0036) == "1.0036x"
    assert fmt(1.0) == "1.0000x"
    assert fmt(0.99999) == "**0.999990x**"  # four decimals would print 1.0000x
    assert fmt(0.995) == "**0.9950x**"


def test_table_rows_and_ratio_column() -> None:
    recs = [
        {"impl": "jax_fa4", "head_dim": 128, "causal": False, "seq": 2048, "fwd_tflops": 558.0},
        {"impl": "cudnn", "head_dim": 128, "causal": False, "seq": 2048, "fwd_tflops": 558.9},
        {"impl": "jax_fa4", "head_dim": 64, "causal": True, "seq": 4096, "fwd_tflops": 418.0},
        {"impl": "cudnn", "head_dim": 64, "causal": True, "seq": 4096, "fwd_tflops": None},
    ]
    lines = bench_attention.table(recs, ["jax_fa4", "cudnn"], "fwd_tflops").splitlines()
    assert lines[0] == "| head dim | causal | seq | jax_fa4 | cudnn | jax_fa4/cudnn |"
    assert lines[2] == "| 64 | yes | 4096 | 418 | - | - |"  # a cell without cuDNN has no ratio
    assert lines[3] == "| 128 | no | 2048 | 558 | 559 | **0.9984x** |"
