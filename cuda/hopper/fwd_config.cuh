// Forward-kernel tile configurations: one struct per head dim. Every tile size, stage count and
// register split lives here; the kernel reads them only through the named accessors of FwdTile.
#pragma once
#include <cstdint>

namespace fa4::hopper {

// The shape parameters of one configuration, and everything derived from them.
template <int HeadDim, int ConsumerWarpgroups, int BlockN, int KvStages, int QkStages,
          int ProducerRegs, int ConsumerRegs>
struct FwdTile {
  // Rows of Q per consumer warpgroup: one wgmma m64 row block.
  static constexpr int rows_per_warpgroup() { return 64; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int consumer_warpgroups() { return ConsumerWarpgroups; }
  static constexpr int block_m() { return 64 * ConsumerWarpgroups; }
  static constexpr int block_n() { return BlockN; }
  static constexpr int kv_stages() { return KvStages; }
  static constexpr int qk_stages() { return QkStages; }
  static constexpr int producer_regs() { return ProducerRegs; }
  static constexpr int consumer_regs() { return ConsumerRegs; }
  // One producer warpgroup (a single warp issues TMA; the rest only give registers back).
  static constexpr int threads() { return 128 * (1 + ConsumerWarpgroups); }
  // TMA boxes and 128B-swizzle atoms are 64 two-byte columns wide.
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr int chunks_per_qk_stage() { return chunks() / QkStages; }
  // Shared-memory bytes of the tiles (2-byte elements).
  static constexpr uint32_t q_bytes() { return uint32_t(block_m()) * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockN) * HeadDim * 2; }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(block_m()) * 128; }
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockN) * 128; }
  static constexpr uint32_t q_offset() { return 0; }
  static constexpr uint32_t k_offset() { return q_bytes(); }
  static constexpr uint32_t v_offset() { return k_offset() + KvStages * kv_tile_bytes(); }
  static constexpr uint32_t barrier_offset() { return v_offset() + KvStages * kv_tile_bytes(); }
  static constexpr uint32_t barrier_bytes() { return 8 * (1 + KvStages * (QkStages + 1) + 2 * KvStages); }
  // +1024: the dynamic smem base is only 16-byte aligned, swizzle atoms need 1024.
  static constexpr uint32_t smem_bytes() { return barrier_offset() + barrier_bytes() + 1024; }

  static_assert(HeadDim % 64 == 0, "head dim must be a multiple of the 64-column swizzle width");
  static_assert(chunks() % QkStages == 0, "K sub-stages must split the head dim into whole chunks");
  static_assert(BlockN % 16 == 0 && BlockN >= 64 && BlockN <= 256, "wgmma N and PV k-steps");
  static_assert(ProducerRegs + ConsumerWarpgroups * ConsumerRegs <= 512 && ProducerRegs % 8 == 0 &&
                    ConsumerRegs % 8 == 0,
                "register split must fit 64K registers per SM (in units of 128 threads)");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
};

template <int HeadDim, bool Causal>
struct FwdConfig;

// hd64: exp-bound (MUFU takes as long as the MMAs), so a third consumer warpgroup (FA3's 192-row
// tile) gives the tensor cores another warpgroup's MMAs to run while two do their softmax.
// O is only 32 registers per thread, so 160 per consumer is enough.
template <bool Causal>
struct FwdConfig<64, Causal>
    : FwdTile</*HeadDim=*/64, /*ConsumerWarpgroups=*/3, /*BlockN=*/128, /*KvStages=*/2,
              /*QkStages=*/1, /*ProducerRegs=*/32, /*ConsumerRegs=*/160> {};

// hd128: FA3's tiles, 128x128 causal and a longer 128x176 K tile without the mask.
template <bool Causal>
struct FwdConfig<128, Causal>
    : FwdTile<128, 2, Causal ? 128 : 176, 2, /*QkStages=*/2, 24, 240> {};

// hd256: O alone takes 128 registers per thread, so the K tile is short (80 rows).
template <bool Causal>
struct FwdConfig<256, Causal> : FwdTile<256, 2, 80, 2, /*QkStages=*/2, 24, 240> {};

}  // namespace fa4::hopper
