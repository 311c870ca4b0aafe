"""Host-side check of the forward kernel's emulated exp2 (cuda/hopper/fwd_softmax.cuh exp2_poly).

Replays the device sequence in float32 with numpy, operation by operation:

    t = x + 0x1.8p23          (FADD, round to nearest even: j = round(x) in t's low mantissa bits)
    j = t - 0x1.8p23          (FADD, exact)
    f = x - j                 (FADD, exact, f in [-0.5, 0.5])
    p = Horner(c5..c1, 1) in f (5 FFMA, each rounded once: emulated exactly below)
    bits = bits(p) + (bits(t) << 23)   (integer add modulo 2^32: 2^j into the exponent field)
    result = x >= -126 ? bits : +0     (FSETP + FSEL; ex2.approx.ftz also flushes below 2^-126)

and compares it with float64 exp2 over the range the kernel feeds it: x = s * scale_log2 - max,
so x <= 0 (up to +8 under the CondRescale variants, whose max may be stale by 2^8), down to where
the result underflows, plus -inf (masked scores: must give exactly +0).

Checks (exit status 1 on a failure):
  1. every float32 f in [-0.5, 0.5] with |f| >= 2^-10 (2 x 9 binades, exhaustive) and a strided
     sweep of the smaller ones: the reduced polynomial, which with the exact reduction and the
     exact exponent insertion is the whole error for normal results;
  2. a strided sweep of every float32 x in [-126, 8] (each 61st bit pattern) and 4M uniform x;
  3. special inputs: -inf and x < -126 give +0; x = -126 gives 2^-126 (smallest normal);
     x = 0 and -0 give exactly 1; x = 8 gives 256; denormal x gives 1;
  4. max relative error <= 2^-22 (about 2 ulp; measured 1.74e-7 = 2^-22.46, 2.16 ulp), i.e. in
     the class of MUFU.EX2 (ex2.approx), which the emulation replaces for some of P's elements.

Run: python3 tests/gpu/cuda/exp2_poly_check.py [--full]   (--full: every float32 f, ~5 min)
"""

from __future__ import annotations

import sys

import numpy as np

ROUND = np.float32(12582912.0)  # 0x1.8p23
# Degree-5 minimax of 2^f on [-0.5, 0.5] (relative error, c0 = 1), coefficients rounded to float32
# and re-fitted one by one; the same hex literals as exp2_poly in fwd_softmax.cuh.
COEFFS = [float.fromhex(h) for h in ("0x1.62e428p-1", "0x1.ebf9bcp-3", "0x1.c6b798p-5",
                                     "0x1.3cf118p-7", "0x1.5bfc4ep-10")]
C = [np.float32(1.0)] + [np.float32(c) for c in COEFFS]
assert all(float(np.float32(c)) == c for c in COEFFS), "coefficients must be float32 values"


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fma(a, b, c) with one rounding, exactly (not float64-then-float32 double rounding).

    a * b is exact in float64 (48 significant bits). s = ab + c in float64 is rounded; TwoSum gives
    its error e exactly. Rounding s to float32 is then right except when s lies exactly half-way
    between two float32 values (or on one) and e != 0: then the true value is off the midpoint,
    and the rounding goes toward the side of e.
    """
    ab = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = ab + c64
    bb = s - ab
    e = (ab - (s - bb)) + (c64 - bb)  # TwoSum error: ab + c = s + e exactly
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    # neighbours of r in float32 and the midpoints between r and them
    up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
    dn = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
    mid_up = (r64 + up) / 2  # exact in float64 (float32 values)
    mid_dn = (r64 + dn) / 2
    # s exactly on a midpoint: round-half-even picked r; the true value is s + e
    fix_up = (s == mid_up) & (e > 0)
    fix_dn = (s == mid_dn) & (e < 0)
    # s exactly on r with e != 0 never changes the rounding (|e| < half an ulp of s in float64)
    r = np.where(fix_up, up.astype(np.float32), r)
    return np.where(fix_dn, dn.astype(np.float32), r)


def exp2_poly(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = (x + ROUND).astype(np.float32)
        j = (t - ROUND).astype(np.float32)
        f = (x - j).astype(np.float32)
        p = np.full_like(f, C[5])
        for k in (4, 3, 2, 1, 0):
            p = fma32(p, f, np.full_like(f, C[k]))
    bits = (p.view(np.uint32).astype(np.uint64) + (t.view(np.uint32).astype(np.uint64) << 23))
    r = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(x >= np.float32(-126.0), r, np.float32(0.0)).astype(np.float32)


def errors(x: np.ndarray) -> tuple[float, float]:
    """Max relative error and max error in ulps of the correctly rounded result."""
    got = exp2_poly(x).astype(np.float64)
    ref = np.exp2(x.astype(np.float64))
    rel = np.abs(got - ref) / ref
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    return float(rel.max()), float((np.abs(got - ref) / ulp).max())


def floats_between(lo: float, hi: float, stride: int = 1) -> np.ndarray:
    """Every stride-th float32 in [lo, hi] (same sign, 0 <= |lo| <= |hi|)."""
    sign = -1 if hi < 0 or lo < 0 else 1
    a, b = sorted((abs(lo), abs(hi)))
    ia = int(np.float32(a).view(np.uint32))
    ib = int(np.float32(b).view(np.uint32))
    v = np.arange(ia, ib + 1, stride, dtype=np.uint32).view(np.float32)
    return v if sign > 0 else -v


def main() -> int:
    full = "--full" in sys.argv
    failures = []
    worst_rel, worst_ulp = 0.0, 0.0

    # 1. the reduced argument f (exhaustive for |f| >= 2^-10, or every float with --full)
    lo_exh = 0.0 if full else 2.0**-10
    for sign in (1.0, -1.0):
        a = np.float32(lo_exh)
        ia = int(a.view(np.uint32))
        ib = int(np.float32(0.5).view(np.uint32))
        for start in range(ia, ib + 1, 1 << 23):
            v = np.arange(start, min(start + (1 << 23), ib + 1), dtype=np.uint32).view(np.float32)
            r, u = errors(np.float32(sign) * v)
            worst_rel, worst_ulp = max(worst_rel, r), max(worst_ulp, u)
        if not full:
            r, u = errors(np.float32(sign) * floats_between(1e-30, 2.0**-10, 101))
            worst_rel, worst_ulp = max(worst_rel, r), max(worst_ulp, u)
    print(f"reduced argument f in [-0.5, 0.5]: max rel {worst_rel:.3e} ({np.log2(worst_rel):.2f}"
          f" log2), max {worst_ulp:.2f} ulp")

    # 2. the kernel's x range: strided sweep of all float32 in [-126, 8], uniform samples
    xs = [floats_between(-1e-38, -126.0, 61), floats_between(0.0, 8.0, 61),
          np.random.default_rng(0).uniform(-126.0, 8.0, 4_000_000).astype(np.float32)]
    for x in xs:
        r, u = errors(x)
        worst_rel, worst_ulp = max(worst_rel, r), max(worst_ulp, u)
    print(f"x in [-126, 8] (strided + random): max rel {worst_rel:.3e}, max {worst_ulp:.2f} ulp")
    if worst_rel > 2.0**-22:
        failures.append(f"max relative error {worst_rel:.3e} > 2^-22")

    # 3. specials
    def expect(x: float, want: float, what: str) -> None:
        got = exp2_poly(np.array([x], np.float32))[0]
        ok = got == np.float32(want) and not (want == 0 and np.signbit(got))
        print(f"  exp2_poly({x!r}) = {got!r}  ({what}) {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"exp2_poly({x!r}) = {got!r}, want {want!r}")

    print("special inputs:")
    expect(-np.inf, 0.0, "masked score: exactly +0")
    expect(-126.00001, 0.0, "below 2^-126: +0 like ex2.approx.ftz")
    expect(-200.0, 0.0, "far below: +0")
    expect(-1e30, 0.0, "huge negative: +0")
    expect(-126.0, 2.0**-126, "smallest normal")
    expect(0.0, 1.0, "exact")
    expect(-0.0, 1.0, "exact")
    expect(8.0, 256.0, "CondRescale's largest P")
    expect(-1.0, 0.5, "exact")
    expect(-125.0, 2.0**-125, "exact")
    expect(float(np.float32(1e-45)), 1.0, "denormal input")
    expect(-float(np.float32(1e-45)), 1.0, "denormal input")
    # every result for x in [-126, 8] must be a positive normal float (no wrapped exponents)
    x = np.concatenate([floats_between(-125.0, -126.0, 1),
                        np.float32(np.linspace(-126, 8, 100001))])
    y = exp2_poly(x)
    bad = int(np.sum(~(y >= np.float32(2.0**-126)) | ~np.isfinite(y)))
    print(f"  [-126, 8]: {bad} results not a finite normal float")
    if bad:
        failures.append(f"{bad} non-normal results in [-126, 8]")

    # fma32: a cancellation that float32 arithmetic without a fused multiply-add gets wrong, and a
    # double-rounding case (the float64 sum lands on a float32 midpoint, the exact value does not)
    a = np.array([1.0 + 2.0**-23], np.float32)
    b = np.array([1.0 + 2.0**-23], np.float32)
    c = np.array([-(1.0 + 2.0**-22)], np.float32)
    ok1 = fma32(a, b, c)[0] == np.float32(2.0**-46)
    # (1 + 2^-23)(2^-24 - 2^-47) + (1 + 2^-23) = 1 + 2^-23 + 2^-24 - 2^-70: float64 rounds it to
    # the float32 midpoint 1 + 2^-23 + 2^-24, which ties to the even 1 + 2^-22; the exact value is
    # below the midpoint, so the fused result is 1 + 2^-23.
    a2 = np.array([1.0 + 2.0**-23], np.float32)
    b2 = np.array([2.0**-24 - 2.0**-47], np.float32)
    c2 = np.array([1.0 + 2.0**-23], np.float32)
    naive = np.float32(a2.astype(np.float64) * b2 + c2)[0]
    ok2 = fma32(a2, b2, c2)[0] == np.float32(1.0 + 2.0**-23) and naive == np.float32(1 + 2.0**-22)
    if not (ok1 and ok2):
        failures.append(f"fma32 self-test ({ok1}, {ok2})")

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("exp2_poly: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
