"""Per-call time, SM clock and board power of each implementation under sustained load (GPU only).

The benchmark (``bench_attention.py``) times a chain after 0.3 s of untimed runs; kernel-only
harness timings and ``profile_chain.py`` time it right after a pause. At seq 2048 the two disagree
by more for some kernels than for others (one H200 run: jax_fa4's head dim 64 causal forward
0.357 ms per call after a pause, 0.385 ms warm; cuDNN's 0.373 / 0.380). This tool runs one
implementation's forward chain back to back for ``--seconds`` while ``nvidia-smi`` samples the SM
clock, power draw, temperature and the active clock-event (throttle) reasons, and prints, per
implementation, the time per call in the first 50 ms and in the second half of the window beside
the median clock and power there. Implementations run in palindromic order (A B B A) with an idle
``--pause`` between runs.

Usage (GPU):
  python benchmarks/clock_probe.py --impls jax_fa4,cudnn --head-dim 64 --seq 2048 --causal
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Query fields, in the order of SMI_FIELDS; the reasons field was renamed in newer drivers.
SMI_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu")
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


@dataclass
class SmiSample:
    """One nvidia-smi line: host time (s), SM clock (MHz), power (W), temperature (C), reasons."""

    t: float
    sm_mhz: float | None
    power_w: float | None
    temp_c: float | None
    reasons: str | None


def _num(text: str) -> float | None:
    """A float from an nvidia-smi field, or None for '[N/A]', '[Not Supported]' and the like."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def parse_smi_line(line: str, t: float) -> SmiSample | None:
    """Parses one ``--format=csv,noheader,nounits`` line of SMI_FIELDS + one reasons field."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < len(SMI_FIELDS):
        return None
    sm, power, temp = (_num(p) for p in parts[: len(SMI_FIELDS)])
    if sm is None and power is None:
        return None
    reasons = parts[len(SMI_FIELDS)] if len(parts) > len(SMI_FIELDS) else None
    return SmiSample(t, sm, power, temp, reasons or None)


def summarize(
    samples: Sequence[SmiSample], t_from: float, t_to: float
) -> dict[str, float | str | None]:
    """Median clock, power, temperature and the modal reasons of samples in [t_from, t_to]."""
    window = [s for s in samples if t_from <= s.t <= t_to]

    def med(values: list[float | None]) -> float | None:
        vs = [v for v in values if v is not None]
        return statistics.median(vs) if vs else None

    reasons = [s.reasons for s in window if s.reasons]
    return {
        "samples": len(window),
        "sm_mhz": med([s.sm_mhz for s in window]),
        "power_w": med([s.power_w for s in window]),
        "temp_c": med([s.temp_c for s in window]),
        "reasons": max(set(reasons), key=reasons.count) if reasons else None,
    }


class SmiSampler:
    """nvidia-smi in loop mode (every period_ms) on a thread; lines stamped when they arrive."""

    def __init__(self, period_ms: int) -> None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise RuntimeError("nvidia-smi not found: this tool needs an NVIDIA GPU machine")
        self.samples: list[SmiSample] = []
        self.proc = None
        for reason in REASON_FIELDS:
            query = ",".join((*SMI_FIELDS, reason))
            probe = subprocess.run(
                [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if probe.returncode == 0:
                self.proc = subprocess.Popen(
                    [
                        exe,
                        f"--query-gpu={query}",
                        "--format=csv,noheader,nounits",
                        f"-lms={period_ms}",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                break
        if self.proc is None:
            raise RuntimeError(f"nvidia-smi rejected every reasons field of {REASON_FIELDS}")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            s = parse_smi_line(line, time.perf_counter())
            if s is not None:
                self.samples.append(s)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run_sustained(impl: str, cell, seconds: float, sampler: SmiSampler) -> dict[str, object]:
    """Runs impl's forward chain back to back for `seconds`; per-call times and SMI medians."""
    import bench_attention as ba
    import jax

    attn = ba.make_impl(impl, cell.causal, cell.head_dim)
    flops = ba.fwd_flops(cell.batch, cell.heads, cell.seq, cell.head_dim, cell.causal)
    n = ba.chain_length(flops, 2e12)
    q, k, v, _ = ba.make_inputs(cell, jax.numpy.bfloat16)
    f = ba.compile_fn(ba.fwd_chain(attn, n), (q, k, v))
    jax.block_until_ready(f(q, k, v))
    chains: list[tuple[float, float]] = []  # (start, duration) per chain
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ts = time.perf_counter()
        jax.block_until_ready(f(q, k, v))
        chains.append((ts, time.perf_counter() - ts))
    t_end = time.perf_counter()
    first = [d for ts, d in chains if ts - t0 < 0.05] or [chains[0][1]]
    late = [d for ts, d in chains if ts - t0 >= seconds / 2] or [chains[-1][1]]
    per_call_first = statistics.median(first) / n
    per_call_late = statistics.median(late) / n
    return {
        "impl": impl,
        "chain": n,
        "chains": len(chains),
        "first_ms_per_call": per_call_first * 1e3,
        "late_ms_per_call": per_call_late * 1e3,
        "first_tflops": flops / per_call_first / 1e12,
        "late_tflops": flops / per_call_late / 1e12,
        "first_smi": summarize(sampler.samples, t0, t0 + 0.1),
        "late_smi": summarize(sampler.samples, t0 + seconds / 2, t_end),
    }


def _describe(ms: float, tflops: float, smi: dict) -> str:
    """'0.357 ms (385 TF/s, 1755 MHz, 612 W, 61 C, reasons 0x4)' for one phase of a run."""
    return (
        f"{ms:.3f} ms ({tflops:.0f} TF/s, {smi['sm_mhz']} MHz, {smi['power_w']} W, "
        f"{smi['temp_c']} C, reasons {smi['reasons']})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Probes every implementation in palindromic order; one line per run (and --out JSON)."""
    import bench_attention as ba

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ba.add_cell_arguments(p)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--pause", type=float, default=2.0, help="idle seconds before each run")
    p.add_argument("--period-ms", type=int, default=50)
    p.add_argument("--out", default=None, help="JSON output path")
    args = p.parse_args(argv)
    if args.seconds <= 0.2 or args.pause < 0 or args.period_ms < 10:
        print(
            f"bad timing arguments: --seconds {args.seconds} (> 0.2), --pause {args.pause} (>= 0), "
            f"--period-ms {args.period_ms} (>= 10)",
            file=sys.stderr,
        )
        return 2

    impls = [s for s in args.impls.split(",") if s]
    unknown = [i for i in impls if i not in ba.ALL_IMPLS]
    if unknown:
        print(f"unknown --impls {unknown}; allowed: {list(ba.ALL_IMPLS)}", file=sys.stderr)
        return 2
    cell = ba.grid([args.head_dim], [args.seq], [args.causal], 16384, 2048)[0]
    sampler = SmiSampler(args.period_ms)
    results = []
    try:
        for impl in impls + impls[::-1]:
            time.sleep(args.pause)
            r = run_sustained(impl, cell, args.seconds, sampler)
            results.append(r)
            first = _describe(r["first_ms_per_call"], r["first_tflops"], r["first_smi"])
            late = _describe(r["late_ms_per_call"], r["late_tflops"], r["late_smi"])
            head = f"{impl:8s} hd{cell.head_dim} seq {cell.seq} causal {cell.causal}"
            print(f"{head}: first {first} | late {late}", flush=True)
    finally:
        sampler.stop()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
