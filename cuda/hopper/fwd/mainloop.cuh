// The forward consumers' main loop: S = Q K^T (SS wgmma), the online softmax, O += P V (RS wgmma:
// P stays in registers), in the order that lets one warpgroup's softmax hide under the other's MMAs.
//
// Per key block a consumer warpgroup waits for its issue token (a named barrier the consumers pass
// around, so their MMAs reach the tensor cores in turn), issues S for block n and O += P(n + 1) V,
// hands the token on, and does the softmax of S while the PV MMA runs. Key blocks run from the
// last to the first, so under a causal mask the partial (diagonal) blocks come first and the rest
// need no mask. consume_tile is the whole loop over one tile, shared by the one-tile and the
// persistent kernels. A tile visits the key blocks [begin, end) of the mask policy
// (common/mask.cuh, TileMask); blocks outside it are never loaded or multiplied.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "hopper/common/mask.cuh"
#include "hopper/common/numeric.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/fwd/config.cuh"
#include "hopper/fwd/score.cuh"
#include "hopper/fwd/softmax.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/wgmma.cuh"
#include "hopper/ptx/wgmma_mma.cuh"

namespace fa4::hopper {

// Named barrier ids (0 is __syncthreads). Issue token of consumer c: kBarSched + c.
// Epilogue barrier of consumer c (its 128 threads): kBarEpilogue + c.
constexpr uint32_t kBarSched = 1;
constexpr uint32_t kBarEpilogue = 8;

// S = Q K^T for this warpgroup's 64 rows, over the head dim in k-steps of 16, waiting for each K
// sub-stage just before its k-steps.
// NE < block_n (the trimmed first block): only the first NE key columns (the D fragment of an
// m64nNE wgmma holds the same columns in the same places as the first NE / 2 registers of the full
// width's). WaitFirst (below): the trimmed block issues it on one branch of a switch, where an
// injected warpgroup.arrive would serialize the kernel's wgmmas (C7520).
template <class T, class Cfg, int NE = Cfg::block_n(), bool WaitFirst = Cfg::k_wait_first(), class KPipe>
__device__ __forceinline__ void issue_qk(float (&s)[NE / 2], const uint8_t* q_tile, KPipe& k) {
  using Tag = typename WgmmaTag<T>::type;
  constexpr int kSteps = Cfg::head_dim() / 16;
  constexpr int kStepsPerSub = kSteps / Cfg::qk_stages();
  // WaitFirst: wait for every K sub-stage before the fence (no wait loop between wgmmas, so ptxas
  // injects no warpgroup.arrive, C7519: on a warpgroup-dependent path such an arrive made it
  // serialize every wgmma of the kernel, C7520). Otherwise sub-stage j's wait comes just before
  // its k-steps, so the first k-steps overlap the later sub-stages' loads.
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
// (0 .. block_n / 16). The trim is a configuration of the dense kernels (the partial first block is
// the sequence's tail, the same for every row).
template <class Cfg, MaskKind M>
__device__ __forceinline__ int visible_ksteps(const TileMask<M>& mask, int n, int row_begin) {
  static_assert(M == MaskKind::kDense, "the first-block trim assumes every row sees the keys up to kv_len");
  constexpr int N = Cfg::block_n();
  const int end = mask.kv_len;  // one past the last column any of the rows sees
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
// NE < block_n (the trimmed first block): only the first NE keys (P is 0 past them).
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

// O *= o_scale per row after a PV.
template <class Cfg>
__device__ __forceinline__ void rescale_o(float (&o)[Cfg::head_dim() / 2], const float (&o_scale)[2]) {
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

// The key blocks [*begin, *end) (of width N) that rows [r0, r0 + rows) visit: the band and the
// lengths of the mask policy, narrowed to the 64-key chunks whose segment ids can meet the rows'
// (kVariant with ids; any ids are exact, sorted ones skip the blocks between documents).
// Warp-collective (all 32 lanes, warp-uniform arguments); the result is read from lane 0, so the
// compiler knows it is warp-uniform.
template <int N, MaskKind M>
__device__ __forceinline__ void tile_key_blocks(const TileMask<M>& mask, int r0, int rows, int lane, int* begin,
                                                int* end) {
  if constexpr (M != MaskKind::kVariant) {
    // TileMask::key_blocks in closed form for rows r0 < seq_q: from block 0, to the last row's
    // diagonal under the causal mask (the dense and causal kernels' original arithmetic, which
    // keeps the count on the uniform datapath).
    const int total = (mask.kv_len + N - 1) / N;
    *begin = 0;
    *end = total;
    if constexpr (M == MaskKind::kCausal) {
      const int last_row = imin(r0 + rows, mask.q_len) - 1;
      const int max_col = last_row + mask.kv_len - mask.q_len;
      *end = max_col < 0 ? 0 : imin(total, max_col / N + 1);
    }
  } else {
    int lo, hi;
    mask.key_span(r0, r0 + rows, &lo, &hi);
    mask.narrow_keys_by_segment(r0, r0 + rows, &lo, &hi, lane);
    TileMask<M>::blocks_of(lo, hi, N, begin, end);
    *begin = __shfl_sync(0xffffffffu, *begin, 0);
    *end = __shfl_sync(0xffffffffu, *end, 0);
  }
}

// WgSkip: the key blocks [*mine_begin, *mine_end) warpgroup c computes of its tile's [begin, end):
// none if its rows are all past seq_q (the last query tile's spare rows: never stored), else the
// blocks its own 64 rows see (a sub-range: the band is monotone in the row). A warpgroup that
// computes nothing gets [begin, begin), so pass_skipped_blocks passes the whole tile. Every
// warpgroup still waits for and releases every K/V stage of [begin, end) (computed or passed), so
// the rings' phases and the token ring stay in step whatever the ranges. Read from
// lane 0, so the compiler knows the range is warp-uniform (else the main loop's trip count looks
// divergent: wait loops get WARPSYNC / YIELD and the wgmma descriptors leave the uniform datapath,
// +54 instructions per hd64 block). Without WgSkip: the tile's range.
template <class Cfg, MaskKind M>
__device__ __forceinline__ void warpgroup_blocks(const TileMask<M>& mask, int m0, int c, int seq_q, int lane, int begin,
                                                 int end, int* mine_begin, int* mine_end) {
  *mine_begin = begin;
  *mine_end = end;
  if constexpr (Cfg::wg_skip()) {
    int b = begin, e = end;
    if (m0 + c * 64 >= seq_q) {
      b = e = begin;
    } else if constexpr (M != MaskKind::kDense) {
      tile_key_blocks<Cfg::block_n()>(mask, m0 + c * 64, 64, lane, &b, &e);
      if constexpr (M == MaskKind::kVariant) {  // causal: b = begin = 0 and e <= end already
        b = imax(b, begin);
        e = imin(e, end);
        if (e <= b) b = e = begin;
      }
    }
    if constexpr (M == MaskKind::kVariant) *mine_begin = __shfl_sync(0xffffffffu, b, 0);
    *mine_end = __shfl_sync(0xffffffffu, e, 0);
  }
}

// WgSkip: key blocks [mine_end, end) (the loop runs from the last block down, so these come
// first) get the same token hand-over and stage releases as a computed block, without an MMA, so
// the issue-token ring stays in step. Iteration kb of the main loop releases K(kb) and V(kb + 1);
// V(mine_end), whose PV the first computed block would issue, goes right after the loop. Each
// stage is waited on (full) before it is released, as by a consumer that reads nothing: an arrival
// for a stage's next lap can then never count towards this lap's phase (unwaited, a skipping
// warpgroup could overtake a slower one: tests/gpu/cuda/fwd_protocol_model.py found it). S = -inf
// would give P = 0 and leave O, the max and the sum as they are, so skipping is exact.
template <class Cfg, class KPipe, class VPipe>
__device__ __forceinline__ void pass_skipped_blocks(KPipe& k, VPipe& v, int end, int mine_end, uint32_t sched_mine,
                                                    uint32_t sched_next, bool elected) {
  for (int n = end - 1; n >= mine_end; --n) {
    named_barrier_sync(sched_mine, kSchedThreads);
    named_barrier_arrive(sched_next, kSchedThreads);
#pragma unroll
    for (int j = 0; j < Cfg::qk_stages(); ++j) k.wait(j);
    k.release(elected);
    k.advance();
    if (n + 1 < end) {
      v.wait(0);
      v.release(elected);
      v.advance();
    }
  }
  if (mine_end < end) {
    v.wait(0);
    v.release(elected);
    v.advance();
  }
}

// WgSkip under a band with a left bound: key blocks [begin, mine_begin), below the computed ones,
// come last. The computed range's final PV released V(mine_begin); each block here takes its token
// round and waits for and releases K(kb) and V(kb), in the rings' order.
template <class Cfg, class KPipe, class VPipe>
__device__ __forceinline__ void pass_trailing_blocks(KPipe& k, VPipe& v, int begin, int mine_begin,
                                                     uint32_t sched_mine, uint32_t sched_next, bool elected) {
  for (int n = mine_begin - 1; n >= begin; --n) {
    named_barrier_sync(sched_mine, kSchedThreads);
    named_barrier_arrive(sched_next, kSchedThreads);
#pragma unroll
    for (int j = 0; j < Cfg::qk_stages(); ++j) k.wait(j);
    k.release(elected);
    k.advance();
    v.wait(0);
    v.release(elected);
    v.advance();
  }
}

// One main-loop step of a consumer warpgroup (plain and persistent): S for key block kb while O
// takes the previous block's P over its first PvKeys keys (block_n, or fewer for the trimmed
// partial first block); after_s runs once S retired and K(kb) is released. Tested = false: block kb
// is known to need no mask (Scores::unmasked_run).
template <class T, class Cfg, int PvKeys, bool Tested, class Scores, class KPipe, class VPipe, class Softmax,
          class AfterS>
__device__ __forceinline__ void fwd_pipelined_step(int kb, const uint8_t* q_tile, KPipe& k, VPipe& v,
                                                   float (&s)[Cfg::block_n() / 2], float (&o)[Cfg::head_dim() / 2],
                                                   uint32_t (&p)[Cfg::block_n() / 4], float (&o_scale)[2],
                                                   Softmax& softmax, const Scores& scores,
                                                   int row0, int lane, bool elected, uint32_t sched_mine,
                                                   uint32_t sched_next, float scale_log2, AfterS&& after_s) {
  constexpr int N = Cfg::block_n();
  named_barrier_sync(sched_mine, kSchedThreads);
  issue_qk<T, Cfg>(s, q_tile, k);             // S for block kb ...
  issue_pv<T, Cfg, PvKeys>(o, p, v);          // ... while O takes block kb + 1
  named_barrier_arrive(sched_next, kSchedThreads);
  wgmma_wait<1>();  // S done (groups retire in order), PV may still run
  fence_regs(s);
  // With fwd_late_k_release K(kb) is released only after the softmax, its arrival made to depend
  // on the row sum (a sum of exp2 values: >= 0 or NaN, so the test is always true, but ptxas
  // cannot know): ptxas keeps the PV wait below that shared-memory arrival, and otherwise hoists
  // it above the whole softmax, so the softmax would never overlap this warpgroup's own PV.
  constexpr bool kLateK = fwd_late_k_release<Cfg, Scores::kMask>();
  if constexpr (!kLateK) {
    k.release(elected);
    k.advance();
  }
  after_s();
  scores.template prepare<N, Tested>(s, kb, row0, lane);
  softmax.template update<N / 2, !Tested>(s, scale_log2, o_scale);
  if constexpr (kLateK) {
    k.release(elected && !(softmax.row_sum[1] < -1.f));
    k.advance();
  }
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(p);  // the RS wgmma read p asynchronously: keep its registers until here
  v.release(elected);
  v.advance();
  if constexpr (!Softmax::kBounded) rescale_o<Cfg>(o, o_scale);
#pragma unroll
  for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
}


// One tile's main loop for consumer warpgroup c: key blocks from mine_end - 1 down to mine_begin
// (warpgroup_blocks; the caller passes the others on). on_s_done(kb) runs once S of block kb
// retired and K(kb) was released (the persistent kernel's Q-empty arrival after the tile's last S,
// kb == mine_begin). O, the softmax state and P are the caller's; it runs the epilogue.
template <class T, class Cfg, class Scores, class KPipe, class VPipe, class Softmax, class OnSDone>
__device__ __forceinline__ void consume_tile(const uint8_t* q_tile, KPipe& k, VPipe& v, float (&s)[Cfg::block_n() / 2],
                                             float (&o)[Cfg::head_dim() / 2], uint32_t (&p)[Cfg::block_n() / 4],
                                             float (&o_scale)[2], Softmax& softmax,
                                             const Scores& scores, int m0, int c, int mine_begin, int mine_end,
                                             int row0, int lane, bool elected, uint32_t sched_mine,
                                             uint32_t sched_next, float scale_log2, OnSDone&& on_s_done) {
  constexpr int N = Cfg::block_n();
  int n = mine_end - 1;
  int first_steps = N / 16;
  if constexpr (Cfg::trim_first()) first_steps = visible_ksteps<Cfg>(scores.mask, n, m0 + c * 64);
  auto step = [&](auto pv_keys, int kb, auto tested) {
    fwd_pipelined_step<T, Cfg, decltype(pv_keys)::value, decltype(tested)::value>(
        kb, q_tile, k, v, s, o, p, o_scale, softmax, scores, row0, lane, elected, sched_mine, sched_next, scale_log2,
        [&] { on_s_done(kb); });
  };
  using Full = std::integral_constant<int, N>;
  using Tested = std::true_type;

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
      on_s_done(n);
      scores.template prepare<N>(sf, n, row0, lane);
      softmax.update(sf, scale_log2, o_scale);
#pragma unroll
      for (int q = 0; q < N / 4; ++q) p[q] = q < NE / 4 ? pack2<T>(sf[2 * q], sf[2 * q + 1]) : 0u;
      // The loop's first step here, where NE is a constant, so this block's PV runs only its
      // NE / 16 visible k-steps. The whole step, waits included: with the wgmmas still in flight
      // where the switch's cases merge, ptxas moved accumulator registers under them and
      // serialized every wgmma of the kernel (C7515).
      if (n > mine_begin) step(width, --n, Tested{});
    });
  } else {
    issue_qk<T, Cfg>(s, q_tile, k);
    named_barrier_arrive(sched_next, kSchedThreads);
    wgmma_wait<0>();
    fence_regs(s);
    k.release(elected);
    k.advance();
    on_s_done(n);
    scores.template prepare<N>(s, n, row0, lane);
    softmax.update(s, scale_log2, o_scale);
#pragma unroll
    for (int q = 0; q < N / 4; ++q) p[q] = pack2<T>(s[2 * q], s[2 * q + 1]);
  }

  if constexpr (Scores::kMask == MaskKind::kVariant) {
    // The blocks above the unmasked run (tested), the run itself (no test), the blocks below it
    // (tested): a window's interior blocks skip the per-block mask test and its registers.
    int run_begin, run_end;
    scores.template unmasked_run<N>(&run_begin, &run_end);
    for (--n; n >= imax(run_end, mine_begin); --n) step(Full{}, n, Tested{});
    for (; n >= imax(run_begin, mine_begin); --n) step(Full{}, n, std::false_type{});
    for (; n >= mine_begin; --n) step(Full{}, n, Tested{});
  } else {
    for (--n; n >= mine_begin; --n) step(Full{}, n, Tested{});
  }
  issue_pv<T, Cfg>(o, p, v);
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(p);
  v.release(elected);
  v.advance();
}

}  // namespace fa4::hopper
