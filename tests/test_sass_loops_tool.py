"""benchmarks/sass_loops.py: finding and counting a kernel's main loops in nvdisasm -c text."""

from __future__ import annotations

import pathlib

import pytest
from script_module import load_script

sass_loops = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "sass_loops.py"
)


def _loop(label: str, ffma: int, mufu: int, extra: tuple[str, ...] = ()) -> list[str]:
    """A loop body of `ffma` FFMA and `mufu` MUFU.EX2 ending in a branch back to `label`."""
    pad = "        /*0000*/                   "
    body = [f"{label}:"]
    body += [f"{pad}FFMA R{i % 200}, R1, R2, R3 ;" for i in range(ffma)]
    body += [f"{pad}WARPGROUP.DEPBAR.LE gsb0, 0x1 ;"]
    body += [f"{pad}MUFU.EX2 R{i % 200}, R4 ;" for i in range(mufu)]
    body += [f"{pad}WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"]
    body += [f"{pad}{x}" for x in extra]
    body += [f"        /*0000*/              @P0 BRA `({label}) ;"]
    return body


def _kernel(name: str, *loops: list[str]) -> list[str]:
    lines = [f".text.{name}:", "        /*0000*/                   MOV R1, c[0x0][0x28] ;"]
    for loop in loops:
        lines += loop
    return lines + ["        /*0000*/                   EXIT ;"]


@pytest.fixture
def sass_file(tmp_path: pathlib.Path) -> pathlib.Path:
    text = _kernel(
        "dense_kernel",
        _loop(".L_x_1", 300, 64, ("LDL R5, [R1] ;",)),
        _loop(".L_x_2", 200, 32),
        _loop(".L_x_3", 400, 8),  # too few MUFU: a spin or epilogue loop, not a main loop
    ) + _kernel("causal_kernel", _loop(".L_x_4", 500, 64))
    path = tmp_path / "k.sass"
    path.write_text("\n".join(text) + "\n")
    return path


def test_all_lists_every_main_loop_in_order(sass_file: pathlib.Path, capsys) -> None:
    assert sass_loops.main([str(sass_file), "--function", "dense", "--all"]) == 0
    rows = capsys.readouterr().out.strip().split("\n")
    assert len(rows) == 2
    assert rows[0].startswith("instructions 368, HGMMA 0, MUFU 64, MUFU before wait 0 64")
    assert rows[0].endswith("LDL/STL 1")
    assert rows[1].startswith("instructions 235, HGMMA 0, MUFU 32")


def test_innermost_is_the_shortest_main_loop(sass_file: pathlib.Path, capsys) -> None:
    assert sass_loops.main([str(sass_file), "--function", "dense"]) == 0
    assert capsys.readouterr().out.startswith("instructions 235,")
    assert sass_loops.main([str(sass_file), "--function", "causal"]) == 0
    assert capsys.readouterr().out.startswith("instructions 567,")


def test_no_main_loop_is_an_error(sass_file: pathlib.Path) -> None:
    with pytest.raises(SystemExit, match="no loop"):
        sass_loops.main([str(sass_file), "--function", "no_such_kernel"])
