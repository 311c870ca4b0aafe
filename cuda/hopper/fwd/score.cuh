// What a forward consumer does to a key block's raw scores before the online softmax: the soft
// cap (a score modifier), then, on partial tiles only, the mask (common/mask.cuh's policy). The
// kernels are templated on both, so the dense and causal kernels carry none of the variant code.
//
// Fragment layout (fwd/softmax.cuh): register 4*j + 2*i + e of a thread holds row row0 + 8*i,
// column col0 + 8*j + 2*(lane % 4) + e.
#pragma once
#include <cmath>
#include <cstdint>

#include "hopper/common/mask.cuh"
#include "hopper/common/numeric.cuh"

namespace fa4::hopper {

// The score modifier a forward kernel is built for: none, or the soft cap c tanh(s / c) with the
// online softmax (kOnline), or with a fixed row max (kBounded: OnlineSoftmax's Bounded mode; bf16
// with kBoundedCapMin <= c <= kBoundedCapMax only, fwd_bounded_cap in fwd/launch.cuh).
enum class ScoreCap { kNone, kOnline, kBounded };

template <MaskKind M, ScoreCap Cap>
struct FwdScores {
  static constexpr MaskKind kMask = M;
  TileMask<M> mask;
  int r0;              // dense / causal: the first row the partial-tile test covers
  float cap_scale;     // soft cap: softmax_scale / softcap (the raw score's factor inside tanh)
  // kVariant, per tile, so that the main loop keeps few registers live (the policy's fields it no
  // longer reads are dead): a key block [c0, c1) needs no mask iff every row of [r0, r1) is real
  // and c0 >= full_lo, c1 <= full_hi (TileMask::needs_mask's band test, precomputed), and, with
  // segment ids, the rows carry one id (otherwise every block is masked) that every 64-key chunk
  // of the block carries alone: the block lies inside [uni_lo, uni_hi) (TileMask::uniform_key_run
  // over the keys the warpgroup visits, found once per tile, so no block reads the chunk ranges).
  int full_lo = 0, full_hi = 0;
  bool rows_real = false;
  int uni_lo = 0, uni_hi = 0;
  // kVariant: the band [lo, hi) of this thread's two rows (hi = 0 for padding rows: nothing
  // visible) and their segment ids.
  int row_lo[2] = {0, 0}, row_hi[2] = {0, 0}, row_id[2] = {0, 0};

  // Rows [mask_r0, mask_r1) (mask_r1 clipped to seq_q) are the ones the partial-tile test covers;
  // row0: this thread's first row (its second is row0 + 8); keys [key_lo, key_hi): those of the
  // key blocks the rows visit. Warp-collective under kVariant with segment ids (the uniform run).
  __device__ __forceinline__ FwdScores(const TileMask<M>& m, int mask_r0, int mask_r1, int row0, float cap,
                                       int key_lo, int key_hi, int lane)
      : mask(m), r0(mask_r0), cap_scale(cap) {
    if constexpr (M == MaskKind::kVariant) {
      const int r1 = imin(mask_r1, mask.q_len);
      rows_real = mask_r0 < r1 && mask_r1 <= mask.q_len;
      if (rows_real) {
        full_lo = mask.key_lo(r1 - 1);
        full_hi = mask.key_hi(mask_r0);
      }
      if (mask.q_ids != nullptr && rows_real) {
        // The rows' ids are one id v iff every 64-row chunk they touch has range (v, v).
        const int v = __ldg(mask.q_ranges + 2 * (mask_r0 / kSegmentChunk));
        bool single = true;
        for (int c = mask_r0 / kSegmentChunk; c <= (r1 - 1) / kSegmentChunk; ++c)
          single = single && __ldg(mask.q_ranges + 2 * c) == v && __ldg(mask.q_ranges + 2 * c + 1) == v;
        if (single) mask.uniform_key_run(key_lo, imin(key_hi, mask.kv_len), v, &uni_lo, &uni_hi, lane);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = row0 + 8 * i;
        const bool real = row < mask.q_len;
        row_lo[i] = real ? mask.key_lo(row) : 0;
        row_hi[i] = real ? mask.key_hi(row) : 0;
        row_id[i] = real && mask.q_ids ? __ldg(mask.q_ids + row) : 0;
      }
    }
  }

  // Whether key block kb (of N keys) needs the per-element mask for these rows.
  template <int N>
  __device__ __forceinline__ bool needs_mask(int kb) const {
    const int c0 = kb * N, col_end = (kb + 1) * N;
    if constexpr (M == MaskKind::kVariant) {
      // TileMask::needs_mask, from the per-tile values.
      if (!rows_real || c0 < full_lo || col_end > full_hi || col_end > mask.kv_len) return true;
      return mask.kv_ids != nullptr && (c0 < uni_lo || col_end > uni_hi);
    } else {
      // The dense / causal test in the kernels' original form (TileMask::needs_mask agrees: rows
      // never pass q_len = seq_q here, and no key lies left of the band).
      if (col_end > mask.kv_len) return true;
      return M == MaskKind::kCausal && col_end - 1 > r0 + mask.kv_len - mask.q_len;
    }
  }

  // kVariant: the key blocks [*begin, *end) (of N keys) that need no mask, one contiguous run
  // (needs_mask in closed form: false exactly for the band's fully visible blocks below kv_len,
  // with segment ids also inside the uniform run), so the main loop can run them without the
  // per-block test; empty (0, 0) with padding rows. Warp-uniform values, read from lane 0 so the compiler
  // knows it: three inlined copies of the step around run bounds it took for divergent made ptxas
  // serialize every wgmma (C7520).
  template <int N>
  __device__ __forceinline__ void unmasked_run(int* begin, int* end) const {
    static_assert(M == MaskKind::kVariant, "the dense and causal kernels test every block");
    int b = 0, e = 0;
    if (rows_real) {
      int lo = full_lo, hi = imin(full_hi, mask.kv_len);
      if (mask.kv_ids != nullptr) {
        lo = imax(lo, uni_lo);
        hi = imin(hi, uni_hi);
      }
      b = (lo + N - 1) / N;
      e = imax(hi, 0) / N;
      if (e <= b) b = e = 0;
    }
    *begin = __shfl_sync(0xffffffffu, b, 0);
    *end = __shfl_sync(0xffffffffu, e, 0);
  }

  // Masked scores of a 64 x 2 NAcc fragment (key columns from col0) become -inf: selected, never
  // multiplied, so a NaN or Inf score of an invisible key reaches no row.
  template <int NAcc>
  __device__ __forceinline__ void apply(float (&s)[NAcc], int col0, int row0, int lane) const {
    const int col_base = col0 + 2 * (lane & 3);
    if constexpr (M == MaskKind::kVariant) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int rel_lo = row_lo[i] - col_base, rel_hi = row_hi[i] - col_base;
#pragma unroll
        for (int j = 0; j < NAcc / 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = 8 * j + e;
            if (c < rel_lo || c >= rel_hi) s[4 * j + 2 * i + e] = -INFINITY;
          }
        }
      }
      // Inside the uniform run every key carries the rows' id: the band alone masks (a document's
      // diagonal block).
      if (mask.kv_ids != nullptr && (col0 < uni_lo || col0 + 2 * NAcc > uni_hi)) {
        // The ids of this thread's columns, from L2 (a quad's lanes read 8 consecutive ids; the
        // warp's 8 quads read the same ones). Columns past kv_len are masked by the band already.
#pragma unroll
        for (int j = 0; j < NAcc / 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = col_base + 8 * j + e;
            const int id = col < mask.kv_len ? __ldg(mask.kv_ids + col) : 0;
#pragma unroll
            for (int i = 0; i < 2; ++i)
              if (id != row_id[i]) s[4 * j + 2 * i + e] = -INFINITY;
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        int limit = mask.kv_len;  // first column this row may NOT see
        if (M == MaskKind::kCausal) limit = min(limit, row0 + 8 * i + mask.kv_len - mask.q_len + 1);
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
  }

  // The soft cap, then the mask where block kb needs it (Tested = false: a block of
  // unmasked_run's, which needs none). The cap comes first: the mask's -inf must survive
  // (c * tanh(-inf) would be -c). After the cap the scores are tanh(s * scale / c) and the
  // softmax's scale is c (FwdArgs::scale_log2, softmax_scale).
  template <int N, bool Tested = true, int NAcc>
  __device__ __forceinline__ void prepare(float (&s)[NAcc], int kb, int row0, int lane) const {
    if constexpr (Cap != ScoreCap::kNone) {
#pragma unroll
      for (int q = 0; q < NAcc; ++q) s[q] = tanh_approx(s[q] * cap_scale);
    }
    if constexpr (Tested) {
      if (needs_mask<N>(kb)) apply(s, kb * N, row0, lane);
    }
  }
};

}  // namespace fa4::hopper
