// The backward's producer: the loader thread's TMA loads of K/V (once per tile) and of the
// per-step Q / dO row tiles with their lse2 / delta' vectors into two rings.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/ptx/bulk_copy.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"

namespace fa4::hopper {

// One step's row tile (Q or dO, block_m x head_dim by TMA) and its float vector (lse2 or delta',
// block_m floats by 1-D bulk copy) into the next free stage of a ring, one full barrier.
template <class Cfg, class Ring>
__device__ __forceinline__ void load_row_step(Ring& ring, uint8_t* tiles, float* vecs, const CUtensorMap* map,
                                              const float* vec_src, int row0, int head, int batch) {
  // Parity trick (as in TmaProducerPipeline::load): a fresh barrier's previous phase counts as
  // complete, so the first lap passes at once.
  mbarrier_wait(&ring.bars->empty[ring.stage], ring.phase ^ 1);
  uint64_t* full = &ring.bars->full[ring.stage][0];
  // (kBwdVecCopyFirst, a racecheck diagnostic (args.cuh): the arrival after the copies.)
  if constexpr (!kBwdVecCopyFirst) mbarrier_arrive_expect_tx(full, Cfg::q_tile_bytes() + Cfg::vec_bytes());
  uint8_t* tile = tiles + ring.stage * Cfg::q_tile_bytes();
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(tile + c * Cfg::chunk_bytes_q(), map, full, c * 64, row0, head, batch);
  }
  bulk_load_1d(vecs + ring.stage * Cfg::block_m(), vec_src, Cfg::vec_bytes(), full);
  if constexpr (kBwdVecCopyFirst) mbarrier_arrive_expect_tx(full, Cfg::q_tile_bytes() + Cfg::vec_bytes());
  ring.advance();
}

// K and V of key block n0 (block_n rows each), one full barrier for both.
template <class Cfg>
__device__ __forceinline__ void bwd_load_kv(uint8_t* smem, uint64_t* kv_full, const CUtensorMap* tm_k,
                                            const CUtensorMap* tm_v, int n0, int kv_head, int batch) {
  mbarrier_arrive_expect_tx(kv_full, 2 * Cfg::kv_tile_bytes());
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(smem + Cfg::k_offset() + c * Cfg::chunk_bytes_kv(), tm_k, kv_full, c * 64, n0, kv_head, batch);
  }
#pragma unroll
  for (int c = 0; c < Cfg::chunks(); ++c) {
    tma_load_4d(smem + Cfg::v_offset() + c * Cfg::chunk_bytes_kv(), tm_v, kv_full, c * 64, n0, kv_head, batch);
  }
}

// Per step (every q head of the group, query blocks m_begin .. m_end) the Q row tile with lse2 and
// the dO row tile with delta' into their rings (whatever their stage counts).
template <class Cfg, class QRing, class DoRing>
__device__ __forceinline__ void bwd_load_rows(QRing& q_ring, DoRing& do_ring, uint8_t* smem, const CUtensorMap* tm_q,
                                              const CUtensorMap* tm_do, const BwdArgs& args, int kv_head, int batch,
                                              int m_begin, int m_end) {
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

// The loader thread's whole job for one tile of a one-tile-per-CTA kernel: K and V, then every
// step's Q and dO into fresh rings of QStages / DoStages stages.
template <class Cfg, int QStages, int DoStages>
__device__ __forceinline__ void bwd_load_tile(uint8_t* smem, uint64_t* kv_full,
                                              typename StagedPipeline<QStages, 1>::Barriers* q_bars,
                                              typename StagedPipeline<DoStages, 1>::Barriers* do_bars,
                                              const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                              const CUtensorMap* tm_v, const CUtensorMap* tm_do,
                                              const BwdArgs& args, int n0, int kv_head, int batch, int m_begin,
                                              int m_end) {
  bwd_load_kv<Cfg>(smem, kv_full, tm_k, tm_v, n0, kv_head, batch);
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

}  // namespace fa4::hopper
