"""benchmarks/ncu_summary.py reads Nsight Compute's raw CSV layout (messages, a header, a units
row, one row per kernel) and reports what it holds: durations by the units row, the kernels over
the threshold, stall reasons largest first, a file without the header refused."""

from __future__ import annotations

import pathlib

from script_module import load_script

ncu_summary = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "ncu_summary.py"
)

HEADER = (
    '"ID","Kernel Name","gpu__time_duration.sum",'
    '"smsp__issue_active.avg.pct_of_peak_sustained_active",'
    '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"\n'
)


def write(tmp_path: pathlib.Path, unit: str) -> pathlib.Path:
    path = tmp_path / f"report_{unit}.csv"
    path.write_text(
        "==PROF== Connected to process 1\n"
        + HEADER
        + f'"","","{unit}","%","ratio","ratio"\n'
        + '"0","bwd_preprocess","66,100","20.0","0.1","2.0"\n'
        + '"1","bwd_main","4,850,500","55.2","1.25","0.40"\n'
    )
    return path


def test_units_threshold_and_stall_order(tmp_path, capsys):
    assert ncu_summary.main([str(write(tmp_path, "nsecond")), "--min-us", "200"]) == 0
    out = capsys.readouterr().out
    assert "2 kernels profiled, 1 of at least 200 us" in out
    assert "bwd_main" in out and "bwd_preprocess" not in out
    assert "4,850.5 us" in out and "issue active 55.2%" in out
    assert "barrier 1.25, long_scoreboard 0.40" in out  # largest first
    rows, units = ncu_summary.read_report(str(write(tmp_path, "msecond")))
    assert ncu_summary.duration_us(rows[0], units) == 66_100_000.0


def test_not_a_report(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("no csv here\n")
    assert ncu_summary.main([str(bad)]) == 2
    assert "no ncu raw CSV header" in capsys.readouterr().err
