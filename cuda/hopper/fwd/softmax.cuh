// The forward's online softmax on wgmma accumulator fragments.
//
// Fragment layout of a 64xN f32 accumulator in a warpgroup (PTX "wgmma .m64nNk16 D"): thread t,
// warp w = t/32, lane l. Register 4*j + 2*i + e holds row 16*w + l/4 + 8*i, column 8*j + 2*(l%4) + e.
// So each thread owns two rows (i = 0, 1); each row is spread over the 4 lanes of a quad.
#pragma once
#include <cmath>
#include <cstdint>

#include "hopper/common/numeric.cuh"

namespace fa4::hopper {

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 1);
  return v + __shfl_xor_sync(0xffffffff, v, 2);
}

// Running max and sum of one thread's two rows. Scores stay unscaled; the softmax scale (times
// log2 e) is folded into the one FMA that feeds each exp2.
// Bounded: every score lies in [-1, 1] (the soft cap's tanh), so the row max can be a constant
// that never rescales O: an integer bias k in log2 units (FwdArgs::bounded_bias, chosen by the
// host), p = 2^(s * scale_log2 - k) a normal float between 2^(-scale_log2 - k) and
// 2^(scale_log2 - k) (the host's condition, ScoreCap::kBounded). No max, no shuffles, no o_scale
// exponentials and no O rescale a block; the LSE is k ln 2 + log(sum). k integer lets exp2_fma_affine
// round and reduce the exponent in the FMAs that form it.
template <int NAcc, bool Bounded = false>
struct OnlineSoftmax {
  static constexpr bool kBounded = Bounded;
  static constexpr float kLn2 = 0.693147180559945309f;
  // Bounded, on blocks without a mask: of every 4 column pairs j, the first kExp2FmaOf4 take 2^x
  // from exp2_fma_affine instead of MUFU.EX2. The capped step issues two MUFU a score (tanh and 2^x) on
  // a pipe of 16 lanes a cycle an SM: at head dim 64 that outlasts the other warpgroup's two
  // products on the tensor cores, at 128 it about matches them. Kernel-only on an H100, 2 of 4
  // against none: 9-10% faster at head dim 64, within the noise at 128; 4 of 4 is 10% slower at
  // 128, where the FMA pipe's issue slots become the limit.
  static constexpr int kExp2FmaOf4 = 2;
  float row_max[2];  // Bounded: the bias k (log2 units); else the running max (score units)
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; the quad is summed in finalize

  // bounded_bias: Bounded's integer bias k (unused otherwise).
  __device__ __forceinline__ explicit OnlineSoftmax(float bounded_bias = 0.f)
      : row_max{Bounded ? bounded_bias : -INFINITY, Bounded ? bounded_bias : -INFINITY} {}

  // Turns scores s into unnormalised probabilities p = 2^(s*scale_log2 - max*scale_log2) and
  // returns in o_scale the factor by which the O rows accumulated so far must be multiplied.
  // M < NAcc (the trimmed first block): only the first M accumulators of the block were computed;
  // the other columns count as masked (p = 0). Unmasked: no score is -inf (a block the mask
  // policy found fully visible), so the bounded softmax may use exp2_fma_affine, whose range
  // excludes it.
  template <int M = NAcc, bool Unmasked = false>
  __device__ __forceinline__ void update(float (&s)[M], float scale_log2, float (&o_scale)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // The exponent's offset: the fixed max (Bounded) or the running one, whose change rescales
      // the row's sum and O.
      float max_scaled;
      if constexpr (Bounded) {
        max_scaled = row_max[i];
        o_scale[i] = 1.f;
      } else {
        float mx = row_max[i];
#pragma unroll
        for (int j = 0; j < M / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
        mx = quad_max(mx);
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
          const float sc = s[4 * j + 2 * i + e];
          const float p = Bounded && Unmasked && j % 4 < kExp2FmaOf4 ? exp2_fma_affine(sc, scale_log2, max_scaled)
                                                                     : exp2_approx(fmaf(sc, scale_log2, -max_scaled));
          s[4 * j + 2 * i + e] = p;
          sum += p;
        }
      }
      row_sum[i] = Bounded ? row_sum[i] + sum : row_sum[i] * o_scale[i] + sum;
    }
  }

  // Per row: the factor that normalises O (0 for a row that saw no key) and the natural-log LSE
  // (-inf for such a row).
  __device__ __forceinline__ void finalize(float softmax_scale, float (&o_scale)[2], float (&lse)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float l = quad_sum(row_sum[i]);
      const bool empty = !(l > 0.f);
      o_scale[i] = empty ? 0.f : 1.f / l;
      lse[i] = empty ? -INFINITY : row_max[i] * (Bounded ? kLn2 : softmax_scale) + logf(l);
    }
  }

  // finalize with a sink logit per row (-inf: none, and for padding rows): it joins the
  // denominator and no numerator, lse = log(exp(sink) + sum exp(s)), so O is normalised by it. In
  // the frame of M = max(row max, sink), so neither a large sink nor a large score overflows. A
  // row with no visible key gets o_scale 0 and lse = sink (-inf without one).
  __device__ __forceinline__ void finalize_with_sink(float softmax_scale, const float (&sink)[2], float (&o_scale)[2],
                                                     float (&lse)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float l = quad_sum(row_sum[i]);
      const float m = l > 0.f ? row_max[i] * (Bounded ? kLn2 : softmax_scale) : -INFINITY;
      const float mx = fmaxf(m, sink[i]);
      if (mx == -INFINITY) {
        o_scale[i] = 0.f;
        lse[i] = -INFINITY;
      } else {
        const float a = l > 0.f ? __expf(m - mx) : 0.f;
        const float total = l * a + __expf(sink[i] - mx);  // sink -inf: exp gives 0
        o_scale[i] = a / total;
        lse[i] = mx + logf(total);
      }
    }
  }
};

}  // namespace fa4::hopper
