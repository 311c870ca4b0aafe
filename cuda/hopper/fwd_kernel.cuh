// The Hopper forward attention kernel (DESIGN.md section 3).
//
// One CTA computes block_m = 64 * W query rows of one (batch, head) against all visible keys.
//   warpgroup 0  producer: one thread loads Q once, then streams K and V tiles by TMA into a ring
//                of kv_stages buffers (pipeline.cuh); registers lowered with setmaxnreg.
//   warpgroups 1..W  consumers: warpgroup c owns Q rows [64c, 64c + 64). Per key block it issues
//                S = Q K^T (SS wgmma) and O += P V (RS wgmma: P stays in registers), then does
//                the softmax of S while the PV MMA runs (intra-warpgroup overlap). Named barriers
//                pass an issue token around the consumers so their MMAs reach the tensor cores
//                in turn and one warpgroup's softmax hides under the other's MMAs (ping-pong).
// Key blocks run from the last to the first, so under a causal mask the diagonal (masked)
// blocks come first and the rest need no masking.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "hopper/fwd_config.cuh"
#include "hopper/fwd_launch.h"
#include "hopper/fwd_phase_clock.cuh"
#include "hopper/fwd_schedule.h"
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
  float* lse;
  int seq_q, seq_k, heads_q;
  int group;           // heads_q / heads_kv: q head h reads kv head h / group
  float scale_log2;    // softmax_scale * log2(e), folded into the exp2 FMA
  float softmax_scale;
  // Lpt variants (fwd_config.cuh) under a causal mask: the grid is linear when lpt_section > 0:
  // tile t is in section t / (lpt_section * m_blocks) of lpt_section (head, batch) pairs (the last
  // section possibly shorter); inside a section the m block (longest first), then the pair.
  // lpt_section == 0: the (m block, head, batch) grid.
  int lpt_section;
  int m_blocks;
  int batch;
};

template <class T> struct WgmmaTag;
template <> struct WgmmaTag<__nv_bfloat16> { using type = Bf16; };
template <> struct WgmmaTag<__half> { using type = F16; };

// Named barrier ids (0 is __syncthreads). Issue token of consumer c: kBarSched + c.
// Epilogue barrier of consumer c (its 128 threads): kBarEpilogue + c.
constexpr uint32_t kBarSched = 1;
constexpr uint32_t kBarEpilogue = 8;

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

// Epilogue: this thread's normalised O (o * o_scale per row) into rows [tile_row0, +8) of a Q-shaped
// shared tile (64-column chunks of chunk_bytes_q, 128-byte rows, 128B swizzle: the 16-byte unit
// index within a row XORed with row % 8), the layout the TMA store of O reads.
template <class T, class Cfg>
__device__ __forceinline__ void stage_o_tile(uint8_t* tile, const float (&o)[Cfg::head_dim() / 2],
                                             const float (&o_scale)[2], int tile_row0, int lane) {
#pragma unroll
  for (int j = 0; j < Cfg::head_dim() / 8; ++j) {
    const int col = 8 * j + 2 * (lane & 3);
    const int chunk = col / 64;
    const int cc = col % 64;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = tile_row0 + 8 * i;
      const uint32_t off = chunk * Cfg::chunk_bytes_q() + r * 128 + (((cc / 8) ^ (r % 8)) * 16) + (cc % 8) * 2;
      *reinterpret_cast<uint32_t*>(tile + off) = pack2<T>(o[4 * j + 2 * i] * o_scale[i], o[4 * j + 2 * i + 1] * o_scale[i]);
    }
  }
}

// S = Q K^T for this warpgroup's 64 rows, over the head dim in k-steps of 16, waiting for each K
// sub-stage just before its k-steps.
// NE < block_n (TrimFirst's first block): only the first NE key columns (the D fragment of an
// m64nNE wgmma holds the same columns in the same places as the first NE / 2 registers of the full
// width's). WaitFirst: as KWaitFirst (below), for this call only (TrimFirst issues it on one branch of a
// switch, where an injected warpgroup.arrive would serialize the kernel's wgmmas, C7520).
template <class T, class Cfg, int NE = Cfg::block_n(), bool WaitFirst = Cfg::k_wait_first(), class KPipe>
__device__ __forceinline__ void issue_qk(float (&s)[NE / 2], const uint8_t* q_tile, KPipe& k) {
  using Tag = typename WgmmaTag<T>::type;
  constexpr int kSteps = Cfg::head_dim() / 16;
  constexpr int kStepsPerSub = kSteps / Cfg::qk_stages();
  // KWaitFirst: wait for every K sub-stage before the fence (no wait loop between wgmmas, so no
  // warpgroup.arrive injected by ptxas, C7519; the WgSkip variants needed it while their n_mine was
  // not provably warp-uniform: the injected arrive landed on a divergent path and ptxas serialized
  // every wgmma of the kernel, C7520; warpgroup_block_count reads it from lane 0 since session 7).
  // Otherwise v2's order: sub-stage j's wait just before its k-steps.
  if constexpr (WaitFirst) {
#pragma unroll
    for (int j = 0; j < Cfg::qk_stages(); ++j) k.wait(j);
  }
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < Cfg::qk_stages(); ++j) {
    if constexpr (!WaitFirst) k.wait(j);
#pragma unroll
    for (int kk = j * kStepsPerSub; kk < (j + 1) * kStepsPerSub; ++kk) {
      const int chunk = kk / 4;
      const uint32_t within = (kk % 4) * 32;  // 16 elements = 32 bytes inside a swizzle row
      auto a = MmaSmemDescriptor::sw128(q_tile + chunk * Cfg::chunk_bytes_q(), 0).plus_bytes(within);
      auto b = k.desc(chunk).plus_bytes(within);
      WgmmaSS<Tag, NE>::mma(s, a.bits, b.bits, kk > 0 ? 1u : 0u);
    }
  }
  wgmma_commit();
}

// TrimFirst: the 16-column groups of key block n that rows [row_begin, row_begin + 64) can see
// (0 .. block_n / 16). Rows past seq_q are never stored, so only the valid ones count.
template <class Cfg, bool Causal>
__device__ __forceinline__ int visible_ksteps(const AttentionMask<Causal>& mask, int n, int row_begin) {
  constexpr int N = Cfg::block_n();
  int end = mask.seq_k;  // one past the last column any of the rows sees
  if (Causal) end = min(end, min(row_begin + 64, mask.seq_q) + mask.seq_k - mask.seq_q);
  const int cols = min(N, max(0, end - n * N));
  return (cols + 15) / 16;
}

// TrimFirst: calls first(std::integral_constant<int, 16 * ksteps>) with ksteps clamped to
// 1 .. block_n / 16 (warp-uniform: the whole warpgroup takes one case). The first block's S lives
// in its own array of exactly that width (a wgmma accumulator that only wgmma writes: writing a
// prefix of the loop's full-width S made ptxas serialize every wgmma of the kernel, C7511/C7515).
template <int N, class First>
__device__ __forceinline__ void with_first_width(int ksteps, First&& first) {
  static_assert(N % 16 == 0 && N <= 256, "16-column groups");
  // From lane 0, so the compiler knows the switch is warp-uniform (a divergent switch around wgmmas
  // made it add YIELD / WARPSYNC to every wait loop of the kernel, also the main loop's).
  ksteps = __shfl_sync(0xffffffffu, max(1, min(N / 16, ksteps)), 0);
#define FA4_TRIM_CASE(J)                                 \
  case J:                                                \
    if constexpr (16 * J <= N) {                         \
      first(std::integral_constant<int, 16 * J>{});      \
      return;                                            \
    }                                                    \
    break;
  switch (ksteps) {
    FA4_TRIM_CASE(1) FA4_TRIM_CASE(2) FA4_TRIM_CASE(3) FA4_TRIM_CASE(4) FA4_TRIM_CASE(5)
    FA4_TRIM_CASE(6) FA4_TRIM_CASE(7) FA4_TRIM_CASE(8) FA4_TRIM_CASE(9) FA4_TRIM_CASE(10)
    FA4_TRIM_CASE(11) FA4_TRIM_CASE(12) FA4_TRIM_CASE(13) FA4_TRIM_CASE(14) FA4_TRIM_CASE(15)
    FA4_TRIM_CASE(16)
    default: break;
  }
#undef FA4_TRIM_CASE
}

// O += P V: P (block_n keys) from registers in k-steps of 16 keys; V rows are 128 bytes apart.
// NE < block_n (TrimFirstPv's first block): only the first NE keys (P is 0 past them).
template <class T, class Cfg, int NE = Cfg::block_n(), class VPipe>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::head_dim() / 2],
                                         const uint32_t (&p)[Cfg::block_n() / 4], VPipe& v) {
  using Tag = typename WgmmaTag<T>::type;
  v.wait(0);
  wgmma_fence();
  const MmaSmemDescriptor b = v.desc();
#pragma unroll
  for (int kk = 0; kk < NE / 16; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    WgmmaRS<Tag, Cfg::head_dim()>::mma(o, a, b.plus_bytes(kk * 16 * 128).bits, 1u);
  }
  wgmma_commit();
}

// O *= o_scale per row after a PV. CondRescale: a warp whose rows all kept their max (o_scale
// exactly 1) skips the multiply. The vote is per warp, not per warpgroup: each warp owns 16 rows of
// O and nothing between here and the next wgmma needs the warpgroup converged, so a warp-uniform
// branch is enough (the warps reconverge before the next wgmma_fence).
template <class Cfg>
__device__ __forceinline__ void rescale_o(float (&o)[Cfg::head_dim() / 2], const float (&o_scale)[2], bool rescaled) {
  if (Cfg::cond_rescale() && !__any_sync(0xffffffffu, rescaled)) return;
#pragma unroll
  for (int j = 0; j < Cfg::head_dim() / 8; ++j) {
    o[4 * j + 0] *= o_scale[0];
    o[4 * j + 1] *= o_scale[0];
    o[4 * j + 2] *= o_scale[1];
    o[4 * j + 3] *= o_scale[1];
  }
}

// The issue-token barrier's width: the waiting warpgroup plus the one handing over.
constexpr uint32_t kSchedThreads = 256;

// WgSkip: the key blocks [0, n_mine) warpgroup c computes of a tile's n_blocks: none if its rows
// are all past seq_q (the last query tile's spare rows: never stored), else under a causal mask the
// blocks its own rows see. n_mine is never below the tile's count for the warpgroup holding the
// tile's last valid row, so every K/V stage is still waited on by someone before the producer may
// refill it. Read from lane 0, so the compiler knows it is warp-uniform (else the main loop's trip
// count looks divergent: wait loops get WARPSYNC / YIELD and the wgmma descriptors leave the
// uniform datapath, +54 instructions per hd64 block). Without WgSkip: n_blocks.
template <class Cfg, bool Causal>
__device__ __forceinline__ int warpgroup_block_count(const AttentionMask<Causal>& mask, int m0, int c, int seq_q,
                                                     int n_blocks) {
  if constexpr (!Cfg::wg_skip()) {
    return n_blocks;
  } else {
    const int mine = m0 + c * 64 >= seq_q ? 0 : Causal ? mask.n_blocks(m0 + c * 64, 64, Cfg::block_n()) : n_blocks;
    return __shfl_sync(0xffffffffu, mine, 0);
  }
}

// WgSkip: key blocks [n_mine, n_blocks) (the loop runs from the last block down, so these come
// first) get the same token hand-over and stage releases as a computed block, without an MMA, so
// the issue-token ring stays in step. Iteration n of the main loop releases K(n) and V(n + 1);
// V(n_mine), whose PV the first computed block would issue, goes right after the loop. Each stage
// is waited on (full) before it is released, as by a consumer that reads nothing: an arrival for a
// stage's next lap can then never count towards this lap's phase (unwaited, a skipping warpgroup
// could overtake a slower one: tests/gpu/cuda/fwd_protocol_model.py found it). S = -inf would give
// P = 0 and leave O, the max and the sum as they are, so skipping is exact.
template <class Cfg, class KPipe, class VPipe>
__device__ __forceinline__ void pass_skipped_blocks(KPipe& k, VPipe& v, int n_blocks, int n_mine, uint32_t sched_mine,
                                                    uint32_t sched_next, bool elected) {
  for (int n = n_blocks - 1; n >= n_mine; --n) {
    named_barrier_sync(sched_mine, kSchedThreads);
    named_barrier_arrive(sched_next, kSchedThreads);
#pragma unroll
    for (int j = 0; j < Cfg::qk_stages(); ++j) k.wait(j);
    k.release(elected);
    k.advance();
    if (n + 1 < n_blocks) {
      v.wait(0);
      v.release(elected);
      v.advance();
    }
  }
  if (n_mine < n_blocks) {
    v.wait(0);
    v.release(elected);
    v.advance();
  }
}

// One main-loop step of a consumer warpgroup (plain and persistent): S for key block kb while O
// takes the previous block's P over its first PvKeys keys (block_n, or fewer for TrimFirstPv's
// partial first block); after_s runs once S retired and K(kb) is released.
template <class T, class Cfg, int PvKeys, bool Causal, class KPipe, class VPipe, class Softmax, class Clock,
          class AfterS>
__device__ __forceinline__ void fwd_pipelined_step(int kb, const uint8_t* q_tile, KPipe& k, VPipe& v,
                                                   float (&s)[Cfg::block_n() / 2], float (&o)[Cfg::head_dim() / 2],
                                                   uint32_t (&p)[Cfg::block_n() / 4], float (&o_scale)[2],
                                                   Softmax& softmax, const AttentionMask<Causal>& mask, int mask_m0,
                                                   int row0, int lane, bool elected, uint32_t sched_mine,
                                                   uint32_t sched_next, float scale_log2, Clock& clk,
                                                   AfterS&& after_s) {
  constexpr int N = Cfg::block_n();
  named_barrier_sync(sched_mine, kSchedThreads);
  clk.tick(kPhaseSched);
  issue_qk<T, Cfg>(s, q_tile, k);             // S for block kb ...
  issue_pv<T, Cfg, PvKeys>(o, p, v);          // ... while O takes block kb + 1
  named_barrier_arrive(sched_next, kSchedThreads);
  clk.tick(kPhaseIssue);
  wgmma_wait<1>();  // S done (groups retire in order), PV may still run
  fence_regs(s);
  clk.tick(kPhaseWaitS);
  k.release(elected);
  k.advance();
  after_s();
  if (mask.block_needs_mask(kb, mask_m0, N)) mask.apply(s, kb * N, row0, lane);
  const bool rescaled = softmax.update(s, scale_log2, o_scale);
  clk.tick(kPhaseSoftmax);
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(p);  // the RS wgmma read p asynchronously: keep its registers until here
  clk.tick(kPhaseWaitPv);
  v.release(elected);
  v.advance();
  rescale_o<Cfg>(o, o_scale, rescaled);
#pragma unroll
  for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
  clk.tick(kPhaseSoftmax);
}

template <class T, class Cfg, bool Causal>
__device__ __forceinline__ void fwd_consumer(int c, uint8_t* sQ, uint8_t* sK, uint8_t* sV, uint64_t* q_full,
                                             typename TmaConsumerPipeline<T, Cfg, true>::Staged::Barriers* k_bars,
                                             typename TmaConsumerPipeline<T, Cfg, false>::Staged::Barriers* v_bars,
                                             const CUtensorMap* tm_o, const FwdArgs& args,
                                             const AttentionMask<Causal>& mask, int m0, int head, int batch,
                                             int n_blocks) {
  constexpr int N = Cfg::block_n();
  constexpr int D = Cfg::head_dim();
  constexpr int W = Cfg::consumer_warpgroups();
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  const int row_in_wg = warp * 16 + lane / 4;  // this thread's first row; its second is +8
  const int row0 = m0 + c * 64 + row_in_wg;
  const uint32_t sched_mine = kBarSched + c;
  const uint32_t sched_next = kBarSched + (c + 1) % W;

  TmaConsumerPipeline<T, Cfg, true> k(k_bars, sK);
  TmaConsumerPipeline<T, Cfg, false> v(v_bars, sV);
  OnlineSoftmax<N / 2, Cfg::cond_rescale(), Cfg::exp2_emu_eighths()> softmax;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float s[N / 2];
  uint32_t p[N / 4];
  float o_scale[2];

  PhaseClock<Cfg::phase_clocks()> clk;  // harness instrumentation (fwd_phase_clock.cuh); empty when off
  clk.start();

  // The last warpgroup hands the first issue token to warpgroup 0.
  if (c == W - 1) named_barrier_arrive(kBarSched, kSchedThreads);

  // WgSkip: this warpgroup computes only key blocks [0, n_mine) (warpgroup_block_count) and passes
  // the others on. mask_m0 = this warpgroup's first row, which makes block_needs_mask exact for it.
  constexpr bool kSkip = Cfg::wg_skip();
  const int mask_m0 = kSkip ? m0 + c * 64 : m0;
  const int n_mine = warpgroup_block_count<Cfg>(mask, m0, c, args.seq_q, n_blocks);

  if (n_blocks > 0) {
    // Also on the skip-everything path: the epilogue writes O over this warpgroup's Q rows.
    mbarrier_wait(q_full, 0);
  }
  clk.tick(kPhaseWaitQ);
  if constexpr (kSkip) pass_skipped_blocks<Cfg>(k, v, n_blocks, n_mine, sched_mine, sched_next, elected);

  if (n_mine > 0) {
    const uint8_t* q_tile = sQ + c * 64 * 128;  // this warpgroup's 64 rows inside each chunk
    int n = n_mine - 1;
    const int first_steps = Cfg::trim_first() ? visible_ksteps<Cfg>(mask, n, m0 + c * 64) : N / 16;
    auto step = [&](auto pv_keys, int kb) {
      fwd_pipelined_step<T, Cfg, decltype(pv_keys)::value>(kb, q_tile, k, v, s, o, p, o_scale, softmax, mask, mask_m0,
                                                           row0, lane, elected, sched_mine, sched_next,
                                                           args.scale_log2, clk, [] {});
    };

    named_barrier_sync(sched_mine, kSchedThreads);
    if constexpr (Cfg::trim_first()) {
      with_first_width<N>(first_steps, [&](auto width) {
        constexpr int NE = decltype(width)::value;
        float sf[NE / 2];
        issue_qk<T, Cfg, NE, true>(sf, q_tile, k);
        named_barrier_arrive(sched_next, kSchedThreads);
        wgmma_wait<0>();
        fence_regs(sf);
        k.release(elected);
        k.advance();
        if (mask.block_needs_mask(n, mask_m0, N)) mask.apply(sf, n * N, row0, lane);
        softmax.update(sf, args.scale_log2, o_scale);
#pragma unroll
        for (int q = 0; q < N / 4; ++q) p[q] = q < NE / 4 ? pack2<T>(sf[2 * q], sf[2 * q + 1]) : 0u;
        if constexpr (Cfg::trim_first_pv()) {
          // TrimFirstPv: the loop's first step here, where NE is a constant, so this block's PV
          // runs only its NE / 16 visible k-steps. The whole step, waits included: with the
          // wgmmas still in flight where the switch's cases merge, ptxas moved accumulator
          // registers under them and serialized every wgmma of the kernel (C7515).
          if (n > 0) step(width, --n);
        }
      });
    } else {
      clk.tick(kPhaseSched);
      issue_qk<T, Cfg>(s, q_tile, k);
      named_barrier_arrive(sched_next, kSchedThreads);
      clk.tick(kPhaseIssue);
      wgmma_wait<0>();
      fence_regs(s);
      clk.tick(kPhaseWaitS);
      k.release(elected);
      k.advance();
      if (mask.block_needs_mask(n, mask_m0, N)) mask.apply(s, n * N, row0, lane);
      softmax.update(s, args.scale_log2, o_scale);
#pragma unroll
      for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
      clk.tick(kPhaseSoftmax);
    }

    for (--n; n >= 0; --n) step(std::integral_constant<int, N>{}, n);
    issue_pv<T, Cfg>(o, p, v);
    clk.tick(kPhaseIssue);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(p);
    clk.tick(kPhaseWaitPv);
    v.release(elected);
    v.advance();
  }

  // Epilogue: normalise, stage O through this warpgroup's rows of the Q buffer (Q is no longer
  // read by them), then one TMA store per 64-column chunk; rows past seq_q are clipped by TMA.
  float lse[2];
  softmax.finalize(args.softmax_scale, o_scale, lse);
  stage_o_tile<T, Cfg>(sQ, o, o_scale, c * 64 + row_in_wg, lane);
  fence_proxy_async_smem();
  named_barrier_sync(kBarEpilogue + c, 128);
  if (elected && m0 + c * 64 < args.seq_q) {
#pragma unroll
    for (int chunk = 0; chunk < Cfg::chunks(); ++chunk) {
      tma_store_4d(tm_o, sQ + chunk * Cfg::chunk_bytes_q() + c * 64 * 128, chunk * 64, m0 + c * 64, head, batch);
    }
    tma_store_commit();
  }
  if ((lane & 3) == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row < args.seq_q) args.lse[(int64_t(batch) * args.heads_q + head) * args.seq_q + row] = lse[i];
    }
  }
  if (elected) tma_store_wait_read_all();  // shared memory must outlive the store's reads
  clk.tick(kPhaseEpilogue);
  clk.tile_done();
  clk.flush(elected);
  // Balance the token handed over at the start so no barrier is left half-arrived.
  if (c == 0) named_barrier_sync(kBarSched, kSchedThreads);
}

template <class T, class Cfg, bool Causal>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
               const FwdArgs args) {
  using KCons = TmaConsumerPipeline<T, Cfg, true>;
  using VCons = TmaConsumerPipeline<T, Cfg, false>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* sQ = smem + Cfg::q_offset();
  uint8_t* sK = smem + Cfg::k_offset();
  uint8_t* sV = smem + Cfg::v_offset();
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* k_bars = reinterpret_cast<typename KCons::Staged::Barriers*>(q_full + 1);
  auto* v_bars = reinterpret_cast<typename VCons::Staged::Barriers*>(k_bars + 1);

  // Causal: the last query blocks see the most keys; start them first.
  int m_block, head, batch;
  if (Cfg::lpt() && Causal && args.lpt_section > 0) {
    const FwdTileCoord tc = lpt_tile_coord(int(blockIdx.x), args.m_blocks, args.heads_q, args.batch, args.lpt_section);
    m_block = tc.m_block;
    head = tc.head;
    batch = tc.batch;
  } else {
    m_block = Causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    head = blockIdx.y;
    batch = blockIdx.z;
  }
  const int m0 = m_block * Cfg::block_m();
  const AttentionMask<Causal> mask{args.seq_q, args.seq_k};
  const int n_blocks = mask.n_blocks(m0, Cfg::block_m(), Cfg::block_n());
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    mbarrier_init(q_full, 1);
    KCons::Staged::init(k_bars, Cfg::consumer_warpgroups());
    VCons::Staged::init(v_bars, Cfg::consumer_warpgroups());
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    if (threadIdx.x == 0 && n_blocks > 0) {
      constexpr int N = Cfg::block_n();
      const int kv_head = head / args.group;
      mbarrier_arrive_expect_tx(q_full, Cfg::q_bytes());
#pragma unroll
      for (int c = 0; c < Cfg::chunks(); ++c) {
        tma_load_4d(sQ + c * Cfg::chunk_bytes_q(), &tm_q, q_full, c * 64, m0, head, batch);
      }
      // Consumers take K(n) then V(n+1): load in that order so neither ring stalls the other.
      TmaProducerPipeline<T, Cfg, true> k(k_bars, sK);
      TmaProducerPipeline<T, Cfg, false> v(v_bars, sV);
      int n = n_blocks - 1;
      k.load(&tm_k, n * N, kv_head, batch);
      for (; n > 0; --n) {
        k.load(&tm_k, (n - 1) * N, kv_head, batch);
        v.load(&tm_v, n * N, kv_head, batch);
      }
      v.load(&tm_v, 0, kv_head, batch);
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    fwd_consumer<T, Cfg, Causal>(wg - 1, sQ, sK, sV, q_full, k_bars, v_bars, &tm_o, args, mask, m0,
                                 head, batch, n_blocks);
  }
}

// Persist: the tile this CTA runs in its round r = 0, 1, ...; false once past the last tile (the
// tile index grows with r, so the first miss ends the loop). Without a mask every tile is equally
// long: t = blockIdx.x + r * gridDim.x, m block fastest. Under a causal mask the tiles go in the
// Lpt order (longest first within L2-sized sections of (head, batch) pairs, fwd_schedule.h) dealt
// boustrophedon, odd rounds backwards, so every CTA's sum of tile lengths stays within about one
// tile of the others' (a plain stride would give CTA 0 the longest tile of every round).
template <bool Causal>
__device__ __forceinline__ bool persistent_tile(int r, int num_tiles, const FwdArgs& args, FwdTileCoord& tc) {
  const int t = persistent_deal_index(r, int(gridDim.x), int(blockIdx.x), Causal);
  if (t >= num_tiles) return false;
  if (Causal) {
    tc = lpt_tile_coord(t, args.m_blocks, args.heads_q, args.batch, args.lpt_section);
  } else {
    const int pair = t / args.m_blocks;
    tc = {t % args.m_blocks, pair % args.heads_q, pair / args.heads_q};
  }
  return true;
}

// Persist variants: one CTA per SM loops over its tiles (persistent_tile; a causal tile runs only
// the key blocks its rows see, and a tile whose rows see none is skipped by producer and consumers
// alike, so the Q barriers' phases stay in step).
// Without a mask: tiles t = blockIdx.x + k * gridDim.x
// (tile t: m block t % m_blocks of (head, batch) pair t / m_blocks; without a mask every tile
// runs the same n_blocks, so the static stride is balanced). The K/V rings, the issue-token ring
// and the Q barriers run on across tiles:
//   q_full   (1 arrival + Q's bytes) phase k = tile k's Q landed; consumers wait with parity k % 2.
//   q_empty  (one arrival per consumer warpgroup, after its last S = Q K^T of a tile retired) phase
//            k = tile k's Q no longer read; the producer waits for it before loading tile k + 1's Q,
//            having already queued tile k + 1's first K. No phase can be skipped: Q(k + 1) needs
//            every warpgroup's tile-k arrival, which comes after that warpgroup's tile-k q_full wait.
//   O        staged in its own buffer (sO, Q's layout), one TMA store per warpgroup and chunk; a
//            warpgroup's elected thread waits for its previous store to have read sO
//            (bulk wait_group.read) before the warpgroup rewrites its rows (epilogue barrier).
// So the next tile's Q and first K/V load while this tile's last PV, normalisation and store run.
// OInQ: sO is the Q buffer (a warpgroup overwrites only its own 64 Q rows, after its last wgmma
// retired); the q_empty arrival moves from the last S to after the warpgroup's O store has read
// those rows, so only K/V (not Q) of the next tile load during the epilogue.
// QStages = 2 (harness variant, with an O buffer): q_full / q_empty per Q buffer, the tiles with
// keys taking the buffers in turn, so "tile k" above reads "the k-th tile of that buffer"; the
// producer loads tile k + 1's Q right after tile k's first K, once tile k - 1 released the buffer.
// Q buffer b's parity in a mask with one bit per buffer (one buffer: the mask is its bit, so the
// single-buffer kernels compile as before the second buffer existed).
template <class Cfg>
__device__ __forceinline__ uint32_t q_parity(uint32_t bits, int b) {
  return Cfg::q_stages() == 1 ? bits : (bits >> b) & 1u;
}

template <class T, class Cfg, bool Causal>
__device__ __forceinline__ void fwd_consumer_persistent(int c, uint8_t* sQ, uint8_t* sO, uint64_t* q_full, uint64_t* q_empty,
                                                        uint8_t* sK, uint8_t* sV,
                                                        typename TmaConsumerPipeline<T, Cfg, true>::Staged::Barriers* k_bars,
                                                        typename TmaConsumerPipeline<T, Cfg, false>::Staged::Barriers* v_bars,
                                                        const CUtensorMap* tm_o, const FwdArgs& args, int num_tiles) {
  constexpr int N = Cfg::block_n();
  constexpr int D = Cfg::head_dim();
  constexpr int W = Cfg::consumer_warpgroups();
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  const int row_in_wg = warp * 16 + lane / 4;  // this thread's first row; its second is +8
  const uint32_t sched_mine = kBarSched + c;
  const uint32_t sched_next = kBarSched + (c + 1) % W;
  const AttentionMask<Causal> mask{args.seq_q, args.seq_k};
  const uint8_t* q_rows = sQ + c * 64 * 128;  // this warpgroup's 64 rows inside each chunk of Q buffer 0

  TmaConsumerPipeline<T, Cfg, true> k(k_bars, sK);
  TmaConsumerPipeline<T, Cfg, false> v(v_bars, sV);
  uint32_t q_phase = 0;  // bit b: the parity of Q buffer b's next q_full phase
  int q_slot = 0;        // the Q buffer of the next tile that has keys (they take turns)
  PhaseClock<Cfg::phase_clocks()> clk;  // harness instrumentation (fwd_phase_clock.cuh); empty when off

  if (c == W - 1) named_barrier_arrive(kBarSched, kSchedThreads);
  clk.start();

  FwdTileCoord tc;
  for (int r = 0; persistent_tile<Causal>(r, num_tiles, args, tc); ++r) {
    const int m0 = tc.m_block * Cfg::block_m();
    const int head = tc.head;
    const int batch = tc.batch;
    const int row0 = m0 + c * 64 + row_in_wg;
    const int n_blocks = mask.n_blocks(m0, Cfg::block_m(), Cfg::block_n());

    OnlineSoftmax<N / 2, Cfg::cond_rescale(), Cfg::exp2_emu_eighths()> softmax;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float s[N / 2];
    uint32_t p[N / 4];
    float o_scale[2];

    // WgSkip: as in fwd_consumer, this warpgroup computes only key blocks [0, n_mine)
    // (warpgroup_block_count) and passes the others on (pass_skipped_blocks; the rings run on into
    // the next tile, so every stage must be released). One that computes nothing arrives on q_empty right after its q_full wait (it never
    // reads Q; that wait keeps it from arriving for the next tile before this tile's phase
    // completed). mask_m0 = this warpgroup's first row, which makes block_needs_mask exact for it.
    constexpr bool kSkip = Cfg::wg_skip();
    const int mask_m0 = kSkip ? m0 + c * 64 : m0;
    const int n_mine = warpgroup_block_count<Cfg>(mask, m0, c, args.seq_q, n_blocks);
    const int slot = q_slot;
    const uint8_t* q_tile = q_rows + slot * Cfg::q_bytes();
    if (n_blocks > 0) {
      mbarrier_wait(q_full + slot, q_parity<Cfg>(q_phase, slot));
      q_phase ^= 1u << slot;
      q_slot = (slot + 1) % Cfg::q_stages();
    }
    clk.tick(kPhaseWaitQ);
    if constexpr (kSkip) {
      if (!Cfg::o_in_q() && n_mine == 0 && n_blocks > 0 && elected) mbarrier_arrive(q_empty + slot);
      pass_skipped_blocks<Cfg>(k, v, n_blocks, n_mine, sched_mine, sched_next, elected);
    }
    if (n_mine > 0) {
      int n = n_mine - 1;
      const int first_steps = Cfg::trim_first() ? visible_ksteps<Cfg>(mask, n, m0 + c * 64) : N / 16;
      // The main-loop step, plus the q_empty arrival once the tile's last S retired.
      auto step = [&](auto pv_keys, int kb) {
        fwd_pipelined_step<T, Cfg, decltype(pv_keys)::value>(
            kb, q_tile, k, v, s, o, p, o_scale, softmax, mask, mask_m0, row0, lane, elected, sched_mine, sched_next,
            args.scale_log2, clk, [&] {
              if (!Cfg::o_in_q() && kb == 0 && elected) mbarrier_arrive(q_empty + slot);
            });
      };

      named_barrier_sync(sched_mine, kSchedThreads);
      if constexpr (Cfg::trim_first()) {
        with_first_width<N>(first_steps, [&](auto width) {
          constexpr int NE = decltype(width)::value;
          float sf[NE / 2];
          issue_qk<T, Cfg, NE, true>(sf, q_tile, k);
          named_barrier_arrive(sched_next, kSchedThreads);
          wgmma_wait<0>();
          fence_regs(sf);
          k.release(elected);
          k.advance();
          if (!Cfg::o_in_q() && n == 0 && elected) mbarrier_arrive(q_empty + slot);  // last read of Q retired
          if (mask.block_needs_mask(n, mask_m0, N)) mask.apply(sf, n * N, row0, lane);
          softmax.update(sf, args.scale_log2, o_scale);
#pragma unroll
          for (int q = 0; q < N / 4; ++q) p[q] = q < NE / 4 ? pack2<T>(sf[2 * q], sf[2 * q + 1]) : 0u;
        });
      } else {
        clk.tick(kPhaseSched);
        issue_qk<T, Cfg>(s, q_tile, k);
        named_barrier_arrive(sched_next, kSchedThreads);
        clk.tick(kPhaseIssue);
        wgmma_wait<0>();
        fence_regs(s);
        clk.tick(kPhaseWaitS);
        k.release(elected);
        k.advance();
        if (!Cfg::o_in_q() && n == 0 && elected) mbarrier_arrive(q_empty + slot);  // last read of Q retired
        if (mask.block_needs_mask(n, mask_m0, N)) mask.apply(s, n * N, row0, lane);
        softmax.update(s, args.scale_log2, o_scale);
#pragma unroll
        for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
        clk.tick(kPhaseSoftmax);
      }

      for (--n; n >= 0; --n) step(std::integral_constant<int, N>{}, n);
      issue_pv<T, Cfg>(o, p, v);
      clk.tick(kPhaseIssue);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(p);
      clk.tick(kPhaseWaitPv);
      v.release(elected);
      v.advance();
    }

    // Epilogue through sO: the previous tile's store must have read this warpgroup's rows first
    // (OInQ: it has, before the previous tile's q_empty arrival).
    float lse[2];
    softmax.finalize(args.softmax_scale, o_scale, lse);
    if constexpr (!Cfg::o_in_q()) {
      if (elected) tma_store_wait_read_all();
      named_barrier_sync(kBarEpilogue + c, 128);
    }
    stage_o_tile<T, Cfg>(sO, o, o_scale, c * 64 + row_in_wg, lane);
    fence_proxy_async_smem();
    named_barrier_sync(kBarEpilogue + c, 128);
    if (elected && m0 + c * 64 < args.seq_q) {
#pragma unroll
      for (int chunk = 0; chunk < Cfg::chunks(); ++chunk) {
        tma_store_4d(tm_o, sO + chunk * Cfg::chunk_bytes_q() + c * 64 * 128, chunk * 64, m0 + c * 64, head, batch);
      }
      tma_store_commit();
    }
    if constexpr (Cfg::o_in_q()) {
      // The next tile's Q may overwrite these rows once the store has read them (the writes of
      // all 128 threads are behind the epilogue barrier and fence.proxy.async above).
      if (elected && n_blocks > 0) {
        tma_store_wait_read_all();
        mbarrier_arrive(q_empty + slot);
      }
    }
    if ((lane & 3) == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = row0 + 8 * i;
        if (row < args.seq_q) args.lse[(int64_t(batch) * args.heads_q + head) * args.seq_q + row] = lse[i];
      }
    }
    clk.tick(kPhaseEpilogue);
    clk.tile_done();
  }
  clk.flush(elected);
  if (elected) tma_store_wait_read_all();  // shared memory must outlive the stores' reads
  if (c == 0) named_barrier_sync(kBarSched, kSchedThreads);
}

template <class T, class Cfg, bool Causal>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    fwd_kernel_persistent(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                          const FwdArgs args) {
  static_assert(Cfg::persist(), "persistent kernel needs the Persist layout (O buffer, Q-empty barrier)");
  // A causal tile whose rows see no key skips the Q barriers and stages its zeros at once: with
  // OInQ that would overwrite a next Q the producer may already be loading.
  static_assert(!(Causal && Cfg::o_in_q()), "a causal persistent kernel needs its own O buffer (no OInQ)");
  using KCons = TmaConsumerPipeline<T, Cfg, true>;
  using VCons = TmaConsumerPipeline<T, Cfg, false>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* sQ = smem + Cfg::q_offset();
  uint8_t* sK = smem + Cfg::k_offset();
  uint8_t* sV = smem + Cfg::v_offset();
  uint8_t* sO = Cfg::o_in_q() ? sQ : smem + Cfg::o_offset();
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());  // [q_stages]
  auto* k_bars = reinterpret_cast<typename KCons::Staged::Barriers*>(q_full + Cfg::q_stages());
  auto* v_bars = reinterpret_cast<typename VCons::Staged::Barriers*>(k_bars + 1);
  uint64_t* q_empty = reinterpret_cast<uint64_t*>(v_bars + 1);  // [q_stages]
  const AttentionMask<Causal> mask{args.seq_q, args.seq_k};
  const int num_tiles = args.m_blocks * args.heads_q * args.batch;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_o);
#pragma unroll
    for (int b = 0; b < Cfg::q_stages(); ++b) {
      mbarrier_init(q_full + b, 1);
      mbarrier_init(q_empty + b, Cfg::consumer_warpgroups());
    }
    KCons::Staged::init(k_bars, Cfg::consumer_warpgroups());
    VCons::Staged::init(v_bars, Cfg::consumer_warpgroups());
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    if (threadIdx.x == 0) {
      constexpr int N = Cfg::block_n();
      TmaProducerPipeline<T, Cfg, true> k(k_bars, sK);
      TmaProducerPipeline<T, Cfg, false> v(v_bars, sV);
      uint32_t q_phase = 0;  // bit b: Q buffer b's q_empty phases waited for so far, mod 2
      // Q of a tile into buffer `slot` once the tile that used that buffer last released it (a
      // fresh barrier passes parity 1 at once, as the rings' empty barriers).
      auto load_q = [&](int slot, int q_m0, int q_head, int q_batch) {
        mbarrier_wait(q_empty + slot, q_parity<Cfg>(q_phase, slot) ^ 1);
        q_phase ^= 1u << slot;
        mbarrier_arrive_expect_tx(q_full + slot, Cfg::q_bytes());
#pragma unroll
        for (int c = 0; c < Cfg::chunks(); ++c) {
          tma_load_4d(sQ + slot * Cfg::q_bytes() + c * Cfg::chunk_bytes_q(), &tm_q, q_full + slot, c * 64, q_m0,
                      q_head, q_batch);
        }
      };
      int q_slot = 0;         // this tile's Q buffer (the tiles with keys take turns)
      bool q_loaded = false;  // two buffers: this tile's Q was loaded during the previous tile
      FwdTileCoord tc;
      for (int r = 0; persistent_tile<Causal>(r, num_tiles, args, tc); ++r) {
        const int m0 = tc.m_block * Cfg::block_m();
        const int head = tc.head;
        const int batch = tc.batch;
        const int kv_head = head / args.group;
        const int n_blocks = mask.n_blocks(m0, Cfg::block_m(), Cfg::block_n());
        if (n_blocks == 0) continue;  // the consumers skip its Q barriers too
        int n = n_blocks - 1;
        // The first K may land while the consumers still read the previous tile's Q ...
        k.load(&tm_k, n * N, kv_head, batch);
        if constexpr (Cfg::q_stages() == 1) {
          // ... Q only once every consumer warpgroup's last S of the previous tile retired (written
          // out, not through load_q: the lambda changed the single-buffer kernels' scheduling).
          mbarrier_wait(q_empty, q_phase ^ 1);
          q_phase ^= 1;
          mbarrier_arrive_expect_tx(q_full, Cfg::q_bytes());
#pragma unroll
          for (int c = 0; c < Cfg::chunks(); ++c) {
            tma_load_4d(sQ + c * Cfg::chunk_bytes_q(), &tm_q, q_full, c * 64, m0, head, batch);
          }
        } else {
          // ... this Q is already loading (but the first tile's); the next tile's goes into the
          // other buffer once the tile before this one released it: a whole tile ahead.
          if (!q_loaded) load_q(q_slot, m0, head, batch);
          q_loaded = false;
          FwdTileCoord tn;
          for (int rn = r + 1; persistent_tile<Causal>(rn, num_tiles, args, tn); ++rn) {
            const int tn_m0 = tn.m_block * Cfg::block_m();
            if (mask.n_blocks(tn_m0, Cfg::block_m(), Cfg::block_n()) > 0) {
              load_q(q_slot ^ 1, tn_m0, tn.head, tn.batch);
              q_loaded = true;
              break;
            }
          }
          q_slot ^= 1;
        }
        for (; n > 0; --n) {
          k.load(&tm_k, (n - 1) * N, kv_head, batch);
          v.load(&tm_v, n * N, kv_head, batch);
        }
        v.load(&tm_v, 0, kv_head, batch);
      }
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    fwd_consumer_persistent<T, Cfg, Causal>(wg - 1, sQ, sO, q_full, q_empty, sK, sV, k_bars, v_bars, &tm_o, args,
                                            num_tiles);
  }
}

// K and V bytes (2-byte elements) one (head, batch) pair reads; a GQA group's heads share them.
inline int64_t fwd_kv_bytes_per_pair(const FwdProblem& p) {
  return p.seq_k * p.head_dim * 2 * 2 / (p.heads_q / p.heads_kv);
}

// Lpt sections of the plain kernel's linear grid: (head, batch) pairs whose K and V fill about
// 32 MB of the 50 MB L2, at least one pair.
inline int64_t fwd_lpt_section(const FwdProblem& p) {
  const int64_t pairs = p.heads_q * p.batch;
  return std::min<int64_t>(pairs, std::max<int64_t>(1, (int64_t(32) << 20) / std::max<int64_t>(1, fwd_kv_bytes_per_pair(p))));
}

// fwd_persistent_section, remembered per shape: scoring costs up to tens of ms of host time, and a
// training step calls the same shapes again and again.
inline int64_t cached_persistent_section(const FwdPersistentShape& s) {
  using Key = std::array<int64_t, 7>;
  static std::mutex mutex;
  static std::map<Key, int64_t> cache;
  const Key key{s.seq_q, s.seq_k, s.pairs, s.kv_bytes_per_pair, s.block_m, s.block_n, s.ctas};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const int64_t section = fwd_persistent_section(s);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 4096) cache.clear();  // bounded: shapes beyond that are rescored
  cache.emplace(key, section);
  return section;
}

// Builds the tensor maps and launches one instantiation.
template <class T, class Cfg, bool Causal>
std::string launch_fwd_kernel(const FwdProblem& p, cudaStream_t stream) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tq, tk, tv, to;
  std::string err;
  const int64_t seq_k_map = p.seq_k > 0 ? p.seq_k : 1;  // no key is ever loaded when seq_k == 0
  if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, Cfg::block_m())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&to, p.o, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, 64)).empty()) return err;

  FwdArgs args;
  args.lse = p.lse;
  args.seq_q = int(p.seq_q);
  args.seq_k = int(p.seq_k);
  args.heads_q = int(p.heads_q);
  args.group = int(p.heads_q / p.heads_kv);
  args.softmax_scale = p.softmax_scale;
  args.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const int64_t m_blocks = (p.seq_q + Cfg::block_m() - 1) / Cfg::block_m();
  args.m_blocks = int(m_blocks);
  args.batch = int(p.batch);
  args.lpt_section = 0;
  dim3 grid(unsigned(m_blocks), unsigned(p.heads_q), unsigned(p.batch));
  if (Cfg::lpt() && !Cfg::persist() && Causal && m_blocks * p.heads_q * p.batch <= INT_MAX) {
    args.lpt_section = int(fwd_lpt_section(p));
    grid = dim3(unsigned(m_blocks * p.heads_q * p.batch), 1, 1);
  }

  auto kernel = [] {
    if constexpr (Cfg::persist()) {
      return fwd_kernel_persistent<T, Cfg, Causal>;
    } else {
      return fwd_kernel<T, Cfg, Causal>;
    }
  }();
  if constexpr (Cfg::persist()) {
    const int64_t tiles = m_blocks * p.heads_q * p.batch;
    if (tiles > INT_MAX) return "too many query tiles (" + std::to_string(tiles) + ") for the persistent kernel";
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return std::string("device query: ") + cudaGetErrorString(e);
    int64_t ctas = std::min<int64_t>(tiles, sms);
    if (p.max_ctas > 0) ctas = std::min<int64_t>(ctas, p.max_ctas);
    grid = dim3(unsigned(ctas), 1, 1);
    // persistent_tile's causal order: L2-sized Lpt sections, the size scored by the host model of
    // fwd_schedule.h (session 9; one section over all pairs read K/V from DRAM for every tile).
    if (Causal) {
      const FwdPersistentShape shape{p.seq_q, p.seq_k, p.heads_q * p.batch, fwd_kv_bytes_per_pair(p),
                                     Cfg::block_m(), Cfg::block_n(), int(ctas)};
      args.lpt_section = int(p.lpt_section > 0 ? std::min<int64_t>(p.lpt_section, shape.pairs)
                                               : cached_persistent_section(shape));
    }
  }
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
  if (e != cudaSuccess) return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  kernel<<<grid, Cfg::threads(), Cfg::smem_bytes(), stream>>>(tq, tk, tv, to, args);
  e = cudaGetLastError();
  if (e != cudaSuccess) return std::string("forward kernel launch failed: ") + cudaGetErrorString(e);
  return {};
}

// bf16 only: the standalone harness's other variants (tests/gpu/cuda/fwd_variants_hd*.cu).
template <int HeadDim, int Variant>
std::string launch_fwd_head_dim_bf16(const FwdProblem& p, cudaStream_t stream) {
  if (p.dtype != FwdDtype::kBf16) return "forward variant " + std::to_string(Variant) + " is built for bf16 only";
  return p.causal ? launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, true, Variant>, true>(p, stream)
                  : launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, false, Variant>, false>(p, stream);
}

template <int HeadDim, int Variant>
std::string launch_fwd_head_dim_variant(const FwdProblem& p, cudaStream_t stream) {
  if (p.dtype == FwdDtype::kBf16) {
    return p.causal ? launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, true, Variant>, true>(p, stream)
                    : launch_fwd_kernel<__nv_bfloat16, FwdConfig<HeadDim, false, Variant>, false>(p, stream);
  }
  return p.causal ? launch_fwd_kernel<__half, FwdConfig<HeadDim, true, Variant>, true>(p, stream)
                  : launch_fwd_kernel<__half, FwdConfig<HeadDim, false, Variant>, false>(p, stream);
}

// The library's forward for one head dim: the short-sequence variant where it has one and the
// keys are few (fwd_config.cuh, fwd_short_seq_variant), else the default variant.
template <int HeadDim>
std::string launch_fwd_head_dim(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (fwd_short_seq_variant(HeadDim) >= 0) {
    if (p.seq_k <= fwd_short_seq_max_k(HeadDim, p.causal))
      return launch_fwd_head_dim_variant<HeadDim, fwd_short_seq_variant(HeadDim)>(p, stream);
  }
  return launch_fwd_head_dim_variant<HeadDim, fwd_default_variant(HeadDim)>(p, stream);
}

}  // namespace fa4::hopper
