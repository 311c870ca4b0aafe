"""benchmarks/bench_variants.py runs a slow peer's cells (tokamax) after every other
implementation's in each round, so a timeout there, which ends the run, costs no other cell; the
others still run cell by cell, every implementation in turn."""

from __future__ import annotations

import pathlib

from script_module import load_script

bench_variants = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_variants.py"
)


def test_slow_peer_runs_last_and_every_pair_once():
    grid = bench_variants.cells(["dense_causal", "window1024", "packed8x2048"], 16384)
    impls = ["jax_fa4", "tokamax", "fa3", "cudnn"]
    order = bench_variants.run_order(grid, impls)
    assert sorted((c.variant, c.batch, i) for c, i in order) == sorted(
        (c.variant, c.batch, i) for c in grid for i in impls
    )
    first_tokamax = next(k for k, (_, i) in enumerate(order) if i == "tokamax")
    assert all(i == "tokamax" for _, i in order[first_tokamax:])
    assert [c.variant for c, i in order if i == "tokamax"] == [c.variant for c in grid]
    # The others: cell by cell, the given implementation order inside each cell.
    assert [(c.variant, i) for c, i in order[:6]] == [
        ("dense_causal", "jax_fa4"),
        ("dense_causal", "fa3"),
        ("dense_causal", "cudnn"),
        ("window1024", "jax_fa4"),
        ("window1024", "fa3"),
        ("window1024", "cudnn"),
    ]


def test_without_a_slow_peer_the_order_is_cell_by_cell():
    grid = bench_variants.cells(["dense_causal", "sinks"], 2048)
    order = bench_variants.run_order(grid, ["jax_fa4", "fa4jax"])
    assert [(c.variant, i) for c, i in order] == [
        ("dense_causal", "jax_fa4"),
        ("dense_causal", "fa4jax"),
        ("sinks", "jax_fa4"),
        ("sinks", "fa4jax"),
    ]
