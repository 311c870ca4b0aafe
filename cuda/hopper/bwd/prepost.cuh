// The backward's preprocess and postprocess (plain CUDA, memory-bound).
//
//   bwd_preprocess   per query row, delta' = rowsum(dO * O) - dlse and lse2 = lse * log2(e), both
//                    float32 into padded [batch, heads_q, seq_q_pad] scratch rows (the padding and
//                    the rows that see no key get lse2 = +inf, delta' = 0, so they contribute
//                    exactly nothing: P = 2^-inf = 0); it also zeroes the row's dq_accum floats,
//                    the deterministic semaphores and the persistent kernel's tile counter.
//   bwd_postprocess  dq = softmax_scale * dq_accum, converted to the input dtype, reading dq_accum
//                    in the configuration's tile order.
// The main kernel is a programmatic dependent of the preprocess and the postprocess of the main
// kernel (launch_config.cuh): each starts its blocks while the one before drains and waits
// (grid_dependency_wait) before its first global access; the preprocess, launched as an ordinary
// kernel after whatever ran before, lets the main kernel launch at once.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/workspace.h"
#include "hopper/common/numeric.cuh"
#include "hopper/ptx/grid_dependency.cuh"

namespace fa4::hopper {

// Grid (seq_q_pad / rows per block, heads_q, batch), HeadDim / 8 threads per row (16-byte loads of
// O and dO, two 16-byte zero stores of the row's dq_accum floats: any tile order of dq_accum covers
// the same rows), several rows per warp at hd64/hd128. The first row of every 64 zeroes its
// semaphore (dq_sem [batch, heads_q, seq_q_pad / 64]), block (0, 0, 0) the counters after them.
template <class T, int HeadDim>
__global__ void __launch_bounds__(256) bwd_preprocess(const T* o, const T* d_o, const float* lse, const float* dlse,
                                                      float* lse2, float* delta, float* dq_accum, int* dq_sem,
                                                      int seq_q, int seq_q_pad, int heads_q) {
  grid_dependency_launch_dependents();  // the main kernel waits for this grid's completion
  constexpr int kVec = 8;
  constexpr int kLanes = HeadDim / kVec;  // threads per row: 8, 16, 32
  constexpr int kRowsPerBlock = 256 / kLanes;
  static_assert(kLanes <= 32 && 128 % kRowsPerBlock == 0, "rows of one warp; blocks tile seq_q_pad");
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
  if (lane == 0 && i % kBwdSemRows == 0) dq_sem[bh * (seq_q_pad / kBwdSemRows) + i / kBwdSemRows] = 0;
  if (blockIdx.x == 0 && head == 0 && b == 0 && threadIdx.x < kBwdCounterInts) {
    const int64_t sems = int64_t(gridDim.z) * heads_q * (seq_q_pad / kBwdSemRows);
    dq_sem[sems + threadIdx.x] = 0;
  }
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

// The 8 dq_accum floats of query row i, head-dim columns 8 cv .. 8 cv + 7, of (batch, head) row
// block bh, inside the row's block_m tile in the configuration's fragment order: contiguous for
// BwdTile (dq_accum_offset), scattered for the 80-key kernel's transposed pieces.
template <class Cfg, int HeadDim>
__device__ __forceinline__ void load_dq8(const float* dq_accum, int64_t bh, int seq_q_pad, int i, int cv, float4& a,
                                         float4& c) {
  constexpr int kVec = 8;
  constexpr int BM = Cfg::block_m();
  if constexpr (Cfg::dq_transposed()) {
    const float* tile = dq_accum + (bh * seq_q_pad + (i / BM) * BM) * HeadDim;
    float e[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) e[u] = tile[Cfg::dq_accum_offset_any(i % BM, cv * kVec + u)];
    a = make_float4(e[0], e[1], e[2], e[3]);
    c = make_float4(e[4], e[5], e[6], e[7]);
  } else {
    const float* src = dq_accum + (bh * seq_q_pad + (i / BM) * BM) * HeadDim + Cfg::dq_accum_offset(i % BM, cv * kVec);
    a = *reinterpret_cast<const float4*>(src);
    c = *reinterpret_cast<const float4*>(src + 4);
  }
}

// dq[b, i, h, :] = softmax_scale * dq_accum[b, h, i, :], 8 elements per thread; (head, batch) from
// the grid (y, z), so only power-of-two divisions.
template <class T, int HeadDim, class Cfg>
__global__ void __launch_bounds__(256) bwd_postprocess(const float* dq_accum, T* dq, float scale, int seq_q,
                                                       int seq_q_pad, int heads_q) {
  grid_dependency_wait();  // the main kernel's dq_accum, complete and visible
  constexpr int kVec = 8;
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
  out.x = pack2<T>(a.x * scale, a.y * scale);
  out.y = pack2<T>(a.z * scale, a.w * scale);
  out.z = pack2<T>(c.x * scale, c.y * scale);
  out.w = pack2<T>(c.z * scale, c.w * scale);
  *reinterpret_cast<uint4*>(dq + ((int64_t(b) * seq_q + i) * heads_q + head) * HeadDim + cv * kVec) = out;
}

}  // namespace fa4::hopper
