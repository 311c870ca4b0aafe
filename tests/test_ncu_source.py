"""benchmarks/ncu_source.py reads Nsight Compute's source-page CSV (a kernel-name row, then a header
row starting with "Address", one row per SASS instruction) and reports where the samples are:
reasons over all samples, opcodes, shared-memory wavefronts with their excess, the instructions
with the most samples, a loop's share by address range; a file without the header is refused."""

from __future__ import annotations

import pathlib

from script_module import load_script

ncu_source = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "ncu_source.py"
)

HEADER = (
    '"Address","Source","Warp Stall Sampling (All Samples)","L1 Wavefronts Shared",'
    '"L1 Wavefronts Shared Ideal","L1 Wavefronts Shared Excessive","stall_barrier",'
    '"stall_short_sb","stall_barrier (Not Issued)"\n'
)


def write(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "src.csv"
    path.write_text(
        '"Kernel Name","void bwd_kernel<...>(...)"\n'
        + HEADER
        + '"0x7f0000000100","LDS.64 R10, [R233+0x30040]","10","4,096","2,048","2,048","0","0","0"\n'
        + '"0x7f0000000110","FFMA R192, R192, UR13, -R10","600","0","0","0","0","600","0"\n'
        + '"0x7f0000000120","@!P0  BRA 0x7f0000000100","90","0","0","0","90","0","45"\n'
        + '"0x7f0000000200","BAR.SYNC.DEFER_BLOCKING 0x1, 0x100",'
        + '"300","0","0","0","300","0","300"\n'
    )
    return path


def test_reasons_opcodes_conflicts_and_top(tmp_path, capsys):
    assert ncu_source.main([str(write(tmp_path)), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "4 instructions, 1000 samples" in out
    # Reasons over all samples, largest first; the not-issued column is not a reason of its own.
    assert "stall reasons, % of samples: short_sb 60.0, barrier 39.0" in out
    assert "barrier (Not Issued)" not in out
    # The predicate and modifiers are not part of the opcode.
    assert "FFMA 60.0" in out and "BRA 9.0" in out and "BAR 30.0" in out
    # The LDS's bank conflicts show as wavefronts over the ideal.
    assert "LDS" in out and "4096           2048           2048" in out
    top = out.split("the 2 instructions with the most samples:")[1]
    assert top.index("FFMA") < top.index("BAR.SYNC") and "LDS.64" not in top
    assert "short_sb 100%" in top


def test_range_is_the_loop(tmp_path, capsys):
    assert (
        ncu_source.main([str(write(tmp_path)), "--range", "0x7f0000000100", "0x7f0000000120"]) == 0
    )
    out = capsys.readouterr().out
    assert "3 instructions, 70.0% of the samples" in out
    assert "00110 60.00%" in out


def test_not_a_source_page(tmp_path, capsys):
    path = tmp_path / "raw.csv"
    path.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","1"\n')
    assert ncu_source.main([str(path)]) == 2
    assert "no header row" in capsys.readouterr().err
