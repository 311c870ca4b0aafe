"""benchmarks/palindrome.py: the harness timing rows averaged per variant."""

from __future__ import annotations

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "palindrome.py"
_spec = importlib.util.spec_from_file_location("palindrome", _PATH)
assert _spec is not None and _spec.loader is not None
palindrome = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(palindrome)

_FWD_ROWS = """
   64     yes   2048      8      12     0.3928     349.9     352.0
      v14 phases (% of a warpgroup's span; 44589 cycles per tile): Q wait 1.8
   64     yes   2048      8      16     0.3696     372.0     377.6
   64     yes   2048      8      16     0.3692     372.2     377.8
   64     yes   2048      8      12     0.4076     337.1     343.4
"""
_BWD_ROWS = """
  128      no   2048      8      51     5     1.4345     479.0
  128      no   2048      8      59     5     1.4041     489.4
"""


def test_forward_rows_average_per_variant_relative_to_the_first() -> None:
    cells = palindrome.parse(_FWD_ROWS.splitlines())
    assert list(cells) == [(64, "yes", 2048, "")]
    assert cells[(64, "yes", 2048, "")]["V12"] == [349.9, 337.1]
    (line,) = palindrome.report(cells)
    assert "V12 343.5" in line and "V16 372.1" in line and "+8.3%" in line


def test_backward_rows_keep_their_launch_options() -> None:
    (line,) = palindrome.report(palindrome.parse(_BWD_ROWS.splitlines()))
    assert "opts 5" in line and "V59 489.4 +2.2%" in line
