// Online softmax and masking on wgmma accumulator fragments.
//
// Fragment layout of a 64xN f32 accumulator in a warpgroup (PTX "wgmma .m64nNk16 D"): thread t,
// warp w = t/32, lane l. Register 4*j + 2*i + e holds row 16*w + l/4 + 8*i, column 8*j + 2*(l%4) + e.
// So each thread owns two rows (i = 0, 1); each row is spread over the 4 lanes of a quad.
#pragma once
#include <cstdint>

#include "hopper/fwd_config.cuh"

namespace fa4::hopper {

// 2^x on the special-function unit (MUFU.EX2); ex2(-inf) = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe (fwd v5 Exp2Emu variants, NOTES.md "fwd v5 candidates"): FA4's exp2
// emulation, here with a degree-5 polynomial so that it is as accurate as MUFU.EX2 (max relative
// error 1.74e-7 = 2^-22.5, at most 2.2 ulp; tests/gpu/cuda/exp2_poly_check.py replays this exact
// sequence in float32 and checks it). Cody-Waite reduction x = j + f, j = round(x), f in
// [-0.5, 0.5] (exact); 2^f by Horner (c0 = 1); 2^j by adding j to the exponent field: the
// magic-number sum t = x + 1.5 * 2^23 holds j in its low mantissa bits, so (bits(t) << 23) is
// j << 23 modulo 2^32. Valid for x in [-126, 127); x < -126 (also -inf) gives +0 exactly like
// ex2.approx.ftz, whose results below 2^-126 are flushed. Cost: 3 FADD, 5 FFMA, 1 LEA/IADD,
// FSETP + FSEL instead of one MUFU.EX2 (which occupies the SFU for 8 cycles per warp).
__device__ __forceinline__ float exp2_poly(float x) {
  constexpr float kRound = 12582912.f;  // 0x1.8p23
  const float t = x + kRound;
  const float j = t - kRound;
  const float f = x - j;
  float p = 0x1.5bfc4ep-10f;
  p = fmaf(p, f, 0x1.3cf118p-7f);
  p = fmaf(p, f, 0x1.c6b798p-5f);
  p = fmaf(p, f, 0x1.ebf9bcp-3f);
  p = fmaf(p, f, 0x1.62e428p-1f);
  p = fmaf(p, f, 1.f);
  const int bits = __float_as_int(p) + (__float_as_int(t) << 23);
  return x >= -126.f ? __int_as_float(bits) : 0.f;
}

// Conditional rescale (fwd v5 CondRescale variants): FA4's threshold, in log2 units of the scaled
// scores. A row's running max is only moved (and O and the row sum rescaled) when the block's max
// exceeds it by more than this; otherwise P = 2^(s - stale max) <= 2^8 (exact in bf16/fp16 range).
constexpr float kRescaleThresholdLog2 = 8.f;

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 1);
  return v + __shfl_xor_sync(0xffffffff, v, 2);
}

// Which keys each query may see. Rows and columns are global sequence indices.
// Causal is bottom-right aligned: query i sees keys j <= i + seq_k - seq_q.
template <bool Causal>
struct AttentionMask {
  int seq_q, seq_k;

  // Number of key blocks (from block 0) that rows [m0, m0 + block_m) need; 0 if they see nothing.
  __device__ __forceinline__ int n_blocks(int m0, int block_m, int block_n) const {
    return fwd_tile_key_blocks<Causal>(m0, block_m, block_n, seq_q, seq_k);
  }

  // Whether any element of key block n must be masked for some row >= m0.
  __device__ __forceinline__ bool block_needs_mask(int n, int m0, int block_n) const {
    const int col_end = (n + 1) * block_n;  // one past the block's last column
    if (col_end > seq_k) return true;
    return Causal && col_end - 1 > m0 + seq_k - seq_q;
  }

  // Sets masked scores to -inf. row0: this thread's first row (its second is row0 + 8).
  template <int NAcc>
  __device__ __forceinline__ void apply(float (&s)[NAcc], int col0, int row0, int lane) const {
    const int col_base = col0 + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      int limit = seq_k;  // first column this row may NOT see
      if (Causal) limit = min(limit, row0 + 8 * i + seq_k - seq_q + 1);
      const int rel = limit - col_base;
#pragma unroll
      for (int j = 0; j < NAcc / 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * j + e >= rel) s[4 * j + 2 * i + e] = -INFINITY;
        }
      }
    }
  }
};

// Running max and sum of one thread's two rows. Scores stay unscaled; the softmax scale (times
// log2 e) is folded into the one FMA that feeds each exp2.
// CondRescale: the running max may be stale by up to kRescaleThresholdLog2 (per row; the four
// lanes of a row's quad hold the same max and take the same decision). finalize's lse uses the max
// that P was actually computed against, so it stays exact. Exp2EmuEighths (0..8): that many of
// every 8 exp2s of P (spread over the row: element k when (k * E) % 8 < E) use exp2_poly on the
// FMA pipe instead of MUFU.EX2.
template <int NAcc, bool CondRescale = false, int Exp2EmuEighths = 0>
struct OnlineSoftmax {
  static_assert(Exp2EmuEighths >= 0 && Exp2EmuEighths <= 8, "emulated fraction in eighths");
  static constexpr bool emulated(int k) { return (k * Exp2EmuEighths) % 8 < Exp2EmuEighths; }

  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; the quad is summed in finalize

  // Turns scores s into unnormalised probabilities p = 2^(s*scale_log2 - max*scale_log2) and
  // returns in o_scale the factor by which the O rows accumulated so far must be multiplied.
  // Returns whether either factor may differ from 1 (always true without CondRescale; with it,
  // o_scale is exactly 1 for a row whose max was kept, so skipping the O multiply is exact).
  // M < NAcc (TrimFirst's first block): only the first M accumulators of the block were computed;
  // the other columns count as masked (p = 0).
  template <int M = NAcc>
  __device__ __forceinline__ bool update(float (&s)[M], float scale_log2, float (&o_scale)[2]) {
    bool rescaled = !CondRescale;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = row_max[i];
#pragma unroll
      for (int j = 0; j < M / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
      mx = quad_max(mx);
      float max_scaled;
      if constexpr (CondRescale) {
        // Move the max only when it grew by more than the threshold. Before the first visible key
        // row_max is -inf: a finite mx grows by +inf (always moves, o_scale = 0 on a zero O); both
        // -inf gives NaN > threshold = false (the max stays -inf, o_scale 1).
        const float old_scaled = row_max[i] * scale_log2;
        const float new_scaled = mx * scale_log2;
        const bool grow = new_scaled - old_scaled > kRescaleThresholdLog2;
        o_scale[i] = grow ? exp2_approx(old_scaled - new_scaled) : 1.f;
        row_max[i] = grow ? mx : row_max[i];
        rescaled |= grow;
        max_scaled = row_max[i] == -INFINITY ? 0.f : row_max[i] * scale_log2;
      } else {
        // A row that has seen only masked keys keeps max -inf; use 0 so -inf - max stays -inf, not NaN.
        max_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;
        o_scale[i] = exp2_approx(row_max[i] * scale_log2 - max_scaled);
        row_max[i] = mx;
      }
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < M / 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = fmaf(s[4 * j + 2 * i + e], scale_log2, -max_scaled);
          const float p = emulated(2 * j + e) ? exp2_poly(x) : exp2_approx(x);
          s[4 * j + 2 * i + e] = p;
          sum += p;
        }
      }
      row_sum[i] = row_sum[i] * o_scale[i] + sum;
    }
    return rescaled;
  }

  // Per row: the factor that normalises O (0 for a row that saw no key) and the natural-log LSE
  // (-inf for such a row).
  __device__ __forceinline__ void finalize(float softmax_scale, float (&o_scale)[2], float (&lse)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float l = quad_sum(row_sum[i]);
      const bool empty = !(l > 0.f);
      o_scale[i] = empty ? 0.f : 1.f / l;
      lse[i] = empty ? -INFINITY : row_max[i] * softmax_scale + logf(l);
    }
  }
};

}  // namespace fa4::hopper
