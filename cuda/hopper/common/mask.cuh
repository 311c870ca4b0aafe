// The mask policy: which keys each query may see, asked by the producer, the consumers and the
// schedulers alike, so they can never disagree about which tiles exist. Rows and columns are
// global sequence indices; causal is bottom-right aligned (query i sees keys j <= i + seq_k - seq_q).
//
// Per (query tile, key tile) the policy answers: no key visible (the tile is never loaded: it lies
// outside key_blocks / query_block_begin), every key visible (no per-element mask), or partial
// (needs_mask: the S tile is masked by apply). Per query tile: the key blocks to visit; per key
// block: the first query block that sees it. Plain C++ on the host (the schedulers' cost models)
// and CUDA on the device.
#pragma once
#include <cmath>
#include <cstdint>

#include <climits>

#include "hopper/common/problem.h"

#if defined(__CUDACC__)
#define FA4_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define FA4_HOST_DEVICE_INLINE inline
#endif

namespace fa4::hopper {

// int min / max for host and device code (CUDA's on the device, a comparison on the host).
FA4_HOST_DEVICE_INLINE int imin(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return a < b ? a : b;
#endif
}
FA4_HOST_DEVICE_INLINE int imax(int a, int b) {
#if defined(__CUDA_ARCH__)
  return max(a, b);
#else
  return a > b ? a : b;
#endif
}

template <bool Causal>
struct AttentionMask {
  int seq_q, seq_k;

  // Key blocks (from block 0) that query rows [m0, m0 + block_m) need; 0 if they see none.
  FA4_HOST_DEVICE_INLINE int key_blocks(int m0, int block_m, int block_n) const {
    const int total = (seq_k + block_n - 1) / block_n;
    if (!Causal) return total;
    const int last_row = imin(m0 + block_m, seq_q) - 1;
    const int max_col = last_row + seq_k - seq_q;
    if (max_col < 0) return 0;
    return imin(total, max_col / block_n + 1);
  }

  // The first query block (of block_m rows) that sees any key of the block starting at key n0.
  FA4_HOST_DEVICE_INLINE int query_block_begin(int n0, int block_m) const {
    // The first query that sees key n0 is n0 - (seq_k - seq_q).
    return Causal ? imax(0, n0 - (seq_k - seq_q)) / block_m : 0;
  }

  // Whether any element of key block n must be masked for some row >= m0 (partial tile).
  FA4_HOST_DEVICE_INLINE bool needs_mask(int n, int m0, int block_n) const {
    const int col_end = (n + 1) * block_n;  // one past the block's last column
    if (col_end > seq_k) return true;
    return Causal && col_end - 1 > m0 + seq_k - seq_q;
  }

  // One past the last key column that rows [row_begin, row_begin + rows) see (rows past seq_q
  // are never stored, so only the valid ones count).
  FA4_HOST_DEVICE_INLINE int key_end(int row_begin, int rows) const {
    int end = seq_k;
    if (Causal) end = imin(end, imin(row_begin + rows, seq_q) + seq_k - seq_q);
    return end;
  }

#if defined(__CUDACC__)
  // Sets the masked scores of a wgmma accumulator fragment (64 x 2 NAcc, fwd/softmax.cuh's
  // layout) to -inf. row0: this thread's first row (its second is row0 + 8).
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
#endif
};

// ---------------------------------------------------------------------------------------------
// The variant-aware mask policy (common/problem.h, AttentionVariant): one type per MaskKind, the
// same questions for every kind, answered from compile-time facts where the kind has them (kDense:
// everything visible up to the sequence ends; kCausal: the bottom-right diagonal) and from the
// runtime band, lengths and segment ids for kVariant. Rows and columns are global sequence
// indices of one batch entry.
// ---------------------------------------------------------------------------------------------

// The mask's kernel argument (trivially copyable): the problem's variant, pointers still covering
// every batch entry; TileMask picks one entry's.
struct MaskArgs {
  int seq_q, seq_k;
  int window_left, window_right;  // causal already folded into window_right
  const int32_t* q_lengths;
  const int32_t* kv_lengths;
  const int32_t* q_ids;
  const int32_t* kv_ids;
  const int32_t* q_ranges;   // [batch, ceil(seq_q / 64), 2]
  const int32_t* kv_ranges;  // [batch, ceil(seq_k / 64), 2]
};

inline MaskArgs make_mask_args(const ProblemShape& p) {
  const AttentionVariant& v = p.variant;
  int right = v.window_right;
  if (p.causal && right > 0) right = 0;
  return {int(p.seq_q),      int(p.seq_k),       v.window_left,       right,
          v.q_lengths,       v.kv_lengths,       v.q_segment_ids,     v.kv_segment_ids,
          v.q_segment_ranges, v.kv_segment_ranges};
}

FA4_HOST_DEVICE_INLINE int iclamp(int x, int lo, int hi) { return imin(imax(x, lo), hi); }

template <MaskKind K>
struct TileMask {
  int q_len, kv_len;  // clamped lengths of this batch entry
  int off;            // kv_len - q_len: the diagonal of row i is key i + off
  int left, right;    // the band around the diagonal (kVariant; >= kWindowUnbounded: none)
  const int32_t* q_ids = nullptr;   // this entry's [seq_q] ids, or null
  const int32_t* kv_ids = nullptr;  // [seq_k]
  const int32_t* q_ranges = nullptr;   // this entry's [ceil(seq_q / 64), 2]
  const int32_t* kv_ranges = nullptr;  // [ceil(seq_k / 64), 2]

  // The policy of one batch entry. On the host only kDense / kCausal problems without lengths
  // are modelled (the schedulers' cost models), so the pointers are never read there.
  FA4_HOST_DEVICE_INLINE TileMask(const MaskArgs& a, int batch) {
    q_len = a.seq_q;
    kv_len = a.seq_k;
    left = a.window_left;
    right = a.window_right;
    if constexpr (K == MaskKind::kVariant) {
      if (a.q_lengths) q_len = iclamp(a.q_lengths[batch], 0, a.seq_q);
      if (a.kv_lengths) kv_len = iclamp(a.kv_lengths[batch], 0, a.seq_k);
      if (a.q_ids) {
        q_ids = a.q_ids + int64_t(batch) * a.seq_q;
        kv_ids = a.kv_ids + int64_t(batch) * a.seq_k;
        q_ranges = a.q_ranges + int64_t(batch) * 2 * ((a.seq_q + kSegmentChunk - 1) / kSegmentChunk);
        kv_ranges = a.kv_ranges + int64_t(batch) * 2 * ((a.seq_k + kSegmentChunk - 1) / kSegmentChunk);
      }
    }
    off = kv_len - q_len;
  }
  // The dense / causal policy of a shape without lengths (host cost models, tests).
  FA4_HOST_DEVICE_INLINE TileMask(int seq_q, int seq_k)
      : q_len(seq_q), kv_len(seq_k), off(seq_k - seq_q), left(kWindowUnbounded),
        right(K == MaskKind::kCausal ? 0 : kWindowUnbounded) {}

  FA4_HOST_DEVICE_INLINE bool bounded_left() const { return K == MaskKind::kVariant && left < kWindowUnbounded; }
  FA4_HOST_DEVICE_INLINE bool bounded_right() const {
    return K == MaskKind::kCausal || (K == MaskKind::kVariant && right < kWindowUnbounded);
  }

  // The band of row i (ignoring segment ids): keys [key_lo(i), key_hi(i)); both non-decreasing in
  // i. Meaningful for i < q_len only (padding rows see nothing).
  FA4_HOST_DEVICE_INLINE int key_lo(int i) const { return bounded_left() ? iclamp(i + off - left, 0, kv_len) : 0; }
  FA4_HOST_DEVICE_INLINE int key_hi(int i) const {
    return bounded_right() ? iclamp(i + off + (K == MaskKind::kCausal ? 0 : right) + 1, 0, kv_len) : kv_len;
  }
  // The rows whose band holds key j: [row_lo(j), row_hi(j)) (j < kv_len).
  FA4_HOST_DEVICE_INLINE int row_lo(int j) const {
    return bounded_right() ? iclamp(j - off - (K == MaskKind::kCausal ? 0 : right), 0, q_len) : 0;
  }
  FA4_HOST_DEVICE_INLINE int row_hi(int j) const { return bounded_left() ? iclamp(j - off + left + 1, 0, q_len) : q_len; }

  // Whether key j is visible to row i (band and lengths; segment ids are tested by the caller,
  // with the ids it loaded).
  FA4_HOST_DEVICE_INLINE bool in_band(int i, int j) const {
    return i < q_len && j >= key_lo(i) && j < key_hi(i);
  }

  // The keys [*lo, *hi) that rows [r0, r1) may see by band and lengths (empty: *lo >= *hi).
  FA4_HOST_DEVICE_INLINE void key_span(int r0, int r1, int* lo, int* hi) const {
    r1 = imin(r1, q_len);
    if (r0 >= r1) { *lo = *hi = 0; return; }
    *lo = key_lo(r0);
    *hi = key_hi(r1 - 1);
  }
  // The rows [*lo, *hi) that may see keys [c0, c1) by band and lengths.
  FA4_HOST_DEVICE_INLINE void row_span(int c0, int c1, int* lo, int* hi) const {
    c1 = imin(c1, kv_len);
    if (c0 >= c1) { *lo = *hi = 0; return; }
    *lo = row_lo(c0);
    *hi = row_hi(c1 - 1);
  }

  // Whether some element of the tile rows [r0, r1) x keys [c0, c1) is invisible (the tile needs
  // the per-element mask). r1 is clipped to seq_q by the caller (rows past it are never stored);
  // padding rows in [q_len, seq_q) count as invisible. With segment ids, a tile is unmasked only
  // when every row and key chunk it touches holds one and the same id (ranges read from memory).
  FA4_HOST_DEVICE_INLINE bool needs_mask(int r0, int r1, int c0, int c1) const {
    if (r1 > q_len || c1 > kv_len) return true;
    if constexpr (K == MaskKind::kDense) {
      return false;
    } else {
      if (c0 < key_lo(r1 - 1) || c1 > key_hi(r0)) return true;
      if (K == MaskKind::kVariant && q_ids) return !single_segment(r0, r1, c0, c1);
      return false;
    }
  }

  // Key blocks [*begin, *end) of width bn that rows [r0, r1) visit (band and lengths only).
  FA4_HOST_DEVICE_INLINE void key_blocks(int r0, int r1, int bn, int* begin, int* end) const {
    int lo, hi;
    key_span(r0, r1, &lo, &hi);
    blocks_of(lo, hi, bn, begin, end);
  }
  // Query blocks [*begin, *end) of height bm that visit keys [c0, c1) (band and lengths only).
  FA4_HOST_DEVICE_INLINE void query_blocks(int c0, int c1, int bm, int* begin, int* end) const {
    int lo, hi;
    row_span(c0, c1, &lo, &hi);
    blocks_of(lo, hi, bm, begin, end);
  }

  FA4_HOST_DEVICE_INLINE static void blocks_of(int lo, int hi, int b, int* begin, int* end) {
    if (lo >= hi) {
      *begin = *end = 0;
    } else {
      *begin = lo / b;
      *end = (hi + b - 1) / b;
    }
  }

  // True when rows [r0, r1) and keys [c0, c1) all carry one id (by their 64-row chunk ranges).
  FA4_HOST_DEVICE_INLINE bool single_segment(int r0, int r1, int c0, int c1) const {
    const int v = q_ranges[2 * (r0 / kSegmentChunk)];
    for (int c = r0 / kSegmentChunk; c <= (r1 - 1) / kSegmentChunk; ++c)
      if (q_ranges[2 * c] != v || q_ranges[2 * c + 1] != v) return false;
    for (int c = c0 / kSegmentChunk; c <= (c1 - 1) / kSegmentChunk; ++c)
      if (kv_ranges[2 * c] != v || kv_ranges[2 * c + 1] != v) return false;
    return true;
  }

#if defined(__CUDACC__)
  // Chunks a lane loads per trip of the forward's scans (narrow_keys_by_segment, uniform_key_run),
  // all in flight at once: a scan over up to 32 x kScanUnroll chunks costs one L2 round trip (one
  // chunk a lane a trip, a causal tile at 16k keys paid eight in a row before its first load).
  static constexpr int kScanUnroll = 4;

  // Warp-collective (all 32 lanes, warp-uniform arguments): narrows the key span [*lo, *hi) of rows
  // [r0, r1) to the 64-key chunks whose id range meets the rows' (from the range arrays; any ids
  // are exact, non-decreasing ids give the tight range). No-op without segment ids.
  __device__ __forceinline__ void narrow_keys_by_segment(int r0, int r1, int* lo, int* hi, int lane) const {
    if (K != MaskKind::kVariant || q_ids == nullptr || *lo >= *hi) return;
    int mn, mx;
    id_hull<kScanUnroll>(q_ranges, r0, imin(r1, q_len), lane, &mn, &mx);
    narrow_by_hull<kScanUnroll>(kv_ranges, mn, mx, lo, hi, lane);
  }
  // The same for the rows [*lo, *hi) that keys [c0, c1) may be visible to (the backward's loader,
  // one chunk a lane a trip: at its 40 registers the unrolled scan spilled 8-16 B more).
  __device__ __forceinline__ void narrow_rows_by_segment(int c0, int c1, int* lo, int* hi, int lane) const {
    if (K != MaskKind::kVariant || q_ids == nullptr || *lo >= *hi) return;
    int mn, mx;
    id_hull<1>(kv_ranges, c0, imin(c1, kv_len), lane, &mn, &mx);
    narrow_by_hull<1>(q_ranges, mn, mx, lo, hi, lane);
  }
  // Warp-collective (warp-uniform arguments): the keys [*lo, *hi) of the whole 64-key chunks that
  // meet [c0, c1) and carry id v alone (chunk range (v, v)), as one run from the first such chunk
  // to the last when every chunk between them is one too (always, for non-decreasing ids); else
  // empty (0, 0). Rows of id v need no id test on a key block inside the run.
  __device__ __forceinline__ void uniform_key_run(int c0, int c1, int v, int* lo, int* hi, int lane) const {
    int first = INT_MAX, last = -1, count = 0;
    const int end = (c1 - 1) / kSegmentChunk;
    for (int b = c0 / kSegmentChunk + lane; c0 < c1 && b <= end; b += 32 * kScanUnroll) {
      bool one[kScanUnroll];
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u) {
        const int c = b + 32 * u;
        const int r_lo = c <= end ? kv_ranges[2 * c] : INT_MAX, r_hi = c <= end ? kv_ranges[2 * c + 1] : INT_MIN;
        one[u] = r_lo == v && r_hi == v;
      }
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u) {
        if (one[u]) {
          first = min(first, b + 32 * u);
          last = max(last, b + 32 * u);
          ++count;
        }
      }
    }
    first = warp_min(first);
    last = warp_max(last);
    count = warp_sum(count);
    const bool run = last >= 0 && count == last - first + 1;
    *lo = run ? first * kSegmentChunk : 0;
    *hi = run ? (last + 1) * kSegmentChunk : 0;
  }

 private:
  __device__ __forceinline__ static int warp_min(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
  __device__ __forceinline__ static int warp_max(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
  __device__ __forceinline__ static int warp_sum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  // The min and max id over positions [p0, p1) (p0 < p1), by their chunks, Unroll chunks a lane
  // a trip. Unroll = 1 keeps the plain loop: written as the batched one, ptxas gave the backward's
  // variant kernels 8-24 B more spills.
  template <int Unroll>
  __device__ __forceinline__ static void id_hull(const int32_t* ranges, int p0, int p1, int lane, int* mn, int* mx) {
    int a = INT_MAX, b = INT_MIN;
    if constexpr (Unroll == 1) {
      for (int c = p0 / kSegmentChunk + lane; c <= (p1 - 1) / kSegmentChunk; c += 32) {
        a = min(a, ranges[2 * c]);
        b = max(b, ranges[2 * c + 1]);
      }
    } else {
      const int last = (p1 - 1) / kSegmentChunk;
      for (int c0 = p0 / kSegmentChunk + lane; c0 <= last; c0 += 32 * Unroll) {
        int lo[Unroll], hi[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          const int c = c0 + 32 * u;
          lo[u] = c <= last ? ranges[2 * c] : INT_MAX;
          hi[u] = c <= last ? ranges[2 * c + 1] : INT_MIN;
        }
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          a = min(a, lo[u]);
          b = max(b, hi[u]);
        }
      }
    }
    *mn = warp_min(a);
    *mx = warp_max(b);
  }
  // Narrows [*lo, *hi) to the first .. last chunk in it whose id range meets [mn, mx] (Unroll as
  // id_hull).
  template <int Unroll>
  __device__ __forceinline__ static void narrow_by_hull(const int32_t* ranges, int mn, int mx, int* lo, int* hi,
                                                        int lane) {
    int first = INT_MAX, last = -1;
    if constexpr (Unroll == 1) {
      for (int c = *lo / kSegmentChunk + lane; c <= (*hi - 1) / kSegmentChunk; c += 32) {
        if (ranges[2 * c] <= mx && ranges[2 * c + 1] >= mn) {
          first = min(first, c);
          last = max(last, c);
        }
      }
    } else {
      const int end = (*hi - 1) / kSegmentChunk;
      for (int c0 = *lo / kSegmentChunk + lane; c0 <= end; c0 += 32 * Unroll) {
        bool meets[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          const int c = c0 + 32 * u;
          // Both loads issued unconditionally (within the range): && would chain them.
          const int r_lo = c <= end ? ranges[2 * c] : INT_MAX, r_hi = c <= end ? ranges[2 * c + 1] : INT_MIN;
          meets[u] = r_lo <= mx && r_hi >= mn;
        }
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          if (meets[u]) {
            first = min(first, c0 + 32 * u);
            last = max(last, c0 + 32 * u);
          }
        }
      }
    }
    first = warp_min(first);
    last = warp_max(last);
    if (last < 0) {
      *lo = *hi = 0;
    } else {
      *lo = imax(*lo, first * kSegmentChunk);
      *hi = imin(*hi, (last + 1) * kSegmentChunk);
    }
  }
#endif
};

}  // namespace fa4::hopper
