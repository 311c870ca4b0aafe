// The Hopper forward attention kernel (DESIGN.md section 3).
//
// A tile is block_m = 64 * W query rows of one (batch, head) against all their visible keys. The
// grid is persistent (one CTA per SM, FwdTile::persistent): each CTA loops over tiles.
//   warpgroup 0  producer: one thread loads each tile's Q once (after the consumers release the
//                previous Q), then streams K and V tiles by TMA into a ring of kv_stages buffers
//                (pipeline.cuh) that runs on across tiles; registers lowered with setmaxnreg.
//   warpgroups 1..W  consumers: warpgroup c owns Q rows [64c, 64c + 64). Per key block it issues
//                S = Q K^T (SS wgmma) and O += P V (RS wgmma: P stays in registers), then does
//                the softmax of S while the PV MMA runs (intra-warpgroup overlap). Named barriers
//                pass an issue token around the consumers so their MMAs reach the tensor cores
//                in turn and one warpgroup's softmax hides under the other's MMAs (ping-pong).
// Key blocks run from the last to the first, so under a causal mask the diagonal (masked)
// blocks come first and the rest need no masking. O goes from registers straight to global
// memory, so Q's buffer is free as soon as a tile's last S = Q K^T has completed: the next tile's
// Q load overlaps this tile's last softmax, last PV and epilogue.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "hopper/fwd_config.cuh"
#include "hopper/fwd_launch.h"
#include "hopper/fwd_softmax.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/pipeline.cuh"
#include "hopper/sync.cuh"
#include "hopper/tensor_map.h"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"
#include "hopper/wgmma_mma.cuh"

namespace fa4::hopper {

struct FwdArgs {
  void* o;             // [batch, seq_q, heads_q, head_dim], q's dtype
  float* lse;          // [batch, heads_q, seq_q]
  int seq_q, seq_k, heads_q;
  int m_blocks;        // query tiles per (batch, head)
  int num_tiles;       // m_blocks * heads_q * batch
  int group;           // heads_q / heads_kv: q head h reads kv head h / group
  float scale_log2;    // softmax_scale * log2(e), folded into the exp2 FMA
  float softmax_scale;
};

template <class T> struct WgmmaTag;
template <> struct WgmmaTag<__nv_bfloat16> { using type = Bf16; };
template <> struct WgmmaTag<__half> { using type = F16; };

// Named barrier ids (0 is __syncthreads). Issue token of consumer c: kBarSched + c.
constexpr uint32_t kBarSched = 1;

// Tile t -> (m_block, head, batch). Consecutive tiles share (batch, head), so the CTAs running at
// one time read the same K/V through L2. Causal: each (batch, head) runs its longest tiles first.
struct TileCoord {
  int m_block, head, batch;
};
template <bool Causal>
__device__ __forceinline__ TileCoord tile_coord(int t, const FwdArgs& args) {
  const int m = t % args.m_blocks;
  const int bh = t / args.m_blocks;
  return {Causal ? args.m_blocks - 1 - m : m, bh % args.heads_q, bh / args.heads_q};
}

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// S = Q K^T for this warpgroup's 64 rows, over the head dim in k-steps of 16, waiting for each K
// sub-stage just before its k-steps.
template <class T, class Cfg, class KPipe>
__device__ __forceinline__ void issue_qk(float (&s)[Cfg::block_n() / 2], const uint8_t* q_tile, KPipe& k) {
  using Tag = typename WgmmaTag<T>::type;
  constexpr int kSteps = Cfg::head_dim() / 16;
  constexpr int kStepsPerSub = kSteps / Cfg::qk_stages();
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < Cfg::qk_stages(); ++j) {
    k.wait(j);
#pragma unroll
    for (int kk = j * kStepsPerSub; kk < (j + 1) * kStepsPerSub; ++kk) {
      const int chunk = kk / 4;
      const uint32_t within = (kk % 4) * 32;  // 16 elements = 32 bytes inside a swizzle row
      auto a = MmaSmemDescriptor::sw128(q_tile + chunk * Cfg::chunk_bytes_q(), 0).plus_bytes(within);
      auto b = k.desc(chunk).plus_bytes(within);
      WgmmaSS<Tag, Cfg::block_n()>::mma(s, a.bits, b.bits, kk > 0 ? 1u : 0u);
    }
  }
  wgmma_commit();
}

// O += P V: P (block_n keys) from registers in k-steps of 16 keys; V rows are 128 bytes apart.
template <class T, class Cfg, class VPipe>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::head_dim() / 2],
                                         const uint32_t (&p)[Cfg::block_n() / 4], VPipe& v) {
  using Tag = typename WgmmaTag<T>::type;
  v.wait(0);
  wgmma_fence();
  const MmaSmemDescriptor b = v.desc();
#pragma unroll
  for (int kk = 0; kk < Cfg::block_n() / 16; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    WgmmaRS<Tag, Cfg::head_dim()>::mma(o, a, b.plus_bytes(kk * 16 * 128).bits, 1u);
  }
  wgmma_commit();
}

template <class T, class Cfg, bool Causal>
__device__ __forceinline__ void fwd_consumer(int c, uint8_t* sQ, uint8_t* sK, uint8_t* sV, uint64_t* q_full,
                                             uint64_t* q_empty,
                                             typename TmaConsumerPipeline<T, Cfg, true>::Staged::Barriers* k_bars,
                                             typename TmaConsumerPipeline<T, Cfg, false>::Staged::Barriers* v_bars,
                                             const FwdArgs& args) {
  constexpr int N = Cfg::block_n();
  constexpr int D = Cfg::head_dim();
  constexpr int W = Cfg::consumer_warpgroups();
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  const int row_in_tile = c * 64 + warp * 16 + lane / 4;  // this thread's first row; its second is +8
  const uint32_t sched_mine = kBarSched + c;
  const uint32_t sched_next = kBarSched + (c + 1) % W;
  constexpr uint32_t kSchedThreads = 256;  // the waiting warpgroup plus the one handing over
  const AttentionMask<Causal> mask{args.seq_q, args.seq_k};
  const uint8_t* q_tile = sQ + c * 64 * 128;  // this warpgroup's 64 rows inside each chunk

  // The pipelines run on across tiles: their stage and phase carry over.
  TmaConsumerPipeline<T, Cfg, true> k(k_bars, sK);
  TmaConsumerPipeline<T, Cfg, false> v(v_bars, sV);
  uint32_t q_phase = 0;

  // The last warpgroup hands the first issue token to warpgroup 0.
  if (c == W - 1) named_barrier_arrive(kBarSched, kSchedThreads);

  for (int t = blockIdx.x; t < args.num_tiles; t += gridDim.x) {
    const TileCoord tc = tile_coord<Causal>(t, args);
    const int m0 = tc.m_block * Cfg::block_m();
    const int row0 = m0 + row_in_tile;
    const int n_blocks = mask.n_blocks(m0, Cfg::block_m(), N);

    OnlineSoftmax<N / 2> softmax;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float s[N / 2];
    uint32_t p[N / 4];
    float o_scale[2];

    if (n_blocks > 0) {
      mbarrier_wait(q_full, q_phase);
      q_phase ^= 1;
      int n = n_blocks - 1;

      named_barrier_sync(sched_mine, kSchedThreads);
      issue_qk<T, Cfg>(s, q_tile, k);
      named_barrier_arrive(sched_next, kSchedThreads);
      wgmma_wait<0>();
      fence_regs(s);
      k.release(elected);
      k.advance();
      if (n == 0 && elected) mbarrier_arrive(q_empty);  // last read of this tile's Q is done
      if (mask.block_needs_mask(n, m0, N)) mask.apply(s, n * N, row0, lane);
      softmax.update(s, args.scale_log2, o_scale);
#pragma unroll
      for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);

      for (--n; n >= 0; --n) {
        named_barrier_sync(sched_mine, kSchedThreads);
        issue_qk<T, Cfg>(s, q_tile, k);  // S for block n ...
        issue_pv<T, Cfg>(o, p, v);       // ... while O takes block n+1
        named_barrier_arrive(sched_next, kSchedThreads);
        wgmma_wait<1>();  // S done (groups retire in order), PV may still run
        fence_regs(s);
        k.release(elected);
        k.advance();
        if (n == 0 && elected) mbarrier_arrive(q_empty);
        if (mask.block_needs_mask(n, m0, N)) mask.apply(s, n * N, row0, lane);
        softmax.update(s, args.scale_log2, o_scale);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(p);  // the RS wgmma read p asynchronously: keep its registers until here
        v.release(elected);
        v.advance();
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          o[4 * j + 0] *= o_scale[0];
          o[4 * j + 1] *= o_scale[0];
          o[4 * j + 2] *= o_scale[1];
          o[4 * j + 3] *= o_scale[1];
        }
#pragma unroll
        for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
      }
      issue_pv<T, Cfg>(o, p, v);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(p);
      v.release(elected);
      v.advance();
    }

    // Epilogue: normalise and store O from registers (4 bytes per store; a quad of lanes writes
    // 16 contiguous bytes of a row), rows past seq_q skipped; LSE by one lane per quad.
    float lse[2];
    softmax.finalize(args.softmax_scale, o_scale, lse);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row < args.seq_q) {
        T* dst = static_cast<T*>(args.o) +
                 ((int64_t(tc.batch) * args.seq_q + row) * args.heads_q + tc.head) * D + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          *reinterpret_cast<uint32_t*>(dst + 8 * j) =
              pack2<T>(o[4 * j + 2 * i] * o_scale[i], o[4 * j + 2 * i + 1] * o_scale[i]);
        }
        if ((lane & 3) == 0) {
          args.lse[(int64_t(tc.batch) * args.heads_q + tc.head) * args.seq_q + row] = lse[i];
        }
      }
    }
  }
  // Balance the token handed over at the start so no barrier is left half-arrived.
  if (c == 0) named_barrier_sync(kBarSched, kSchedThreads);
}

template <class T, class Cfg, bool Causal>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const FwdArgs args) {
  using KCons = TmaConsumerPipeline<T, Cfg, true>;
  using VCons = TmaConsumerPipeline<T, Cfg, false>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* sQ = smem + Cfg::q_offset();
  uint8_t* sK = smem + Cfg::k_offset();
  uint8_t* sV = smem + Cfg::v_offset();
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  uint64_t* q_empty = q_full + 1;
  auto* k_bars = reinterpret_cast<typename KCons::Staged::Barriers*>(q_full + 2);
  auto* v_bars = reinterpret_cast<typename VCons::Staged::Barriers*>(k_bars + 1);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    mbarrier_init(q_full, 1);
    mbarrier_init(q_empty, Cfg::consumer_warpgroups());
    KCons::Staged::init(k_bars, Cfg::consumer_warpgroups());
    VCons::Staged::init(v_bars, Cfg::consumer_warpgroups());
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    if (threadIdx.x == 0) {
      constexpr int N = Cfg::block_n();
      const AttentionMask<Causal> mask{args.seq_q, args.seq_k};
      TmaProducerPipeline<T, Cfg, true> k(k_bars, sK);
      TmaProducerPipeline<T, Cfg, false> v(v_bars, sV);
      uint32_t q_phase = 0;
      for (int t = blockIdx.x; t < args.num_tiles; t += gridDim.x) {
        const TileCoord tc = tile_coord<Causal>(t, args);
        const int m0 = tc.m_block * Cfg::block_m();
        const int n_blocks = mask.n_blocks(m0, Cfg::block_m(), N);
        if (n_blocks == 0) continue;  // the consumers skip this tile's Q too
        const int kv_head = tc.head / args.group;
        // Q's buffer is free once every consumer warpgroup finished the last tile's S = Q K^T.
        mbarrier_wait(q_empty, q_phase ^ 1);
        q_phase ^= 1;
        mbarrier_arrive_expect_tx(q_full, Cfg::q_bytes());
#pragma unroll
        for (int c = 0; c < Cfg::chunks(); ++c) {
          tma_load_4d(sQ + c * Cfg::chunk_bytes_q(), &tm_q, q_full, c * 64, m0, tc.head, tc.batch);
        }
        // Consumers take K(n) then V(n+1): load in that order so neither ring stalls the other.
        int n = n_blocks - 1;
        k.load(&tm_k, n * N, kv_head, tc.batch);
        for (; n > 0; --n) {
          k.load(&tm_k, (n - 1) * N, kv_head, tc.batch);
          v.load(&tm_v, n * N, kv_head, tc.batch);
        }
        v.load(&tm_v, 0, kv_head, tc.batch);
      }
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    fwd_consumer<T, Cfg, Causal>(wg - 1, sQ, sK, sV, q_full, q_empty, k_bars, v_bars, args);
  }
}

// Builds the tensor maps and launches one instantiation.
template <class T, class Cfg, bool Causal>
std::string launch_fwd_kernel(const FwdProblem& p, cudaStream_t stream) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tq, tk, tv;
  std::string err;
  const int64_t seq_k_map = p.seq_k > 0 ? p.seq_k : 1;  // no key is ever loaded when seq_k == 0
  if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, Cfg::block_m())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;

  FwdArgs args;
  args.o = p.o;
  args.lse = p.lse;
  args.seq_q = int(p.seq_q);
  args.seq_k = int(p.seq_k);
  args.heads_q = int(p.heads_q);
  args.group = int(p.heads_q / p.heads_kv);
  args.softmax_scale = p.softmax_scale;
  args.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const int64_t m_blocks = (p.seq_q + Cfg::block_m() - 1) / Cfg::block_m();
  const int64_t tiles = m_blocks * p.heads_q * p.batch;
  if (tiles > INT32_MAX) return "too many query tiles (" + std::to_string(tiles) + ")";
  args.m_blocks = int(m_blocks);
  args.num_tiles = int(tiles);

  int64_t ctas = tiles;
  if (p.max_ctas > 0) {
    ctas = std::min<int64_t>(ctas, p.max_ctas);
  } else if (Cfg::persistent()) {
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return std::string("cudaDeviceGetAttribute: ") + cudaGetErrorString(e);
    ctas = std::min<int64_t>(ctas, sms);
  }

  auto kernel = fwd_kernel<T, Cfg, Causal>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
  if (e != cudaSuccess) return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  kernel<<<unsigned(ctas), Cfg::threads(), Cfg::smem_bytes(), stream>>>(tq, tk, tv, args);
  e = cudaGetLastError();
  if (e != cudaSuccess) return std::string("forward kernel launch failed: ") + cudaGetErrorString(e);
  return {};
}

template <int HeadDim>
std::string launch_fwd_head_dim(const FwdProblem& p, cudaStream_t stream) {
  if (p.dtype == FwdDtype::kBf16) {
    return p.causal ? launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, true>, true>(p, stream)
                    : launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, false>, false>(p, stream);
  }
  return p.causal ? launch_fwd_kernel<__half, FwdConfig<HeadDim, true>, true>(p, stream)
                  : launch_fwd_kernel<__half, FwdConfig<HeadDim, false>, false>(p, stream);
}

}  // namespace fa4::hopper
