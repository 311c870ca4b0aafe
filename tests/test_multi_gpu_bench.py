"""benchmarks/multi_gpu.py on 8 CPU devices: every variant runs in every mode on every device
count, its o, lse and gradients match one device, and the window variant's ring skips steps."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest
from script_module import load_script

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "multi_gpu.py"
multi_gpu = load_script(BENCH, "multi_gpu_bench")

MODES = {"dp": ("data-parallel",), "ring": ("ring-shard_map", "ring-jit")}
FIELDS = (
    "mode",
    "variant",
    "seq",
    "heads",
    "heads_kv",
    "causal",
    "window",
    "devices",
    "fwd_ms",
    "bwd_ms",
    "speedup_fwd",
    "speedup_bwd",
    "max_abs_err",
)


def run_bench(tmp_path, *args: str) -> dict:
    out = tmp_path / "multi_gpu.json"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # conftest's 8 host devices
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--cpu-devices", "8", "--json", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    result = json.loads(out.read_text())
    assert result["devices"] == 8 and result["date"]
    return result


def check_records(result: dict, variants, counts) -> dict:
    """Every (variant, mode, device count) recorded: ok with o, lse, dq, dk, dv compared, or
    refused by the library with the reason in a note; one reference per problem. Returns the
    records by (variant, causal, mode, devices)."""
    records = result["records"]
    for r in records:
        missing = [f for f in FIELDS if f not in r]
        assert not missing, (missing, r)
    refs = [r for r in records if r["mode"] == "one-device"]
    assert all(r["devices"] == 1 and r["fwd_ms"] and r["bwd_ms"] for r in refs), refs
    keys = [(r["variant"], r["kind"], r["causal"]) for r in refs]
    assert len(keys) == len(set(keys)), "one reference per problem"
    assert {v for v, _, _ in keys} == set(variants)
    by_key = {}
    for variant, kind, causal in keys:
        for n in counts:
            for mode in MODES[kind]:
                found = [
                    r
                    for r in records
                    if (r["variant"], r["kind"], r["causal"], r["mode"], r["devices"])
                    == (variant, kind, causal, mode, n)
                ]
                assert len(found) == 1, (variant, kind, causal, mode, n, len(found))
                r = found[0]
                if r["ok"] is None:  # refused: the reason is recorded
                    assert any("unsupported by jax_fa4" in note for note in r["notes"]), r
                    continue
                assert r["ok"] is True, r
                assert set(r["max_abs_err"]) == {"o", "lse", "dq", "dk", "dv"}, r
                assert all(r["max_abs_err"][q] <= r["tol"][q] for q in r["tol"]), r
                assert r["fwd_ms"] > 0 and r["speedup_fwd"] > 0, r
                by_key[(variant, causal, mode, n)] = r
    for r in records:
        if r["variant"] == "gqa":
            assert r["heads_kv"] == max(1, r["heads"] // 4), r
        elif r["variant"] == "window":
            assert r["window"] is not None and r["causal"], r
        elif r["variant"] == "segments":
            assert r["docs"] and r["causal"], r
    return by_key


def check_window_ring(by_key: dict, n: int) -> None:
    """The window's ring ran over the sequence and skipped the steps it cannot see."""
    r = by_key[("window", True, "ring-shard_map", n)]
    assert r["hlo"]["collective_permutes"] > 0, r
    assert r["window"] < r["seq"] // n, "the window is shorter than a device's chunk"
    # (W, 0) with W < chunk: each device sees its own block and the one before it, no others.
    assert r["hlo"]["fwd_kernel_calls"] <= 2, r
    assert n == 2 or r["hlo"]["fwd_kernel_calls"] < n, r
    jit = by_key[("window", True, "ring-jit", n)]
    assert jit["hlo"]["collective_permutes"] > 0 or any("no ring" in x for x in jit["notes"])


def test_device_counts_and_problems():
    assert multi_gpu._device_counts(None, 8) == [2, 4, 8]
    assert multi_gpu._device_counts(None, 6) == [2, 4, 6]
    assert multi_gpu._device_counts(None, 1) == [1]
    assert multi_gpu._device_counts("8,2", 8) == [2, 8]
    args = multi_gpu._parse_args(["--docs", "3"])
    probs = multi_gpu.problems(args, True, [2, 4, 6])
    assert {p.variant for p in probs} == set(multi_gpu.VARIANTS)
    for p in probs:  # fixed across the counts: every count splits batch / zig-zag sequence
        if p.kind == "dp":
            assert all(p.batch % n == 0 for n in (2, 4, 6)), p
        else:
            assert p.batch == 1 and all(p.seq % (2 * n) == 0 for n in (2, 4, 6)), p
        if p.variant == "segments":
            ids = p.segment_ids()
            assert ids.shape == (p.batch, p.seq) and ids.dtype.name == "int32"
            lengths = [int((ids[0] == d).sum()) for d in range(3)]
            assert max(lengths) - min(lengths) <= 1 and sum(lengths) == p.seq
        if p.variant == "window":  # query i sees keys max(0, i - W) .. i
            s, w = p.seq, p.window
            assert p.visible_pairs() == sum(min(i, w) + 1 for i in range(s))


def test_a_refused_combination_is_a_note(monkeypatch):
    """A ValueError of the library while tracing a mode is recorded (ok None, the reason in a
    note), not raised; the other modes still run and match."""

    def refusing(prob, data, devices, rec):
        setup = multi_gpu._setup_ring_jit(prob, data, devices, rec)

        def attn(*args):
            raise ValueError("local_window_size: not with this layout")

        return multi_gpu.Setup(attn, setup.args, setup.extra, setup.ct)

    monkeypatch.setitem(multi_gpu.SETUPS, "ring-jit", refusing)
    prob = multi_gpu.Problem("ring", "window", 1, 128, 2, 2, 16, "float32", True, window=20)
    records = multi_gpu.run_problem(prob, jax.devices(), [4], multi_gpu.Config(1, 1, True))
    by_mode = {r.mode: r for r in records}
    assert by_mode["ring-shard_map"].ok is True
    refused = by_mode["ring-jit"]
    assert refused.ok is None and refused.fwd_ms is None
    assert any("unsupported by jax_fa4: ValueError: local_window_size" in n for n in refused.notes)


def test_window_ring_on_2_and_8_devices(tmp_path):
    result = run_bench(tmp_path, "--variants", "window", "--device-counts", "2,8", "--repeats", "1")
    by_key = check_records(result, ["window"], [2, 8])
    check_window_ring(by_key, 2)
    check_window_ring(by_key, 8)


@pytest.mark.slow
def test_default_cpu_run(tmp_path):
    """The whole default CPU smoke run: all variants, device counts 2, 4 and 8."""
    result = run_bench(tmp_path, "--repeats", "1")
    assert result["device_counts"] == [2, 4, 8]
    by_key = check_records(result, multi_gpu.VARIANTS, [2, 4, 8])
    for n in (2, 4, 8):
        check_window_ring(by_key, n)
        # a plain causal ring computes every step
        dense = by_key[("dense", True, "ring-shard_map", n)]
        assert dense["hlo"]["fwd_kernel_calls"] == n, dense
