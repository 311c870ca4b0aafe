// The split-KV decode forward (decode/plan.h): a few query rows against a long KV cache, at memory
// bandwidth. One CTA per (split, kv head x row tile, batch): the query rows of the kv head's group
// (packed row R = position * group + head in group) against one split of the visible key range.
//
// Roles: warp 4 is the producer (one thread issues the TMA loads of K and V blocks of 64 keys into
// a ring of stages); warps 0-3 consume every stage with warp-level mma.sync (S = Q K^T, then
// O += P V), an online softmax per warp in the log2 domain, and the per-element mask of the
// attention variants (common/problem.h) on every block (the kernel is bound by memory, not by
// these tests). How the four consumer warps share a stage is the tile's DecodeWarpSplit: each its
// own 16 keys for all of the tile's rows (kKeys; at the end the four warps' (max, sum, O) merge in
// a fixed order, so the result is bitwise reproducible), or each its own 16 rows for all 64 keys
// (kRows: a row's softmax lives in one warp, no merge; a 64-row tile whose output accumulator is
// a quarter of kKeys', so GQA groups of 17-64 rows read K and V once at head dims 128 and 256).
// The CTA writes either the final output (one split) or a float32 partial output and its
// log2-domain LSE, which decode_combine merges.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "hopper/common/mask.cuh"
#include "hopper/common/numeric.cuh"
#include "hopper/common/problem.h"
#include "hopper/decode/plan.h"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/grid_dependency.cuh"
#include "hopper/ptx/ldmatrix.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/mma_sync.cuh"
#include "hopper/ptx/tma.cuh"

namespace fa4::hopper {

// One decode configuration's geometry (head dim, rows per CTA, resident CTAs per SM, how the
// consumer warps split a stage: decode_warp_split); every size and offset derives from it.
template <int HeadDim, int Rows, int CtasPerSm>
struct DecodeTile {
  static constexpr DecodeWarpSplit split() { return decode_warp_split(HeadDim, Rows); }
  static constexpr bool row_split() { return split() == DecodeWarpSplit::kRows; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int block_n() { return kDecodeBlockN; }
  static constexpr int consumer_warps() { return 4; }
  // kKeys: 16 keys (one k step of P V) of every row; kRows: 16 rows (one m16 tile) of every key.
  static constexpr int keys_per_warp() { return row_split() ? block_n() : block_n() / consumer_warps(); }
  static constexpr int rows_per_warp() { return row_split() ? Rows / consumer_warps() : Rows; }
  static constexpr int warp_key0(int warp) { return row_split() ? 0 : warp * keys_per_warp(); }
  static constexpr int warp_row0(int warp) { return row_split() ? warp * rows_per_warp() : 0; }
  static constexpr int rows() { return Rows; }
  static constexpr int m_tiles() { return rows_per_warp() / 16; }  // per warp
  static constexpr int k_chunks() { return keys_per_warp() / 16; }  // k16 steps of P V per warp
  // The end-of-loop merge's float32 O slices: one per warp (kKeys), one in all (kRows: a row's O
  // is in one warp).
  static constexpr int merge_slices() { return row_split() ? 1 : consumer_warps(); }
  static constexpr int threads() { return 32 * (consumer_warps() + 1); }
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr int ctas_per_sm() { return CtasPerSm; }
  // K + V loads in flight per SM, split between its resident CTAs' stages.
  static constexpr uint32_t inflight_bytes_per_sm() { return 192u * 1024u; }
  static constexpr int stages() { return int(inflight_bytes_per_sm() / ctas_per_sm() / (2 * kv_tile_bytes())); }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(rows()) * 128; }
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(block_n()) * 128; }
  static constexpr uint32_t q_bytes() { return chunk_bytes_q() * chunks(); }
  static constexpr uint32_t kv_tile_bytes() { return chunk_bytes_kv() * chunks(); }
  static constexpr uint32_t q_offset() { return 0; }
  static constexpr uint32_t k_offset(int stage) { return q_bytes() + uint32_t(stage) * 2 * kv_tile_bytes(); }
  static constexpr uint32_t v_offset(int stage) { return k_offset(stage) + kv_tile_bytes(); }
  static constexpr uint32_t barrier_offset() { return k_offset(stages()); }
  // full[stages], empty[stages].
  static constexpr uint32_t barrier_bytes() { return 8 * 2 * stages(); }
  static constexpr uint32_t smem_bytes() { return barrier_offset() + barrier_bytes() + 1024; }
  // The end-of-loop merge reuses the K / V stages: per-warp row max and sum, then each warp's O in
  // float32, a slice per warp with rows of merge_o_stride() floats: the padding of 8 puts the
  // eight rows a warp's fragment store covers on distinct bank groups (2 wavefronts per 256 bytes).
  static constexpr int merge_o_stride() { return HeadDim + 8; }
  static constexpr uint32_t merge_stats_offset() { return k_offset(0); }
  static constexpr uint32_t merge_o_offset() { return merge_stats_offset() + 2 * 4 * consumer_warps() * rows(); }
  static constexpr uint32_t merge_o_slice_floats() { return uint32_t(rows()) * merge_o_stride(); }
  static constexpr uint32_t merge_bytes() {
    return merge_o_offset() - merge_stats_offset() + 4u * merge_slices() * merge_o_slice_floats();
  }

  static_assert(rows() % 16 == 0 && rows() <= kDecodeMaxRows, "rows are whole m16 tiles");
  static_assert(!row_split() || rows_per_warp() == 16, "kRows: one m16 tile per warp");
  static_assert(merge_bytes() <= barrier_offset() - k_offset(0), "the merge fits in the stages");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
  // Each resident block also takes 1 KB of shared memory the system reserves.
  static_assert((smem_bytes() + 1024) * ctas_per_sm() <= 233472, "the resident CTAs fit in an SM's shared memory");
  static_assert(stages() >= 2, "at least two stages in flight");
  static_assert(CtasPerSm >= 1 && CtasPerSm <= decode_max_ctas_per_sm(HeadDim, Rows),
                "the tile's registers allow this many resident CTAs");
};

struct DecodeArgs {
  const void* q;  // [batch, seq_q, heads_q, head_dim]
  void* o;        // [batch, seq_q, heads_q, head_dim]
  float* lse;     // [batch, heads_q, seq_q], natural log
  float* o_part;    // splits > 1: [splits, batch, heads_kv, rows, head_dim]
  float* lse_part;  // splits > 1: [splits, batch, heads_kv, rows], log2 domain
  const float* sinks;  // [batch, heads_q] or null
  MaskArgs mask;
  int seq_q, seq_k, heads_q, heads_kv, group, rows, splits, batch;
  float scale_log2;  // softmax scale * log2(e) (with the soft cap: cap * log2(e))
  float cap_scale;   // > 0: scores become tanh(raw * cap_scale), then times scale_log2
};

// The keys [lo, hi) that the real rows of row tile `tile` may see by band and lengths, and the
// split's key blocks [*b0, *b1) of them.
struct DecodeRange {
  int lo = 0, hi = 0, b0 = 0, b1 = 0;
};
__device__ __forceinline__ DecodeRange decode_range(const TileMask<MaskKind::kVariant>& m, const DecodeArgs& a,
                                                    int tile, int rows_per_cta, int split) {
  DecodeRange r;
  const int r0 = tile * rows_per_cta, r1 = imin(r0 + rows_per_cta, a.rows);
  const int i0 = r0 / a.group, i1 = (r1 - 1) / a.group + 1;  // positions [i0, i1)
  m.key_span(i0, i1, &r.lo, &r.hi);
  if (r.hi <= r.lo) return r;
  const int first = r.lo / kDecodeBlockN, last = (r.hi - 1) / kDecodeBlockN + 1;
  // Split s takes blocks [n s / splits, n (s + 1) / splits): the sizes differ by at most one and
  // as few splits as possible hold the larger size (the CTAs sharing an SM finish together).
  const int64_t n = last - first;
  r.b0 = first + int(n * split / a.splits);
  r.b1 = first + int(n * (split + 1) / a.splits);
  return r;
}

// A row's LSE and output scale from its log2-domain LSE over the visible keys (-inf: none) and
// the sink: returns the natural-log LSE, *factor the factor on the normalised output.
__device__ __forceinline__ float decode_finish_row(float lse2, const float* sink, float* factor) {
  constexpr float kLn2 = 0.6931471805599453f, kLog2e = 1.4426950408889634f;
  if (sink == nullptr) {
    *factor = lse2 == -INFINITY ? 0.f : 1.f;
    return lse2 == -INFINITY ? -INFINITY : lse2 * kLn2;
  }
  const float s2 = *sink * kLog2e;
  const float mx = fmaxf(lse2, s2);
  const float total2 = mx + log2f(exp2f(lse2 - mx) + exp2f(s2 - mx));
  *factor = lse2 == -INFINITY ? 0.f : exp2f(lse2 - total2);
  return total2 * kLn2;
}

template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::threads(), Cfg::ctas_per_sm())
    decode_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const DecodeArgs a) {
  constexpr int D = Cfg::head_dim(), MT = Cfg::m_tiles(), RPC = Cfg::rows(), S = Cfg::stages();
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  uint64_t* empty = full + S;

  const int split = blockIdx.x;
  const int hkv = blockIdx.y % a.heads_kv, tile = blockIdx.y / a.heads_kv;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], Cfg::consumer_warps());
    }
    fence_mbarrier_init();
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
  }
  // Launched as a dependent of the stream's previous kernel (launch_decode): the set-up above
  // overlaps its tail; every global access (lengths, Q, K, V, outputs) comes after the wait.
  grid_dependency_wait();
  // The combine (the next kernel) may start its blocks now: they wait for this grid to finish.
  grid_dependency_launch_dependents();
  __syncthreads();
  const TileMask<MaskKind::kVariant> mask(a.mask, b);
  const DecodeRange range = decode_range(mask, a, tile, RPC, split);
  const int nblk = range.b1 - range.b0;

  if (warp == Cfg::consumer_warps()) {
    // Producer: K and V of each block of the split, one stage per block.
    if (lane == 0 && nblk > 0) {
      for (int it = 0; it < nblk; ++it) {
        const int s = it % S;
        if (it >= S) mbarrier_wait(&empty[s], ((it / S) - 1) & 1);
        mbarrier_arrive_expect_tx(&full[s], 2 * Cfg::kv_tile_bytes());
        // One box of whole rows each (make_bshd_rows_tensor_map): the 64-column pieces land side
        // by side, as sw128_offset reads them.
        const int key0 = (range.b0 + it) * kDecodeBlockN;
        tma_load_5d(smem + Cfg::k_offset(s), &tm_k, &full[s], 0, key0, 0, hkv, b);
        tma_load_5d(smem + Cfg::v_offset(s), &tm_v, &full[s], 0, key0, 0, hkv, b);
      }
    }
    return;
  }

  // Q of the tile's rows into shared memory (the 128-byte swizzle the ldmatrix addresses expect);
  // rows past the group's rows are zero.
  const T* q = static_cast<const T*>(a.q);
  for (int u = threadIdx.x; u < RPC * (D / 8); u += 32 * Cfg::consumer_warps()) {
    const int r = u / (D / 8), col = (u % (D / 8)) * 8;
    const int R = tile * RPC + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (R < a.rows) {
      const int i = R / a.group, h = hkv * a.group + R % a.group;
      val = *reinterpret_cast<const uint4*>(q + ((int64_t(b) * a.seq_q + i) * a.heads_q + h) * D + col);
    }
    *reinterpret_cast<uint4*>(smem + Cfg::q_offset() + sw128_offset(r, col, Cfg::chunk_bytes_q())) = val;
  }
  named_barrier_sync(1, 32 * Cfg::consumer_warps());

  // This thread's rows: m tile t, half e -> tile row row0w + 16 t + lane / 4 + 8 e. Their bands
  // and ids.
  constexpr int KC = Cfg::k_chunks();
  const int row0w = Cfg::warp_row0(warp);
  int row_lo[MT][2], row_hi[MT][2], row_id[MT][2];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int R = tile * RPC + row0w + 16 * t + lane / 4 + 8 * e;
      const int i = R / a.group;
      const bool real = R < a.rows && i < mask.q_len;
      row_lo[t][e] = real ? mask.key_lo(i) : 0;
      row_hi[t][e] = real ? mask.key_hi(i) : 0;
      row_id[t][e] = real && mask.q_ids ? __ldg(mask.q_ids + i) : 0;
    }
  }

  float o[MT][D / 8][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) row_max[t][e] = -INFINITY, row_sum[t][e] = 0.f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[t][n][0] = o[t][n][1] = o[t][n][2] = o[t][n][3] = 0.f;
  }

  const int wkey = Cfg::warp_key0(warp);  // this warp's first key within a block
  for (int it = 0; it < nblk; ++it) {
    const int s = it % S;
    mbarrier_wait(&full[s], (it / S) & 1);
    const uint8_t* sK = smem + Cfg::k_offset(s);
    uint8_t* sV = smem + Cfg::v_offset(s);
    const int key0 = (range.b0 + it) * kDecodeBlockN + wkey;

    // Keys no row of the tile sees (past the cache length, before the window) hold anything,
    // NaN included: their V rows are zeroed before P V so that 0 * NaN never reaches an output.
    // kKeys: each warp zeroes the rows of its own keys (a warp-uniform test); kRows: every warp
    // reads every key, so the four zero the block's rows together and meet before reading (the
    // test is then CTA-uniform).
    const bool edge = key0 < range.lo || key0 + Cfg::keys_per_warp() > range.hi;
    if (edge) {
      // kRows: the rows a warp zeroes were read by every warp S blocks ago. That order already
      // holds through the empty / full barriers and the TMA fill between them, but a CTA barrier
      // here states it where compute-sanitizer's racecheck can see it (edge blocks only).
      if constexpr (Cfg::row_split()) named_barrier_sync(1, 32 * Cfg::consumer_warps());
      constexpr int zero_threads = Cfg::row_split() ? 32 * Cfg::consumer_warps() : 32;
      const int zt = Cfg::row_split() ? int(threadIdx.x) : lane;
      for (int u = zt; u < Cfg::keys_per_warp() * (D / 8); u += zero_threads) {
        const int k = u / (D / 8), col = (u % (D / 8)) * 8;
        const int j = key0 + k;
        if (j < range.lo || j >= range.hi)
          *reinterpret_cast<uint4*>(sV + sw128_offset(wkey + k, col, Cfg::chunk_bytes_kv())) = make_uint4(0, 0, 0, 0);
      }
      if constexpr (Cfg::row_split()) {
        named_barrier_sync(1, 32 * Cfg::consumer_warps());
      } else {
        __syncwarp();
      }
    }

    // S = Q K^T for this warp's keys: two n8 tiles per k16 chunk of keys, per m tile.
    float sc[MT][2 * KC][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
      for (int n = 0; n < 2 * KC; ++n) sc[t][n][0] = sc[t][n][1] = sc[t][n][2] = sc[t][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[MT][4];  // Q's fragments of this k16 step, loaded with the first key chunk
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        uint32_t kf[4];
        ldmatrix_x4(kf, sK + sw128_offset(wkey + 16 * c + (lane % 8) + (lane / 16) * 8,
                                          kk * 16 + ((lane / 8) % 2) * 8, Cfg::chunk_bytes_kv()));
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          if (c == 0)
            ldmatrix_x4(qf[t], smem + Cfg::q_offset() + sw128_offset(row0w + 16 * t + lane % 16,
                                                                     kk * 16 + (lane / 16) * 8, Cfg::chunk_bytes_q()));
          mma_m16n8k16<T>(sc[t][2 * c], qf[t], kf[0], kf[1]);
          mma_m16n8k16<T>(sc[t][2 * c + 1], qf[t], kf[2], kf[3]);
        }
      }
    }

    // Soft cap, scale, mask (a select: a masked score is -inf whatever K held), online softmax.
    uint32_t pf[MT][KC][4];
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float mx = row_max[t][e];
#pragma unroll
        for (int n = 0; n < 2 * KC; ++n) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int j = key0 + 8 * n + 2 * (lane % 4) + c;
            float v = sc[t][n][2 * e + c];
            if (a.cap_scale > 0.f) v = tanh_approx(v * a.cap_scale);
            v *= a.scale_log2;
            bool vis = j >= row_lo[t][e] && j < row_hi[t][e];
            if (mask.kv_ids != nullptr) vis = vis && j < mask.kv_len && __ldg(mask.kv_ids + j) == row_id[t][e];
            v = vis ? v : -INFINITY;
            sc[t][n][2 * e + c] = v;
            mx = fmaxf(mx, v);
          }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.f : mx;
        const float corr = exp2_approx(row_max[t][e] - base);  // 0 when the old max was -inf
        row_max[t][e] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2 * KC; ++n) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = exp2_approx(sc[t][n][2 * e + c] - base);
            sc[t][n][2 * e + c] = p;
            sum += p;
          }
        }
        row_sum[t][e] = row_sum[t][e] * corr + sum;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[t][n][2 * e] *= corr, o[t][n][2 * e + 1] *= corr;
      }
      // The accumulator layout of two n8 tiles is the A fragment of one k16 step.
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        pf[t][c][0] = pack2<T>(sc[t][2 * c][0], sc[t][2 * c][1]);
        pf[t][c][1] = pack2<T>(sc[t][2 * c][2], sc[t][2 * c][3]);
        pf[t][c][2] = pack2<T>(sc[t][2 * c + 1][0], sc[t][2 * c + 1][1]);
        pf[t][c][3] = pack2<T>(sc[t][2 * c + 1][2], sc[t][2 * c + 1][3]);
      }
    }

    // O += P V over this warp's keys, 16 head-dim columns per transposed ldmatrix.
#pragma unroll
    for (int dd = 0; dd < D / 16; ++dd) {
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, sV + sw128_offset(wkey + 16 * c + (lane % 8) + ((lane / 8) % 2) * 8,
                                                dd * 16 + (lane / 16) * 8, Cfg::chunk_bytes_kv()));
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          mma_m16n8k16<T>(o[t][2 * dd], pf[t][c], vf[0], vf[1]);
          mma_m16n8k16<T>(o[t][2 * dd + 1], pf[t][c], vf[2], vf[3]);
        }
      }
    }
    // The zeroing above wrote the stage through the generic proxy; the next TMA fill of it is an
    // async-proxy write, ordered after them by this fence and the release below.
    if (edge) fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[s]);
  }

  // Merge: kKeys, the four warps: the tile's max per row, each warp's sum and O rescaled to it,
  // summed in warp order; kRows: each row's (max, sum, O) from its one warp, in one slice.
  constexpr int W = Cfg::consumer_warps(), MW = Cfg::merge_slices();
  const int slice = Cfg::row_split() ? 0 : warp;
  named_barrier_sync(1, 32 * W);  // every warp is past its last read of the stages
  float* st_max = reinterpret_cast<float*>(smem + Cfg::merge_stats_offset());
  float* st_sum = st_max + W * RPC;
  float* so = reinterpret_cast<float*>(smem + Cfg::merge_o_offset());
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float sum = row_sum[t][e];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      row_sum[t][e] = sum;
      if (lane % 4 == 0) {
        const int r = row0w + 16 * t + lane / 4 + 8 * e;
        st_max[slice * RPC + r] = row_max[t][e];
        st_sum[slice * RPC + r] = sum;
      }
    }
  }
  named_barrier_sync(1, 32 * W);
  float scale_own[MT][2];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = row0w + 16 * t + lane / 4 + 8 * e;
      float mx = -INFINITY;
      for (int w = 0; w < MW; ++w) mx = fmaxf(mx, st_max[w * RPC + r]);
      const float base = mx == -INFINITY ? 0.f : mx;
      scale_own[t][e] = exp2_approx(row_max[t][e] - base);
    }
  }
  // Every warp writes its O, rescaled to the row's tile max, into its slice at once.
  float* so_own = so + slice * Cfg::merge_o_slice_floats();
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = row0w + 16 * t + lane / 4 + 8 * e;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(so_own + r * Cfg::merge_o_stride() + 8 * n + 2 * (lane % 4)) =
            make_float2(o[t][n][2 * e] * scale_own[t][e], o[t][n][2 * e + 1] * scale_own[t][e]);
    }
  }
  named_barrier_sync(1, 32 * W);

  // Output: rows of the tile, float32 O / sum, as the final output (one split: LSE with the sink,
  // padding rows 0 / -inf) or as this split's partial.
  for (int u = threadIdx.x; u < RPC * (D / 4); u += 32 * W) {
    const int r = u / (D / 4), col = (u % (D / 4)) * 4;
    const int R = tile * RPC + r;
    if (R >= a.rows) continue;
    float mx = -INFINITY;
    for (int w = 0; w < MW; ++w) mx = fmaxf(mx, st_max[w * RPC + r]);
    const float base = mx == -INFINITY ? 0.f : mx;
    float sum = 0.f;  // the warps' sums rescaled to the row's max, in warp order
    for (int w = 0; w < MW; ++w) sum += st_sum[w * RPC + r] * exp2_approx(st_max[w * RPC + r] - base);
    const float lse2 = sum > 0.f ? base + __log2f(sum) : -INFINITY;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    float4 acc = *reinterpret_cast<const float4*>(so + r * Cfg::merge_o_stride() + col);
    for (int w = 1; w < MW; ++w) {  // the warps' slices summed in warp order
      const float4 x = *reinterpret_cast<const float4*>(so + w * Cfg::merge_o_slice_floats() +
                                                        r * Cfg::merge_o_stride() + col);
      acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
    const int i = R / a.group, h = hkv * a.group + R % a.group;
    if (a.splits == 1) {
      float factor;
      const bool pad = i >= mask.q_len;
      const float* sink = a.sinks && !pad ? a.sinks + int64_t(b) * a.heads_q + h : nullptr;
      float lse = decode_finish_row(lse2, sink, &factor);
      if (pad) factor = 0.f, lse = -INFINITY;
      const float f = factor * inv;
      T* dst = static_cast<T*>(a.o) + ((int64_t(b) * a.seq_q + i) * a.heads_q + h) * D + col;
      uint2 packed;
      packed.x = pack2<T>(acc.x * f, acc.y * f);
      packed.y = pack2<T>(acc.z * f, acc.w * f);
      *reinterpret_cast<uint2*>(dst) = packed;
      if (col == 0) a.lse[(int64_t(b) * a.heads_q + h) * a.seq_q + i] = lse;
    } else {
      const int64_t row = ((int64_t(split) * a.batch + b) * a.heads_kv + hkv) * a.rows + R;
      *reinterpret_cast<float4*>(a.o_part + row * D + col) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (col == 0) a.lse_part[row] = lse2;
    }
  }
}

// Merges the splits' partials of one packed row per CTA: its threads are kGroups groups of D / 4
// columns (a float4 each); group g takes splits g, g + kGroups, ... with every load of a round of
// kUnroll splits in flight at once, merged online in split order, then the groups are merged in
// group order through shared memory (bitwise reproducible). The sink and padding rows as the
// split kernel's one-split output; writes o and the natural-log LSE.
template <int D>
struct DecodeCombineShape {
  static constexpr int threads() { return 128; }
  static constexpr int col_threads() { return D / 4; }
  static constexpr int groups() { return threads() / col_threads(); }
  static_assert(threads() % col_threads() == 0 && groups() >= 1, "whole groups of columns");
};

template <class T, int D>
__global__ void __launch_bounds__(DecodeCombineShape<D>::threads()) decode_combine(const DecodeArgs a) {
  using Shape = DecodeCombineShape<D>;
  constexpr int kCols = Shape::col_threads(), kGroups = Shape::groups(), kUnroll = 4;
  __shared__ float4 part_o[kGroups][kCols];
  __shared__ float part_max[kGroups], part_sum[kGroups];
  // Launched as a dependent of the split kernel: its partials are read after the wait; the next
  // kernel of the stream may start its blocks at once.
  grid_dependency_wait();
  grid_dependency_launch_dependents();
  const int64_t row = blockIdx.x;  // over batch x heads_kv x rows
  const int64_t pairs_rows = int64_t(a.batch) * a.heads_kv * a.rows;
  const int g = threadIdx.x / kCols, c = threadIdx.x % kCols;

  // Online over this group's splits. Every split wrote its partial (an empty split: O 0, LSE
  // -inf), so a round's loads do not wait on each other. A split this row does not see (LSE
  // -inf) is skipped by select, never added as 0 x its partial, which may hold NaN from a V row
  // only other rows of its tile see.
  float mx = -INFINITY, sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = g; s0 < a.splits; s0 += kGroups * kUnroll) {
    float l[kUnroll];
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u * kGroups;
      l[u] = -INFINITY;
      x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (s < a.splits) {
        l[u] = a.lse_part[s * pairs_rows + row];
        x[u] = *reinterpret_cast<const float4*>(a.o_part + (s * pairs_rows + row) * D + 4 * c);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (l[u] == -INFINITY) continue;
      const float m = fmaxf(mx, l[u]);
      const float r = exp2f(mx - m), w = exp2f(l[u] - m);  // mx = -inf: r = 0, acc and sum are 0
      acc.x = acc.x * r + w * x[u].x, acc.y = acc.y * r + w * x[u].y;
      acc.z = acc.z * r + w * x[u].z, acc.w = acc.w * r + w * x[u].w;
      sum = sum * r + w;
      mx = m;
    }
  }
  if (kGroups > 1) {
    part_o[g][c] = acc;
    if (c == 0) part_max[g] = mx, part_sum[g] = sum;
    __syncthreads();
    if (g != 0) return;
    float m_all = -INFINITY;
#pragma unroll
    for (int k = 0; k < kGroups; ++k) m_all = fmaxf(m_all, part_max[k]);
    mx = m_all, sum = 0.f;
    acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {  // in group order
      if (part_max[k] == -INFINITY) continue;
      const float w = exp2f(part_max[k] - m_all);
      const float4 p = part_o[k][c];
      acc.x += w * p.x, acc.y += w * p.y, acc.z += w * p.z, acc.w += w * p.w;
      sum += w * part_sum[k];
    }
  }

  const int R = int(row % a.rows);
  const int hkv = int((row / a.rows) % a.heads_kv);
  const int b = int(row / (int64_t(a.rows) * a.heads_kv));
  const int i = R / a.group, h = hkv * a.group + R % a.group;
  int q_len = a.seq_q;
  if (a.mask.q_lengths) q_len = iclamp(a.mask.q_lengths[b], 0, a.seq_q);
  const bool pad = i >= q_len;
  const float lse2 = sum > 0.f ? mx + log2f(sum) : -INFINITY;
  float factor;
  const float* sink = a.sinks && !pad ? a.sinks + int64_t(b) * a.heads_q + h : nullptr;
  float lse = decode_finish_row(lse2, sink, &factor);
  if (pad) factor = 0.f, lse = -INFINITY;
  const float f = sum > 0.f ? factor / sum : 0.f;
  T* dst = static_cast<T*>(a.o) + ((int64_t(b) * a.seq_q + i) * a.heads_q + h) * D + 4 * c;
  uint2 packed;
  packed.x = pack2<T>(acc.x * f, acc.y * f);
  packed.y = pack2<T>(acc.z * f, acc.w * f);
  *reinterpret_cast<uint2*>(dst) = packed;
  if (c == 0) a.lse[(int64_t(b) * a.heads_q + h) * a.seq_q + i] = lse;
}

}  // namespace fa4::hopper
