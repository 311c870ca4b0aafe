// The consumer warpgroups' main loop of the hd64 / hd128 backward (config.cuh says who owns what):
// the wgmma products of one step, P^T and dS^T, and the pipelined loop over a tile's steps.
//
// Working with transposed scores (S^T rather than S, FA3's SdP_swapAB) makes P^T and dS^T come
// out of the wgmma in the accumulator layout of the A operand of dV/dK, so they never leave the
// registers for those two products; dQ needs dS with keys as the reduction dimension, which is
// exactly dS^T stored row by row (an MN-major A operand), so no transpose is ever done. The
// 80-row tile (Cfg::dq_transposed) is the exception: no wgmma has M = 80, so it takes dQ^T = K^T
// dS^T and stores dS query-major with stmatrix.trans (issue_dqt, store_ds_query_major).
#pragma once
#include <climits>
#include <cstdint>
#include <type_traits>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/dq_writer.cuh"
#include "hopper/bwd/probe.cuh"
#include "hopper/bwd/scheduler.cuh"
#include "hopper/bwd/variant.cuh"
#include "hopper/common/mask.cuh"
#include "hopper/common/numeric.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/ldmatrix.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/special_registers.cuh"
#include "hopper/ptx/stmatrix.cuh"
#include "hopper/ptx/wgmma.cuh"
#include "hopper/ptx/wgmma_mma.cuh"

namespace fa4::hopper {

// X's rows [64r, 64r + 64), head-dim columns [0, 64), as the register A operand of four k16
// wgmma steps (BwdTile::k_in_registers): register 4 kk + m holds ldmatrix matrix m of step kk
// (rows + 8 (m % 2), columns 16 kk + 8 (m / 2)), the accumulator layout's fragment order.
template <class Cfg>
__device__ __forceinline__ void load_a_frags(uint32_t (&frag)[Cfg::k_frag_regs()], const uint8_t* x_tile, int r,
                                             int warp, int lane) {
  static_assert(Cfg::k_frag_regs() == 16, "four k16 steps of four registers");
  const int m = lane / 8;
  const int row = 64 * r + 16 * warp + lane % 8 + 8 * (m % 2);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t f[4];
    ldmatrix_x4(f, x_tile + sw128_offset(row, 16 * kk + 8 * (m / 2), Cfg::chunk_bytes_kv()));
#pragma unroll
    for (int u = 0; u < 4; ++u) frag[4 * kk + u] = f[u];
  }
}

// Acc^T (64 key rows x N query columns) = X Y^T over the head dim, X = K or V rows [64r, 64r+64)
// (K-major, block_n-row chunks), Y = this step's Q or dO columns [col0, col0 + N) (K-major,
// block_m-row chunks). KF = k_frag_regs(): X's first 64 columns come from x_frag (load_a_frags;
// an RS wgmma), the rest from shared memory; KF = 1: all of X from shared memory (x_frag
// unused). Caller fences and commits.
template <class T, class Cfg, int N, int KF>
__device__ __forceinline__ void issue_transposed_scores(float (&acc)[N / 2], const uint8_t* x_tile, int r,
                                                        const uint8_t* y_tile, int col0, const uint32_t (&x_frag)[KF]) {
  static_assert(KF == 1 || (KF == Cfg::k_frag_regs() && !Cfg::dq_transposed()), "register X: 64-row tiles");
  using Tag = typename WgmmaTag<T>::type;
  // dq_transposed: X's descriptors as Y's plus the byte distance (both K-major, the same fields):
  // Y's ring stage makes them loop-variant, so they are formed per step on the uniform datapath.
  // As loop invariants, X's 8 descriptors (and dQ^T's) stayed live across the step loop of the
  // 80-row tile, whose 208 accumulator registers left no room: 152 B of spills, 12 local loads
  // and stores a step (ptxas -v, SASS). The 64-row tiles keep X's own descriptors. y0: Y's first
  // chunk at col0, also the RS steps' B.
  const auto y0 = MmaSmemDescriptor::sw128(y_tile + col0 * 128, 0);
  const int64_t x_minus_y =
      (int64_t(smem_addr(x_tile + r * 64 * 128)) - int64_t(smem_addr(y_tile + col0 * 128))) / 16;
#pragma unroll
  for (int kk = 0; kk < Cfg::head_dim() / 16; ++kk) {
    const int chunk = kk / 4;
    const uint32_t within = (kk % 4) * 32;  // 16 elements = 32 bytes inside a swizzle row
    uint64_t a, b;
    if constexpr (KF > 1) {
      if (kk < 4) {
        b = y0.plus_bytes(within).bits;  // chunk 0 of Y
        const uint32_t frag[4] = {x_frag[4 * kk], x_frag[4 * kk + 1], x_frag[4 * kk + 2], x_frag[4 * kk + 3]};
        WgmmaRS<Tag, N>::template mma<0>(acc, frag, b, kk > 0 ? 1u : 0u);
        continue;
      }
    }
    if constexpr (Cfg::dq_transposed()) {
      b = y0.plus_bytes(chunk * Cfg::chunk_bytes_q() + within).bits;
      a = b + uint64_t(x_minus_y + chunk * (int64_t(Cfg::chunk_bytes_kv()) - int64_t(Cfg::chunk_bytes_q())) / 16);
    } else {
      a = MmaSmemDescriptor::sw128(x_tile + chunk * Cfg::chunk_bytes_kv() + r * 64 * 128, 0).plus_bytes(within).bits;
      b = MmaSmemDescriptor::sw128(y_tile + chunk * Cfg::chunk_bytes_q() + col0 * 128, 0).plus_bytes(within).bits;
    }
    WgmmaSS<Tag, N>::template mma<0, 0>(acc, a, b, kk > 0 ? 1u : 0u);
  }
}

// Acc (64 key rows x dkv_cols) += A (64 key rows x block_m queries, from registers: P^T or dS^T
// in the accumulator layout) * Y (block_m queries x head-dim columns [col0, ...), MN-major:
// dO or Q). Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void issue_dkv_rs(float (&acc)[Cfg::dkv_cols() / 2],
                                             const uint32_t (&a)[Cfg::block_m() / 4], const uint8_t* y_tile,
                                             int col0) {
  using Tag = typename WgmmaTag<T>::type;
  const auto b = MmaSmemDescriptor::sw128(y_tile + (col0 / 64) * Cfg::chunk_bytes_q(), Cfg::chunk_bytes_q());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_m() / 16; ++kk) {
    const uint32_t frag[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    WgmmaRS<Tag, Cfg::dkv_cols()>::mma(acc, frag, b.plus_bytes(kk * 16 * 128).bits, 1u);
  }
}

// dQ piece (64 queries [64 qs, ...) x N head-dim columns [col0, ...)) = dS K over the
// block's keys. A = dS: the dS^T tile's chunk qs read MN-major (queries contiguous, keys are
// rows); B = K read MN-major (head-dim columns contiguous, keys are rows). Caller fences, commits.
template <class T, class Cfg, int N>
__device__ __forceinline__ void issue_dq(float (&acc)[N / 2], const uint8_t* ds_tile, int qs,
                                         const uint8_t* k_tile, int col0) {
  using Tag = typename WgmmaTag<T>::type;
  const auto a = MmaSmemDescriptor::sw128(ds_tile + qs * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
  const auto b = MmaSmemDescriptor::sw128(k_tile + (col0 / 64) * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_n() / 16; ++kk) {
    WgmmaSS<Tag, N>::template mma<1, 1>(acc, a.plus_bytes(kk * 16 * 128).bits, b.plus_bytes(kk * 16 * 128).bits,
                                        kk > 0 ? 1u : 0u);
  }
}

// dQ^T piece (head-dim rows [64 c, ...) x all block_m queries) = K^T dS^T over the block's keys
// (dq_transposed: 80 query rows, no M = 80 wgmma). A = K^T: K's chunk c read MN-major (head-dim
// columns contiguous, keys are rows); B = dS^T from the query-major dS tile (keys contiguous:
// K-major, chunks of 64 keys, block_m rows). Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void issue_dqt(float (&acc)[Cfg::block_m() / 2], const uint8_t* k_tile, int c,
                                          const uint8_t* ds_tile) {
  using Tag = typename WgmmaTag<T>::type;
  const auto a = MmaSmemDescriptor::sw128(k_tile + c * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_n() / 16; ++kk) {
    const auto b = MmaSmemDescriptor::sw128(ds_tile + (kk / 4) * Cfg::chunk_bytes_q(), 0).plus_bytes((kk % 4) * 32);
    WgmmaSS<Tag, Cfg::block_m()>::template mma<1, 0>(acc, a.plus_bytes(kk * 16 * 128).bits, b.bits, kk > 0 ? 1u : 0u);
  }
}

// Writes a 64 x N accumulator-layout tile of packed pairs (rows [64r, ...), columns [col0, ...))
// into a dS^T buffer (block_n rows, 64-column chunks, 128B swizzle) with stmatrix (4 x 8 x 8 b16
// per instruction). Matrix m of the x4 = fragment (i = m % 2, j + m / 2): lane l addresses row
// l % 8 of matrix l / 8.
template <class Cfg, int N>
__device__ __forceinline__ void store_pds(uint8_t* tile, const uint32_t (&v)[N / 4], int r, int col0, int warp,
                                          int lane) {
  const int m = lane / 8;
  const int row = 64 * r + 16 * warp + lane % 8 + 8 * (m % 2);
  const uint32_t base = smem_addr(tile);
#pragma unroll
  for (int j = 0; j < N / 8; j += 2) {
    const int col = col0 + 8 * (j + m / 2);
    stmatrix_x4(base + sw128_offset(row, col, Cfg::chunk_bytes_kv()), v[2 * j], v[2 * j + 1], v[2 * j + 2],
                v[2 * j + 3]);
  }
}

// The transpose of store_pds for the query-major dS tile (dq_transposed): this warpgroup's 64 key
// rows [64r, ...) x N query columns of packed pairs go to rows = queries, columns = keys [64r,
// ...) (chunk r, chunk_bytes_q() each, 128B swizzle) with stmatrix.trans: lane l addresses what
// becomes query row l % 8 of matrix l / 8 (fragment i = m % 2, j + m / 2, as store_pds).
template <class Cfg, int N>
__device__ __forceinline__ void store_ds_query_major(uint8_t* tile, const uint32_t (&v)[N / 4], int r, int warp,
                                                     int lane) {
  const int m = lane / 8;
  const int key = 64 * r + 16 * warp + 8 * (m % 2);
  const uint32_t base = smem_addr(tile);
#pragma unroll
  for (int j = 0; j < N / 8; j += 2) {
    const int query = 8 * (j + m / 2) + lane % 8;
    stmatrix_x4_trans(base + sw128_offset(query, key, Cfg::chunk_bytes_q()), v[2 * j], v[2 * j + 1], v[2 * j + 2],
                      v[2 * j + 3]);
  }
}

// Writes a 64 x dkv_cols accumulator (key rows [n0 + 64r, ...) of one kv head, all head-dim
// columns) times `scale` to [batch, seq_k, heads_kv, head_dim] as whole rows; rows past seq_k are
// dropped. In the accumulator's fragment order a thread holds 4 bytes of 8 rows per column group,
// so direct stores write 16 bytes of 8 rows each (128 four-byte stores a thread for dK and dV at
// hd128). Instead each warp stages its own 16 rows through `stage` (this warpgroup's rows of the V
// tile, 128B swizzle, with stmatrix) and reads them back 16 bytes a lane, so one store writes 2
// (hd128) or 4 (hd64) whole rows. The staging rows are the warp's alone (only this warpgroup's
// dP^T products read its V rows, and they have retired), so __syncwarp is the only ordering.
// staged = false (a tile with no steps: V was never loaded, and on the persistent kernel the next
// tile's K/V may be landing in it): zeros, without the staging.
template <class T, class Cfg>
__device__ __forceinline__ void store_dkv_rows(void* out, const float (&acc)[Cfg::dkv_cols() / 2], float scale,
                                               uint8_t* stage, bool staged, const BwdArgs& args, int n0, int r,
                                               int kv_head, int batch, int warp, int lane) {
  static_assert(Cfg::col_splits() == 1, "a warpgroup owns whole dK / dV rows");
  constexpr int kUnits = Cfg::dkv_cols() / 8;  // 16-byte units per row
  constexpr int kRowsPerStore = 32 / kUnits;
  static_assert(32 % kUnits == 0 && 16 % kRowsPerStore == 0, "a warp store covers whole rows");
  if (staged) {
    uint32_t v[Cfg::dkv_cols() / 4];
#pragma unroll
    for (int k = 0; k < Cfg::dkv_cols() / 4; ++k) v[k] = pack2<T>(acc[2 * k] * scale, acc[2 * k + 1] * scale);
    store_pds<Cfg, Cfg::dkv_cols()>(stage, v, r, 0, warp, lane);
    __syncwarp();
  }
  const int unit = lane % kUnits;
#pragma unroll
  for (int it = 0; it < 16 / kRowsPerStore; ++it) {
    const int row = 64 * r + 16 * warp + kRowsPerStore * it + lane / kUnits;  // inside the key block
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (staged) val = *reinterpret_cast<const uint4*>(stage + sw128_offset(row, 8 * unit, Cfg::chunk_bytes_kv()));
    if (n0 + row < args.seq_k) {
      T* dst = static_cast<T*>(out) +
               ((int64_t(batch) * args.seq_k + n0 + row) * args.heads_kv + kv_head) * Cfg::head_dim() + 8 * unit;
      *reinterpret_cast<uint4*>(dst) = val;
    }
  }
  __syncwarp();  // every lane's read of the staging rows is done before they are written again
}

// One step's S^T (X = K, Y = Q) or dP^T (X = V, Y = dO) slice from the ring's current stage: waits
// for the stage's full barrier, issues and commits one wgmma group. Fenced before the issue: a
// wait loop (and ordinary code) sits between it and the previous group. wait = false (a tile no
// query sees, before its empty loop): no barrier wait, the product of whatever the stage holds is
// computed and never read -- so the issue is unconditional (a conditional issue made ptxas
// serialize the pipeline, C7515/C7517, and spill). Nothing writes that stage for this tile.
template <class T, class Cfg, class Ring, int KF>
__device__ __forceinline__ void issue_st_step(float (&st)[Cfg::s_cols() / 2], Ring& q, const uint8_t* sK, int r,
                                              int s_col0, const uint32_t (&k_frag)[KF], bool wait = true) {
  if (wait) q.wait(0);
  wgmma_fence();
  issue_transposed_scores<T, Cfg, Cfg::s_cols()>(st, sK, r, q.get(), s_col0, k_frag);
  wgmma_commit();
}
template <class T, class Cfg, class Ring>
__device__ __forceinline__ void issue_dpt_step(float (&dpt)[Cfg::s_cols() / 2], Ring& dO, const uint8_t* sV, int r,
                                               int s_col0, bool wait = true) {
  if (wait) dO.wait(0);
  wgmma_fence();  // a wait loop sits between the two groups: fence again (else ptxas injects one, C7519)
  const uint32_t no_frag[1] = {0u};
  issue_transposed_scores<T, Cfg, Cfg::s_cols()>(dpt, sV, r, dO.get(), s_col0, no_frag);
  wgmma_commit();
}

// Per 16-bit half of a packed P pair: 0xFFFF where P is not zero, 0 where it is.
template <class T>
__device__ __forceinline__ uint32_t nonzero_halves(uint32_t x) {
  uint32_t m;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("set.ne.u32.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(x), "r"(0u));
  } else {
    asm("set.ne.u32.f16x2 %0, %1, %2;" : "=r"(m) : "r"(x), "r"(0u));
  }
  return m;
}

// Causal: the columns c (relative to query0, the thread's first query column) that key `key`
// hides are exactly c < the returned threshold: all of them for a key past seq_k, else the queries
// before its diagonal (key visible to query iff key <= query + seq_k - seq_q).
__device__ __forceinline__ int bwd_causal_hide_below(const BwdArgs& args, int key, int query0) {
  return key >= args.seq_k ? INT_MAX : key - (args.seq_k - args.seq_q) - query0;
}

// A causal band's left edge: key `key` hides the columns c >= the returned value (the queries
// past key + band_reach); none without a band.
template <class Cfg>
__device__ __forceinline__ int bwd_band_hide_from(const BwdArgs& args, int key, int query0) {
  return bwd_band_bounded<Cfg>(args) ? key - query0 + args.band_reach + 1 : INT_MAX;
}

// The softmax part of a step, on the S^T and dP^T wgmma groups in flight (waits for them in issue
// order): P^T = 2^(S^T * scale * log2 e - lse2[query]), masked entries exactly 0, then
// dS^T = P^T * (dP^T - delta'[query]), both packed to the input dtype for the dV / dK products.
// query0 = this thread's first query column; lse_cols / delta_cols = its vectors in shared memory.
//
// need_mask (a partial tile): masked entries get P = 0 and dS = 0 by select, never by a product
// with 0, so a NaN / Inf in an invisible score or in the dP of an invisible pair (its V or dO row)
// reaches neither.
//   kDense: P = 0 selected inline for keys past seq_k. kCausal: each of the thread's two key rows
//     hides the columns below one threshold (bwd_causal_hide_below) and, for a causal band (hd128
//     only, BwdTile::causal_bands), from a second one on (bwd_band_hide_from): an element costs a
//     compare or two against constants, in a pass of its own after the exponentials (ptxas then
//     issues all of them under the dP^T product at hd64, 34 of 64 with the test inline: +1-3% at
//     hd64 causal; the same pass in the dense kernel cost it 1-3%, docs/hopper-kernels.md part B).
//     dS is cleared after the packing where the packed P is 0 (for a visible entry whose P
//     underflowed to 0, dS = 0 * (dP - delta) is 0 anyway when that is finite).
//   kVariant: the caller follows this (need_mask = false) with bwd_variant_mask_pds.
// SoftCap (kVariant, and kCausal at hd64 / hd128): S' = c tanh(u), u = S * softmax_scale / c; P = 2^(c log2(e) t - lse2)
// and dS = P (dP - delta) (1 - t^2), the chain rule through the cap (softmax_scale is applied to
// dK in the epilogue and to dQ in the postprocess, as without the cap). t replaces S in its
// registers and P is formed in the dS loop, so the cap costs no register.
// The kCausal thresholds of this thread's two key rows (key_row0 and key_row0 + 8) relative to
// query0: columns below hide_below[i] (before the diagonal) or from hide_from[i] on (past a
// band's reach) are hidden.
template <class Cfg>
__device__ __forceinline__ void bwd_causal_thresholds(const BwdArgs& args, int key_row0, int query0,
                                                      int (&hide_below)[2], int (&hide_from)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    hide_below[i] = bwd_causal_hide_below(args, key_row0 + 8 * i, query0);
    hide_from[i] = bwd_band_hide_from<Cfg>(args, key_row0 + 8 * i, query0);
  }
}

template <class T, class Cfg, MaskKind K, bool SoftCap, int NS>
__device__ __forceinline__ void bwd_p_ds(float (&st)[NS / 2], float (&dpt)[NS / 2], uint32_t (&pf)[NS / 4],
                                         uint32_t (&dsf)[NS / 4], const BwdArgs& args, const float* lse_cols,
                                         const float* delta_cols, bool need_mask, int key_row0, int query0) {
  constexpr bool Causal = K == MaskKind::kCausal;
  static_assert(!SoftCap || K != MaskKind::kDense, "soft-capped problems run the kCausal or kVariant mask");
  // The lse pairs are loaded before the S^T wait and the delta pairs before the dP^T wait, so the
  // loads are served while the products run (after each wait, the wait's memory clobber kept
  // them, and their first uses took 10-13% of the warps' stall samples on the hd128 causal
  // step). Where registers allow: S^T slices of up to 80 columns (hd64's 128 spilled 120 B), not
  // the soft cap (P and dS formed after the dP^T wait) nor the persistent kernels (232 registers).
  constexpr bool Prefetch = NS <= 80 && !SoftCap && !Cfg::persistent();
  float2 lse_pair[NS / 8];
  if constexpr (Prefetch) {
#pragma unroll
    for (int j = 0; j < NS / 8; ++j) lse_pair[j] = *reinterpret_cast<const float2*>(lse_cols + 8 * j);
  }
  wgmma_wait<1>();
  fence_regs(st);
  if constexpr (SoftCap) {
    // t = tanh(u) in place of S; P follows in the dS loop (the exponentials move after the dP
    // wait, the MUFU count is the same, and no register holds 1 - t^2 meanwhile).
#pragma unroll
    for (int k = 0; k < NS / 2; ++k) st[k] = tanh_approx(st[k] * args.softcap_scale);
  } else {
#pragma unroll
    for (int j = 0; j < NS / 8; ++j) {
      const float2 l = Prefetch ? lse_pair[j] : *reinterpret_cast<const float2*>(lse_cols + 8 * j);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p = exp2_approx(fmaf(st[4 * j + 2 * i + e], args.scale_log2, -(e ? l.y : l.x)));
          if (K == MaskKind::kDense && need_mask && key_row0 + 8 * i >= args.seq_k) p = 0.f;
          st[4 * j + 2 * i + e] = p;
        }
      }
    }
    if (Causal && need_mask) {
      int hide_below[2], hide_from[2];
      bwd_causal_thresholds<Cfg>(args, key_row0, query0, hide_below, hide_from);
#pragma unroll
      for (int k = 0; k < NS / 2; ++k) {
        const int j = k / 4, i = (k / 2) % 2, e = k % 2;  // element 4j + 2i + e: key row i, column 8j + e
        if (8 * j + e < hide_below[i] || 8 * j + e >= hide_from[i]) st[k] = 0.f;
      }
    }
  }
  float2 delta_pair[NS / 8];
  if constexpr (Prefetch) {
#pragma unroll
    for (int j = 0; j < NS / 8; ++j) delta_pair[j] = *reinterpret_cast<const float2*>(delta_cols + 8 * j);
  }
  wgmma_wait<0>();
  fence_regs(dpt);
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const float2 dl = Prefetch ? delta_pair[j] : *reinterpret_cast<const float2*>(delta_cols + 8 * j);
    float2 l;
    if constexpr (SoftCap) l = *reinterpret_cast<const float2*>(lse_cols + 8 * j);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = 4 * j + 2 * i + e;
        if constexpr (SoftCap) {
          const float t = st[k];
          const float p = exp2_approx(fmaf(t, args.softcap_log2, -(e ? l.y : l.x)));
          dpt[k] = p * (dpt[k] - (e ? dl.y : dl.x)) * fmaf(-t, t, 1.f);
          st[k] = p;
        } else {
          dpt[k] = st[k] * (dpt[k] - (e ? dl.y : dl.x));
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < NS / 4; ++k) {
    pf[k] = pack2<T>(st[2 * k], st[2 * k + 1]);
    dsf[k] = pack2<T>(dpt[2 * k], dpt[2 * k + 1]);
  }
  if constexpr (SoftCap && Causal) {
    // kCausal with the cap forms P in the dS loop, where the thresholds' registers spilled: the
    // causal select runs here on the packed halves of P (S^T and dP^T are dead by now), and the
    // pass below clears the dS halves it hid.
    if (need_mask) {
      int hide_below[2], hide_from[2];
      bwd_causal_thresholds<Cfg>(args, key_row0, query0, hide_below, hide_from);
#pragma unroll
      for (int k = 0; k < NS / 4; ++k) {
        const int j = k / 2, i = k % 2;  // halves: elements 4j + 2i + e, key row i, column 8j + e
        const bool keep0 = 8 * j >= hide_below[i] && 8 * j < hide_from[i];
        const bool keep1 = 8 * j + 1 >= hide_below[i] && 8 * j + 1 < hide_from[i];
        pf[k] &= (keep0 ? 0x0000ffffu : 0u) | (keep1 ? 0xffff0000u : 0u);
      }
    }
  }
  if (K != MaskKind::kVariant && need_mask) {
#pragma unroll
    for (int k = 0; k < NS / 4; ++k) dsf[k] &= nonzero_halves<T>(pf[k]);
  }
}

// kVariant, a masked step: band, lengths (padding rows and keys) and segment ids, tested after
// the packing on the packed halves of P and dS (S^T and dP^T are dead by then, so the test's
// registers do not compete with them; in the float registers it spilled). One copy of the float
// code serves masked and unmasked steps; this pass follows it on masked ones.
//
// Band and lengths: the queries that see key j are one contiguous range, [row_lo(j), row_hi(j))
// (none for a key past kv_len; padding rows lie past row_hi), so each of the thread's two key rows
// keeps the columns c of that range, relative to query0, by one unsigned compare against its
// width: the same test per element as the causal select. Segment ids add the id compare per
// element, in a rolled loop that loads the query ids, on the steps that need it
// (bwd_variant_step_needs_ids; m0: the step's first query row).
template <class Cfg, int NS>
__device__ __forceinline__ void bwd_variant_mask_pds(uint32_t (&pf)[NS / 4], uint32_t (&dsf)[NS / 4],
                                                     const BwdArgs& args, int key_row0, int query0, int m0,
                                                     uint8_t* smem) {
  constexpr MaskKind K = MaskKind::kVariant;
  // Opaque from here: nothing derived from the thread's rows and columns is hoisted out of the
  // main loop into registers that would stay live across it (ptxas spilled them).
  asm volatile("" : "+r"(key_row0), "+r"(query0));
  // The batch entry's mask, rebuilt here from the warp's shared copy (kept live across the main
  // loop it would cost the consumers a dozen registers they do not have).
  const TileMask<K> mask = bwd_variant_mask<Cfg>(smem, args);
  // Per key row i: the visible columns are [first[i], first[i] + width[i]) relative to query0.
  int first[2];
  uint32_t width[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = key_row0 + 8 * i;
    const bool real = key < mask.kv_len;
    const int lo = real ? mask.row_lo(key) : 0;
    const int hi = real ? mask.row_hi(key) : 0;
    first[i] = lo - query0;
    width[i] = uint32_t(max(hi - lo, 0));
  }
  auto in_band = [&](int col, int i) { return uint32_t(col - first[i]) < width[i]; };
  auto keep_of = [](bool lo, bool hi) { return (lo ? 0x0000ffffu : 0u) | (hi ? 0xffff0000u : 0u); };
  if (mask.q_ids == nullptr || !bwd_variant_step_needs_ids<Cfg>(smem, m0, args.seq_q)) {
    // Pair k = 2j + i holds columns 8j and 8j + 1 of key row i.
#pragma unroll
    for (int k = 0; k < NS / 4; ++k) {
      const int j = k / 2, i = k % 2;
      const uint32_t keep = keep_of(in_band(8 * j, i), in_band(8 * j + 1, i));
      pf[k] &= keep;
      dsf[k] &= keep;
    }
    return;
  }
  // This thread's two key rows' ids.
  int kid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) kid[i] = __ldg(mask.kv_ids + min(key_row0 + 8 * i, args.seq_k - 1));
  // Visibility bits, element 4j + 2i + e, from a rolled loop (unrolled, the scheduler hoisted
  // every column's loads at once and the consumers spilled), then applied to the packed halves.
  using Bits = std::conditional_t<(NS / 2 > 32), uint64_t, uint32_t>;
  Bits vis = 0;
#pragma unroll 1
  for (int j = 0; j < NS / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int qid = __ldg(mask.q_ids + min(query0 + 8 * j + e, args.seq_q - 1));
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const bool visible = in_band(8 * j + e, i) && kid[i] == qid;
        vis |= Bits(visible ? 1 : 0) << (4 * j + 2 * i + e);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < NS / 4; ++k) {
    const uint32_t keep = keep_of((vis >> (2 * k)) & 1, (vis >> (2 * k + 1)) & 1);
    pf[k] &= keep;
    dsf[k] &= keep;
  }
}

// Dense / causal: whether the P / dS code has one copy per need_mask value or one copy testing
// need_mask inline, whichever ptxas allocates best (ptxas -v, causal bf16, with the dS select):
// hd128 one copy 28 spilled bytes, two copies 8; hd64 two copies 40, one copy 4; hd128
// persistent 0 either way, one copy as before (static code within 2% of what it was). With the
// threshold mask hd64 still wants one copy: two spill 20 B and the unmasked one issues 9 of its 64
// exponentials under dP^T instead of all of them.
template <class Cfg>
constexpr bool kBwdSplitMaskedCopy = Cfg::block_m() == 64 && !Cfg::persistent();

// Dense kernels whose step tests need_mask inline (hd64, hd128 persistent) run the key blocks
// without keys past seq_k through a second copy of the tile with no mask code at all
// (bwd_consumer_tile_for picks bwd_consumer_tile<..., KeysPastEnd = false>): hd64's step 684 -> 563 SASS
// instructions, hd128 persistent's 495 -> 426, no spill in either loop. The split-copy hd128
// kernel keeps one tile: a second one spilled in both of its step loops (8 and 6 LDL/STL).
template <class Cfg>
constexpr bool kBwdDenseTileSplit = !kBwdSplitMaskedCopy<Cfg>;

// One consumer warpgroup's work on one tile (key block n0 of kv head `kv_head`, batch `batch`).
// The rings q / dO carry on from the previous tile (persistent kernel) or start fresh; step0 = the
// steps this CTA did before (the dS^T buffer parity runs on across tiles); K/V are awaited on
// kv_full with parity kv_parity; kv_empty (persistent kernel only, else null) gets one arrival
// per consumer warp once its dK/dV staging in V has been read back (a tile with steps only).
// Returns the number of steps done.
//
// KeysPastEnd: whether the tile may hold keys past seq_k (the last key block). Only the dense
// kernels call with false, for every other key block: their steps then compile without the mask,
// which is otherwise tested per step (hd128) or inline per element (hd64, hd128 persistent).
//
// Schedule (Cfg::dq_under_dk(), config.cuh). No wgmma group is in flight across the step loop's
// back edge in either order (ptxas serializes the whole pipeline when one is: C7514/C7515).
//
// dQ under dK, per step t: S^T(t) and dP^T(t) (SS); P and dS; dV(t) (RS) under the dS^T store and
// the P / dS barrier; dQ(t) (SS); wait<1>: dV retired, release dO(t); dK(t) (RS); wait<1>: dQ
// retired, its piece staged under dK; wait<0>: release Q(t). The 80-row tile
// (Cfg::dq_after_dv_retired) waits for dV before issuing dQ^T: wait<0>: release dO(t); dQ^T(t),
// dK(t); wait<1>: dQ^T retired, staged under dK; wait<0>: release Q(t).
//
// Look-ahead: one iteration = the second half of step t and the first half of step t + 1:
//   B(t) = dQ(t);  C = S^T(t+1) from Q's next stage;  wait<1>: B retired;  release Q(t), dO(t);
//   dQ(t) to the shared tile;  D = dP^T(t+1);  then scores_to_ds(t+1): wait<1>: C retired, P^T;
//   wait<0>: D retired, dS^T; A(t+1) = dV, dK RS; dS^T store; barrier; wait<0>.
// So S^T(t+1) and dP^T(t+1) queue behind dQ(t) while the dQ tile is written. The loop runs the
// steps that have a next one, so C and D are unconditional and every path reaches the back edge
// with nothing in flight; the last step's B (and its dQ tile) is peeled after the loop.
template <class T, class Cfg, MaskKind K, bool SoftCap, bool KeysPastEnd, class Ring>
__device__ __forceinline__ int bwd_consumer_tile(int c, uint8_t* smem, uint64_t* kv_full, uint32_t kv_parity,
                                                 uint64_t* kv_empty, Ring& q, Ring& dO, int step0,
                                                 const BwdArgs& args, int n0, int kv_head, int batch) {
  constexpr int NS = Cfg::s_cols();
  constexpr int BM = Cfg::block_m();
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  // Ownership (config.cuh): S^T / dK / dV row group r and column split s; dQ slice (qs, ds).
  const int r = c / Cfg::col_splits();
  const int s = c % Cfg::col_splits();
  const int qs = c % Cfg::dq_row_slices();
  const int ds = c / Cfg::dq_row_slices();
  const int s_col0 = s * NS;                 // first query column of this warpgroup's S^T slice
  const int dkv_col0 = s * Cfg::dkv_cols();  // first head-dim column of its dK / dV
  const int dq_col0 = ds * Cfg::dq_cols();

  uint8_t* sK = smem + Cfg::k_offset();
  uint8_t* sV = smem + Cfg::v_offset();
  uint8_t* sDS = smem + Cfg::ds_offset();
  const float* sLse = reinterpret_cast<const float*>(smem + Cfg::lse_offset());
  const float* sDelta = reinterpret_cast<const float*>(smem + Cfg::delta_offset());

  float dk[Cfg::dkv_cols() / 2];
  float dv[Cfg::dkv_cols() / 2];
#pragma unroll
  for (int i = 0; i < Cfg::dkv_cols() / 2; ++i) dk[i] = dv[i] = 0.f;

  constexpr bool Causal = K == MaskKind::kCausal;
  int m_begin, m_end;
  bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
  // kVariant: the tile's mask facts into the warp's shared copy (variant.cuh).
  if constexpr (K == MaskKind::kVariant) {
    bwd_write_variant_facts<Cfg>(smem, TileMask<K>(args.mask, batch), n0, n0 + Cfg::block_n(),
                                 bwd_q_ranges(args, batch), m_begin, m_end);
  }
  const bool any = m_end > m_begin;
  if (any) mbarrier_wait(kv_full, kv_parity);
  // K's first 64 head-dim columns as S^T's register operand (BwdTile::k_in_registers), loaded once
  // K landed. A grid tile without steps loads whatever K holds (nothing writes it) and never
  // reads the products it feeds.
  constexpr bool KRegs = Cfg::k_in_registers(K == MaskKind::kCausal && !SoftCap);
  uint32_t k_frag[KRegs ? Cfg::k_frag_regs() : 1];
  if constexpr (KRegs) {
    static_assert(!Cfg::persistent(), "the next tile's K may be landing: registers loaded per tile only here");
    load_a_frags<Cfg>(k_frag, sK, r, warp, lane);
  } else {
    k_frag[0] = 0u;
  }
  // The phase probe's thread (a probe build's grid kernel only).
  const bool probe = kBwdPhaseProbe && !Cfg::persistent() && c == 0 && tid == 0;
  if (probe) bwd_probe_mark(args, kBwdProbeKv);

  // This thread's first key row (the second is +8) and the offset of its first query column.
  const int key_row0 = n0 + 64 * r + 16 * warp + lane / 4;
  const int col_in_slice = 2 * (lane % 4);
  const int tile_steps = any ? args.group * (m_end - m_begin) : 0;

  float st[NS / 2];
  float dpt[NS / 2];
  // A step's P and dS, packed into pf / dsf, from its S^T and dP^T in flight (bwd_p_ds waits for
  // them): the step whose first query row is m0, on Q / dO stage `stage`. Both step orders below.
  auto p_and_ds = [&](int m0, int stage, uint32_t (&pf)[NS / 4], uint32_t (&dsf)[NS / 4]) {
    bool need_mask;
    if constexpr (K == MaskKind::kVariant) {
      need_mask = bwd_variant_needs_mask<Cfg>(smem, m0, args.seq_q);
    } else {
      // Causal: the block's last key is past the first row's diagonal, or (a band) the block's
      // last real row is past the reach of its first key.
      static_assert(KeysPastEnd || K == MaskKind::kDense, "only dense tiles drop the seq_k mask");
      need_mask = (KeysPastEnd && n0 + Cfg::block_n() > args.seq_k) ||
                  (Causal && (n0 + Cfg::block_n() - 1 > m0 + args.seq_k - args.seq_q ||
                              (bwd_band_bounded<Cfg>(args) && min(m0 + BM, args.seq_q) - 1 - n0 > args.band_reach)));
    }
    // kDense / kCausal: one copy of the P / dS code per need_mask, so the unmasked one carries no
    // test at all. kVariant: the float code without a mask, then on masked steps the element pass
    // on the packed halves (bwd_variant_mask_pds).
    const float* lse_cols = sLse + stage * BM + s_col0 + col_in_slice;
    const float* delta_cols = sDelta + stage * BM + s_col0 + col_in_slice;
    const int query0 = m0 + s_col0 + col_in_slice;
    if constexpr (K == MaskKind::kVariant) {
      bwd_p_ds<T, Cfg, K, SoftCap, NS>(st, dpt, pf, dsf, args, lse_cols, delta_cols, false, key_row0, query0);
      if (need_mask) bwd_variant_mask_pds<Cfg, NS>(pf, dsf, args, key_row0, query0, m0, smem);
    } else if (kBwdSplitMaskedCopy<Cfg> && need_mask) {
      bwd_p_ds<T, Cfg, K, SoftCap, NS>(st, dpt, pf, dsf, args, lse_cols, delta_cols, true, key_row0, query0);
    } else {
      bwd_p_ds<T, Cfg, K, SoftCap, NS>(st, dpt, pf, dsf, args, lse_cols, delta_cols,
                                       kBwdSplitMaskedCopy<Cfg> ? false : need_mask, key_row0, query0);
    }
  };
  if constexpr (Cfg::dq_under_dk()) {
    // One step: S^T and dP^T; P and dS; dV (RS) under the dS^T store and the P / dS barrier; dQ
    // (SS) behind it (the 80-row tile: once dV retired); once dV retired, dO's stage released and
    // dK (RS) issued; once dQ retired, the dQ piece staged while dK runs (its stores under a
    // register-sourced product, which leaves half the shared-memory bandwidth free); once dK
    // retired, Q's stage released. Nothing is in flight across the loop's back edge.
    auto step_fn = [&](int m0, int step) {
      issue_st_step<T, Cfg>(st, q, sK, r, s_col0, k_frag);
      issue_dpt_step<T, Cfg>(dpt, dO, sV, r, s_col0);
      uint32_t pf[NS / 4];
      uint32_t dsf[NS / 4];
      p_and_ds(m0, q.pipe.stage, pf, dsf);
      uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      // Pins dK/dV before the fence: zeros sunk past wgmma_fence make ptxas inject a
      // warpgroup.arrive (C7519).
      fence_regs(dk);
      fence_regs(dv);
      wgmma_fence();
      issue_dkv_rs<T, Cfg>(dv, pf, dO.get(), dkv_col0);
      wgmma_commit();
      if constexpr (Cfg::dq_transposed()) {
        store_ds_query_major<Cfg, NS>(ds_tile, dsf, r, warp, lane);
      } else {
        store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
      }
      // Generic-proxy stores -> wgmma (async proxy) reads, across both warpgroups.
      fence_proxy_async_smem();
      named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
      // The release test re-reads %tid.x: held across the loop, it cost the 80-row tile a spilled
      // register and two local accesses a step.
      auto release_thread = [] { return kBwdReleaseEveryThread || thread_index_x() % 128 == 0; };
      // dO(t) and delta: every wgmma reading them (dP^T, dV) has retired, and every consumer
      // thread's delta reads fed its dS, stored before the P / dS barrier the releasing thread
      // passed. (The loader refills a stage's Q, then its dO, so dO(t + 2) still waits for Q(t)'s
      // release below; released here, dO's stage is free as soon as it can be.)
      auto release_do = [&] {
        fence_regs(pf);
        fence_regs(dv);
        dO.release(release_thread());
        dO.advance();
      };
      float dq[Cfg::dq_regs()];
      if constexpr (Cfg::dq_after_dv_retired()) {
        wgmma_wait<0>();  // dV retired
        release_do();
      }
      wgmma_fence();
      if constexpr (Cfg::dq_transposed()) {
        issue_dqt<T, Cfg>(dq, sK, dq_col0 / 64, ds_tile);
      } else {
        issue_dq<T, Cfg, Cfg::dq_cols()>(dq, ds_tile, qs, sK, dq_col0);
      }
      wgmma_commit();
      if constexpr (!Cfg::dq_after_dv_retired()) {
        wgmma_wait<1>();  // dV retired (groups retire in order); dQ may run
        release_do();
        wgmma_fence();
      }
      issue_dkv_rs<T, Cfg>(dk, dsf, q.get(), dkv_col0);
      wgmma_commit();
      wgmma_wait<1>();  // dQ retired; dK may run
      fence_regs(dq);
      stage_dq_tile<Cfg>(dq);  // deterministic mode: the writer warp orders the adds
      wgmma_wait<0>();  // dK retired
      fence_regs(dsf);
      fence_regs(dk);
      // Q(t) and lse: S^T and dK have retired; the lse reads fed P before the barrier.
      q.release(release_thread());
      q.advance();
    };

    int m = m_begin;
    // The probe's events in this order: FirstStep after the whole first step (or at once for a
    // tile without steps), LoopEnd = LastDq after the last.
    if (probe && tile_steps == 0) bwd_probe_mark(args, kBwdProbeFirstStep);
    for (int step = step0; step < step0 + tile_steps; ++step) {
      step_fn(m * BM, step);
      if (probe && step == step0) bwd_probe_mark(args, kBwdProbeFirstStep);
      if (++m == m_end) m = m_begin;
    }
    if (probe) {
      bwd_probe_mark(args, kBwdProbeLoopEnd);
      bwd_probe_mark(args, kBwdProbeLastDq);
    }
  } else {
    auto scores_to_ds = [&](int m0, int stage, int step) {
      uint32_t pf[NS / 4];
      uint32_t dsf[NS / 4];
      p_and_ds(m0, stage, pf, dsf);
      uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      // Pins dK/dV (their zeroing, in the peeled first call) before the fence: zeros sunk past
      // wgmma_fence make ptxas inject a warpgroup.arrive (C7519). No-op in the loop.
      fence_regs(dk);
      fence_regs(dv);
      wgmma_fence();
      issue_dkv_rs<T, Cfg>(dv, pf, dO.get(), dkv_col0);
      issue_dkv_rs<T, Cfg>(dk, dsf, q.get(), dkv_col0);
      wgmma_commit();
      if constexpr (Cfg::dq_transposed()) {
        store_ds_query_major<Cfg, NS>(ds_tile, dsf, r, warp, lane);
      } else {
        store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
      }
      // Generic-proxy stores -> wgmma (async proxy) reads, across both warpgroups.
      fence_proxy_async_smem();
      named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
      wgmma_wait<0>();  // A retired (it had the store and the barrier to run in)
      fence_regs(pf);
      fence_regs(dsf);
      fence_regs(dk);
      fence_regs(dv);
    };

    issue_st_step<T, Cfg>(st, q, sK, r, s_col0, k_frag, tile_steps > 0);
    issue_dpt_step<T, Cfg>(dpt, dO, sV, r, s_col0, tile_steps > 0);
    if (tile_steps > 0) {
      scores_to_ds(m_begin * BM, q.pipe.stage, step0);
    } else {
      wgmma_wait<0>();
    }
    if (probe) bwd_probe_mark(args, kBwdProbeFirstStep);
    // Group B of step `step`: dQ(t), then (with the next step's S^T, group C, in flight behind it
    // when there is a next step: LookAhead) Q(t) and dO(t) released and the dQ tile staged.
    // (`step` = step0 + the step inside this tile: the dS^T buffer of the step.)
    auto dq_step = [&](int step, auto look_ahead) {
      constexpr bool LookAhead = decltype(look_ahead)::value;
      uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      wgmma_fence();
      float dq[Cfg::dq_regs()];
      if constexpr (Cfg::dq_transposed()) {
        issue_dqt<T, Cfg>(dq, sK, dq_col0 / 64, ds_tile);
      } else {
        issue_dq<T, Cfg, Cfg::dq_cols()>(dq, ds_tile, qs, sK, dq_col0);
      }
      wgmma_commit();
      if constexpr (LookAhead) {
        // Group C: the next step's S^T.
        Ring q_next = q;
        q_next.advance();
        issue_st_step<T, Cfg>(st, q_next, sK, r, s_col0, k_frag);
        wgmma_wait<1>();  // B retired (groups retire in order); C may run
      } else {
        wgmma_wait<0>();
      }
      fence_regs(dq);

      // Q(t), dO(t) and their vectors: every wgmma reading them (S^T, dP^T, A, B) has retired.
      // Every consumer thread's lse / delta reads of this stage fed its P / dS, which it stored
      // before the P / dS named barrier of scores_to_ds(t): the elected thread arrives after that
      // barrier, with every read's value already consumed (no load in flight).
      q.release(kBwdReleaseEveryThread || elected);
      dO.release(kBwdReleaseEveryThread || elected);
      q.advance();
      dO.advance();

      stage_dq_tile<Cfg>(dq);  // deterministic mode: the writer warp orders the adds
    };
    int m = m_begin;
    for (int step = step0; step < step0 + tile_steps - 1; ++step) {
      dq_step(step, std::true_type{});
      // Group D: the next step's dP^T (dO has advanced to its stage).
      issue_dpt_step<T, Cfg>(dpt, dO, sV, r, s_col0);
      if (++m == m_end) m = m_begin;
      scores_to_ds(m * BM, q.pipe.stage, step + 1);
    }
    if (probe) bwd_probe_mark(args, kBwdProbeLoopEnd);
    // The last step's group B alone, peeled: no look-ahead S^T and dP^T on a stage nobody loads.
    if (tile_steps > 0) {
      dq_step(step0 + tile_steps - 1, std::false_type{});
      fence_regs(dk);  // the epilogue reads them: not before this wait
      fence_regs(dv);
    }
    if (probe) bwd_probe_mark(args, kBwdProbeLastDq);
  }

  // Epilogue: dK = softmax_scale * dS^T Q summed over the group, dV = P^T dO; rows past seq_k
  // dropped. A key block no query sees (seq_q == 0, causal rows before the diagonal, or a
  // variant's band, lengths and segments) writes zeros. Staged through this warpgroup's V rows:
  // no wgmma of it reads K/V any more (every path above ends in a wait<0>).
  store_dkv_rows<T, Cfg>(args.dv, dv, 1.f, sV, any, args, n0, r, kv_head, batch, warp, lane);
  if (probe) bwd_probe_mark(args, kBwdProbeDvOut);
  store_dkv_rows<T, Cfg>(args.dk, dk, args.softmax_scale, sV, any, args, n0, r, kv_head, batch, warp, lane);
  if (probe) {
    bwd_probe_mark(args, kBwdProbeDkOut);
    bwd_probe_mark(args, kBwdProbeSteps, tile_steps);
  }
  // Persistent: this warp's staging reads are done (the __syncwarp ending the stores), so the
  // producer may load the next tile's K/V (kv_empty counts one arrival per consumer warp). The
  // next K/V lands by TMA (async proxy) over the generic-proxy stmatrix writes: each thread fences
  // its own writes before the warp's arrival.
  if (kv_empty != nullptr && any) {
    fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(kv_empty);
  }
  return tile_steps;
}

// The kernels' entry to bwd_consumer_tile: dense kernels with kBwdDenseTileSplit run a key block
// with no key past seq_k (all but the last) through the mask-free copy, everything else the
// masked one. Arguments as bwd_consumer_tile's.
template <class T, class Cfg, MaskKind K, bool SoftCap, class Ring>
__device__ __forceinline__ int bwd_consumer_tile_for(int c, uint8_t* smem, uint64_t* kv_full, uint32_t kv_parity,
                                                     uint64_t* kv_empty, Ring& q, Ring& dO, int step0,
                                                     const BwdArgs& args, int n0, int kv_head, int batch) {
  if constexpr (K == MaskKind::kDense && kBwdDenseTileSplit<Cfg>) {
    if (n0 + Cfg::block_n() <= args.seq_k)
      return bwd_consumer_tile<T, Cfg, K, SoftCap, false>(c, smem, kv_full, kv_parity, kv_empty, q, dO, step0, args,
                                                          n0, kv_head, batch);
  }
  return bwd_consumer_tile<T, Cfg, K, SoftCap, true>(c, smem, kv_full, kv_parity, kv_empty, q, dO, step0, args, n0,
                                                     kv_head, batch);
}

}  // namespace fa4::hopper
