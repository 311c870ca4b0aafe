"""benchmarks/bench_variants.py runs a slow peer's cells (tokamax) after every other
implementation's cells of every round, and its slowest cells (windows) after its others, so a
timeout there, which ends the run, costs no other cell; the others still run round by round, cell
by cell, every implementation in turn."""

from __future__ import annotations

import pathlib

from script_module import load_script

bench_variants = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_variants.py"
)


def test_slow_peer_runs_last_and_every_pair_once_per_round():
    grid = bench_variants.cells(["dense_causal", "window1024", "softcap30", "packed8x2048"], 16384)
    impls = ["jax_fa4", "tokamax", "fa3", "cudnn"]
    order = bench_variants.run_order(grid, impls, rounds=2)
    assert sorted((r, c.variant, c.batch, i) for r, c, i in order) == sorted(
        (r, c.variant, c.batch, i) for r in range(2) for c in grid for i in impls
    )
    first_tokamax = next(k for k, (_, _, i) in enumerate(order) if i == "tokamax")
    assert all(i == "tokamax" for _, _, i in order[first_tokamax:])
    # tokamax: every round's non-window cells, then every round's window cells.
    assert [(r, c.variant) for r, c, i in order if i == "tokamax"] == [
        (0, "dense_causal"),
        (0, "softcap30"),
        (0, "packed8x2048"),
        (0, "dense_causal"),
        (1, "dense_causal"),
        (1, "softcap30"),
        (1, "packed8x2048"),
        (1, "dense_causal"),
        (0, "window1024"),
        (1, "window1024"),
    ]
    # The others: round by round, cell by cell, the given implementation order inside each cell.
    assert [(r, c.variant, i) for r, c, i in order[:6]] == [
        (0, "dense_causal", "jax_fa4"),
        (0, "dense_causal", "fa3"),
        (0, "dense_causal", "cudnn"),
        (0, "window1024", "jax_fa4"),
        (0, "window1024", "fa3"),
        (0, "window1024", "cudnn"),
    ]
    rounds = [r for r, _, _ in order[:first_tokamax]]
    assert rounds == sorted(rounds)


def test_without_a_slow_peer_the_order_is_cell_by_cell():
    grid = bench_variants.cells(["dense_causal", "sinks"], 2048)
    order = bench_variants.run_order(grid, ["jax_fa4", "fa4jax"])
    assert [(r, c.variant, i) for r, c, i in order] == [
        (0, "dense_causal", "jax_fa4"),
        (0, "dense_causal", "fa4jax"),
        (0, "sinks", "jax_fa4"),
        (0, "sinks", "fa4jax"),
    ]
