"""benchmarks/clock_probe.py: nvidia-smi line parsing and the window summary (GPU part: H200)."""

from __future__ import annotations

import pathlib

from script_module import load_script

clock_probe = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "clock_probe.py"
)


def test_parse_line_with_reasons() -> None:
    s = clock_probe.parse_smi_line("1755, 612.34, 61, 0x0000000000000004\n", 2.5)
    assert s is not None
    assert (s.t, s.sm_mhz, s.power_w, s.temp_c, s.reasons) == (
        2.5,
        1755.0,
        612.34,
        61.0,
        "0x0000000000000004",
    )


def test_parse_line_not_available_fields() -> None:
    s = clock_probe.parse_smi_line("1980, [N/A], 40, \n", 0.0)
    assert s is not None and s.sm_mhz == 1980.0 and s.power_w is None and s.reasons is None
    assert clock_probe.parse_smi_line("[N/A], [N/A], 40, 0x0\n", 0.0) is None  # nothing to report
    assert clock_probe.parse_smi_line("garbage\n", 0.0) is None


def test_summarize_window_medians_and_modal_reason() -> None:
    rows = [
        "1980, 300, 40, 0x0",  # t = 0: before the window
        "1700, 690, 60, 0x4",
        "1650, 700, 61, 0x4",
        "1600, 698, 62, 0x0",
        "1980, 100, 50, 0x0",  # t = 4: after the window
    ]
    samples = [clock_probe.parse_smi_line(r, float(t)) for t, r in enumerate(rows)]
    out = clock_probe.summarize([s for s in samples if s is not None], 1.0, 3.0)
    assert out == {
        "samples": 3,
        "sm_mhz": 1650.0,
        "power_w": 698.0,
        "temp_c": 61.0,
        "reasons": "0x4",
    }


def test_summarize_empty_window() -> None:
    out = clock_probe.summarize([], 0.0, 1.0)
    assert out["samples"] == 0 and out["sm_mhz"] is None and out["reasons"] is None
