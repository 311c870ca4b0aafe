"""benchmarks/bench_attention.py: the ratio column of its tables (what the README's tables copy)."""

from __future__ import annotations

import pathlib

from script_module import load_script

bench_attention = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_attention.py"
)

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


def test_cells_beyond_the_grid_parse_and_label_their_rows() -> None:
    cell = bench_attention.parse_cell("128,8192,2,32/8,causal")
    assert (cell.head_dim, cell.seq, cell.batch, cell.heads, cell.kv_heads) == (128, 8192, 2, 32, 8)
    assert cell.causal and cell.beyond
    mha = bench_attention.parse_cell("128, 3000, 5, 16, full")
    assert mha.kv_heads == 16 and mha.heads_kv == 0 and not mha.causal
    for bad in ("128,8192,2,32/5,causal", "128,8192,2,32", "128,8k,2,32,causal", "128,8192,2,32,x"):
        try:
            bench_attention.parse_cell(bad)
        except ValueError as e:
            assert repr(bad) in str(e)
        else:
            raise AssertionError(f"{bad!r} parsed")
    assert len({bench_attention.parse_cell(t) for t in bench_attention.BEYOND_GRID}) == 4


def test_best_peer_column_and_beyond_grid_labels() -> None:
    row = {"head_dim": 128, "causal": True, "seq": 8192, "batch": 2, "heads": 32, "heads_kv": 8}
    recs = [
        {**row, "beyond": True, "impl": "jax_fa4", "bwd_tflops": 470.0},
        {**row, "beyond": True, "impl": "cudnn", "bwd_tflops": 400.0},
        {**row, "beyond": True, "impl": "fa4jax", "bwd_tflops": 577.0},
        {"impl": "jax_fa4", "head_dim": 128, "causal": True, "seq": 2048, "bwd_tflops": 500.0},
        {"impl": "fa4jax", "head_dim": 128, "causal": True, "seq": 2048, "bwd_tflops": 500.0},
    ]
    impls = ["jax_fa4", "cudnn", "fa4jax"]
    lines = bench_attention.table(recs, impls, "bwd_tflops").splitlines()
    assert lines[0] == (
        "| head dim | causal | seq | jax_fa4 | cudnn | fa4jax | jax_fa4/cudnn | jax_fa4/best peer |"
    )
    assert lines[2] == "| 128 | yes | 2048 | 500 | - | 500 | - | 1.0000x |"
    assert lines[3] == (
        "| 128 | yes | 8192 (batch 2, heads 32/8) | 470 | 400 | 577 | 1.18x | **0.81x** |"
    )
