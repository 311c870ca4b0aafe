// The Hopper forward attention kernels (docs/hopper-kernels.md).
//
// A CTA computes block_m = 64 * W query rows of one (batch, head) against every visible key:
//   warpgroup 0  producer: one thread loads Q, then streams K and V tiles by TMA into rings of
//                kv_stages buffers (common/pipeline.cuh); registers lowered with setmaxnreg.
//   warpgroups 1..W  consumers: warpgroup c owns Q rows [64c, 64c + 64) and runs consume_tile
//                (fwd/mainloop.cuh), then the epilogue (fwd/epilogue.cuh).
// fwd_kernel runs one tile per CTA (FwdSchedule kSingleTile / kLongestFirst); O is staged in the
// Q buffer. fwd_kernel_persistent loops over the tiles its FwdScheduler deals it; the K/V rings,
// the issue-token ring and the Q barriers run on across tiles:
//   q_full   (1 arrival + Q's bytes) phase k = tile k's Q landed; consumers wait with parity k % 2.
//   q_empty  (one arrival per consumer warpgroup, after its last S = Q K^T of a tile retired) phase
//            k = tile k's Q no longer read; the producer waits for it before loading tile k + 1's Q,
//            having already queued tile k + 1's first K. No phase can be skipped: Q(k + 1) needs
//            every warpgroup's tile-k arrival, which comes after that warpgroup's tile-k q_full wait.
//   O        staged in its own buffer (sO, Q's layout); a warpgroup's elected thread waits for its
//            previous store to have read sO (bulk wait_group.read) before the warpgroup rewrites it.
// So the next tile's Q and first K/V load while this tile's last PV, normalisation and store run.
// A tile whose rows see no key (causal above the diagonal, a band outside the keys, padding rows,
// other documents) is skipped by producer and consumers alike, so the Q barriers' phases stay in
// step; its rows get o = 0 and lse = -inf (the sink with sinks).
//
// Templates: M, the mask policy (common/mask.cuh, TileMask<M>), and Cap, the score modifier
// (fwd/score.cuh: none, or, with kVariant only, the soft cap with the online or the bounded
// softmax). A tile visits the key blocks [begin, end) of tile_key_blocks; the producer's warp 0
// computes them (warp-collective: the segment narrowing) and its thread 0 loads them, each
// consumer warp computes the same range. Sinks (any mask) are read in the epilogue.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "hopper/common/mask.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/fwd/epilogue.cuh"
#include "hopper/fwd/mainloop.cuh"
#include "hopper/fwd/scheduler.cuh"
#include "hopper/fwd/softmax.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"

namespace fa4::hopper {

// The CTA's shared memory, carved as the configuration lays it out (fwd/config.cuh): Q, the K and
// V rings, (persistent) the O buffer, then the barriers.
template <class T, class Cfg>
struct FwdSharedMemory {
  using KCons = TmaConsumerPipeline<T, Cfg, true>;
  using VCons = TmaConsumerPipeline<T, Cfg, false>;
  uint8_t* sQ;
  uint8_t* sK;
  uint8_t* sV;
  uint8_t* sO;  // the persistent kernel's O buffer (the one-tile kernel stages O in sQ)
  uint64_t* q_full;
  typename KCons::Staged::Barriers* k_bars;
  typename VCons::Staged::Barriers* v_bars;
  uint64_t* q_empty;  // persistent only

  __device__ __forceinline__ explicit FwdSharedMemory(uint8_t* smem_raw) {
    // The dynamic smem base is only 16-byte aligned; swizzle atoms need 1024.
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    sQ = smem + Cfg::q_offset();
    sK = smem + Cfg::k_offset();
    sV = smem + Cfg::v_offset();
    sO = smem + Cfg::o_offset();
    q_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
    k_bars = reinterpret_cast<typename KCons::Staged::Barriers*>(q_full + 1);
    v_bars = reinterpret_cast<typename VCons::Staged::Barriers*>(k_bars + 1);
    q_empty = reinterpret_cast<uint64_t*>(v_bars + 1);
  }

  // One thread, before the CTA-wide barrier that precedes any use.
  __device__ __forceinline__ void init_barriers() const {
    mbarrier_init(q_full, 1);
    if constexpr (Cfg::persistent()) mbarrier_init(q_empty, Cfg::consumer_warpgroups());
    KCons::Staged::init(k_bars, Cfg::consumer_warpgroups());
    VCons::Staged::init(v_bars, Cfg::consumer_warpgroups());
    fence_mbarrier_init();
  }
};

// The tile's mask policy: the batch entry's lengths and ids (kVariant), else the shape alone.
template <MaskKind M>
__device__ __forceinline__ TileMask<M> fwd_tile_mask(const FwdArgs& args, int batch) {
  if constexpr (M == MaskKind::kVariant) {
    return TileMask<M>(args.mask, batch);
  } else {
    return TileMask<M>(args.seq_q, args.seq_k);
  }
}

// The consumer's epilogue: normalise, stage and store O, write the LSE. With sinks (any mask) the
// sink joins the denominator of real rows (never of padding rows). kCausal and kVariant: an empty
// row's O is written as 0 by selection, so that a non-finite V of keys it does not see (0 x Inf in
// the PV product) cannot reach it.
template <class T, class Cfg, MaskKind M, class Softmax>
__device__ __forceinline__ void fwd_epilogue(Softmax& softmax, float (&o)[Cfg::head_dim() / 2],
                                             uint8_t* sO, const CUtensorMap* tm_o, const FwdArgs& args,
                                             const TileMask<M>& mask, int c, int row_in_wg, int row0, int lane,
                                             bool elected, int m0, int head, int batch, bool wait_previous_store) {
  float lse[2], o_scale[2];
  if (M == MaskKind::kVariant || args.sinks != nullptr) {
    float sink[2] = {-INFINITY, -INFINITY};
    if (args.sinks != nullptr) {
      const float v = __ldg(args.sinks + int64_t(batch) * args.heads_q + head);
#pragma unroll
      for (int i = 0; i < 2; ++i) sink[i] = row0 + 8 * i < mask.q_len ? v : -INFINITY;
    }
    softmax.finalize_with_sink(args.softmax_scale, sink, o_scale, lse);
  } else {
    softmax.finalize(args.softmax_scale, o_scale, lse);
  }
  if (wait_previous_store) {
    // Persistent: the previous tile's store must have read this warpgroup's rows of sO first.
    if (elected) tma_store_wait_read_all();
    named_barrier_sync(kBarEpilogue + c, 128);
  }
  store_o<T, Cfg, M != MaskKind::kDense>(sO, tm_o, o, o_scale, c, row_in_wg, lane, elected, m0, head, batch,
                                          args.seq_q);
  store_lse(args, lse, row0, lane, head, batch);
}

// The producer thread's loads of one tile: Q (unless the caller loads it), then K and V of key
// blocks [begin, end), from the last down. Consumers take K(n) then V(n + 1): load in that order
// so neither ring stalls the other. before_q runs after the first K was queued (the persistent
// kernel's Q-empty wait).
template <class Cfg, class KProd, class VProd, class BeforeQ>
__device__ __forceinline__ void fwd_load_tile(KProd& k, VProd& v, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                              const CUtensorMap* tm_v, uint8_t* sQ, uint64_t* q_full, int m0,
                                              int head, int kv_head, int batch, int begin, int end,
                                              BeforeQ&& before_q) {
  constexpr int N = Cfg::block_n();
  int n = end - 1;
  k.load(tm_k, n * N, kv_head, batch);
  before_q();
  mbarrier_arrive_expect_tx(q_full, Cfg::q_bytes());
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(sQ + c * Cfg::chunk_bytes_q(), tm_q, q_full, c * 64, m0, head, batch);
  }
  for (; n > begin; --n) {
    k.load(tm_k, (n - 1) * N, kv_head, batch);
    v.load(tm_v, n * N, kv_head, batch);
  }
  v.load(tm_v, begin * N, kv_head, batch);
}

template <class T, class Cfg, MaskKind M, ScoreCap Cap>
__device__ __forceinline__ void fwd_consumer(int c, uint8_t* sQ, uint8_t* sK, uint8_t* sV, uint64_t* q_full,
                                             typename TmaConsumerPipeline<T, Cfg, true>::Staged::Barriers* k_bars,
                                             typename TmaConsumerPipeline<T, Cfg, false>::Staged::Barriers* v_bars,
                                             const CUtensorMap* tm_o, const FwdArgs& args, const TileMask<M>& mask,
                                             int m0, int head, int batch, int begin, int end) {
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
  OnlineSoftmax<N / 2, Cap == ScoreCap::kBounded> softmax(args.bounded_bias);
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float s[N / 2];
  uint32_t p[N / 4];
  float o_scale[2];

  // The last warpgroup hands the first issue token to warpgroup 0.
  if (c == W - 1) named_barrier_arrive(kBarSched, kSchedThreads);

  // WgSkip: this warpgroup computes only key blocks [mine_begin, mine_end) and passes the others
  // on. The partial-tile test covers this warpgroup's rows (WgSkip, kVariant: exact for it) or the
  // tile's.
  int mine_begin, mine_end;
  warpgroup_blocks<Cfg>(mask, m0, c, args.seq_q, lane, begin, end, &mine_begin, &mine_end);
  const bool own_rows = Cfg::wg_skip() || M == MaskKind::kVariant;
  const int mask_r0 = own_rows ? m0 + c * 64 : m0;
  const int mask_r1 = min(own_rows ? m0 + c * 64 + 64 : m0 + Cfg::block_m(), args.seq_q);
  const FwdScores<M, Cap> scores(mask, mask_r0, mask_r1, row0, args.softcap_scale, mine_begin * N,
                                       mine_end * N, lane);

  // Also on the skip-everything path: the epilogue writes O over this warpgroup's Q rows.
  if (end > begin) mbarrier_wait(q_full, 0);
  if constexpr (Cfg::wg_skip()) pass_skipped_blocks<Cfg>(k, v, end, mine_end, sched_mine, sched_next, elected);
  if (mine_end > mine_begin) {
    consume_tile<T, Cfg>(sQ + c * 64 * 128, k, v, s, o, p, o_scale, softmax, scores, m0, c, mine_begin, mine_end, row0,
                         lane, elected, sched_mine, sched_next, args.scale_log2, [](int) {});
  }
  if constexpr (Cfg::wg_skip() && M == MaskKind::kVariant)
    pass_trailing_blocks<Cfg>(k, v, begin, mine_begin, sched_mine, sched_next, elected);

  // Epilogue through this warpgroup's rows of the Q buffer (no longer read by them).
  fwd_epilogue<T, Cfg, M>(softmax, o, sQ, tm_o, args, mask, c, row_in_wg, row0, lane, elected, m0, head, batch, false);
  if (elected) tma_store_wait_read_all();  // shared memory must outlive the store's reads
  // Balance the token handed over at the start so no barrier is left half-arrived.
  if (c == 0) named_barrier_sync(kBarSched, kSchedThreads);
}

template <class T, class Cfg, MaskKind M, ScoreCap Cap>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
               const FwdArgs args) {
  static_assert(!Cfg::persistent(), "fwd_kernel runs one tile per CTA");
  static_assert(Cap == ScoreCap::kNone || M == MaskKind::kVariant, "soft-cap problems run the variant mask");
  extern __shared__ uint8_t smem_raw[];
  const FwdSharedMemory<T, Cfg> sm(smem_raw);

  FwdTileCoord tc;
  FwdScheduler<Cfg, M>(args).tile(0, tc);
  const int m0 = tc.m_block * Cfg::block_m();
  const int head = tc.head;
  const int batch = tc.batch;
  const TileMask<M> mask = fwd_tile_mask<M>(args, batch);
  // With fwd_late_k_release from lane 0: warp-uniform, so the consumers' Q-tile descriptors stay
  // in uniform registers (16 R2UR a key block fewer at hd128 causal).
  const int wg = fwd_late_k_release<Cfg, M>() ? __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) : int(threadIdx.x / 128);
  const int lane = threadIdx.x % 32;
  // Every warp computes the tile's key blocks (warp-collective under kVariant), at the entry's
  // register budget (computed after setmaxnreg, the hd256 variant consumer spilled more).
  int begin, end;
  tile_key_blocks<Cfg::block_n()>(mask, m0, Cfg::block_m(), lane, &begin, &end);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    sm.init_barriers();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    if (threadIdx.x == 0 && end > begin) {
      TmaProducerPipeline<T, Cfg, true> k(sm.k_bars, sm.sK);
      TmaProducerPipeline<T, Cfg, false> v(sm.v_bars, sm.sV);
      // Q first here: nothing to wait for before it.
      const int kv_head = head / args.group;
      mbarrier_arrive_expect_tx(sm.q_full, Cfg::q_bytes());
#pragma unroll
      for (int c = 0; c < Cfg::chunks(); ++c) {
        tma_load_4d(sm.sQ + c * Cfg::chunk_bytes_q(), &tm_q, sm.q_full, c * 64, m0, head, batch);
      }
      constexpr int N = Cfg::block_n();
      int n = end - 1;
      k.load(&tm_k, n * N, kv_head, batch);
      for (; n > begin; --n) {
        k.load(&tm_k, (n - 1) * N, kv_head, batch);
        v.load(&tm_v, n * N, kv_head, batch);
      }
      v.load(&tm_v, begin * N, kv_head, batch);
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    fwd_consumer<T, Cfg, M, Cap>(wg - 1, sm.sQ, sm.sK, sm.sV, sm.q_full, sm.k_bars, sm.v_bars, &tm_o, args, mask,
                                     m0, head, batch, begin, end);
  }
}

template <class T, class Cfg, MaskKind M, ScoreCap Cap>
__device__ __forceinline__ void fwd_consumer_persistent(int c, uint8_t* sQ, uint8_t* sO, uint64_t* q_full,
                                                        uint64_t* q_empty, uint8_t* sK, uint8_t* sV,
                                                        typename TmaConsumerPipeline<T, Cfg, true>::Staged::Barriers* k_bars,
                                                        typename TmaConsumerPipeline<T, Cfg, false>::Staged::Barriers* v_bars,
                                                        const CUtensorMap* tm_o, const FwdArgs& args,
                                                        const FwdScheduler<Cfg, M>& sched) {
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
  const uint8_t* q_tile = sQ + c * 64 * 128;  // this warpgroup's 64 rows inside each chunk

  TmaConsumerPipeline<T, Cfg, true> k(k_bars, sK);
  TmaConsumerPipeline<T, Cfg, false> v(v_bars, sV);
  uint32_t q_phase = 0;  // the parity of q_full's next phase

  if (c == W - 1) named_barrier_arrive(kBarSched, kSchedThreads);

  FwdTileCoord tc;
  for (int r = 0; sched.tile(r, tc); ++r) {
    const int m0 = tc.m_block * Cfg::block_m();
    const int head = tc.head;
    const int batch = tc.batch;
    const int row0 = m0 + c * 64 + row_in_wg;
    const TileMask<M> mask = fwd_tile_mask<M>(args, batch);
    int begin, end;
    tile_key_blocks<N>(mask, m0, Cfg::block_m(), lane, &begin, &end);

    OnlineSoftmax<N / 2, Cap == ScoreCap::kBounded> softmax(args.bounded_bias);
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float s[N / 2];
    uint32_t p[N / 4];
    float o_scale[2];

    // WgSkip: as in fwd_consumer; the rings run on into the next tile, so every stage must be
    // released. A warpgroup that computes nothing arrives on q_empty right after its q_full wait
    // (it never reads Q; the wait keeps it from arriving for the next tile before this tile's
    // phase completed).
    int mine_begin, mine_end;
    warpgroup_blocks<Cfg>(mask, m0, c, args.seq_q, lane, begin, end, &mine_begin, &mine_end);
    const bool own_rows = Cfg::wg_skip() || M == MaskKind::kVariant;
    const int mask_r0 = own_rows ? m0 + c * 64 : m0;
    const int mask_r1 = min(own_rows ? m0 + c * 64 + 64 : m0 + Cfg::block_m(), args.seq_q);
    const FwdScores<M, Cap> scores(mask, mask_r0, mask_r1, row0, args.softcap_scale, mine_begin * N,
                                       mine_end * N, lane);
    if (end > begin) {
      mbarrier_wait(q_full, q_phase);
      q_phase ^= 1u;
    }
    if constexpr (Cfg::wg_skip()) {
      if (mine_end == mine_begin && end > begin && elected) mbarrier_arrive(q_empty);
      pass_skipped_blocks<Cfg>(k, v, end, mine_end, sched_mine, sched_next, elected);
    }
    if (mine_end > mine_begin) {
      // The tile's last read of Q retired with S of block mine_begin.
      consume_tile<T, Cfg>(q_tile, k, v, s, o, p, o_scale, softmax, scores, m0, c, mine_begin, mine_end, row0, lane,
                           elected, sched_mine, sched_next, args.scale_log2, [&](int kb) {
                             if (kb == mine_begin && elected) mbarrier_arrive(q_empty);
                           });
    }
    if constexpr (Cfg::wg_skip() && M == MaskKind::kVariant)
      pass_trailing_blocks<Cfg>(k, v, begin, mine_begin, sched_mine, sched_next, elected);

    // Epilogue through sO, once the previous tile's store has read this warpgroup's rows.
    fwd_epilogue<T, Cfg, M>(softmax, o, sO, tm_o, args, mask, c, row_in_wg, row0, lane, elected, m0, head, batch, true);
  }
  if (elected) tma_store_wait_read_all();  // shared memory must outlive the stores' reads
  if (c == 0) named_barrier_sync(kBarSched, kSchedThreads);
}

template <class T, class Cfg, MaskKind M, ScoreCap Cap>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    fwd_kernel_persistent(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                          const FwdArgs args) {
  static_assert(Cfg::persistent(), "the persistent kernel needs the persistent layout (O buffer, Q-empty barrier)");
  static_assert(Cap == ScoreCap::kNone || M == MaskKind::kVariant, "soft-cap problems run the variant mask");
  extern __shared__ uint8_t smem_raw[];
  const FwdSharedMemory<T, Cfg> sm(smem_raw);
  const FwdScheduler<Cfg, M> sched(args);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_o);
    sm.init_barriers();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::producer_regs()>();
    // Thread 0 loads; under kVariant all of warp 0 walks the tiles, for the warp-collective
    // segment narrowing of each tile's key blocks.
    if (M == MaskKind::kVariant ? threadIdx.x < 32 : threadIdx.x == 0) {
      const int lane = threadIdx.x;
      TmaProducerPipeline<T, Cfg, true> k(sm.k_bars, sm.sK);
      TmaProducerPipeline<T, Cfg, false> v(sm.v_bars, sm.sV);
      uint32_t q_phase = 0;  // q_empty phases waited for so far, mod 2
      FwdTileCoord tc;
      for (int r = 0; sched.tile(r, tc); ++r) {
        const int m0 = tc.m_block * Cfg::block_m();
        const int head = tc.head;
        const int batch = tc.batch;
        const int kv_head = head / args.group;
        int begin, end;
        tile_key_blocks<Cfg::block_n()>(fwd_tile_mask<M>(args, batch), m0, Cfg::block_m(), lane, &begin, &end);
        if (end <= begin) continue;  // the consumers skip its Q barriers too
        if (lane != 0) continue;
        // The first K may land while the consumers still read the previous tile's Q; Q only once
        // every consumer warpgroup's last S of the previous tile retired (a fresh barrier passes
        // parity 1 at once, as the rings' empty barriers).
        fwd_load_tile<Cfg>(k, v, &tm_q, &tm_k, &tm_v, sm.sQ, sm.q_full, m0, head, kv_head, batch, begin, end, [&] {
          mbarrier_wait(sm.q_empty, q_phase ^ 1);
          q_phase ^= 1;
        });
      }
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    fwd_consumer_persistent<T, Cfg, M, Cap>(wg - 1, sm.sQ, sm.sO, sm.q_full, sm.q_empty, sm.sK, sm.sV, sm.k_bars,
                                                sm.v_bars, &tm_o, args, sched);
  }
}

}  // namespace fa4::hopper
