// The hd64 / hd128 backward main kernels (docs/design.md; FA3's structure). The whole backward is
// three launches on one stream (launch_config.cuh): the preprocess (prepost.cuh), one of these,
// and the postprocess.
//
// A CTA owns one (key block of block_n rows, kv head, batch) tile at a time (scheduler.cuh) and
// loops over every q head of its GQA group and every query block (block_m rows) that sees its
// keys:
//   warpgroup 0  producer: one thread loads K and V once per tile, then streams (Q, lse2) and
//                (dO, delta') per step through two TMA rings of q_stages buffers (producer.cuh);
//                warp 1 is the dQ writer (dq_writer.cuh). Registers lowered with setmaxnreg.
//   warpgroups 1, 2  consumers (mainloop.cuh). Per step: S^T = K Q^T and dP^T = V dO^T,
//                P^T = 2^(S^T * scale * log2 e - lse2) (masked), dS^T = P^T * (dP^T - delta'),
//                dV += P^T dO and dK += dS^T Q from registers, dS^T to shared memory, one named
//                barrier over both warpgroups, dQ = dS K, dQ to the shared tile the writer adds
//                to the float32 accumulator. dK (times softmax_scale) and dV stay in registers
//                for the whole tile and are written once at its end, summed over the group.
//
// bwd_kernel runs one tile per CTA (BwdGridScheduler); bwd_kernel_persistent loops over tiles
// from the workspace's counter (BwdPersistentScheduler). Both share the shared-memory layout, the
// loads, the consumer tile and the writer protocol.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/config.cuh"
#include "hopper/bwd/dq_writer.cuh"
#include "hopper/bwd/mainloop.cuh"
#include "hopper/bwd/probe.cuh"
#include "hopper/bwd/producer.cuh"
#include "hopper/bwd/scheduler.cuh"
#include "hopper/bwd/variant.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/ptx/grid_dependency.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace fa4::hopper {

// Shared memory: Cfg's tiles, then at Cfg::barrier_offset() kv_full, the Q ring's and the dO
// ring's barriers; the persistent kernel's kv_empty, tile_full[2], tile_empty[2] and the two
// tile-id slots at Cfg::persistent_offset(). (Plain local pointers in each kernel: gathering them
// in a struct reorders the generated code.)
template <class T, class Cfg, MaskKind K, bool SoftCap>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
               const BwdArgs args) {
  static_assert(!Cfg::persistent(), "one tile per CTA");
  extern __shared__ uint8_t smem_raw[];
  // The 1024-byte aligned base of the dynamic shared memory (swizzle atoms need 1024).
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  using Barriers = typename StagedPipeline<Cfg::q_stages(), 1>::Barriers;
  static_assert(sizeof(Barriers) == 8 * 2 * Cfg::q_stages(), "barrier block size (config.cuh)");
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* q_bars = reinterpret_cast<Barriers*>(kv_full + 1);
  auto* do_bars = q_bars + 1;

  if (kBwdPhaseProbe && threadIdx.x == 0) {
    bwd_probe_mark(args, kBwdProbeEntry);
    bwd_probe_mark(args, kBwdProbeSm, sm_id());
  }
  int n_block, kv_head, batch;
  BwdGridScheduler<K>::tile(args, &n_block, &kv_head, &batch);
  const int n0 = n_block * Cfg::block_n();
  // From lane 0 through a shuffle, so the compiler knows it is warp-uniform: the wgmma
  // descriptors and shared-memory bases derived from it live in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_do);
    mbarrier_init(kv_full, 1);
    StagedPipeline<Cfg::q_stages(), 1>::init(q_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    StagedPipeline<Cfg::q_stages(), 1>::init(do_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    fence_mbarrier_init();
  }
  __syncthreads();
  // A programmatic dependent of the preprocess: its lse2, delta', zeroed dq_accum and semaphores
  // are read only after this; the postprocess may launch now (it waits for this grid's end).
  grid_dependency_wait();
  grid_dependency_launch_dependents();
  if (kBwdPhaseProbe && threadIdx.x == 0) bwd_probe_mark(args, kBwdProbeSetup);

  if (wg == 0) {
    setmaxnreg_dec<bwd_producer_regs<Cfg, K>()>();
    int m_begin, m_end;
    bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);  // whole warps (kVariant: collective)
    if (threadIdx.x == 0) {
      // The loader thread. (An `else` for the writer warp below: a test after the loop would keep
      // a register live through it, and at 24 registers that spilled.)
      if (m_end > m_begin) {
        bwd_load_kv<Cfg>(smem, kv_full, &tm_k, &tm_v, n0, kv_head, batch);
        StagedPipeline<Cfg::q_stages(), 1> q_ring{q_bars};
        StagedPipeline<Cfg::q_stages(), 1> do_ring{do_bars};
        bwd_load_rows<Cfg>(q_ring, do_ring, smem, &tm_q, &tm_do, args, kv_head, batch, m_begin, m_end);
      }
    } else if (threadIdx.x / 32 == 1) {
      bwd_dq_writer<Cfg, K>(smem, args, n0, kv_head, batch, threadIdx.x % 32);
      if (kBwdPhaseProbe && threadIdx.x == 32) bwd_probe_mark(args, kBwdProbeWriterEnd);
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    using Ring = TmaConsumerPipeline<T, typename Cfg::RowRing, false>;
    Ring q(q_bars, smem + Cfg::q_offset());
    Ring dO(do_bars, smem + Cfg::do_offset());
    bwd_consumer_tile_for<T, Cfg, K, SoftCap>(wg - 1, smem, kv_full, 0, nullptr, q, dO, 0, args, n0, kv_head, batch);
  }
}

// The persistent kernel. Grid: min(tiles, SMs) CTAs (or the schedule's max_ctas), 1-D. The
// loader thread fetches and publishes each tile id (then -1) in tile_ids[it % 2] on
// tile_full[it % 2] (count 1; readers wait with parity (it / 2) % 2); every reading thread (256
// consumer + 32 writer) then arrives on tile_empty[it % 2], which the loader waits for before
// rewriting the slot for it + 2 (tests/gpu/cuda/bwd_protocol_model.py checks that protocol).
// K/V: kv_full completes once per tile with steps (parity = such tiles so far % 2); kv_empty
// (count 8, lane 0 of each consumer warp once the warp's dK/dV epilogue, staged through its
// warpgroup's V rows, has read them back) gates the next tile's K/V loads (fresh-barrier parity
// trick for the first). The Q/dO rings, dS^T buffers (via step0) and the dQ writer handshakes
// continue across tiles. In the look-ahead order (hd64 persistent) a tile's last step is peeled
// (its dQ alone, no look-ahead S^T / dP^T), and a tile without steps issues S^T / dP^T on
// whatever K/V and the current stages hold, without waiting, and discards them (an unconditional
// issue keeps ptxas from serializing the pipeline, mainloop.cuh), so those reads may overlap a
// later tile's loads; in the dQ-under-dK order (hd128 persistent) a tile without steps issues
// nothing. The loader issues none of the next tile's loads (K/V or Q/dO) before kv_empty.
// Dense and causal problems only (K != kVariant): the loader thread alone computes each tile's
// range, which the segment narrowing (warp-collective) cannot do; variant problems run the grid
// kernel (heuristics.h).
template <class T, class Cfg, MaskKind K>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    bwd_kernel_persistent(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const BwdArgs args) {
  static_assert(Cfg::persistent(), "persistent config");
  static_assert(K != MaskKind::kVariant, "variant problems run bwd_kernel");
  using Sched = BwdPersistentScheduler;
  extern __shared__ uint8_t smem_raw[];
  // The 1024-byte aligned base of the dynamic shared memory (swizzle atoms need 1024).
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  using Barriers = typename StagedPipeline<Cfg::q_stages(), 1>::Barriers;
  static_assert(sizeof(Barriers) == 8 * 2 * Cfg::q_stages(), "barrier block size (config.cuh)");
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* q_bars = reinterpret_cast<Barriers*>(kv_full + 1);
  auto* do_bars = q_bars + 1;
  uint64_t* kv_empty = reinterpret_cast<uint64_t*>(smem + Cfg::persistent_offset());
  uint64_t* tile_full = kv_empty + 1;
  uint64_t* tile_empty = tile_full + 2;
  int* tile_ids = reinterpret_cast<int*>(tile_empty + 2);
  // Warp-uniform through a shuffle, as in bwd_kernel: the wgmma descriptors and shared-memory
  // bases derived from it then live in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_do);
    mbarrier_init(kv_full, 1);
    mbarrier_init(kv_empty, Cfg::consumer_warpgroups() * 4);  // one arrival per consumer warp
    mbarrier_init(&tile_full[0], 1);
    mbarrier_init(&tile_full[1], 1);
    mbarrier_init(&tile_empty[0], Sched::kReaders);
    mbarrier_init(&tile_empty[1], Sched::kReaders);
    StagedPipeline<Cfg::q_stages(), 1>::init(q_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    StagedPipeline<Cfg::q_stages(), 1>::init(do_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    fence_mbarrier_init();
  }
  __syncthreads();
  // A programmatic dependent of the preprocess: its lse2, delta', zeroed dq_accum and semaphores
  // are read only after this; the postprocess may launch now (it waits for this grid's end).
  grid_dependency_wait();
  grid_dependency_launch_dependents();

  if (wg == 0) {
    setmaxnreg_dec<bwd_producer_regs<Cfg, K>()>();
    if (threadIdx.x == 0) {
      const int tiles = args.n_blocks * args.heads_kv * args.batch;
      StagedPipeline<Cfg::q_stages(), 1> q_ring{q_bars};
      StagedPipeline<Cfg::q_stages(), 1> do_ring{do_bars};
      int id = blockIdx.x;
      int loads = 0;
      for (int it = 0;; ++it) {
        const bool valid = id < tiles;
        Sched::publish(tile_ids, tile_full, tile_empty, it, valid, id);
        if (!valid) break;
        int n_block, kv_head, batch, m_begin, m_end;
        Sched::tile_coords(args, id, &n_block, &kv_head, &batch);
        const int n0 = n_block * Cfg::block_n();
        bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
        if (m_end > m_begin) {
          mbarrier_wait(kv_empty, (loads & 1) ^ 1);  // the previous tile's K/V no longer read
          bwd_load_kv<Cfg>(smem, kv_full, &tm_k, &tm_v, n0, kv_head, batch);
          ++loads;
          bwd_load_rows<Cfg>(q_ring, do_ring, smem, &tm_q, &tm_do, args, kv_head, batch, m_begin, m_end);
        }
        id = Sched::next_tile(args);
      }
    } else if (threadIdx.x / 32 == 1) {
      bwd_dq_writer_persistent<Cfg, K>(smem, args, tile_full, tile_empty, tile_ids,
                                            threadIdx.x % 32);
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    using Ring = TmaConsumerPipeline<T, typename Cfg::RowRing, false>;
    Ring q(q_bars, smem + Cfg::q_offset());
    Ring dO(do_bars, smem + Cfg::do_offset());
    int step0 = 0;
    int kv_uses = 0;
    for (int it = 0;; ++it) {
      mbarrier_wait(&tile_full[it & 1], (it >> 1) & 1);
      const int id = Sched::read_tile_id(tile_ids, tile_empty, it);
      if (id < 0) break;
      int n_block, kv_head, batch;
      Sched::tile_coords(args, id, &n_block, &kv_head, &batch);
      const int n0 = n_block * Cfg::block_n();
      const int steps = bwd_consumer_tile_for<T, Cfg, K, false>(wg - 1, smem, kv_full, uint32_t(kv_uses & 1),
                                                                kv_empty, q, dO, step0, args, n0, kv_head, batch);
      step0 += steps;
      kv_uses += steps > 0 ? 1 : 0;
    }
  }
}

}  // namespace fa4::hopper
