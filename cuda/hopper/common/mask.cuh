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

}  // namespace fa4::hopper
