"""Host model of the forward kernel's online softmax (cuda/hopper/fwd_softmax.cuh OnlineSoftmax).

Replays OnlineSoftmax::update / finalize and the consumer's O update (fwd_kernel.cuh: O += P V,
then O *= o_scale unless the warp's vote says no row moved its max) in float32 for one row at a
time, with the fwd v5 options: CondRescale (stale max up to 2^8, kRescaleThresholdLog2) and
Exp2EmuEighths (element k of a row's block uses exp2_poly when (k * E) % 8 < E; the model of
exp2_poly is tests/gpu/cuda/exp2_poly_check.py's). Key blocks run from the last to the first, as in
the kernel; masked scores are -inf. P is rounded to bf16 before the PV product, as the kernel packs
it. Compares O and lse with float64 softmax on rows whose max grows along the kernel's order (every
block, every few blocks), whose max sits in the first block computed, whose first blocks are fully
masked, and with no visible key at all; also counts how many O rescales CondRescale skips.

Run: python3 tests/gpu/cuda/fwd_softmax_model.py   (exits non-zero on a mismatch)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exp2_poly_check import exp2_poly  # noqa: E402

F32 = np.float32
THRESHOLD = F32(8.0)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 (round to nearest even) -> float32, as __floats2bfloat162_rn."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def exp2_mixed(x: np.ndarray, eighths: int) -> np.ndarray:
    k = np.arange(x.size)
    emu = (k * eighths) % 8 < eighths
    mufu = np.exp2(x.astype(np.float64)).astype(np.float32)  # ex2.approx: ~2 ulp; exact here
    mufu[x < -126] = 0  # .ftz
    return np.where(emu, exp2_poly(x), mufu).astype(np.float32)


def kernel_row(s: np.ndarray, v: np.ndarray, scale: float, block: int, cond: bool, eighths: int):
    """One row: scores s (float32, -inf masked), values v [keys, d]. Returns o, lse, rescales."""
    scale_log2 = F32(scale * 1.4426950408889634)
    row_max, row_sum = F32(-np.inf), F32(0.0)
    o = np.zeros(v.shape[1], np.float32)
    n_blocks = (s.size + block - 1) // block
    rescales = 0
    for n in range(n_blocks - 1, -1, -1):
        sb = s[n * block:(n + 1) * block]
        vb = v[n * block:(n + 1) * block]
        mx = F32(max(row_max, sb.max()))
        with np.errstate(invalid="ignore"):
            if cond:
                old_scaled, new_scaled = F32(row_max * scale_log2), F32(mx * scale_log2)
                grow = bool(F32(new_scaled - old_scaled) > THRESHOLD)  # NaN (both -inf): False
                o_scale = F32(np.exp2(np.float64(old_scaled - new_scaled))) if grow else F32(1)
                row_max = mx if grow else row_max
                max_scaled = F32(0) if row_max == -np.inf else F32(row_max * scale_log2)
            else:
                grow = True
                max_scaled = F32(0) if mx == -np.inf else F32(mx * scale_log2)
                o_scale = F32(np.exp2(np.float64(F32(row_max * scale_log2) - max_scaled)))
                row_max = mx
        x = (sb.astype(np.float64) * np.float64(scale_log2) - np.float64(max_scaled)).astype(F32)
        p = exp2_mixed(x, eighths)
        # p sums per thread in the kernel; the order does not matter at this tolerance
        row_sum = F32(row_sum * o_scale + F32(p.sum(dtype=np.float32)))
        if n < n_blocks - 1 and grow:  # the first block's O is zero, no multiply in the kernel
            o = (o * o_scale).astype(np.float32)
            rescales += 1
        o = (o + bf16_round(p).astype(np.float64) @ vb.astype(np.float64)).astype(np.float32)
    empty = not row_sum > 0
    lse = -np.inf if empty else float(F32(row_max * F32(scale))) + math.log(float(row_sum))
    return (np.zeros_like(o) if empty else o / row_sum), lse, rescales


def reference(s: np.ndarray, v: np.ndarray, scale: float):
    s64 = s.astype(np.float64) * scale
    if not np.isfinite(s64).any():
        return np.zeros(v.shape[1]), -np.inf
    m = s64[np.isfinite(s64)].max()
    p = np.exp(s64 - m)
    return p @ v.astype(np.float64) / p.sum(), m + math.log(p.sum())


def main() -> int:
    rng = np.random.default_rng(0)
    d, scale = 64, 1.0 / 8.0
    failures = 0
    total_blocks = skipped = 0
    cases = []
    for sk, growth in ((1000, 60.0), (3000, 60.0), (777, -60.0), (2048, 0.0), (500, 400.0)):
        ramp = growth * (sk - 1 - np.arange(sk)) / sk / scale  # scaled-score growth of `growth`
        cases.append((f"sk={sk} growth={growth}", (rng.standard_normal(sk) * 3 + ramp)))
    s = rng.standard_normal(1000) * 3
    s[600:] = -np.inf  # the first blocks the kernel computes (the last keys) are fully masked
    cases.append(("first 3 blocks masked", s))
    cases.append(("no visible key", np.full(300, -np.inf)))
    for name, s in cases:
        s = s.astype(np.float32)
        v = rng.standard_normal((s.size, d)).astype(np.float32)
        o_ref, lse_ref = reference(s, v, scale)
        for block in (128, 176):
            for cond in (False, True):
                for eighths in (0, 2, 3, 8):
                    o, lse, rescales = kernel_row(s, v, scale, block, cond, eighths)
                    blocks = (s.size + block - 1) // block - 1
                    if cond:
                        total_blocks += blocks
                        skipped += blocks - rescales
                    err = float(np.abs(o - o_ref).max())
                    lse_err = 0.0 if lse == lse_ref else abs(lse - lse_ref)
                    ok = err < 2e-2 and lse_err < 1e-4 and np.isfinite(o).all()
                    failures += not ok
                    if not ok or (block == 128 and eighths in (0, 2)):
                        print(f"{'ok  ' if ok else 'FAIL'} {name:24s} N={block} cond={cond:d} "
                              f"emu={eighths}/8: max|o-ref| {err:.2e} |lse-ref| {lse_err:.1e} "
                              f"O rescales {rescales}/{blocks}")
    print(f"CondRescale skipped {skipped} of {total_blocks} O rescales over these rows")
    print("fwd softmax model:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
