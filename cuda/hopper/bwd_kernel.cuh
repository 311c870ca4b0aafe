// The Hopper backward attention kernels (DESIGN.md section 3, FA3's structure: hopper reference
// notes section 4.2). Three launches on one stream:
//
// 1. bwd_preprocess: per query row, delta' = rowsum(dO * O) - dlse and lse2 = lse * log2(e), both
//    float32 into padded [batch, heads_q, seq_q_pad] scratch rows (the padding and the rows that
//    see no key get lse2 = +inf, delta' = 0, so they contribute exactly nothing: P = 2^-inf = 0).
//    The float32 dQ accumulator (and the dq semaphores after it) is zeroed with cudaMemsetAsync
//    before it.
// 2. bwd_kernel: one CTA per (key block of block_n rows, kv head, batch); it loops over every q
//    head of its GQA group and every query block (block_m rows) that sees its keys.
//      warpgroup 0  producer: one thread loads K and V once, then streams (Q, lse2) and
//                   (dO, delta') per step through two TMA rings of q_stages buffers (the
//                   forward's StagedPipeline / TmaConsumerPipeline; lse2 and delta' ride on the
//                   same full barriers by a 1-D bulk copy). Registers lowered with setmaxnreg.
//      warpgroups 1, 2  consumers (bwd_config.cuh says who owns what). Per step:
//                   S^T = K Q^T and dP^T = V dO^T (SS wgmma, both issued before either is read),
//                   P^T = 2^(S^T * scale * log2 e - lse2) (masked), dS^T = P^T * (dP^T - delta'),
//                   dV += P^T dO and dK += dS^T Q (RS wgmma from registers, or SS through shared
//                   memory at hd256), dS^T to shared memory, one named barrier over both
//                   warpgroups, dQ = dS K (SS wgmma, both operands MN-major) and the dQ tile added
//                   to the float32 accumulator with red.global.add.v2.f32.
//                   dK (times softmax_scale) and dV stay in registers for the whole loop and are
//                   written once at the end, summed over the q heads of the group (GQA).
// 3. bwd_postprocess: dQ = softmax_scale * dq_accum, converted to the input dtype.
//
// Working with transposed scores (S^T rather than S, FA3's SdP_swapAB) makes P^T and dS^T come
// out of the wgmma in the accumulator layout of the A operand of dV/dK, so they never leave the
// registers for those two products; dQ needs dS with keys as the reduction dimension, which is
// exactly dS^T stored row by row (an MN-major A operand), so no transpose is ever done.
//
// Determinism: the float32 adds into dQ (red.global, or the bulk reduce-add of DqViaTma) arrive in
// an order set by the hardware, so dq can differ in its last bits between runs (dk and dv never do:
// one CTA sums them in registers in a fixed order). With args.deterministic (a runtime flag: one
// instantiation serves both modes) the adds of each (batch, q head, query block m) are ordered by
// key block, FA3's scheme: an int32 semaphore per (batch, q head, query block), zeroed with
// dq_accum, counts the key blocks that have added; a key block waits until it equals its rank
// (bwd_dq_rank), adds its whole tile, makes the adds visible, and stores rank + 1. The key blocks
// that visit m are exactly n = 0 .. n_last(m) (bwd_m_range's first query block never decreases
// with n); non-causal ranks them n, causal n_last(m) - n (descending: the highest key block reaches
// m first) with the key blocks launched last-first (bwd_key_block). Either way a CTA only waits
// for CTAs of lower blockIdx.x, dispatched before it. Without DqViaTma the consumers do this
// (dq_tile_wait / dq_tile_signal around add_dq_tile); with it the writer warp does (bwd_dq_writer),
// the consumers are unchanged; likewise DqInRing's writer (bwd_dq_ring_writer), which frees the
// ring stage only after the handshake.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "hopper/bulk_copy.cuh"
#include "hopper/bwd_config.cuh"
#include "hopper/bwd_launch.h"
#include "hopper/bwd_wgmma.cuh"
#include "hopper/global_reduce.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/pipeline.cuh"
#include "hopper/release_acquire.cuh"
#include "hopper/stmatrix.cuh"
#include "hopper/sync.cuh"
#include "hopper/tensor_map.h"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"
#include "hopper/wgmma_mma.cuh"

namespace fa4::hopper {

struct BwdArgs {
  float* dq_accum;     // [batch, heads_q, seq_q_pad, head_dim], zeroed before the main kernel
  int* dq_sem;         // [batch, heads_q, seq_q_pad / 64], zeroed with dq_accum (deterministic mode)
  const float* lse2;   // [batch, heads_q, seq_q_pad]: lse * log2(e); +inf where P must be 0
  const float* delta;  // [batch, heads_q, seq_q_pad]: rowsum(dO * O) - dlse; 0 in the padding
  void* dk;            // [batch, seq_k, heads_kv, head_dim], q's dtype
  void* dv;
  int seq_q, seq_k, seq_q_pad, heads_q, heads_kv;
  int group;           // heads_q / heads_kv
  float scale_log2;    // softmax_scale * log2(e)
  float softmax_scale;
  bool deterministic;  // order the dQ adds of each query block by key block (bitwise repeatable dq)
  // Launch options (BwdLaunchOptions; 0 in the library's launch): pdl = launched as a programmatic
  // dependent of the preprocess (griddepcontrol.wait before touching lse2 / delta / dq_accum);
  // lpt_section > 0 = 1-D grid of n_blocks * heads_kv * batch CTAs in the sectioned
  // longest-first order of bwd_block_coords.
  int pdl;
  int lpt_section;
  int n_blocks;
  int batch;
  int* tile_counter;   // the persistent kernel's tile counter (workspace, zeroed with dq_sem)
};

// PTX griddepcontrol (sm_90): wait until the prerequisite grid has completed and its memory is
// visible / let the dependent grid be scheduled. Only called when the launch used
// cudaLaunchAttributeProgrammaticStreamSerialization (args.pdl).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The CTA's (key block, kv head, batch). lpt_section == 0: grid (key blocks, kv heads, batch).
// Else a 1-D grid: the (batch, kv head) pairs hb = batch * heads_kv + kv_head are cut into sections
// of lpt_section consecutive pairs (the last may be shorter), sections in order, and inside a
// section key block n major, pair minor: every pair's block 0 (under a causal mask the longest:
// it sees every query block) first, the last-dispatched CTAs the shortest.
__device__ __forceinline__ void bwd_block_coords(const BwdArgs& args, int* n_block, int* kv_head, int* batch) {
  if (args.lpt_section == 0) {
    *n_block = blockIdx.x;
    *kv_head = blockIdx.y;
    *batch = blockIdx.z;
    return;
  }
  const int id = blockIdx.x;
  const int pairs = args.heads_kv * args.batch;
  const int per_section = args.lpt_section * args.n_blocks;
  const int section = id / per_section;
  const int rem = id - section * per_section;
  const int first = section * args.lpt_section;
  const int width = min(args.lpt_section, pairs - first);
  const int hb = first + rem % width;
  *n_block = rem / width;
  *batch = hb / args.heads_kv;
  *kv_head = hb - *batch * args.heads_kv;
}

template <class T> struct BwdMmaTag;
template <> struct BwdMmaTag<__nv_bfloat16> { using type = Bf16; };
template <> struct BwdMmaTag<__half> { using type = F16; };

// Named barrier ids (0 is __syncthreads): both consumer warpgroups, once per step, after P^T/dS^T
// are in shared memory.
constexpr uint32_t kBwdBarPds = 1;
constexpr uint32_t kBwdConsumerThreads = 256;
// DqViaTma: the shared dQ tile's full (consumers arrive, writer warp syncs) and empty (writer
// arrives, consumers sync) barriers, both counting the two consumer warpgroups + the writer warp.
constexpr uint32_t kBwdBarDqFull = 2;
constexpr uint32_t kBwdBarDqEmpty = 3;
constexpr uint32_t kBwdDqBarrierThreads = kBwdConsumerThreads + 32;
// DqInRing: the "dQ piece staged" barriers of even and odd steps (ids 2 and 3; that variant has no
// DqFull / DqEmpty), same 288 threads: consumers arrive, the writer warp syncs.
constexpr uint32_t kBwdBarDqRing = 2;
// Deterministic mode without DqViaTma: both consumer warpgroups, twice per step, around the dQ
// adds (dq_tile_wait, dq_tile_signal).
constexpr uint32_t kBwdBarDq = 4;
// SplitSdP (variant 20): P^T of the step is in shared memory (warpgroup 0 stored it, warpgroup 1
// reads it back for dS^T; both then issue dV): both consumer warpgroups, bar.sync, once per step.
constexpr uint32_t kBwdBarPReady = 5;

template <class T>
__device__ __forceinline__ uint32_t bwd_pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// The inverse of bwd_pack2: two 16-bit values to floats (lo, hi).
template <class T>
__device__ __forceinline__ float2 bwd_unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// 2^x on the special-function unit; 2^-inf = +0.
__device__ __forceinline__ float bwd_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Byte offset of element (row, col) in a tile stored as 64-column chunks of `chunk_bytes`, rows
// of 128 bytes, 128-byte swizzle (the 16-byte unit index XORed with row % 8) -- the layout TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B and the wgmma sw128 descriptors read. The tile base must
// be 1024-byte aligned.
__device__ __forceinline__ uint32_t sw128_offset(int row, int col, uint32_t chunk_bytes) {
  const int c = col % 64;
  return uint32_t(col / 64) * chunk_bytes + uint32_t(row) * 128 + uint32_t(((c / 8) ^ (row % 8)) * 16) +
         uint32_t(c % 8) * 2;
}

// ---------------------------------------------------------------------------------------------
// Producer: one step's row tile (Q or dO, block_m x head_dim by TMA) and its float vector (lse2 or
// delta', block_m floats by 1-D bulk copy) into the next free stage of a ring, one full barrier.
// ---------------------------------------------------------------------------------------------
template <class Cfg, class Ring>
__device__ __forceinline__ void load_row_step(Ring& ring, uint8_t* tiles, float* vecs, const CUtensorMap* map,
                                              const float* vec_src, int row0, int head, int batch) {
  // Parity trick (as in TmaProducerPipeline::load): a fresh barrier's previous phase counts as
  // complete, so the first lap passes at once.
  mbarrier_wait(&ring.bars->empty[ring.stage], ring.phase ^ 1);
  uint64_t* full = &ring.bars->full[ring.stage][0];
  mbarrier_arrive_expect_tx(full, Cfg::q_tile_bytes() + Cfg::vec_bytes());
  uint8_t* tile = tiles + ring.stage * Cfg::q_tile_bytes();
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(tile + c * Cfg::chunk_bytes_q(), map, full, c * 64, row0, head, batch);
  }
  bulk_load_1d(vecs + ring.stage * Cfg::block_m(), vec_src, Cfg::vec_bytes(), full);
  ring.advance();
}

// The loader thread's whole job for one key block: K and V once (one full barrier), then per step
// (every q head of the group, query blocks m_begin .. m_end) the Q row tile with lse2 and the dO
// row tile with delta' into their rings (whatever their stage counts).
template <class Cfg, int QStages, int DoStages>
__device__ __forceinline__ void bwd_load_tiles(uint8_t* smem, uint64_t* kv_full,
                                               typename StagedPipeline<QStages, 1>::Barriers* q_bars,
                                               typename StagedPipeline<DoStages, 1>::Barriers* do_bars,
                                               const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                               const CUtensorMap* tm_v, const CUtensorMap* tm_do,
                                               const BwdArgs& args, int n0, int kv_head, int batch, int m_begin,
                                               int m_end) {
  mbarrier_arrive_expect_tx(kv_full, 2 * Cfg::kv_tile_bytes());
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(smem + Cfg::k_offset() + c * Cfg::chunk_bytes_kv(), tm_k, kv_full, c * 64, n0, kv_head, batch);
  }
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(smem + Cfg::v_offset() + c * Cfg::chunk_bytes_kv(), tm_v, kv_full, c * 64, n0, kv_head, batch);
  }
  // PDL: K and V (inputs) are already on their way; lse2 / delta' come from the preprocess.
  if (args.pdl) griddep_wait();
  StagedPipeline<QStages, 1> q_ring{q_bars};
  StagedPipeline<DoStages, 1> do_ring{do_bars};
  float* sLse = reinterpret_cast<float*>(smem + Cfg::lse_offset());
  float* sDelta = reinterpret_cast<float*>(smem + Cfg::delta_offset());
  for (int g = 0; g < args.group; ++g) {
    const int head = kv_head * args.group + g;
    const int64_t vec_row = (int64_t(batch) * args.heads_q + head) * args.seq_q_pad;
    for (int m = m_begin; m < m_end; ++m) {
      const int m0 = m * Cfg::block_m();
      load_row_step<Cfg>(q_ring, smem + Cfg::q_offset(), sLse, tm_q, args.lse2 + vec_row + m0, m0, head, batch);
      load_row_step<Cfg>(do_ring, smem + Cfg::do_offset(), sDelta, tm_do, args.delta + vec_row + m0, m0, head,
                         batch);
    }
  }
}

// The key block's first query block (causal: the earlier ones see none of its keys) and the end.
template <class Cfg, bool Causal>
__device__ __forceinline__ void bwd_m_range(const BwdArgs& args, int n0, int* m_begin, int* m_end) {
  *m_end = (args.seq_q + Cfg::block_m() - 1) / Cfg::block_m();
  // Bottom-right causal: query i sees key j iff j <= i + seq_k - seq_q, so the first query that
  // sees key n0 is n0 - (seq_k - seq_q).
  *m_begin = Causal ? max(0, n0 - (args.seq_k - args.seq_q)) / Cfg::block_m() : 0;
}

// The key block this CTA owns. Deterministic causal launches key blocks last-first, so that every
// CTA one waits on (those before it in a query block's order, bwd_dq_rank) was dispatched earlier.
template <bool Causal>
__device__ __forceinline__ int bwd_key_block(const BwdArgs& args) {
  return Causal && args.deterministic ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
}

// Deterministic mode: key block n's place in the order of the dQ adds to query block m. The key
// blocks visiting m are n = 0 .. n_last(m) (bwd_m_range: n visits m iff n * block_n < x below).
// Non-causal adds them in index order; causal in descending order, because the highest key block
// reaches m first (its first query block is the latest), so in steady state nobody waits (in
// index order every CTA would wait at its diagonal for all lower key blocks, halving throughput).
template <class Cfg, bool Causal>
__device__ __forceinline__ int bwd_dq_rank(const BwdArgs& args, int n, int m) {
  if constexpr (Causal) {
    const int x = (m + 1) * Cfg::block_m() + args.seq_k - args.seq_q;  // > n * block_n >= 0
    return min(int(gridDim.x) - 1, (x - 1) / Cfg::block_n()) - n;
  } else {
    return n;
  }
}

// ---------------------------------------------------------------------------------------------
// Consumer pieces
// ---------------------------------------------------------------------------------------------

// Acc^T (64 key rows x N query columns) = X Y^T over the head dim, X = K or V rows [64r, 64r+64)
// (K-major, block_n-row chunks), Y = this step's Q or dO columns [col0, col0 + N) (K-major,
// block_m-row chunks). Caller fences and commits.
template <class T, class Cfg, int N>
__device__ __forceinline__ void issue_transposed_scores(float (&acc)[N / 2], const uint8_t* x_tile, int r,
                                                        const uint8_t* y_tile, int col0) {
  using Tag = typename BwdMmaTag<T>::type;
#pragma unroll
  for (int kk = 0; kk < Cfg::head_dim() / 16; ++kk) {
    const int chunk = kk / 4;
    const uint32_t within = (kk % 4) * 32;  // 16 elements = 32 bytes inside a swizzle row
    const auto a = MmaSmemDescriptor::sw128(x_tile + chunk * Cfg::chunk_bytes_kv() + r * 64 * 128, 0)
                       .plus_bytes(within);
    const auto b = MmaSmemDescriptor::sw128(y_tile + chunk * Cfg::chunk_bytes_q() + col0 * 128, 0)
                       .plus_bytes(within);
    WgmmaSSMajor<Tag, N>::template mma<0, 0>(acc, a.bits, b.bits, kk > 0 ? 1u : 0u);
  }
}

// Acc (64 key rows x dkv_cols) += A (64 key rows x block_m queries, from registers: P^T or dS^T
// in the accumulator layout) * Y (block_m queries x head-dim columns [col0, ...), MN-major:
// dO or Q). Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void issue_dkv_rs(float (&acc)[Cfg::dkv_cols() / 2],
                                             const uint32_t (&a)[Cfg::block_m() / 4], const uint8_t* y_tile,
                                             int col0) {
  using Tag = typename BwdMmaTag<T>::type;
  const auto b = MmaSmemDescriptor::sw128(y_tile + (col0 / 64) * Cfg::chunk_bytes_q(), Cfg::chunk_bytes_q());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_m() / 16; ++kk) {
    const uint32_t frag[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    WgmmaRS<Tag, Cfg::dkv_cols()>::mma(acc, frag, b.plus_bytes(kk * 16 * 128).bits, 1u);
  }
}

// The same product with A = rows [64r, 64r + 64) of P^T or dS^T in shared memory (K-major: query
// columns contiguous, block_n-row chunks of 64 queries).
template <class T, class Cfg>
__device__ __forceinline__ void issue_dkv_ss(float (&acc)[Cfg::dkv_cols() / 2], const uint8_t* a_tile, int r,
                                             const uint8_t* y_tile, int col0) {
  using Tag = typename BwdMmaTag<T>::type;
  const auto b = MmaSmemDescriptor::sw128(y_tile + (col0 / 64) * Cfg::chunk_bytes_q(), Cfg::chunk_bytes_q());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_m() / 16; ++kk) {
    const auto a = MmaSmemDescriptor::sw128(a_tile + (kk / 4) * Cfg::chunk_bytes_kv() + r * 64 * 128, 0)
                       .plus_bytes((kk % 4) * 32);
    WgmmaSSMajor<Tag, Cfg::dkv_cols()>::template mma<0, 1>(acc, a.bits, b.plus_bytes(kk * 16 * 128).bits, 1u);
  }
}

// dQ piece (64 queries [64 qs, ...) x N head-dim columns [col0, ...)) = dS K over the
// block's keys. A = dS: the dS^T tile's chunk qs read MN-major (queries contiguous, keys are
// rows); B = K read MN-major (head-dim columns contiguous, keys are rows). Caller fences, commits.
template <class T, class Cfg, int N>
__device__ __forceinline__ void issue_dq(float (&acc)[N / 2], const uint8_t* ds_tile, int qs,
                                         const uint8_t* k_tile, int col0) {
  using Tag = typename BwdMmaTag<T>::type;
  const auto a = MmaSmemDescriptor::sw128(ds_tile + qs * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
  const auto b = MmaSmemDescriptor::sw128(k_tile + (col0 / 64) * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_n() / 16; ++kk) {
    WgmmaSSMajor<Tag, N>::template mma<1, 1>(acc, a.plus_bytes(kk * 16 * 128).bits,
                                             b.plus_bytes(kk * 16 * 128).bits, kk > 0 ? 1u : 0u);
  }
}

// Writes a 64 x N accumulator-layout tile of packed pairs (rows [64r, ...), columns [col0, ...))
// into a P^T / dS^T buffer (block_n rows, 64-column chunks, 128B swizzle).
template <class Cfg, int N>
__device__ __forceinline__ void store_pds(uint8_t* tile, const uint32_t (&v)[N / 4], int r, int col0, int warp,
                                          int lane) {
  if constexpr (Cfg::stsm_pds()) {
    // Matrix m of the x4 = fragment (i = m % 2, j + m / 2): lane l addresses row l % 8 of matrix l / 8.
    const int m = lane / 8;
    const int row = 64 * r + 16 * warp + lane % 8 + 8 * (m % 2);
    const uint32_t base = smem_addr(tile);
#pragma unroll
    for (int j = 0; j < N / 8; j += 2) {
      const int col = col0 + 8 * (j + m / 2);
      stmatrix_x4(base + sw128_offset(row, col, Cfg::chunk_bytes_kv()), v[2 * j], v[2 * j + 1], v[2 * j + 2],
                  v[2 * j + 3]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = 64 * r + 16 * warp + lane / 4 + 8 * i;
        const int col = col0 + 8 * j + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(tile + sw128_offset(row, col, Cfg::chunk_bytes_kv())) = v[2 * j + i];
      }
    }
  }
}

// The inverse of store_pds (SplitSdP): the same thread reads back the same packed pairs, so a tile
// stored by one warpgroup comes back in the other's accumulator layout, element for element.
template <class Cfg, int N>
__device__ __forceinline__ void load_pds(uint32_t (&v)[N / 4], const uint8_t* tile, int r, int col0, int warp,
                                         int lane) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = 64 * r + 16 * warp + lane / 4 + 8 * i;
      const int col = col0 + 8 * j + 2 * (lane % 4);
      v[2 * j + i] = *reinterpret_cast<const volatile uint32_t*>(tile + sw128_offset(row, col, Cfg::chunk_bytes_kv()));
    }
  }
}

// Adds this warpgroup's dQ slice to the float32 accumulator (rows past seq_q land in the padding,
// which is never read back, and hold exact zeros anyway since their P is 0).
template <class Cfg, int N>
__device__ __forceinline__ void add_dq_tile(float* dq_rows, const float (&dq)[N / 2], int row0, int col0, int warp,
                                            int lane) {
  // One base pointer; every (i, j) is a compile-time offset from it (no per-element addresses).
  float* base = dq_rows + int64_t(row0 + 16 * warp + lane / 4) * Cfg::head_dim() + col0 + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      red_add_f32x2(base + 8 * i * Cfg::head_dim() + 8 * j, dq[4 * j + 2 * i], dq[4 * j + 2 * i + 1]);
    }
  }
}

// RedV4: the same adds, 16 bytes each, into the fragment-order tile of query block m0 / block_m
// (Cfg::dq_frag_offset: thread tid's registers 4j .. 4j + 3 are 4 contiguous floats).
template <class Cfg, int N>
__device__ __forceinline__ void add_dq_tile_v4(float* dq_rows, const float (&dq)[N / 2], int m0, int c, int tid) {
  static_assert(N == Cfg::dq_cols(), "one piece per warpgroup");
  float* base = dq_rows + int64_t(m0) * Cfg::head_dim() + Cfg::dq_frag_offset(c, tid, 0);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    red_add_f32x4(base + 4 * 128 * j, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
  }
}

// Deterministic mode, before this CTA's dQ adds to one query block: one thread spins until the
// block's semaphore says that every earlier key block (rank < n) has added, then both consumer
// warpgroups pass a barrier. The acquire load plus the barrier order every later red.global of
// the CTA after the previous key block's adds.
__device__ __forceinline__ void dq_tile_wait(const int* sem, int rank, bool spinner) {
  if (spinner) {
    while (ld_acquire_gpu(sem) != rank) {
    }
  }
  __syncwarp();  // the spinner's warp reconverges before the (aligned) bar.sync
  named_barrier_sync(kBwdBarDq, kBwdConsumerThreads);
}

// After them: every thread makes its own adds visible at GPU scope, both warpgroups meet, and one
// thread hands the block to the next key block (rank + 1) with a release store.
__device__ __forceinline__ void dq_tile_signal(int* sem, int rank, bool signaller) {
  __threadfence();
  named_barrier_sync(kBwdBarDq, kBwdConsumerThreads);
  if (signaller) st_release_gpu(sem, rank + 1);
}

// Writes a 64 x dkv_cols accumulator (rows [n0 + 64r, ...) of one kv head, columns [col0, ...))
// times `scale` to [batch, seq_k, heads_kv, head_dim]; rows past seq_k are dropped.
template <class T, class Cfg>
__device__ __forceinline__ void store_dkv(void* out, const float (&acc)[Cfg::dkv_cols() / 2], float scale,
                                          const BwdArgs& args, int n0, int r, int col0, int kv_head, int batch,
                                          int warp, int lane) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = n0 + 64 * r + 16 * warp + lane / 4 + 8 * i;
    if (row >= args.seq_k) continue;
    T* dst = static_cast<T*>(out) +
             ((int64_t(batch) * args.seq_k + row) * args.heads_kv + kv_head) * Cfg::head_dim() + col0;
#pragma unroll
    for (int j = 0; j < Cfg::dkv_cols() / 8; ++j) {
      const int col = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(dst + col) =
          bwd_pack2<T>(acc[4 * j + 2 * i] * scale, acc[4 * j + 2 * i + 1] * scale);
    }
  }
}

// One step's S^T (X = K, Y = Q) or dP^T (X = V, Y = dO) slice from the ring's current stage: waits
// for the stage's full barrier, issues and commits one wgmma group. Fenced before the issue: a
// wait loop (and, pipelined, ordinary code) sits between it and the previous group. wait = false
// (pipelined, after the last step only): no barrier wait, the product of whatever the stage holds
// is computed and never read -- so the issue is unconditional and ptxas sees the same wgmma
// groups in flight at every loop back edge (a conditional issue made it serialize the pipeline,
// C7515/C7517, and spill). Nothing writes that stage any more: the producer has finished.
template <class T, class Cfg, class Ring>
__device__ __forceinline__ void issue_st_step(float (&st)[Cfg::s_cols() / 2], Ring& q, const uint8_t* sK, int r,
                                              int s_col0, bool wait = true) {
  if (wait) q.wait(0);
  wgmma_fence();
  issue_transposed_scores<T, Cfg, Cfg::s_cols()>(st, sK, r, q.get(), s_col0);
  wgmma_commit();
}
template <class T, class Cfg, class Ring>
__device__ __forceinline__ void issue_dpt_step(float (&dpt)[Cfg::s_cols() / 2], Ring& dO, const uint8_t* sV, int r,
                                               int s_col0, bool wait = true) {
  if (wait) dO.wait(0);
  wgmma_fence();  // a wait loop sits between the two groups: fence again (else ptxas injects one, C7519)
  issue_transposed_scores<T, Cfg, Cfg::s_cols()>(dpt, sV, r, dO.get(), s_col0);
  wgmma_commit();
}

// DqViaTma: consumer side of one step's dQ. Waits until the writer warp has finished reading the
// shared dQ tile of the previous step (kBwdBarDqEmpty), writes this warpgroup's piece in fragment
// order (Cfg::dq_frag_offset: a warp's float2 stores cover 256 contiguous bytes, no bank
// conflict), makes the generic-proxy stores visible to the async proxy, and signals the writer
// without waiting (kBwdBarDqFull).
template <class Cfg>
__device__ __forceinline__ void stage_dq_tile(const float (&dq)[Cfg::dq_cols() / 2]) {
  // The tile's 32-bit shared address and this thread's place in it are recomputed here from
  // constants and %tid.x (read by a volatile asm, so not hoisted out of the main loop): no
  // register stays live across the loop for them (a live 64-bit pointer cost a spill at hd64).
  extern __shared__ uint8_t smem_raw[];
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = raw + ((1024 - (raw & 1023)) & 1023) + Cfg::dq_offset() +
                        4 * uint32_t(Cfg::dq_frag_offset(int(tid / 128) - 1, int(tid % 128), 0));
  named_barrier_sync(kBwdBarDqEmpty, kBwdDqBarrierThreads);
#pragma unroll
  for (int u = 0; u < Cfg::dq_cols() / 4; ++u) {
    static_assert(Cfg::dq_frag_offset(0, 0, 2) == 256, "one register pair = 128 threads x 2 floats");
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(base + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                 : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_arrive(kBwdBarDqFull, kBwdDqBarrierThreads);
}

// DqViaTma: the dQ writer, warp 1 of the producer warpgroup (all 32 lanes: the named barriers
// count whole warps). Per step, in the consumers' (head, query block) order: wait for both
// consumer warpgroups' pieces (kBwdBarDqFull), lane 0 adds the whole block_m x head_dim tile to
// dq_accum with one bulk reduce-add, waits until the bulk engine has read the shared tile, and
// the warp frees it (kBwdBarDqEmpty; one pre-arrival so the consumers' first wait passes, none
// after the last step so no barrier generation is left open). THE place where dQ reaches global
// memory in this variant, so deterministic mode orders the adds here: lane 0 waits on the
// (batch, head, query block) semaphore before bulk_reduce_add_f32 and, after bulk_wait_all(),
// hands the block to the next key block.
template <class Cfg, bool Causal>
__device__ __forceinline__ void bwd_dq_writer(uint8_t* smem, const BwdArgs& args, int n0, int kv_head, int batch,
                                              int lane) {
  int m_begin, m_end;
  bwd_m_range<Cfg, Causal>(args, n0, &m_begin, &m_end);
  const int total_steps = m_end > m_begin ? args.group * (m_end - m_begin) : 0;
  if (total_steps == 0) return;
  const float* sdq = reinterpret_cast<const float*>(smem + Cfg::dq_offset());
  named_barrier_arrive(kBwdBarDqEmpty, kBwdDqBarrierThreads);
  int step = 0;
  for (int g = 0; g < args.group; ++g) {
    const int head = kv_head * args.group + g;
    float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
    for (int m = m_begin; m < m_end; ++m) {
      named_barrier_sync(kBwdBarDqFull, kBwdDqBarrierThreads);
      // Deterministic mode: this key block's place in m's order (bwd_dq_rank).
      int* sem = args.deterministic ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m
                                    : nullptr;
      if (lane == 0) {
        const int rank = sem ? bwd_dq_rank<Cfg, Causal>(args, n0 / Cfg::block_n(), m) : 0;
        if (sem) {
          while (ld_acquire_gpu(sem) != rank) {
          }
          fence_proxy_async_global();  // the bulk reduce (async proxy) after the acquire
        }
        bulk_reduce_add_f32(dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim(), sdq, Cfg::dq_tile_bytes());
        bulk_commit();
        if (sem) {
          bulk_wait_all();             // the reduce's global writes are done ...
          fence_proxy_async_global();  // ... and ordered before the generic-proxy release
          __threadfence();
          st_release_gpu(sem, rank + 1);
        }
      }
      if (++step < total_steps) {
        if (lane == 0) bulk_wait_read();
        __syncwarp();
        named_barrier_arrive(kBwdBarDqEmpty, kBwdDqBarrierThreads);
      }
    }
  }
  if (lane == 0) bulk_wait_all();  // source reads and global writes done before the CTA exits
}

// DqInRing (hd256): consumer side of one step's dQ, after every wgmma of this warpgroup for the
// step has retired. Warpgroup c writes its 64 x dq_cols float32 piece in fragment order
// (dq_frag_offset: register pair u of thread t at byte 1024 u + 8 t of the piece) into region c
// of this step's Q stage (pairs u < 16) and of its dO stage (u >= 16): after the P^T/dS^T barrier
// only c's own dK (Q) and dV (dO) wgmmas read those regions, and they have retired; the other
// warpgroup's S^T / dP^T of the step retired before it reached that barrier. Then the generic
// stores are made visible to the async proxy and the writer warp is signalled on the named
// barrier of the step's parity (kBwdBarDqRing + step % 2, no wait): two ids so that an arrival for
// step t + 2 (possible only once the writer freed stage t % 2, i.e. after its sync for step t)
// can never meet an open generation of step t + 1.
template <class Cfg>
__device__ __forceinline__ void stage_dq_ring(const float (&dq)[Cfg::dq_cols() / 2], const uint8_t* q_tile,
                                              const uint8_t* do_tile, int c, int tid, int step) {
  constexpr int kHalfPairs = Cfg::dq_cols() / 8;  // register pairs per 16 KB region (16 at hd256)
  static_assert(kHalfPairs * 1024 == int(Cfg::ring_region_bytes()), "a region holds half the piece");
  static_assert(Cfg::dq_frag_offset(1, 0, 0) * 4 == 2 * int(Cfg::ring_region_bytes()), "piece c at 32 KB c");
  const uint32_t within = uint32_t(c) * Cfg::ring_region_bytes() + 8u * uint32_t(tid);
  const uint32_t qa = smem_addr(q_tile) + within;
  const uint32_t da = smem_addr(do_tile) + within;
#pragma unroll
  for (int u = 0; u < kHalfPairs; ++u) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(qa + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                 : "memory");
  }
#pragma unroll
  for (int u = 0; u < kHalfPairs; ++u) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(da + 1024 * u), "f"(dq[2 * (kHalfPairs + u)]),
                 "f"(dq[2 * (kHalfPairs + u) + 1])
                 : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_arrive(kBwdBarDqRing + uint32_t(step & 1), kBwdDqBarrierThreads);
}

// DqInRing with dq_pieces() == 2 (variant 12, v1 schedule): piece 0 (the first dq_cols / 2
// columns = register pairs 0 .. 15 of the whole piece) is in `dq` and goes to the Q half; piece 1 is
// computed (ds_tile and K stay valid: the next write of this dS^T buffer is a barrier away) and goes
// to the dO half; then the fence and the arrival of stage_dq_ring. Addresses from constants, the
// stage and %tid.x (volatile read: not hoisted), as stage_dq_tile: nothing extra stays live.
template <class T, class Cfg>
__device__ __forceinline__ void stage_dq_ring_pieces(float (&dq)[Cfg::dq_cols() / 4], int stage,
                                                     const uint8_t* ds_tile, const uint8_t* sK, int qs,
                                                     int dq_col0, int step) {
  constexpr int kPieceCols = Cfg::dq_cols() / 2;
  constexpr int kPairs = kPieceCols / 4;  // 16 at hd256
  static_assert(Cfg::dq_pieces() == 2 && kPairs * 1024 == int(Cfg::ring_region_bytes()), "piece = region");
  extern __shared__ uint8_t smem_raw[];
  uint32_t tidx;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tidx));
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t within = raw + ((1024 - (raw & 1023)) & 1023) + uint32_t(stage) * Cfg::q_tile_bytes() +
                          (tidx / 128 - 1) * Cfg::ring_region_bytes() + 8u * (tidx % 128);
  const uint32_t qa = Cfg::q_offset() + within;
#pragma unroll
  for (int u = 0; u < kPairs; ++u) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(qa + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                 : "memory");
  }
  wgmma_fence();
  issue_dq<T, Cfg, kPieceCols>(dq, ds_tile, qs, sK, dq_col0 + kPieceCols);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(dq);
  const uint32_t da = Cfg::do_offset() + within;
#pragma unroll
  for (int u = 0; u < kPairs; ++u) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(da + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                 : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_arrive(kBwdBarDqRing + uint32_t(step & 1), kBwdDqBarrierThreads);
}

// DqInRing: the dQ writer, warp 1 of the producer warpgroup (all 32 lanes at the named barriers).
// Per step, in the consumers' order: sync on the step's barrier (both warpgroups' pieces are in
// the ring stage), lane 0 adds the four 16 KB regions to the query block's fragment-order tile of
// dq_accum (warpgroup c's piece at float 64 * dq_cols * c, its Q half first), waits until the bulk
// engine has read them, and frees the Q and dO stage (their empty barriers count only this
// arrival in this variant). THE place where dQ reaches global memory in this variant, so
// deterministic mode orders the adds here, as bwd_dq_writer does for DqViaTma: lane 0 spins
// (ld.acquire) until the (batch, head, query block) semaphore equals this key block's rank
// (bwd_dq_rank), fence.proxy.async.global (the bulk reduce is an async-proxy access after the
// acquire), the four reduce-adds, then -- as in the default mode -- cp.async.bulk.wait_group.read
// 0 and the arrivals that free the ring stage (the bulk engine has read it; the global writes
// may still be in flight, which only the semaphore cares about), then cp.async.bulk.wait_group 0
// (the global writes done), fence.proxy.async.global, __threadfence, st.release rank + 1. So in
// that mode a stage is held until the CTA's turn came and its adds were read out: the consumers
// can run at most one step (the other stage) ahead of the semaphore; the producer's next load
// into this stage waits for it. Deadlock: the writer of key
// block n waits only for its predecessor in m's order, a CTA dispatched earlier (bwd_dq_rank,
// bwd_key_block), whose writer depends on nothing of this CTA. Det is args.deterministic as a
// template argument (the kernel picks one of two copies of the loop): at 24 registers the
// semaphore's address and rank spill a few words, and so only the deterministic copy pays that.
// WriterTiming (variant 68, harness only): the ring writer's lane 0 adds [cycles waiting on the
// ring barrier (for the consumers), cycles in wait_group.read (for the bulk engine), cycles from
// its first step to its end, steps] here; one per translation unit (static), read and cleared by
// the harness (tests/gpu/cuda/bwd_variants_hd256.cu).
static __device__ unsigned long long g_bwd_writer_clocks[4];

template <class Cfg, bool Causal, bool Det, class Barriers>
__device__ __forceinline__ void bwd_dq_ring_writer(uint8_t* smem, Barriers* q_bars, Barriers* do_bars,
                                                   const BwdArgs& args, int n0, int kv_head, int batch, int lane) {
  int m_begin, m_end;
  bwd_m_range<Cfg, Causal>(args, n0, &m_begin, &m_end);
  if (m_end <= m_begin) return;
  constexpr uint32_t kRegion = Cfg::ring_region_bytes();
  constexpr bool kTime = Cfg::writer_timing();
  [[maybe_unused]] unsigned long long t_bar = 0, t_bulk = 0, t_first = 0;
  int stage = 0;
  int step = 0;
  for (int g = 0; g < args.group; ++g) {
    const int head = kv_head * args.group + g;
    float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
    for (int m = m_begin; m < m_end; ++m) {
      [[maybe_unused]] unsigned long long t0 = 0;
      if constexpr (kTime) t0 = clock64();
      named_barrier_sync(kBwdBarDqRing + uint32_t(step & 1), kBwdDqBarrierThreads);
      if constexpr (kTime) {
        const unsigned long long t1 = clock64();
        if (step == 0) {
          t_first = t1;  // the first step's wait includes the kernel's start-up: not counted
        } else {
          t_bar += t1 - t0;
        }
      }
      if (lane == 0) {
        // Deterministic mode: this key block's place in m's order (bwd_dq_rank).
        int* sem = Det ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m : nullptr;
        const int rank = Det ? bwd_dq_rank<Cfg, Causal>(args, n0 / Cfg::block_n(), m) : 0;
        if constexpr (Det) {
          while (ld_acquire_gpu(sem) != rank) {
          }
          fence_proxy_async_global();  // the bulk reduces (async proxy) after the acquire
        }
        const uint8_t* q_tile = smem + Cfg::q_offset() + stage * Cfg::q_tile_bytes();
        const uint8_t* do_tile = smem + Cfg::do_offset() + stage * Cfg::q_tile_bytes();
        float* dst = dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim();
#pragma unroll
        for (int c = 0; c < Cfg::consumer_warpgroups(); ++c) {
          float* piece = dst + c * 64 * Cfg::dq_cols();
          bulk_reduce_add_f32(piece, reinterpret_cast<const float*>(q_tile + c * kRegion), kRegion);
          bulk_reduce_add_f32(piece + kRegion / 4, reinterpret_cast<const float*>(do_tile + c * kRegion), kRegion);
        }
        bulk_commit();
        [[maybe_unused]] unsigned long long t2 = 0;
        if constexpr (kTime) t2 = clock64();
        bulk_wait_read();  // the async proxy has read the stage: the producer may refill it
        if constexpr (kTime) t_bulk += clock64() - t2;
        mbarrier_arrive(&q_bars->empty[stage]);
        mbarrier_arrive(&do_bars->empty[stage]);
        if constexpr (Det) {
          bulk_wait_all();             // the reduces' global writes are done ...
          fence_proxy_async_global();  // ... and ordered before the generic-proxy release
          __threadfence();
          st_release_gpu(sem, rank + 1);
        }
      }
      __syncwarp();
      if (++stage == Cfg::q_stages()) stage = 0;
      ++step;
    }
  }
  if constexpr (kTime) {
    if (lane == 0) {
      atomicAdd(&g_bwd_writer_clocks[0], t_bar);
      atomicAdd(&g_bwd_writer_clocks[1], t_bulk);
      atomicAdd(&g_bwd_writer_clocks[2], clock64() - t_first);
      atomicAdd(&g_bwd_writer_clocks[3], static_cast<unsigned long long>(step));
    }
  }
  if (lane == 0) bulk_wait_all();  // global writes done before the CTA exits
}

// One step's dQ slice out of the consumer, once its wgmma has retired: DqViaTma -> the shared dQ
// tile (the writer warp adds it to dq_accum); else red.global adds (add_dq_tile: THE place where
// the step's dQ reaches global memory), with any further dq_pieces() computed here one by one
// (ds_tile and K stay valid: the next write of this dS^T stage is two barriers away; the
// wait<0> there also retires a pipelined S^T group -- correct, only less overlap).
template <class T, class Cfg>
__device__ __forceinline__ void bwd_dq_out(float (&dq)[Cfg::dq_cols() / Cfg::dq_pieces() / 2], float* dq_rows,
                                           const uint8_t* ds_tile, const uint8_t* sK, int m0, int c,
                                           int qs, int dq_col0, int tid, int warp, int lane, int* dq_sem,
                                           int dq_rank, bool dq_sem_thread) {
  constexpr int kPieceCols = Cfg::dq_cols() / Cfg::dq_pieces();
  if constexpr (Cfg::dq_via_tma()) {
    stage_dq_tile<Cfg>(dq);  // deterministic mode: the writer warp orders the adds
  } else {
    // Deterministic mode (dq_sem != nullptr): the whole tile's adds, every piece of both
    // warpgroups, between the wait and the signal.
    if (dq_sem) dq_tile_wait(dq_sem, dq_rank, dq_sem_thread);
    if constexpr (Cfg::red_v4()) {
      add_dq_tile_v4<Cfg, kPieceCols>(dq_rows, dq, m0, c, tid);
    } else {
      add_dq_tile<Cfg, kPieceCols>(dq_rows, dq, m0 + 64 * qs, dq_col0, warp, lane);
    }
#pragma unroll
    for (int piece = 1; piece < Cfg::dq_pieces(); ++piece) {
      wgmma_fence();
      issue_dq<T, Cfg, kPieceCols>(dq, ds_tile, qs, sK, dq_col0 + piece * kPieceCols);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
      add_dq_tile<Cfg, kPieceCols>(dq_rows, dq, m0 + 64 * qs, dq_col0 + piece * kPieceCols, warp, lane);
    }
    if (dq_sem) dq_tile_signal(dq_sem, dq_rank, dq_sem_thread);
  }
}

// The softmax part of a step, on the S^T and dP^T wgmma groups in flight (waits for them in issue
// order): P^T = 2^(S^T * scale * log2 e - lse2[query]), masked entries exactly 0, then
// dS^T = P^T * (dP^T - delta'[query]), both packed to the input dtype for the dV / dK products.
// query0 = this thread's first query column; lse_cols / delta_cols = its vectors in shared memory.
template <class T, class Cfg, bool Causal, int NS>
__device__ __forceinline__ void bwd_p_ds(float (&st)[NS / 2], float (&dpt)[NS / 2], uint32_t (&pf)[NS / 4],
                                         uint32_t (&dsf)[NS / 4], const BwdArgs& args, const float* lse_cols,
                                         const float* delta_cols, bool need_mask, int key_row0, int query0) {
  wgmma_wait<1>();
  fence_regs(st);
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse_cols + 8 * j);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float p = bwd_exp2(fmaf(st[4 * j + 2 * i + e], args.scale_log2, -(e ? l.y : l.x)));
        if (need_mask) {
          const int key = key_row0 + 8 * i;
          const int query = query0 + 8 * j + e;
          if (key >= args.seq_k || (Causal && key > query + args.seq_k - args.seq_q)) p = 0.f;
        }
        st[4 * j + 2 * i + e] = p;
      }
    }
  }
  wgmma_wait<0>();
  fence_regs(dpt);
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_cols + 8 * j);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      dpt[4 * j + 2 * i] = st[4 * j + 2 * i] * (dpt[4 * j + 2 * i] - dl.x);
      dpt[4 * j + 2 * i + 1] = st[4 * j + 2 * i + 1] * (dpt[4 * j + 2 * i + 1] - dl.y);
    }
  }
#pragma unroll
  for (int k = 0; k < NS / 4; ++k) {
    pf[k] = bwd_pack2<T>(st[2 * k], st[2 * k + 1]);
    dsf[k] = bwd_pack2<T>(dpt[2 * k], dpt[2 * k + 1]);
  }
}

// One consumer warpgroup's work on one tile (key block n0 of kv head `kv_head`, batch `batch`).
// The rings q / dO carry on from the previous tile (persistent kernel) or start fresh; step0 = the
// steps this CTA did before (the P^T/dS^T buffer and DqInRing barrier parity run on across tiles);
// K/V are awaited on kv_full with parity kv_parity; kv_empty (persistent kernel only, else null)
// gets this warpgroup's arrival once no wgmma reads K/V any more, before the dK/dV stores.
// Returns the number of steps done.
template <class T, class Cfg, bool Causal, class Ring>
__device__ __forceinline__ int bwd_consumer_tile(int c, uint8_t* smem, uint64_t* kv_full, uint32_t kv_parity,
                                                 uint64_t* kv_empty, Ring& q, Ring& dO, int step0,
                                                 const BwdArgs& args, int n0, int kv_head, int batch) {
  constexpr int NS = Cfg::s_cols();
  constexpr int BM = Cfg::block_m();
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  // Ownership (bwd_config.cuh): S^T / dK / dV row group r and column split s; dQ slice (qs, ds).
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
  uint8_t* sP = smem + Cfg::p_offset();
  const float* sLse = reinterpret_cast<const float*>(smem + Cfg::lse_offset());
  const float* sDelta = reinterpret_cast<const float*>(smem + Cfg::delta_offset());

  float dk[Cfg::dkv_cols() / 2];
  float dv[Cfg::dkv_cols() / 2];
#pragma unroll
  for (int i = 0; i < Cfg::dkv_cols() / 2; ++i) dk[i] = dv[i] = 0.f;

  int m_begin, m_end;
  bwd_m_range<Cfg, Causal>(args, n0, &m_begin, &m_end);
  const bool any = m_end > m_begin;
  if (any) mbarrier_wait(kv_full, kv_parity);

  // This thread's first key row (the second is +8) and the offset of its first query column.
  const int key_row0 = n0 + 64 * r + 16 * warp + lane / 4;
  const int col_in_slice = 2 * (lane % 4);
  int step = step0;
  const int tile_steps = any ? args.group * (m_end - m_begin) : 0;
  // Deterministic mode without DqViaTma: the one consumer thread that waits on and signals the
  // dQ semaphores (bwd_dq_out).
  const bool dq_sem_thread = c == 0 && elected;

  if constexpr (Cfg::pipeline_scores()) {
    // ---- PipelineScores schedule (bwd v2). One iteration = the second half of step t and the
    // first half of step t + 1, so that no wgmma group is in flight across the loop's back edge
    // (ptxas serializes the whole pipeline when one is: C7514/C7515):
    //   B(t) = [hd256: dV, dK SS] + dQ(t);  C = S^T(t+1) from Q's next stage;  wait<1>: B retired;
    //   release Q(t), dO(t); dQ(t) out;  D = dP^T(t+1);  then bwd_scores_to_ds(t+1): wait<1>: C
    //   retired, P^T; wait<0>: D retired, dS^T; A(t+1) = dV, dK RS; dS^T store; barrier; wait<0>.
    // So S^T(t+1) and dP^T(t+1) queue behind dQ(t) while the dQ adds run. C and D are issued
    // unconditionally (after the last step they read a stage nobody writes and are never read;
    // the mbarrier wait is skipped), so every path reaches the back edge with nothing in flight.
    const int total_steps = any ? args.group * (m_end - m_begin) : 0;
    float st[NS / 2];
    float dpt[NS / 2];
    auto scores_to_ds = [&](int m0, int stage, int step) {
      const bool need_mask = n0 + Cfg::block_n() > args.seq_k ||
                             (Causal && n0 + Cfg::block_n() - 1 > m0 + args.seq_k - args.seq_q);
      uint32_t pf[NS / 4];
      uint32_t dsf[NS / 4];
      bwd_p_ds<T, Cfg, Causal, NS>(st, dpt, pf, dsf, args, sLse + stage * BM + s_col0 + col_in_slice,
                                   sDelta + stage * BM + s_col0 + col_in_slice, need_mask, key_row0,
                                   m0 + s_col0 + col_in_slice);
      uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      uint8_t* p_tile = sP + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      if constexpr (Cfg::pds_in_registers()) {
        // Pins dK/dV (their zeroing, in the peeled first call) before the fence: zeros sunk past
        // wgmma_fence make ptxas inject a warpgroup.arrive (C7519). No-op in the loop.
        fence_regs(dk);
        fence_regs(dv);
        wgmma_fence();
        issue_dkv_rs<T, Cfg>(dv, pf, dO.get(), dkv_col0);
        issue_dkv_rs<T, Cfg>(dk, dsf, q.get(), dkv_col0);
        wgmma_commit();
        store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
      } else {
        store_pds<Cfg, NS>(p_tile, pf, r, s_col0, warp, lane);
        store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
      }
      fence_proxy_async_smem();
      named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
      if constexpr (Cfg::pds_in_registers()) {
        wgmma_wait<0>();  // A retired (it had the store and the barrier to run in)
        fence_regs(pf);
        fence_regs(dsf);
        fence_regs(dk);
        fence_regs(dv);
      }
    };

    issue_st_step<T, Cfg>(st, q, sK, r, s_col0, total_steps > 0);
    issue_dpt_step<T, Cfg>(dpt, dO, sV, r, s_col0, total_steps > 0);
    if (total_steps > 0) {
      scores_to_ds(m_begin * BM, q.pipe.stage, step0);
    } else {
      wgmma_wait<0>();
    }
    int g = 0, m = m_begin;
    // (`step` = step0 + the step inside this tile: the P^T/dS^T buffer of the step.)
    for (int step = step0; step < step0 + total_steps; ++step) {
      // (DqViaTma: dq_rows and g unused here, the writer warp addresses dq_accum.)
      float* dq_rows = Cfg::dq_via_tma() ? nullptr
                                         : args.dq_accum + (int64_t(batch) * args.heads_q + kv_head * args.group + g) *
                                                               args.seq_q_pad * Cfg::head_dim();
      const int m0 = m * BM;
      const bool has_next = step + 1 < step0 + total_steps;
      uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();

      // Group B.
      wgmma_fence();
      if constexpr (!Cfg::pds_in_registers()) {
        uint8_t* p_tile = sP + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
        issue_dkv_ss<T, Cfg>(dv, p_tile, r, dO.get(), dkv_col0);
        issue_dkv_ss<T, Cfg>(dk, ds_tile, r, q.get(), dkv_col0);
      }
      constexpr int kPieceCols = Cfg::dq_cols() / Cfg::dq_pieces();
      float dq[kPieceCols / 2];
      issue_dq<T, Cfg, kPieceCols>(dq, ds_tile, qs, sK, dq_col0);
      wgmma_commit();
      // Group C: the next step's S^T.
      {
        Ring q_next = q;
        q_next.advance();
        issue_st_step<T, Cfg>(st, q_next, sK, r, s_col0, has_next);
      }
      wgmma_wait<1>();  // B retired (groups retire in order); C may run
      fence_regs(dq);

      // Q(t), dO(t) and their vectors: every wgmma reading them (S^T, dP^T, A, B) has retired.
      q.release(elected);
      dO.release(elected);
      q.advance();
      dO.advance();

      int* dq_sem = !Cfg::dq_via_tma() && args.deterministic
                        ? args.dq_sem + (int64_t(batch) * args.heads_q + kv_head * args.group + g) * (args.seq_q_pad / 64) + m
                        : nullptr;
      const int dq_rank = dq_sem ? bwd_dq_rank<Cfg, Causal>(args, n0 / Cfg::block_n(), m) : 0;
      bwd_dq_out<T, Cfg>(dq, dq_rows, ds_tile, sK, m0, c, qs, dq_col0, tid, warp, lane, dq_sem, dq_rank,
                         dq_sem_thread);

      // Group D: the next step's dP^T (dO has advanced to its stage).
      issue_dpt_step<T, Cfg>(dpt, dO, sV, r, s_col0, has_next);
      if (++m == m_end) {
        m = m_begin;
        if constexpr (!Cfg::dq_via_tma()) ++g;
      }
      if (has_next) {
        scores_to_ds(m * BM, q.pipe.stage, step + 1);
      } else {
        wgmma_wait<0>();  // the look-ahead C and D of the last step, never read
        fence_regs(st);
        fence_regs(dpt);
        fence_regs(dk);  // the epilogue reads them: not before this wait
        fence_regs(dv);
      }
    }
  } else {
    // ---- v1 schedule: every wgmma group of a step retires inside the step.
    // SplitSdP: this warpgroup's score tile (c0: S^T then P^T; c1: dP^T then dS^T). ScoresAhead:
    // the first step's scores are issued here, every later step's in the step before it.
    [[maybe_unused]] float sc[Cfg::split_sdp() ? BM / 2 : 1];
    if constexpr (Cfg::scores_ahead()) {
      if (any) {
        if (c == 0) {
          q.wait(0);
        } else {
          dO.wait(0);
        }
      }
      wgmma_fence();
      issue_transposed_scores<T, Cfg, BM>(sc, c == 0 ? sK : sV, 0, c == 0 ? q.get() : dO.get(), 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sc);
    }
    for (int g = 0; any && g < args.group; ++g) {
      const int head = kv_head * args.group + g;
      float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
      for (int m = m_begin; m < m_end; ++m, ++step) {
        const int m0 = m * BM;
        const int stage = q.pipe.stage;  // the two rings advance together
        const uint8_t* q_tile = q.get();
        const uint8_t* do_tile = dO.get();

        if constexpr (Cfg::split_sdp()) {
          // ---- SplitSdP (variant 20): warpgroup 0 = S^T -> P^T, warpgroup 1 = dP^T -> dS^T, each
          // over the whole 64 keys x BM queries (m64n64). Order per step:
          //   c0: wait Q; S^T; wait<0>; P^T (exp2, mask); store P^T; fence.proxy.async
          //   c1: wait dO; dP^T; wait<0>
          //   both: bar.sync PReady (P^T visible to c1's loads and to both warpgroups' wgmmas)
          //   both: issue dV += P^T dO (SS, own head-dim half; group 1: runs during c1's dS^T)
          //   c1: load P^T, dS^T = P^T (dP^T - delta'), store dS^T; fence.proxy.async
          //   both: bar.sync Pds; issue dK += dS^T Q and dQ = dS K (group 2); wait<0>
          //   then V4's DqInRing staging (stage_dq_ring) and ring advance.
          // Buffer reuse is V4's: P^T / dS^T buffer step % 2 is rewritten at step + 2, after both
          // warpgroups passed Pds(step + 1), which each reaches after the wait<0> retiring every
          // wgmma of `step` (and c1's generic P^T loads precede its Pds(step) arrival).
          const bool is_s = c == 0;
          if (is_s) {
            q.wait(0);
          } else {
            dO.wait(0);
          }
          if constexpr (!Cfg::scores_ahead()) {
            wgmma_fence();
            issue_transposed_scores<T, Cfg, BM>(sc, is_s ? sK : sV, 0, is_s ? q_tile : do_tile, 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(sc);
          }  // ScoresAhead: sc holds this step's scores already (issued in the previous step)
          uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
          uint8_t* p_tile = sP + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
          uint32_t pk[BM / 4];
          if (is_s) {
            const bool need_mask = n0 + Cfg::block_n() > args.seq_k ||
                                   (Causal && n0 + Cfg::block_n() - 1 > m0 + args.seq_k - args.seq_q);
            const float* lse_cols = sLse + stage * BM + col_in_slice;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j) {
              const float2 l = *reinterpret_cast<const float2*>(lse_cols + 8 * j);
#pragma unroll
              for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  float p = bwd_exp2(fmaf(sc[4 * j + 2 * i + e], args.scale_log2, -(e ? l.y : l.x)));
                  if (need_mask) {
                    const int key = key_row0 + 8 * i;
                    const int query = m0 + col_in_slice + 8 * j + e;
                    if (key >= args.seq_k || (Causal && key > query + args.seq_k - args.seq_q)) p = 0.f;
                  }
                  sc[4 * j + 2 * i + e] = p;
                }
              }
            }
#pragma unroll
            for (int k = 0; k < BM / 4; ++k) pk[k] = bwd_pack2<T>(sc[2 * k], sc[2 * k + 1]);
            store_pds<Cfg, BM>(p_tile, pk, 0, 0, warp, lane);
            fence_proxy_async_smem();
          }
          named_barrier_sync(kBwdBarPReady, kBwdConsumerThreads);
          // Each warpgroup waits itself on the full barrier of every TMA tile its wgmmas read (the
          // phase completed long ago: this returns at once), rather than relying on the other
          // warpgroup's wait plus a named barrier for the async-proxy writes' visibility.
          if (is_s) dO.wait(0);
          wgmma_fence();
          issue_dkv_ss<T, Cfg>(dv, p_tile, 0, do_tile, dkv_col0);
          wgmma_commit();
          if (!is_s) {
            load_pds<Cfg, BM>(pk, p_tile, 0, 0, warp, lane);
            const float* delta_cols = sDelta + stage * BM + col_in_slice;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j) {
              const float2 dl = *reinterpret_cast<const float2*>(delta_cols + 8 * j);
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                const float2 pp = bwd_unpack2<T>(pk[2 * j + i]);
                pk[2 * j + i] = bwd_pack2<T>(pp.x * (sc[4 * j + 2 * i] - dl.x), pp.y * (sc[4 * j + 2 * i + 1] - dl.y));
              }
            }
            store_pds<Cfg, BM>(ds_tile, pk, 0, 0, warp, lane);
            fence_proxy_async_smem();
          }
          named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
          if (!is_s) q.wait(0);
          wgmma_fence();
          issue_dkv_ss<T, Cfg>(dk, ds_tile, 0, q_tile, dkv_col0);
          float dq[Cfg::dq_cols() / 2];
          issue_dq<T, Cfg, Cfg::dq_cols()>(dq, ds_tile, qs, sK, dq_col0);
          wgmma_commit();
          wgmma_wait<0>();
          fence_regs(dq);
          fence_regs(dk);
          fence_regs(dv);
          if constexpr (Cfg::scores_ahead()) {
            // stage_dq_ring in two halves with the next step's scores issued between them (the
            // first half's 32 registers are free by then: 32 dQ + 32 scores + 128 dK/dV live).
            // The scores come from the other ring stage and are issued unconditionally (after
            // the last step: no wait, a stage nobody writes any more, never read -- as
            // PipelineScores does, so the same groups are in flight on every path).
            constexpr int kHalfPairs = Cfg::dq_cols() / 8;
            const uint32_t within = uint32_t(c) * Cfg::ring_region_bytes() + 8u * uint32_t(tid);
            const uint32_t qa = smem_addr(q_tile) + within;
            const uint32_t da = smem_addr(do_tile) + within;
#pragma unroll
            for (int u = 0; u < kHalfPairs; ++u) {
              asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(qa + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                           : "memory");
            }
            // (m / g based, non-causal had 0 consumer spills but causal 156 B; this form: one
            // loop-carried word, 1 STL + 1 LDL per step in the consumer, both causal modes.)
            const bool has_next = step + 1 < step0 + tile_steps;
            Ring nx = is_s ? q : dO;
            nx.advance();
            if (has_next) nx.wait(0);
            wgmma_fence();
            issue_transposed_scores<T, Cfg, BM>(sc, is_s ? sK : sV, 0, nx.get(), 0);
            wgmma_commit();
#pragma unroll
            for (int u = 0; u < kHalfPairs; ++u) {
              asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(da + 1024 * u), "f"(dq[2 * (kHalfPairs + u)]),
                           "f"(dq[2 * (kHalfPairs + u) + 1])
                           : "memory");
            }
            fence_proxy_async_smem();
            named_barrier_arrive(kBwdBarDqRing + uint32_t(step & 1), kBwdDqBarrierThreads);
            wgmma_wait<0>();
            fence_regs(sc);
          } else if constexpr (Cfg::dq_in_ring()) {
            stage_dq_ring<Cfg>(dq, q_tile, do_tile, c, tid, step);
          } else {
            // RedV4 (variant 1808): every wgmma of this warpgroup reading Q / dO has retired (and
            // its lse2 / delta' reads are behind it): free the stage, then the 16-byte dQ adds.
            q.release(elected);
            dO.release(elected);
            int* dq_sem = args.deterministic
                              ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m
                              : nullptr;
            const int dq_rank = dq_sem ? bwd_dq_rank<Cfg, Causal>(args, n0 / Cfg::block_n(), m) : 0;
            bwd_dq_out<T, Cfg>(dq, dq_rows, ds_tile, sK, m0, c, qs, dq_col0, tid, warp, lane, dq_sem, dq_rank,
                               dq_sem_thread);
          }
          q.advance();
          dO.advance();
          continue;
        }

        // S^T and dP^T: both issued before either is read, so dP^T runs during P's exp2.
        float st[NS / 2];
        float dpt[NS / 2];
        q.wait(0);
        wgmma_fence();
        issue_transposed_scores<T, Cfg, NS>(st, sK, r, q_tile, s_col0);
        wgmma_commit();
        dO.wait(0);
        wgmma_fence();  // a wait loop sits between the two groups: fence again (else ptxas injects one, C7519)
        issue_transposed_scores<T, Cfg, NS>(dpt, sV, r, do_tile, s_col0);
        wgmma_commit();

        // P^T and dS^T (masked entries exactly 0).
        const bool need_mask = n0 + Cfg::block_n() > args.seq_k ||
                               (Causal && n0 + Cfg::block_n() - 1 > m0 + args.seq_k - args.seq_q);
        uint32_t pf[NS / 4];
        uint32_t dsf[NS / 4];
        bwd_p_ds<T, Cfg, Causal, NS>(st, dpt, pf, dsf, args, sLse + stage * BM + s_col0 + col_in_slice,
                                     sDelta + stage * BM + s_col0 + col_in_slice, need_mask, key_row0,
                                     m0 + s_col0 + col_in_slice);

        uint8_t* ds_tile = sDS + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
        uint8_t* p_tile = sP + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
        if constexpr (Cfg::pds_in_registers()) {
          // This warpgroup holds all block_m query columns of its 64 key rows: dV and dK straight
          // from registers, issued before the dS^T store so they run during it.
          wgmma_fence();
          issue_dkv_rs<T, Cfg>(dv, pf, do_tile, dkv_col0);
          issue_dkv_rs<T, Cfg>(dk, dsf, q_tile, dkv_col0);
          wgmma_commit();
          store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
        } else {
          store_pds<Cfg, NS>(p_tile, pf, r, s_col0, warp, lane);
          store_pds<Cfg, NS>(ds_tile, dsf, r, s_col0, warp, lane);
        }
        // Generic-proxy stores -> wgmma (async proxy) reads, across both warpgroups.
        fence_proxy_async_smem();
        named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);

        wgmma_fence();
        if constexpr (!Cfg::pds_in_registers()) {
          issue_dkv_ss<T, Cfg>(dv, p_tile, r, do_tile, dkv_col0);
          issue_dkv_ss<T, Cfg>(dk, ds_tile, r, q_tile, dkv_col0);
        }
        // dQ in dq_pieces() column pieces one after the other (hd256: bounds the live registers).
        constexpr int kPieceCols = Cfg::dq_cols() / Cfg::dq_pieces();
        float dq[kPieceCols / 2];
        issue_dq<T, Cfg, kPieceCols>(dq, ds_tile, qs, sK, dq_col0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(dq);
        fence_regs(dk);
        fence_regs(dv);
        if constexpr (Cfg::pds_in_registers()) {
          fence_regs(pf);  // read asynchronously by the RS wgmma: keep the registers until here
          fence_regs(dsf);
        }

        if constexpr (Cfg::dq_in_ring()) {
          // dQ into this warpgroup's halves of the Q/dO stage; the writer warp frees the stage.
          if constexpr (Cfg::dq_pieces() == 1) {
            stage_dq_ring<Cfg>(dq, q_tile, do_tile, c, tid, step);
          } else {
            stage_dq_ring_pieces<T, Cfg>(dq, stage, ds_tile, sK, qs, dq_col0, step);
          }
          q.advance();
          dO.advance();
        } else {
          // Q, dO (and their lse2 / delta') are no longer read by this warpgroup.
          q.release(elected);
          dO.release(elected);
          q.advance();
          dO.advance();

          int* dq_sem = !Cfg::dq_via_tma() && args.deterministic
                            ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m
                            : nullptr;
          const int dq_rank = dq_sem ? bwd_dq_rank<Cfg, Causal>(args, n0 / Cfg::block_n(), m) : 0;
          bwd_dq_out<T, Cfg>(dq, dq_rows, ds_tile, sK, m0, c, qs, dq_col0, tid, warp, lane, dq_sem, dq_rank,
                             dq_sem_thread);
        }
      }
    }

  }

  // Persistent: no wgmma of this warpgroup reads K/V any more (every path above ends in a
  // wait<0>), so the producer may load the next tile's while the dK/dV stores run.
  if (kv_empty != nullptr && any && elected) mbarrier_arrive(kv_empty);

  // Epilogue: dK = softmax_scale * dS^T Q summed over the group, dV = P^T dO; rows past seq_k
  // dropped. A key block no query sees (possible only with seq_q == 0) writes zeros.
  store_dkv<T, Cfg>(args.dk, dk, args.softmax_scale, args, n0, r, dkv_col0, kv_head, batch, warp, lane);
  store_dkv<T, Cfg>(args.dv, dv, 1.f, args, n0, r, dkv_col0, kv_head, batch, warp, lane);
  return tile_steps;
}

template <class T, class Cfg, bool Causal>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
               const BwdArgs args) {
  using Barriers = typename StagedPipeline<Cfg::q_stages(), 1>::Barriers;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* q_bars = reinterpret_cast<Barriers*>(kv_full + 1);
  auto* do_bars = q_bars + 1;
  static_assert(sizeof(Barriers) == 8 * 2 * Cfg::q_stages(), "barrier block size (bwd_config.cuh)");

  int n_block, kv_head, batch;
  bwd_block_coords(args, &n_block, &kv_head, &batch);
  // Deterministic causal: key blocks last-first (bwd_key_block; the launch keeps grid x = key block).
  if (Causal && args.deterministic) n_block = bwd_key_block<Causal>(args);
  const int n0 = n_block * Cfg::block_n();
  // (UniformWarpgroup: from lane 0 through a shuffle, so the compiler knows it is warp-uniform.)
  const int wg = Cfg::uniform_warpgroup() ? __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) : int(threadIdx.x / 128);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_do);
    mbarrier_init(kv_full, 1);
    StagedPipeline<Cfg::q_stages(), 1>::init(q_bars, Cfg::ring_empty_arrivals());
    StagedPipeline<Cfg::q_stages(), 1>::init(do_bars, Cfg::ring_empty_arrivals());
    fence_mbarrier_init();
  }
  __syncthreads();
  // PDL: every CTA of this grid has started, so the postprocess may be scheduled (it waits for
  // this grid's completion in griddep_wait before reading dq_accum).
  if (args.pdl) griddep_launch_dependents();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    int m_begin, m_end;
    bwd_m_range<Cfg, Causal>(args, n0, &m_begin, &m_end);
    if (threadIdx.x == 0) {
      // The loader thread. (An `else` for the writer warp below: a test after the loop would keep
      // a register live through it, and at 24 registers that spilled.)
      if (m_end > m_begin) {
        mbarrier_arrive_expect_tx(kv_full, 2 * Cfg::kv_tile_bytes());
  #pragma unroll
        for (int c = 0; c < Cfg::chunks(); ++c) {
          tma_load_4d(smem + Cfg::k_offset() + c * Cfg::chunk_bytes_kv(), &tm_k, kv_full, c * 64, n0, kv_head, batch);
        }
  #pragma unroll
        for (int c = 0; c < Cfg::chunks(); ++c) {
          tma_load_4d(smem + Cfg::v_offset() + c * Cfg::chunk_bytes_kv(), &tm_v, kv_full, c * 64, n0, kv_head, batch);
        }
        // PDL: K and V (inputs) are already on their way; lse2 / delta' come from the preprocess.
        if (args.pdl) griddep_wait();
        StagedPipeline<Cfg::q_stages(), 1> q_ring{q_bars};
        StagedPipeline<Cfg::q_stages(), 1> do_ring{do_bars};
        float* sLse = reinterpret_cast<float*>(smem + Cfg::lse_offset());
        float* sDelta = reinterpret_cast<float*>(smem + Cfg::delta_offset());
        for (int g = 0; g < args.group; ++g) {
          const int head = kv_head * args.group + g;
          const int64_t vec_row = (int64_t(batch) * args.heads_q + head) * args.seq_q_pad;
          for (int m = m_begin; m < m_end; ++m) {
            const int m0 = m * Cfg::block_m();
            load_row_step<Cfg>(q_ring, smem + Cfg::q_offset(), sLse, &tm_q, args.lse2 + vec_row + m0, m0, head, batch);
            load_row_step<Cfg>(do_ring, smem + Cfg::do_offset(), sDelta, &tm_do, args.delta + vec_row + m0, m0, head,
                               batch);
          }
        }
      }
    } else if (Cfg::dq_via_tma() && threadIdx.x / 32 == 1) {
      if (args.pdl) griddep_wait();  // dq_accum is zeroed by the preprocess
      bwd_dq_writer<Cfg, Causal>(smem, args, n0, kv_head, batch, threadIdx.x % 32);
    } else if (Cfg::dq_in_ring() && threadIdx.x / 32 == 1) {
      if (args.pdl) griddep_wait();
      if constexpr (Cfg::det_ring_writer()) {
        if (args.deterministic) {
          bwd_dq_ring_writer<Cfg, Causal, true>(smem, q_bars, do_bars, args, n0, kv_head, batch, threadIdx.x % 32);
        } else {
          bwd_dq_ring_writer<Cfg, Causal, false>(smem, q_bars, do_bars, args, n0, kv_head, batch, threadIdx.x % 32);
        }
      } else {
        bwd_dq_ring_writer<Cfg, Causal, false>(smem, q_bars, do_bars, args, n0, kv_head, batch, threadIdx.x % 32);
      }
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    if (args.pdl) griddep_wait();  // red.global into dq_accum (zeroed by the preprocess)
    using Ring = TmaConsumerPipeline<T, typename Cfg::RowRing, false>;
    Ring q(q_bars, smem + Cfg::q_offset());
    Ring dO(do_bars, smem + Cfg::do_offset());
    bwd_consumer_tile<T, Cfg, Causal>(wg - 1, smem, kv_full, 0, nullptr, q, dO, 0, args, n0, kv_head, batch);
  }
}

// ---------------------------------------------------------------------------------------------
// Persistent kernel (variant bit 3, bwd v3; standalone harness only)
// ---------------------------------------------------------------------------------------------

// Tile id -> (key block, kv head, batch). lpt_section == 0: key block fastest (v2's grid order);
// else bwd_block_coords' sectioned longest-first order.
__device__ __forceinline__ void bwd_tile_coords(const BwdArgs& args, int id, int* n_block, int* kv_head,
                                                int* batch) {
  int hb;
  if (args.lpt_section == 0) {
    hb = id / args.n_blocks;
    *n_block = id - hb * args.n_blocks;
  } else {
    const int pairs = args.heads_kv * args.batch;
    const int per_section = args.lpt_section * args.n_blocks;
    const int section = id / per_section;
    const int rem = id - section * per_section;
    const int first = section * args.lpt_section;
    const int width = min(args.lpt_section, pairs - first);
    hb = first + rem % width;
    *n_block = rem / width;
  }
  *batch = hb / args.heads_kv;
  *kv_head = hb - *batch * args.heads_kv;
}

// Reads the id of iteration `it` (after its tile_full wait) and frees the slot: every reading
// thread arrives on tile_empty[it % 2] (count kBwdTileReaders), which the loader waits for before
// it writes the slot again for iteration it + 2.
constexpr uint32_t kBwdTileReaders = kBwdConsumerThreads + 32;
__device__ __forceinline__ int bwd_read_tile_id(const int* ids, uint64_t* tile_empty, int it) {
  const int id = *reinterpret_cast<const volatile int*>(ids + (it & 1));
  mbarrier_arrive(&tile_empty[it & 1]);
  return id;
}

// Persistent DqViaTma writer: bwd_dq_writer's protocol run on across tiles (one DqEmpty
// pre-arrival at the start, an arrival after every step but the CTA's very last). At a tile's
// last step it peeks at the next tile id (published by the loader once it has issued all of this
// tile's loads, which it has: this step's DqFull means its Q/dO arrived) to know whether that step
// is the last one.
template <class Cfg, bool Causal>
__device__ __forceinline__ void bwd_dq_writer_persistent(uint8_t* smem, const BwdArgs& args, uint64_t* tile_full,
                                                         uint64_t* tile_empty, const int* ids, int lane) {
  const float* sdq = reinterpret_cast<const float*>(smem + Cfg::dq_offset());
  int it = 0;
  mbarrier_wait(&tile_full[0], 0);
  int id = bwd_read_tile_id(ids, tile_empty, 0);
  if (id < 0) return;
  named_barrier_arrive(kBwdBarDqEmpty, kBwdDqBarrierThreads);
  while (true) {
    int n_block, kv_head, batch, m_begin, m_end;
    bwd_tile_coords(args, id, &n_block, &kv_head, &batch);
    bwd_m_range<Cfg, Causal>(args, n_block * Cfg::block_n(), &m_begin, &m_end);
    // Every tile has a step: seq_q > 0 (launch_bwd_checked), so m_begin < m_end (bwd_m_range).
    int next = -1;
    for (int g = 0; g < args.group; ++g) {
      const int head = kv_head * args.group + g;
      float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
      for (int m = m_begin; m < m_end; ++m) {
        named_barrier_sync(kBwdBarDqFull, kBwdDqBarrierThreads);
        if (lane == 0) {
          bulk_reduce_add_f32(dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim(), sdq, Cfg::dq_tile_bytes());
          bulk_commit();
        }
        bool more = true;
        if (g == args.group - 1 && m == m_end - 1) {
          mbarrier_wait(&tile_full[(it + 1) & 1], ((it + 1) >> 1) & 1);
          next = bwd_read_tile_id(ids, tile_empty, it + 1);
          more = next >= 0;
        }
        if (more) {
          if (lane == 0) bulk_wait_read();
          __syncwarp();
          named_barrier_arrive(kBwdBarDqEmpty, kBwdDqBarrierThreads);
        }
      }
    }
    ++it;
    if (next < 0) break;
    id = next;
  }
  if (lane == 0) bulk_wait_all();
}

// Persistent DqInRing writer: bwd_dq_ring_writer's loop run on across tiles (the ring stage and
// the barrier parity continue; no pre-arrival protocol, so no peeking).
template <class Cfg, bool Causal, class Barriers>
__device__ __forceinline__ void bwd_dq_ring_writer_persistent(uint8_t* smem, Barriers* q_bars, Barriers* do_bars,
                                                              const BwdArgs& args, uint64_t* tile_full,
                                                              uint64_t* tile_empty, const int* ids, int lane) {
  constexpr uint32_t kRegion = Cfg::ring_region_bytes();
  int stage = 0;
  int step = 0;
  for (int it = 0;; ++it) {
    mbarrier_wait(&tile_full[it & 1], (it >> 1) & 1);
    const int id = bwd_read_tile_id(ids, tile_empty, it);
    if (id < 0) break;
    int n_block, kv_head, batch, m_begin, m_end;
    bwd_tile_coords(args, id, &n_block, &kv_head, &batch);
    bwd_m_range<Cfg, Causal>(args, n_block * Cfg::block_n(), &m_begin, &m_end);
    for (int g = 0; g < args.group; ++g) {
      const int head = kv_head * args.group + g;
      float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
      for (int m = m_begin; m < m_end; ++m) {
        named_barrier_sync(kBwdBarDqRing + uint32_t(step & 1), kBwdDqBarrierThreads);
        if (lane == 0) {
          const uint8_t* q_tile = smem + Cfg::q_offset() + stage * Cfg::q_tile_bytes();
          const uint8_t* do_tile = smem + Cfg::do_offset() + stage * Cfg::q_tile_bytes();
          float* dst = dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim();
#pragma unroll
          for (int c = 0; c < Cfg::consumer_warpgroups(); ++c) {
            float* piece = dst + c * 64 * Cfg::dq_cols();
            bulk_reduce_add_f32(piece, reinterpret_cast<const float*>(q_tile + c * kRegion), kRegion);
            bulk_reduce_add_f32(piece + kRegion / 4, reinterpret_cast<const float*>(do_tile + c * kRegion), kRegion);
          }
          bulk_commit();
          bulk_wait_read();
          mbarrier_arrive(&q_bars->empty[stage]);
          mbarrier_arrive(&do_bars->empty[stage]);
        }
        __syncwarp();
        if (++stage == Cfg::q_stages()) stage = 0;
        ++step;
      }
    }
  }
  if (lane == 0) bulk_wait_all();
}

// Grid: min(tiles, SMs) CTAs, 1-D. Tile ids: blockIdx.x first, then (*args.tile_counter)++ +
// gridDim.x, until >= tiles (the counter lives in the call's workspace, zeroed before the main
// kernel with the semaphores, so concurrent backward calls on two streams cannot share it). The loader thread fetches and publishes each id (then -1) in
// tile_ids[it % 2] on tile_full[it % 2] (count 1; readers wait with parity (it / 2) % 2); every
// reading thread (256 consumer + 32 writer) then arrives on tile_empty[it % 2], which the loader
// waits for before rewriting the slot for it + 2 (found necessary by bwd_protocol_model.py for the
// DqInRing writer, whose lag behind the loader the consumers do not bound). K/V: kv_full completes once per tile with steps (parity =
// such tiles so far % 2); kv_empty (count 2, one elected thread per consumer warpgroup after its
// last K/V-reading wgmma of the tile retired) gates the next tile's K/V loads (fresh-barrier
// parity trick for the first). The Q/dO rings, P^T/dS^T buffers (via step0) and the dQ writer
// handshakes continue across tiles. Pipelined schedule: the look-ahead S^T/dP^T of a tile's last
// step read the next Q/dO stage without waiting (results discarded); the loader issues none of
// the next tile's loads (K/V or Q/dO) before kv_empty, which the consumers arrive on after the
// wait<0> that retires that look-ahead, so nothing is written under it (checked in
// tests/gpu/cuda/bwd_protocol_model.py).
template <class T, class Cfg, bool Causal>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    bwd_kernel_persistent(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const BwdArgs args) {
  static_assert(Cfg::persistent(), "persistent config");
  using Barriers = typename StagedPipeline<Cfg::q_stages(), 1>::Barriers;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* q_bars = reinterpret_cast<Barriers*>(kv_full + 1);
  auto* do_bars = q_bars + 1;
  uint64_t* kv_empty = reinterpret_cast<uint64_t*>(smem + Cfg::persistent_offset());
  uint64_t* tile_full = kv_empty + 1;
  uint64_t* tile_empty = tile_full + 2;
  int* tile_ids = reinterpret_cast<int*>(tile_empty + 2);
  static_assert(sizeof(Barriers) == 8 * 2 * Cfg::q_stages(), "barrier block size (bwd_config.cuh)");
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_do);
    mbarrier_init(kv_full, 1);
    mbarrier_init(kv_empty, Cfg::consumer_warpgroups());
    mbarrier_init(&tile_full[0], 1);
    mbarrier_init(&tile_full[1], 1);
    mbarrier_init(&tile_empty[0], kBwdTileReaders);
    mbarrier_init(&tile_empty[1], kBwdTileReaders);
    StagedPipeline<Cfg::q_stages(), 1>::init(q_bars, Cfg::ring_empty_arrivals());
    StagedPipeline<Cfg::q_stages(), 1>::init(do_bars, Cfg::ring_empty_arrivals());
    fence_mbarrier_init();
  }
  __syncthreads();
  if (args.pdl) griddep_launch_dependents();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    if (threadIdx.x == 0) {
      const int tiles = args.n_blocks * args.heads_kv * args.batch;
      StagedPipeline<Cfg::q_stages(), 1> q_ring{q_bars};
      StagedPipeline<Cfg::q_stages(), 1> do_ring{do_bars};
      float* sLse = reinterpret_cast<float*>(smem + Cfg::lse_offset());
      float* sDelta = reinterpret_cast<float*>(smem + Cfg::delta_offset());
      int id = blockIdx.x;
      int loads = 0;
      for (int it = 0;; ++it) {
        const bool valid = id < tiles;
        // Slot it % 2 was read by every reader for iteration it - 2 (fresh-barrier parity trick
        // for it < 2). Without this wait a writer warp that lags (DqInRing: the consumers only
        // arrive on its barriers) could miss an id when tiles are 1-2 steps long.
        mbarrier_wait(&tile_empty[it & 1], ((it >> 1) & 1) ^ 1);
        *reinterpret_cast<volatile int*>(tile_ids + (it & 1)) = valid ? id : -1;
        mbarrier_arrive(&tile_full[it & 1]);  // release: the id store is visible to the waiters
        if (!valid) break;
        int n_block, kv_head, batch, m_begin, m_end;
        bwd_tile_coords(args, id, &n_block, &kv_head, &batch);
        const int n0 = n_block * Cfg::block_n();
        bwd_m_range<Cfg, Causal>(args, n0, &m_begin, &m_end);
        if (m_end > m_begin) {
          mbarrier_wait(kv_empty, (loads & 1) ^ 1);  // the previous tile's K/V no longer read
          mbarrier_arrive_expect_tx(kv_full, 2 * Cfg::kv_tile_bytes());
#pragma unroll
          for (int c = 0; c < Cfg::chunks(); ++c) {
            tma_load_4d(smem + Cfg::k_offset() + c * Cfg::chunk_bytes_kv(), &tm_k, kv_full, c * 64, n0, kv_head,
                        batch);
          }
#pragma unroll
          for (int c = 0; c < Cfg::chunks(); ++c) {
            tma_load_4d(smem + Cfg::v_offset() + c * Cfg::chunk_bytes_kv(), &tm_v, kv_full, c * 64, n0, kv_head,
                        batch);
          }
          if (loads == 0 && args.pdl) griddep_wait();
          ++loads;
          for (int g = 0; g < args.group; ++g) {
            const int head = kv_head * args.group + g;
            const int64_t vec_row = (int64_t(batch) * args.heads_q + head) * args.seq_q_pad;
            for (int m = m_begin; m < m_end; ++m) {
              const int m0 = m * Cfg::block_m();
              load_row_step<Cfg>(q_ring, smem + Cfg::q_offset(), sLse, &tm_q, args.lse2 + vec_row + m0, m0, head,
                                 batch);
              load_row_step<Cfg>(do_ring, smem + Cfg::do_offset(), sDelta, &tm_do, args.delta + vec_row + m0, m0,
                                 head, batch);
            }
          }
        }
        // (No griddepcontrol.wait needed: the counter's memset precedes the preprocess.)
        id = atomicAdd(args.tile_counter, 1) + int(gridDim.x);
      }
    } else if (Cfg::dq_via_tma() && threadIdx.x / 32 == 1) {
      if (args.pdl) griddep_wait();
      bwd_dq_writer_persistent<Cfg, Causal>(smem, args, tile_full, tile_empty, tile_ids, threadIdx.x % 32);
    } else if (Cfg::dq_in_ring() && threadIdx.x / 32 == 1) {
      if (args.pdl) griddep_wait();
      bwd_dq_ring_writer_persistent<Cfg, Causal>(smem, q_bars, do_bars, args, tile_full, tile_empty, tile_ids,
                                                 threadIdx.x % 32);
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    if (args.pdl) griddep_wait();
    using Ring = TmaConsumerPipeline<T, typename Cfg::RowRing, false>;
    Ring q(q_bars, smem + Cfg::q_offset());
    Ring dO(do_bars, smem + Cfg::do_offset());
    int step0 = 0;
    int kv_uses = 0;
    for (int it = 0;; ++it) {
      mbarrier_wait(&tile_full[it & 1], (it >> 1) & 1);
      const int id = bwd_read_tile_id(tile_ids, tile_empty, it);
      if (id < 0) break;
      int n_block, kv_head, batch;
      bwd_tile_coords(args, id, &n_block, &kv_head, &batch);
      // hd256: the shared-memory base made opaque per tile, so addresses and wgmma descriptors
      // derived from it are computed inside the tile, not hoisted out of the tile loop and kept
      // live through the dK/dV epilogue (that spilled 0.2-0.5 KB there; at hd64/hd128 it costs a
      // few consumer spills instead, so not there).
      uint8_t* smem_t = smem;
      if constexpr (!Cfg::pds_in_registers()) asm volatile("" : "+l"(smem_t));
      q.smem = smem_t + Cfg::q_offset();
      dO.smem = smem_t + Cfg::do_offset();
      const int steps = bwd_consumer_tile<T, Cfg, Causal>(wg - 1, smem_t, kv_full, uint32_t(kv_uses & 1), kv_empty,
                                                          q, dO, step0, args, n_block * Cfg::block_n(), kv_head,
                                                          batch);
      step0 += steps;
      kv_uses += steps > 0 ? 1 : 0;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Preprocess and postprocess (plain CUDA, memory-bound)
// ---------------------------------------------------------------------------------------------

// One warp per padded query row (batch, head, i < seq_q_pad). Rows past seq_q, and rows whose
// lse is -inf (they saw no key: o = 0, nothing flows back), get lse2 = +inf and delta' = 0.
template <class T, int HeadDim>
__global__ void __launch_bounds__(256) bwd_preprocess(const T* o, const T* d_o, const float* lse, const float* dlse,
                                                      float* lse2, float* delta, int batch, int seq_q,
                                                      int seq_q_pad, int heads_q) {
  constexpr int kVec = 8;  // 16-byte loads
  constexpr int kLanes = HeadDim / kVec;
  static_assert(kLanes <= 32, "one warp per row");
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;  // (batch * heads_q + head) * pad + i
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(batch) * heads_q * seq_q_pad) return;
  const int i = int(row % seq_q_pad);
  const int64_t bh = row / seq_q_pad;
  const int head = int(bh % heads_q);
  const int b = int(bh / heads_q);
  float acc = 0.f;
  if (i < seq_q && lane < kLanes) {
    const int64_t off = ((int64_t(b) * seq_q + i) * heads_q + head) * HeadDim + lane * kVec;
    const uint4 ov = *reinterpret_cast<const uint4*>(o + off);
    const uint4 dv = *reinterpret_cast<const uint4*>(d_o + off);
    const T* op = reinterpret_cast<const T*>(&ov);
    const T* dp = reinterpret_cast<const T*>(&dv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += float(op[k]) * float(dp[k]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, off);
  if (lane == 0) {
    float l2 = INFINITY, dl = 0.f;
    if (i < seq_q) {
      const int64_t li = bh * seq_q + i;
      const float l = lse[li];
      if (l != -INFINITY) {
        l2 = l * 1.4426950408889634f;
        dl = acc - dlse[li];
      }
    }
    lse2[row] = l2;
    delta[row] = dl;
  }
}

// The 8 dq_accum floats of query row i, head-dim columns 8 cv .. 8 cv + 7, of (batch, head) row
// block bh: row-major, or (dq_frag_layout) inside the row's block_m tile in the config's fragment
// order -- DqViaTma / DqInRing keep the 8 columns contiguous, RedV4 only pairs, the 80-key
// kernel's transposed pieces none.
template <class Cfg, int HeadDim>
__device__ __forceinline__ void load_dq8(const float* dq_accum, int64_t bh, int seq_q_pad, int i, int cv, float4& a,
                                         float4& c) {
  constexpr int kVec = 8;
  if constexpr (Cfg::dq_transposed()) {
    constexpr int BM = Cfg::block_m();
    const float* tile = dq_accum + (bh * seq_q_pad + (i / BM) * BM) * HeadDim;
    float e[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) e[u] = tile[Cfg::dq_accum_offset_any(i % BM, cv * kVec + u)];
    a = make_float4(e[0], e[1], e[2], e[3]);
    c = make_float4(e[4], e[5], e[6], e[7]);
  } else if constexpr (Cfg::red_v4()) {
    constexpr int BM = Cfg::block_m();
    const float* tile = dq_accum + (bh * seq_q_pad + (i / BM) * BM) * HeadDim;
    float2 e[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      e[u] = *reinterpret_cast<const float2*>(tile + Cfg::dq_accum_offset_any(i % BM, cv * kVec + 2 * u));
    }
    a = make_float4(e[0].x, e[0].y, e[1].x, e[1].y);
    c = make_float4(e[2].x, e[2].y, e[3].x, e[3].y);
  } else {
    const float* src;
    if constexpr (Cfg::dq_frag_layout()) {
      constexpr int BM = Cfg::block_m();
      src = dq_accum + (bh * seq_q_pad + (i / BM) * BM) * HeadDim + Cfg::dq_accum_offset(i % BM, cv * kVec);
    } else {
      src = dq_accum + (bh * seq_q_pad + i) * HeadDim + cv * kVec;
    }
    a = *reinterpret_cast<const float4*>(src);
    c = *reinterpret_cast<const float4*>(src + 4);
  }
}

// dq[b, i, h, :] = softmax_scale * dq_accum[b, h, i, :], 8 elements per thread. dq_accum's rows
// are row-major, or (Cfg::dq_via_tma()) each block_m-row tile in the fragment order of
// Cfg::dq_accum_offset, whose 8-column groups are contiguous too.
template <class T, int HeadDim, class Cfg>
__global__ void __launch_bounds__(256) bwd_postprocess(const float* dq_accum, T* dq, float scale, int batch,
                                                       int seq_q, int seq_q_pad, int heads_q) {
  constexpr int kVec = 8;
  const int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x;  // over batch * seq_q * heads_q * HeadDim / 8
  const int64_t total = int64_t(batch) * seq_q * heads_q * (HeadDim / kVec);
  if (idx >= total) return;
  const int cv = int(idx % (HeadDim / kVec));
  const int64_t rest = idx / (HeadDim / kVec);
  const int head = int(rest % heads_q);
  const int64_t bi = rest / heads_q;  // b * seq_q + i
  const int i = int(bi % seq_q);
  const int b = int(bi / seq_q);
  float4 a, c;
  load_dq8<Cfg, HeadDim>(dq_accum, int64_t(b) * heads_q + head, seq_q_pad, i, cv, a, c);
  uint4 out;
  out.x = bwd_pack2<T>(a.x * scale, a.y * scale);
  out.y = bwd_pack2<T>(a.z * scale, a.w * scale);
  out.z = bwd_pack2<T>(c.x * scale, c.y * scale);
  out.w = bwd_pack2<T>(c.z * scale, c.w * scale);
  *reinterpret_cast<uint4*>(dq + bi * heads_q * HeadDim + int64_t(head) * HeadDim + cv * kVec) = out;
}

// BwdLaunchOptions::fused_prepost: the preprocess that also zeroes dq_accum (no memset), grid
// (seq_q_pad / rows per block, heads_q, batch), HeadDim / 8 threads per row (16-byte loads of O and
// dO, two 16-byte zero stores of the row's dq_accum floats: any tile order of dq_accum covers the
// same rows), several rows per warp at hd64/hd128. pdl: lets the main kernel be scheduled at once
// (it waits in griddep_wait for this grid to complete before reading what it writes).
template <class T, int HeadDim>
__global__ void __launch_bounds__(256) bwd_preprocess_zero(const T* o, const T* d_o, const float* lse,
                                                           const float* dlse, float* lse2, float* delta,
                                                           float* dq_accum, int seq_q, int seq_q_pad,
                                                           int heads_q, int pdl) {
  constexpr int kVec = 8;
  constexpr int kLanes = HeadDim / kVec;  // threads per row: 8, 16, 32
  constexpr int kRowsPerBlock = 256 / kLanes;
  static_assert(kLanes <= 32 && 128 % kRowsPerBlock == 0, "rows of one warp; blocks tile seq_q_pad");
  if (pdl) griddep_launch_dependents();
  const int head = blockIdx.y;
  const int b = blockIdx.z;
  const int i = int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / kLanes;  // < seq_q_pad
  const int lane = threadIdx.x % kLanes;
  const int64_t bh = int64_t(b) * heads_q + head;
  float acc = 0.f;
  if (i < seq_q) {
    const int64_t off = ((int64_t(b) * seq_q + i) * heads_q + head) * HeadDim + lane * kVec;
    const uint4 ov = *reinterpret_cast<const uint4*>(o + off);
    const uint4 dv = *reinterpret_cast<const uint4*>(d_o + off);
    const T* op = reinterpret_cast<const T*>(&ov);
    const T* dp = reinterpret_cast<const T*>(&dv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += float(op[k]) * float(dp[k]);
  }
  float4* z = reinterpret_cast<float4*>(dq_accum + (bh * seq_q_pad + i) * HeadDim) + 2 * lane;
  z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
  z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, off);
  if (lane == 0) {
    float l2 = INFINITY, dl = 0.f;
    if (i < seq_q) {
      const int64_t li = bh * seq_q + i;
      const float l = lse[li];
      if (l != -INFINITY) {
        l2 = l * 1.4426950408889634f;
        dl = acc - dlse[li];
      }
    }
    lse2[bh * seq_q_pad + i] = l2;
    delta[bh * seq_q_pad + i] = dl;
  }
}

// BwdLaunchOptions::fused_prepost: bwd_postprocess with (head, batch) from the grid (y, z) and only
// power-of-two divisions. pdl: launched as a dependent of the main kernel; waits for it here.
template <class T, int HeadDim, class Cfg>
__global__ void __launch_bounds__(256) bwd_postprocess_grid(const float* dq_accum, T* dq, float scale, int seq_q,
                                                            int seq_q_pad, int heads_q, int pdl) {
  constexpr int kVec = 8;
  if (pdl) griddep_wait();
  const int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x;  // over seq_q * HeadDim / 8
  if (idx >= int64_t(seq_q) * (HeadDim / kVec)) return;
  const int head = blockIdx.y;
  const int b = blockIdx.z;
  const int cv = int(idx % (HeadDim / kVec));
  const int i = int(idx / (HeadDim / kVec));
  const int64_t bh = int64_t(b) * heads_q + head;
  float4 a, c;
  load_dq8<Cfg, HeadDim>(dq_accum, bh, seq_q_pad, i, cv, a, c);
  uint4 out;
  out.x = bwd_pack2<T>(a.x * scale, a.y * scale);
  out.y = bwd_pack2<T>(a.z * scale, a.w * scale);
  out.z = bwd_pack2<T>(c.x * scale, c.y * scale);
  out.w = bwd_pack2<T>(c.z * scale, c.w * scale);
  *reinterpret_cast<uint4*>(dq + ((int64_t(b) * seq_q + i) * heads_q + head) * HeadDim + cv * kVec) = out;
}

}  // namespace fa4::hopper

#include "hopper/bwd_kv80.cuh"

namespace fa4::hopper {

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------

// Enqueues preprocess, main kernel and postprocess for one (dtype, head dim, causal).
template <class T, class Cfg, bool Causal>
std::string launch_bwd_kernel(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  constexpr int D = Cfg::head_dim();
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const int64_t pad = bwd_seq_q_pad(p.seq_q);
  cudaError_t e;
  auto fail = [](const char* what, cudaError_t err) {
    return std::string("backward ") + what + " failed: " + cudaGetErrorString(err);
  };

  // Launch options (BwdLaunchOptions, all off in the library). The grid-indexed pre/postprocess
  // need heads_q and batch within gridDim.y / z (65535); else the v2 kernels run.
  const BwdLaunchOptions opt = bwd_launch_options();
  const bool fused = opt.fused_prepost && p.heads_q <= 65535 && p.batch <= 65535;
  const bool pdl = fused && opt.pdl;
  constexpr int kPreRows = 256 / (D / 8);
  if (fused) {
    // The dq semaphores (deterministic mode) follow dq_accum (bwd_workspace.h): a few bytes, zeroed
    // before the preprocess so nothing sits between it and a PDL-launched main kernel.
    const size_t sem_bytes = (size_t(p.batch) * p.heads_q * (pad / kBwdSemRows) + kBwdCounterInts) * sizeof(int);
    if ((e = cudaMemsetAsync(ws.dq_sem, 0, sem_bytes, stream)) != cudaSuccess) return fail("dq_sem memset", e);
    bwd_preprocess_zero<T, D><<<dim3(unsigned(pad / kPreRows), unsigned(p.heads_q), unsigned(p.batch)), 256, 0,
                                 stream>>>(static_cast<const T*>(p.o), static_cast<const T*>(p.d_o), p.lse, p.dlse,
                                           ws.lse2, ws.delta, ws.dq_accum, int(p.seq_q), int(pad),
                                           int(p.heads_q), pdl ? 1 : 0);
    if ((e = cudaGetLastError()) != cudaSuccess) return fail("preprocess launch", e);
  } else {
  // dq_accum and the dq semaphores that follow it (bwd_workspace.h), in one memset.
  const size_t zero_bytes = size_t(reinterpret_cast<char*>(ws.tile_counter + kBwdCounterInts) -
                                   reinterpret_cast<char*>(ws.dq_accum));
  e = cudaMemsetAsync(ws.dq_accum, 0, zero_bytes, stream);
  if (e != cudaSuccess) return fail("dq_accum memset", e);
  {
    const int64_t rows = p.batch * p.heads_q * pad;
    bwd_preprocess<T, D><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const T*>(p.o), static_cast<const T*>(p.d_o), p.lse, p.dlse, ws.lse2, ws.delta,
        int(p.batch), int(p.seq_q), int(pad), int(p.heads_q));
    if ((e = cudaGetLastError()) != cudaSuccess) return fail("preprocess launch", e);
  }
  }

  bool main_launched = false;
  if (p.seq_k > 0) {
    CUtensorMap tq, tk, tv, tdo;
    std::string err;
    if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, D, Cfg::block_m())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, p.seq_k, p.heads_kv, D, Cfg::block_n())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, p.seq_k, p.heads_kv, D, Cfg::block_n())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tdo, p.d_o, bf16, p.batch, p.seq_q, p.heads_q, D, Cfg::block_m())).empty()) return err;

    BwdArgs args;
    args.dq_accum = ws.dq_accum;
    args.dq_sem = ws.dq_sem;
    args.tile_counter = ws.tile_counter;
    args.lse2 = ws.lse2;
    args.delta = ws.delta;
    args.dk = p.dk;
    args.dv = p.dv;
    args.seq_q = int(p.seq_q);
    args.seq_k = int(p.seq_k);
    args.seq_q_pad = int(pad);
    args.heads_q = int(p.heads_q);
    args.heads_kv = int(p.heads_kv);
    args.group = int(p.heads_q / p.heads_kv);
    args.softmax_scale = p.softmax_scale;
    args.scale_log2 = p.softmax_scale * 1.4426950408889634f;
    args.deterministic = p.deterministic;

    // Key blocks in index order: under a causal mask block 0 sees the most queries, so the
    // longest CTAs start first. Deterministic mode relies on the dispatch order (grid x, the
    // fastest-varying): a CTA waits only on CTAs of lower blockIdx.x, dispatched before it
    // (causal deterministic maps blockIdx.x to key blocks last-first: bwd_key_block), so it
    // keeps this grid (no longest-first sections, no persistent kernel).
    const int64_t n_blocks = (p.seq_k + Cfg::block_n() - 1) / Cfg::block_n();
    dim3 grid(unsigned(n_blocks), unsigned(p.heads_kv), unsigned(p.batch));
    args.pdl = pdl ? 1 : 0;
    args.lpt_section = 0;
    args.n_blocks = int(n_blocks);
    args.batch = int(p.batch);
    const int64_t pairs = p.heads_kv * p.batch;
    // LPT section = the (batch, kv head) pairs whose Q, dO (2 x 2 bytes) and dq_accum (4 bytes) rows
    // fit lpt_section_bytes, rounded down to a power of two, at least 1.
    const auto lpt_section = [&] {
      const int64_t pair_bytes = std::max<int64_t>(1, (p.heads_q / p.heads_kv) * p.seq_q * D * 8);
      int64_t section = 1;
      while (section * 2 * pair_bytes <= opt.lpt_section_bytes && section * 2 <= pairs) section *= 2;
      return int(section);
    };
    const bool lpt = opt.lpt < 0 ? bwd_lpt_default(D, p.seq_k) : opt.lpt != 0;
    if (lpt && Causal && !p.deterministic && n_blocks * pairs <= INT32_MAX) {
      args.lpt_section = lpt_section();
      grid = dim3(unsigned(n_blocks * pairs), 1, 1);
    }
    if constexpr (Cfg::persistent()) {
      // Tiles go out in completion order, which deterministic mode's semaphore ranks cannot follow.
      if (p.deterministic) return "backward: the persistent kernel has no deterministic mode";
      // min(tiles, SMs) CTAs; causal tiles in the sectioned longest-first order (always: the
      // dynamic tile counter is greedy list scheduling, which wants the longest first).
      if (n_blocks * pairs > INT32_MAX) return "backward: too many tiles for the persistent kernel";
      args.lpt_section = Causal ? lpt_section() : 0;
      static int sm_count = 0;
      if (sm_count == 0) {
        int dev = 0;
        if ((e = cudaGetDevice(&dev)) != cudaSuccess) return fail("cudaGetDevice", e);
        if ((e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
          return fail("cudaDeviceGetAttribute", e);
      }
      auto pkernel = bwd_kernel_persistent<T, Cfg, Causal>;
      e = cudaFuncSetAttribute(pkernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
      if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
      cudaLaunchConfig_t cfg = {};
      int64_t ctas = std::min<int64_t>(n_blocks * pairs, sm_count);
      if (opt.max_ctas > 0) ctas = std::min<int64_t>(ctas, opt.max_ctas);
      cfg.gridDim = dim3(unsigned(ctas));
      cfg.blockDim = dim3(Cfg::threads());
      cfg.dynamicSmemBytes = Cfg::smem_bytes();
      cfg.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = pdl ? 1 : 0;
      e = cudaLaunchKernelEx(&cfg, pkernel, tq, tk, tv, tdo, args);
      if (e != cudaSuccess) return fail("persistent main kernel launch", e);
    } else {
      auto kernel = [] {
        if constexpr (Cfg::kv80()) {
          return bwd_kernel_kv80<T, Cfg, Causal>;
        } else {
          return bwd_kernel<T, Cfg, Causal>;
        }
      }();
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
      if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
      if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = dim3(Cfg::threads());
        cfg.dynamicSmemBytes = Cfg::smem_bytes();
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, kernel, tq, tk, tv, tdo, args);
        if (e != cudaSuccess) return fail("main kernel launch (PDL)", e);
      } else {
        kernel<<<grid, Cfg::threads(), Cfg::smem_bytes(), stream>>>(tq, tk, tv, tdo, args);
      }
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return fail("main kernel launch", e);
    main_launched = true;
  }

  if (fused) {
    const unsigned blocks_x = unsigned((p.seq_q * (D / 8) + 255) / 256);
    auto post = bwd_postprocess_grid<T, D, Cfg>;
    const float* acc = ws.dq_accum;
    T* dq_out = static_cast<T*>(p.dq);
    const float scale = p.softmax_scale;
    const int sq = int(p.seq_q), pd = int(pad), hq = int(p.heads_q);
    // PDL only behind the main kernel (after the preprocess, a plain launch: nothing to overlap).
    const int post_pdl = (pdl && main_launched) ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks_x, unsigned(p.heads_q), unsigned(p.batch));
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = post_pdl ? 1 : 0;
    e = cudaLaunchKernelEx(&cfg, post, acc, dq_out, scale, sq, pd, hq, post_pdl);
    if (e != cudaSuccess) return fail("postprocess launch", e);
    return {};
  }

  {
    const int64_t total = p.batch * p.seq_q * p.heads_q * (D / 8);
    bwd_postprocess<T, D, Cfg><<<unsigned((total + 255) / 256), 256, 0, stream>>>(
        ws.dq_accum, static_cast<T*>(p.dq), p.softmax_scale, int(p.batch), int(p.seq_q), int(pad),
        int(p.heads_q));
    if ((e = cudaGetLastError()) != cudaSuccess) return fail("postprocess launch", e);
  }
  return {};
}

// One variant of one head dim, bf16 or fp16 (deterministic problems go to the deterministic variant).
template <int HeadDim, int Variant>
std::string launch_bwd_head_dim_variant(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  if constexpr (Variant != bwd_deterministic_variant(HeadDim)) {
    if (p.deterministic) return launch_bwd_head_dim_variant<HeadDim, bwd_deterministic_variant(HeadDim)>(p, ws, stream);
  }
  using Cfg = BwdConfig<HeadDim, Variant>;
  if (p.dtype == BwdDtype::kBf16) {
    return p.causal ? launch_bwd_kernel<__nv_bfloat16, Cfg, true>(p, ws, stream)
                    : launch_bwd_kernel<__nv_bfloat16, Cfg, false>(p, ws, stream);
  }
  return p.causal ? launch_bwd_kernel<__half, Cfg, true>(p, ws, stream)
                  : launch_bwd_kernel<__half, Cfg, false>(p, ws, stream);
}

// The library's backward for one head dim: the short-sequence variant where it has one, the keys
// are few and the run need not be deterministic (bwd_config.cuh, bwd_short_seq_variant), else the
// default variant.
template <int HeadDim>
std::string launch_bwd_head_dim(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  if constexpr (bwd_short_seq_variant(HeadDim) >= 0) {
    if (p.seq_k <= kBwdShortSeqK && !p.deterministic)
      return launch_bwd_head_dim_variant<HeadDim, bwd_short_seq_variant(HeadDim)>(p, ws, stream);
  }
  return launch_bwd_head_dim_variant<HeadDim, bwd_default_variant(HeadDim)>(p, ws, stream);
}

// The standalone harness's variants (tests/gpu/cuda/bwd_variants_hd*.cu): bf16 only, so each
// extra variant costs two kernel instantiations (causal or not).
template <int HeadDim, int Variant>
std::string launch_bwd_head_dim_bf16(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  using Cfg = BwdConfig<HeadDim, Variant>;
  if (p.dtype != BwdDtype::kBf16) return "variant " + std::to_string(Variant) + " is built for bf16 only";
  return p.causal ? launch_bwd_kernel<__nv_bfloat16, Cfg, true>(p, ws, stream)
                  : launch_bwd_kernel<__nv_bfloat16, Cfg, false>(p, ws, stream);
}

}  // namespace fa4::hopper
