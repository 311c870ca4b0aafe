// The K/V staging pipeline: a ring of kv_stages shared-memory buffers guarded by mbarriers.
// Each stage has qk_stages *full* barriers (the producer's expect_tx + TMA bytes complete them; K
// is split along the head dim so the first QK^T k-steps start before the whole tile lands) and one
// *empty* barrier (one elected thread per consumer warpgroup arrives when its MMAs have read it).
#pragma once
#include <cstdint>

#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace fa4::hopper {

template <int KvStages, int QkStages>
struct StagedPipeline {
  struct Barriers {
    uint64_t full[KvStages][QkStages];
    uint64_t empty[KvStages];
  };

  Barriers* bars;
  int stage = 0;
  uint32_t phase = 0;  // parity of the current lap around the ring

  // One thread, before the CTA-wide barrier that precedes any use.
  __device__ static void init(Barriers* b, uint32_t consumer_arrivals) {
    for (int s = 0; s < KvStages; ++s) {
      for (int j = 0; j < QkStages; ++j) mbarrier_init(&b->full[s][j], 1);
      mbarrier_init(&b->empty[s], consumer_arrivals);
    }
  }

  __device__ __forceinline__ void advance() {
    if (++stage == KvStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// Consumer view of the K (IsK) or V pipeline for one configuration.
template <class T, class Cfg, bool IsK>
struct TmaConsumerPipeline {
  static constexpr int kSubStages = IsK ? Cfg::qk_stages() : 1;
  using Staged = StagedPipeline<Cfg::kv_stages(), kSubStages>;
  // Bytes the producer must announce (expect_tx) per full barrier, and per whole tile.
  static constexpr uint32_t kTileBytes = Cfg::kv_tile_bytes();
  static constexpr uint32_t kSubStageBytes = kTileBytes / kSubStages;

  Staged pipe;
  uint8_t* smem;  // stage 0; stage s starts at smem + s * kTileBytes

  __device__ TmaConsumerPipeline(typename Staged::Barriers* b, uint8_t* tiles) : pipe{b}, smem(tiles) {}

  // Blocks until sub-stage j (K) or the whole tile (V, j = 0) of the current stage has landed.
  __device__ __forceinline__ void wait(int j) { mbarrier_wait(&pipe.bars->full[pipe.stage][j], pipe.phase); }

  // Hands the current stage back to the producer; `elected` is one thread per consumer warpgroup,
  // called only after that warpgroup's wgmma reading the stage have completed.
  __device__ __forceinline__ void release(bool elected) {
    if (elected) mbarrier_arrive(&pipe.bars->empty[pipe.stage]);
  }

  // The current stage's tile; chunk c (64 head-dim columns) begins at chunk * block_n * 128 bytes.
  __device__ __forceinline__ uint8_t* get() const { return smem + pipe.stage * kTileBytes; }

  // wgmma descriptor of the current stage. K (B of S = Q K^T, K-major): descriptor of chunk c.
  // V (B of O += P V, MN-major): the whole tile, LBO = distance between 64-column chunks.
  __device__ __forceinline__ MmaSmemDescriptor desc(int chunk = 0) const {
    if constexpr (IsK) {
      return MmaSmemDescriptor::sw128(get() + chunk * Cfg::chunk_bytes_kv(), 0);
    } else {
      return MmaSmemDescriptor::sw128(get(), Cfg::chunk_bytes_kv());
    }
  }

  __device__ __forceinline__ void advance() { pipe.advance(); }
};

// Producer view: one thread waits for a free stage, announces the bytes and issues the TMA boxes.
template <class T, class Cfg, bool IsK>
struct TmaProducerPipeline {
  using Consumer = TmaConsumerPipeline<T, Cfg, IsK>;
  static constexpr int kSubStages = Consumer::kSubStages;
  using Staged = typename Consumer::Staged;

  Staged pipe;
  uint8_t* smem;

  __device__ TmaProducerPipeline(typename Staged::Barriers* b, uint8_t* tiles) : pipe{b}, smem(tiles) {}

  // Loads rows [row0, row0 + block_n) of (head, batch) into the next free stage.
  __device__ __forceinline__ void load(const CUtensorMap* map, int row0, int head, int batch) {
    // Parity trick: a fresh barrier counts its (virtual) previous phase as complete, so the first
    // lap passes at once.
    mbarrier_wait(&pipe.bars->empty[pipe.stage], pipe.phase ^ 1);
    uint8_t* tile = smem + pipe.stage * Consumer::kTileBytes;
#pragma unroll
    for (int j = 0; j < kSubStages; ++j) {
      uint64_t* full = &pipe.bars->full[pipe.stage][j];
      mbarrier_arrive_expect_tx(full, Consumer::kSubStageBytes);
      constexpr int kChunks = Cfg::chunks() / kSubStages;
#pragma unroll
      for (int c = j * kChunks; c < (j + 1) * kChunks; ++c) {
        tma_load_4d(tile + c * Cfg::chunk_bytes_kv(), map, full, c * 64, row0, head, batch);
      }
    }
    pipe.advance();
  }
};

}  // namespace fa4::hopper
